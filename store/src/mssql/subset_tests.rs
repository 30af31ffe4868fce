//! The T-SQL subset every SQL Server file keeps to, so that SQL Server 2019+, Azure SQL and
//! Babelfish for PostgreSQL all run it (DESIGN.md, "Atomicity per backend"). Each rule is a
//! form one of them refuses, seen on a real server; the test reads every file of
//! `sql/mssql/`, `migrations/mssql/` and `bench/sql/mssql/`, so a new file cannot bring one back.

use std::path::{Path, PathBuf};

/// Every T-SQL file of the repository, with its text.
fn tsql_files() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["sql/mssql", "../migrations/mssql", "../bench/sql/mssql"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "sql") {
                let text = std::fs::read_to_string(&path).unwrap();
                files.push((path, text));
            }
        }
    }
    assert!(files.len() > 60, "the T-SQL files were not found");
    files
}

/// The text without `--` comments and string literals (their insides could look like code),
/// cut into the batches a `GO` line separates.
fn batches(sql: &str) -> Vec<String> {
    let mut code = String::new();
    for line in sql.lines() {
        let mut in_string = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\'' => in_string = !in_string,
                '-' if !in_string && chars.peek() == Some(&'-') => break,
                _ if in_string => {}
                _ => code.push(c),
            }
        }
        code.push('\n');
    }
    let mut out = vec![String::new()];
    for line in code.lines() {
        if line.trim().eq_ignore_ascii_case("go") {
            out.push(String::new());
        } else {
            let last = out.last_mut().expect("one batch at least");
            last.push_str(line);
            last.push('\n');
        }
    }
    out
}

/// The `@name`s a batch uses (parameters, variables, table variables).
fn variables(batch: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let bytes = batch.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'@' && bytes.get(i + 1) != Some(&b'@') && (i == 0 || bytes[i - 1] != b'@') {
            let end = batch[i + 1..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(batch.len(), |n| i + 1 + n);
            if end > i + 1 {
                names.push(&batch[i..end]);
            }
            i = end;
        } else {
            i += 1;
        }
    }
    names
}

/// Variable names take the instance's collation (SQL Server's "identifier collation"), and the
/// default one ignores case: `@Resource` and `@resource` in one procedure are "already
/// declared" there (and on Babelfish), so migration 0004 once could not be installed on a
/// default SQL Server. No two names of one batch may differ only in case.
#[test]
fn no_two_variables_of_one_batch_differ_only_in_case() {
    let mut clashes = std::collections::BTreeSet::new();
    for (path, sql) in tsql_files() {
        for (n, batch) in batches(&sql).iter().enumerate() {
            let mut first: std::collections::BTreeMap<String, &str> = Default::default();
            for name in variables(batch) {
                let seen = *first.entry(name.to_lowercase()).or_insert(name);
                if seen != name {
                    let file = path.display();
                    clashes.insert(format!("{file} batch {}: {seen} and {name}", n + 1));
                }
            }
        }
    }
    assert!(clashes.is_empty(), "{clashes:#?}");
}

#[test]
fn the_checker_finds_a_case_clash_and_ignores_comments_and_strings() {
    let sql = "CREATE PROCEDURE p @Resource int AS\n-- @resource in a comment\n\
               SELECT N'@RESOURCE' AS s, @@ROWCOUNT;\nGO\nDECLARE @resource int;";
    let b = batches(sql);
    assert_eq!(b.len(), 2);
    assert_eq!(variables(&b[0]), vec!["@Resource"]);
    assert_eq!(variables(&b[1]), vec!["@resource"]);
    let clash = "CREATE PROCEDURE p @Resource int AS DECLARE @resource int;";
    let names = variables(clash);
    assert_eq!(names, vec!["@Resource", "@resource"]);
}

/// Forms Babelfish for PostgreSQL 4.3 refuses and SQL Server has an equal of that it runs:
/// the equal is what the files use.
#[test]
fn no_form_that_babelfish_refuses() {
    let refused: &[(&str, &str)] = &[
        ("CREATE OR ALTER ", "plain CREATE: a migration runs once"),
        (
            " WITH CHECK ADD ",
            "ADD CONSTRAINT: new constraints are checked by default",
        ),
        (
            "ALTER DATABASE ",
            "database settings belong to the operator (docs/sql-server.md)",
        ),
        (
            "MERGE ",
            "UPDATE WITH (UPDLOCK, HOLDLOCK), then INSERT when @@ROWCOUNT = 0, in one transaction",
        ),
    ];
    let mut found = std::collections::BTreeSet::new();
    for (path, sql) in tsql_files() {
        for batch in batches(&sql) {
            let flat = batch.split_whitespace().collect::<Vec<_>>().join(" ");
            let upper = format!(" {} ", flat.to_uppercase());
            for (form, instead) in refused {
                if upper.contains(form) {
                    found.insert(format!("{}: {form}(use {instead})", path.display()));
                }
            }
            // ALTER TABLE … ADD a …, b …: one column per ADD.
            for stmt in upper.split(';') {
                if let Some(at) = stmt.find("ALTER TABLE ")
                    && let Some(add) = stmt[at..].find(" ADD ")
                {
                    let rest = &stmt[at + add..];
                    if !rest.trim_start().starts_with("ADD CONSTRAINT") && top_level_comma(rest) {
                        found.insert(format!(
                            "{}: several columns in one ALTER TABLE … ADD",
                            path.display()
                        ));
                    }
                }
            }
            for stmt in upper.split(';') {
                for problem in output_problems(stmt) {
                    found.insert(format!("{}: {problem}", path.display()));
                }
            }
            // An updatable CTE: WITH c AS (…) UPDATE c / DELETE FROM c.
            for name in cte_names(&upper) {
                for target in [format!("UPDATE {name} "), format!("DELETE FROM {name} ")] {
                    if upper.contains(&target) {
                        found.insert(format!(
                            "{}: {}through a CTE (use WHERE id IN (SELECT TOP …))",
                            path.display(),
                            target
                        ));
                    }
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// What Babelfish refuses in one statement's (upper-cased) OUTPUT clause, if it has one.
fn output_problems(stmt: &str) -> Vec<String> {
    let Some(at) = stmt.find(" OUTPUT ") else {
        return Vec::new();
    };
    let after = &stmt[at..];
    let list = &after[8..];
    let list = &list[..[" INTO ", " FROM ", " WHERE ", " VALUES ", " SELECT "]
        .iter()
        .filter_map(|w| list.find(w))
        .min()
        .unwrap_or(list.len())];
    let mut problems = Vec::new();
    // A column, arithmetic or a function of one column runs there, but no CAST, CASE or
    // COALESCE ("missing FROM-clause entry").
    for word in ["CAST(", "CASE ", "COALESCE(", "IIF(", "ISNULL(", "CONVERT("] {
        if list.contains(word) {
            problems.push(format!(
                "{word}… in an OUTPUT list (OUTPUT INTO a table variable, then SELECT the \
                 expression)"
            ));
        }
    }
    let update = stmt.contains("UPDATE ");
    // Sent to the client, an INSERT's OUTPUT cannot stand beside an ORDER BY ("syntax error at
    // or near ORDER").
    if stmt.contains("INSERT ") && stmt.contains(" ORDER BY ") && !after.contains(" INTO ") {
        problems.push(
            "INSERT … OUTPUT … SELECT … ORDER BY (OUTPUT … INTO a table variable)".to_owned(),
        );
    }
    // An UPDATE's deleted.* is NULL there.
    if update && list.contains("DELETED.") {
        problems.push("deleted.… in an UPDATE's OUTPUT (read it with UPDLOCK first)".to_owned());
    }
    // Babelfish loses the alias an UPDATE with OUTPUT joins with JOIN … ON.
    if update && after.contains(" JOIN ") {
        problems.push(
            "UPDATE … OUTPUT … FROM … JOIN (join in the FROM list, the condition in WHERE)"
                .to_owned(),
        );
    }
    problems
}

/// Whether `s` has a comma outside parentheses.
fn top_level_comma(s: &str) -> bool {
    let mut depth = 0i32;
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => return true,
            _ => {}
        }
    }
    false
}

/// The names a batch defines with `WITH name AS (` or `, name AS (`.
fn cte_names(upper: &str) -> Vec<String> {
    let words: Vec<&str> = upper.split_whitespace().collect();
    words
        .windows(4)
        .filter(|w| {
            (w[0] == "WITH" || w[0].ends_with(',')) && w[2] == "AS" && w[3].starts_with('(')
        })
        .map(|w| w[1].to_owned())
        .collect()
}

#[test]
fn the_form_checks_see_what_they_look_for() {
    assert!(top_level_comma(" ADD a int NULL, b int NULL"));
    assert!(!top_level_comma(" ADD a decimal(10, 2) NULL"));
    let cte = " WITH C AS ( SELECT TOP (1) * FROM T ), D AS ( SELECT 1 ) UPDATE C SET X = 1 ";
    assert_eq!(cte_names(cte), vec!["C", "D"]);
}

//! ARCHITECTURE.md stays true: every path it names exists, every SQL file it names is a
//! statement or a migration, and every test it names is a test function somewhere.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `code spans` of the page.
fn spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Every Rust file below `dir`, as text.
fn rust_sources(dir: &Path, out: &mut String) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() && name != "target" && name != ".git" {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
}

#[test]
fn every_path_sql_file_and_test_named_in_architecture_md_exists() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let mut sources = String::new();
    rust_sources(&root(), &mut sources);
    let mut checked = 0;
    for span in spans(&text) {
        let span = span.trim();
        if span.contains(['*', '<', ' ', '(']) {
            continue; // a pattern, a call or a phrase, not a name
        }
        let found = if span.ends_with(".sql") && !span.contains('/') {
            [
                "store/sql/postgres",
                "store/sql/sqlite",
                "store/sql/mssql",
                "migrations/postgres",
            ]
            .iter()
            .any(|dir| root().join(dir).join(span).exists())
        } else if span.contains('/') {
            root().join(span.trim_end_matches('/')).exists()
        } else if span.starts_with('g')
            && span.contains('_')
            && span.chars().nth(1).is_some_and(|c| c.is_ascii_digit())
            || span.starts_with("issue")
            || span.ends_with("_never_sent")
            || span.starts_with("retries_")
        {
            sources.contains(&format!("fn {span}("))
        } else {
            continue;
        };
        assert!(
            found,
            "ARCHITECTURE.md names `{span}`, which does not exist"
        );
        checked += 1;
    }
    assert!(checked > 50, "only {checked} names checked");
}

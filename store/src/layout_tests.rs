//! The layout rule of STYLE.md: every backend has the same SQL and migration file names, and
//! every file is used, so no dialect's file can be forgotten or left dead.

use std::collections::BTreeSet;
use std::path::Path;

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Files only some backends have, and why: the others do the same work another way.
const NOT_EVERY_BACKEND: &[(&str, &str, &str)] = &[
    (
        "mssql",
        "session_setup.sql",
        "SQL Server's session options (XACT_ABORT, the settings filtered indexes need) are set by a statement after login; sqlx sets the others' through its connect options",
    ),
    (
        "mssql",
        "server_product.sql",
        "Babelfish for PostgreSQL speaks SQL Server's protocol but ignores its locking hints: the store asks which server answers before it lends a connection",
    ),
    (
        "sqlite",
        "op_queue_insert.sql",
        "SQLite has no data-modifying WITH: the request's insert returns its id and this statement writes its queue row (PostgreSQL and SQL Server write both in the insert's statement)",
    ),
    (
        "sqlite",
        "op_claimed_read.sql",
        "SQLite's RETURNING reads only the table it updates: the claim returns the queue rows' ids and this statement reads them with their requests",
    ),
    (
        "sqlite",
        "backlog_minute_purge.sql",
        "a prepared SQLite statement deletes from one table: the charts' retention deletes the backlog's samples with this one (PostgreSQL and SQL Server delete both tables' rows in minute_stats_purge.sql)",
    ),
    (
        "sqlite",
        "op_request_delete.sql",
        "see op_queue_insert.sql: a purge deletes the finished rows, then their requests with this statement",
    ),
    (
        "sqlite",
        "op_request_erase.sql",
        "see op_queue_insert.sql: erasure stamps the finished rows, then clears their requests' content with this statement",
    ),
    (
        "sqlite",
        "data_version_read.sql",
        "SQLite has no notifications: its dispatcher watches for other connections' commits (PostgreSQL LISTENs, SQL Server polls)",
    ),
    (
        "sqlite",
        "database_file_read.sql",
        "see data_version_read.sql: the watcher reads the WAL index beside the database file",
    ),
    (
        "postgres",
        "op_insert_new_if_lease_held.sql",
        "PostgreSQL's speculative insertion costs every row; SQLite's ON CONFLICT costs nothing extra",
    ),
    (
        "postgres",
        "op_insert_batch_new_if_lease_held.sql",
        "see op_insert_new_if_lease_held.sql",
    ),
    (
        "postgres",
        "producer_calls.sql",
        "a PostgreSQL login may hold the role outbox_producer alone (0016): its producer calls then go through functions that run with their owner's rights; SQLite has no roles",
    ),
    ("postgres", "producer_enqueue.sql", "see producer_calls.sql"),
    (
        "postgres",
        "producer_lease_acquire.sql",
        "see producer_calls.sql",
    ),
    (
        "postgres",
        "producer_lease_renew.sql",
        "see producer_calls.sql",
    ),
    (
        "postgres",
        "producer_lease_release.sql",
        "see producer_calls.sql",
    ),
    (
        "mssql",
        "producer_calls.sql",
        "a SQL Server user may hold the role outbox_producer alone (0018): its producer calls then go through procedures that reach the tables through ownership chaining (0004, 0020); SQLite has no roles",
    ),
    ("mssql", "producer_enqueue.sql", "see producer_calls.sql"),
    (
        "mssql",
        "producer_lease_acquire.sql",
        "see producer_calls.sql",
    ),
    (
        "mssql",
        "producer_lease_renew.sql",
        "see producer_calls.sql",
    ),
    (
        "mssql",
        "producer_lease_release.sql",
        "see producer_calls.sql",
    ),
];

/// Every backend, and whether its statements are part of this build (all of them are).
const BACKENDS: &[(crate::Backend, bool)] = &[
    (crate::Backend::Postgres, true),
    (crate::Backend::Sqlite, true),
    (crate::Backend::Mssql, true),
];

/// Every Rust file of a backend's module folder, as one text without white space.
fn module_source(backend: &str) -> String {
    let dir = root().join("src").join(backend);
    names(&dir)
        .iter()
        .filter(|f| f.ends_with(".rs"))
        .map(|f| std::fs::read_to_string(dir.join(f)).unwrap())
        .collect::<String>()
        .replace(char::is_whitespace, "")
}

#[test]
fn sql_files_are_the_same_for_every_backend_and_all_used() {
    let only = |backend: &str| -> BTreeSet<String> {
        NOT_EVERY_BACKEND
            .iter()
            .filter(|(b, _, _)| *b == backend)
            .map(|(_, f, _)| f.to_string())
            .collect()
    };
    let common = |backend: &str| -> Vec<String> {
        names(&root().join("sql").join(backend))
            .difference(&only(backend))
            .cloned()
            .collect()
    };
    let reference = common("postgres");
    for (backend, built) in BACKENDS {
        let backend = backend.name();
        let dir = root().join("sql").join(backend);
        if !built && !dir.exists() {
            eprintln!("sql/{backend}: not part of this build yet");
            continue;
        }
        assert_eq!(
            common(backend),
            reference,
            "sql/{backend} and sql/postgres must hold the same file names, but for NOT_EVERY_BACKEND"
        );
        let source = module_source(backend);
        // The sqlx backends name their admin files through `admin_sql!("<backend>")`.
        let shared = if source.contains(&format!("admin_sql!(\"{backend}\")")) {
            std::fs::read_to_string(root().join("src/admin/sqlx_admin.rs"))
                .unwrap()
                .replace(char::is_whitespace, "")
        } else {
            String::new()
        };
        for file in names(&dir) {
            let include = format!("include_str!(\"../../sql/{backend}/{file}\")");
            let shared_include = format!("include_str!(concat!(\"../../sql/\",$dir,\"/{file}\"))");
            assert!(
                source.contains(&include) || shared.contains(&shared_include),
                "src/{backend}/ does not use sql/{backend}/{file}"
            );
        }
    }
}

/// Migrations PostgreSQL has and another backend does not have yet, and why: each is a step of
/// an open issue, and the backend gets the same file when that step reaches it.
const MIGRATION_NOT_YET: &[(&str, &str, &str)] = &[];

#[test]
fn migrations_are_the_same_for_every_backend_and_all_embedded() {
    let migrations = root().join("../migrations");
    let pg = names(&migrations.join("postgres"));
    for backend in [
        crate::Backend::Postgres,
        crate::Backend::Sqlite,
        crate::Backend::Mssql,
    ] {
        let files = names(&migrations.join(backend.name()));
        let expected: BTreeSet<String> = pg
            .iter()
            .filter(|f| {
                !MIGRATION_NOT_YET
                    .iter()
                    .any(|(b, file, _)| *b == backend.name() && file == f)
            })
            .cloned()
            .collect();
        assert_eq!(
            files, expected,
            "migrations/{backend} differs from migrations/postgres"
        );
        let embedded: BTreeSet<String> = crate::migrate::migrations(backend)
            .iter()
            .map(|m| format!("{}.sql", crate::migrate::label(m)))
            .collect();
        assert_eq!(
            embedded, files,
            "migrations/{backend} has files the build does not embed"
        );
    }
}

//! Migrations on every backend: applied once and recorded, idempotent, safe to run from
//! several processes at once, and a changed applied file is an error.

use outbox_store::{Error, MigrateError};
use outbox_tests::TestDb;

async fn migrations_apply_once_and_are_recorded(db: TestDb) {
    let store = db.store_with(TestDb::options()).await;
    let first = store.migrate().await.unwrap();
    assert_eq!(first.applied, db.migrations());
    assert!(first.already_applied.is_empty());
    let again = store.migrate().await.unwrap();
    assert!(again.applied.is_empty());
    assert_eq!(again.already_applied, db.migrations());
    assert_eq!(
        db.execute("UPDATE outbox_schema_migrations SET name = name")
            .await,
        db.migrations().len() as u64
    );
}

async fn concurrent_migrations_apply_each_file_once(db: TestDb) {
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(db.store_with(TestDb::options()).await);
    }
    let runs: Vec<_> = stores
        .into_iter()
        .map(|s| tokio::spawn(async move { s.migrate().await }))
        .collect();
    let mut applied = 0;
    for run in runs {
        applied += run
            .await
            .unwrap()
            .expect("every concurrent run succeeds")
            .applied
            .len();
    }
    assert_eq!(
        applied,
        outbox_store::migrate::migrations(outbox_store::backend_of(db.url()).unwrap()).len(),
        "each migration was applied by exactly one run"
    );
}

async fn a_changed_applied_migration_is_an_error(db: TestDb) {
    let store = db.store().await;
    db.execute("UPDATE outbox_schema_migrations SET checksum = 'tampered'")
        .await;
    match store.migrate().await {
        Err(Error::Migrate(MigrateError::Changed {
            version: 1,
            recorded,
            ..
        })) => assert_eq!(recorded, "tampered"),
        other => panic!("expected a changed-migration error, got {other:?}"),
    }
}

async fn a_migration_newer_than_this_build_is_an_error(db: TestDb) {
    let store = db.store().await;
    db.execute("INSERT INTO outbox_schema_migrations (version, name, checksum) VALUES (9999, 'future', 'x')").await;
    assert!(matches!(
        store.migrate().await,
        Err(Error::Migrate(MigrateError::Unknown { version: 9999, .. }))
    ));
}

conformance!(
    migrations_apply_once_and_are_recorded,
    concurrent_migrations_apply_each_file_once,
    a_changed_applied_migration_is_an_error,
    a_migration_newer_than_this_build_is_an_error,
);

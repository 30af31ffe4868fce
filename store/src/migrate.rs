//! The versioned schema: `migrations/<backend>/NNNN_name.sql`, embedded at build time, applied
//! in order inside one transaction, recorded with a SHA-256 checksum. An applied file that has
//! changed, or an applied version this build does not know, is an error. [`Migration`] and
//! [`AppliedMigration`] are defined in `model/migration.rs` and re-exported here.

pub use crate::model::{AppliedMigration, Migration};

use serde::Serialize;

use crate::driver::Driver;
use crate::error::{Backend, MigrateError};

macro_rules! migration {
    ($backend:literal, $version:literal, $name:literal) => {
        Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!(
                "../../migrations/",
                $backend,
                "/",
                stringify!($version),
                "_",
                $name,
                ".sql"
            )),
        }
    };
}

// The version literal is written with its leading zeros so it matches the file name.
#[allow(clippy::zero_prefixed_literal)]
const POSTGRES: &[Migration] = &[
    migration!("postgres", 0001, "init"),
    migration!("postgres", 0002, "admin"),
    migration!("postgres", 0003, "hardening"),
    migration!("postgres", 0004, "sql_api"),
    migration!("postgres", 0005, "membership"),
    migration!("postgres", 0006, "partition_count"),
    migration!("postgres", 0007, "trace_links"),
    migration!("postgres", 0008, "destination_health"),
    migration!("postgres", 0009, "lean_attempts"),
    migration!("postgres", 0010, "pooler_safe_sessions"),
    migration!("postgres", 0011, "claim_honours_holds"),
    migration!("postgres", 0012, "claim_room_per_destination"),
    migration!("postgres", 0013, "queue_layout"),
    migration!("postgres", 0014, "request_rules"),
    migration!("postgres", 0015, "producer_role"),
    migration!("postgres", 0016, "component_roles"),
    migration!("postgres", 0017, "content_at_rest"),
    migration!("postgres", 0018, "database_roles"),
    migration!("postgres", 0019, "minute_stats"),
    migration!("postgres", 0020, "producer_procedure"),
];
#[allow(clippy::zero_prefixed_literal)]
const SQLITE: &[Migration] = &[
    migration!("sqlite", 0001, "init"),
    migration!("sqlite", 0002, "admin"),
    migration!("sqlite", 0003, "hardening"),
    migration!("sqlite", 0004, "sql_api"),
    migration!("sqlite", 0005, "membership"),
    migration!("sqlite", 0006, "partition_count"),
    migration!("sqlite", 0007, "trace_links"),
    migration!("sqlite", 0008, "destination_health"),
    migration!("sqlite", 0009, "lean_attempts"),
    migration!("sqlite", 0010, "pooler_safe_sessions"),
    migration!("sqlite", 0011, "claim_honours_holds"),
    migration!("sqlite", 0012, "claim_room_per_destination"),
    migration!("sqlite", 0013, "queue_layout"),
    migration!("sqlite", 0014, "request_rules"),
    migration!("sqlite", 0015, "producer_role"),
    migration!("sqlite", 0016, "component_roles"),
    migration!("sqlite", 0017, "content_at_rest"),
    migration!("sqlite", 0018, "database_roles"),
    migration!("sqlite", 0019, "minute_stats"),
    migration!("sqlite", 0020, "producer_procedure"),
];
#[allow(clippy::zero_prefixed_literal)]
const MSSQL: &[Migration] = &[
    migration!("mssql", 0001, "init"),
    migration!("mssql", 0002, "admin"),
    migration!("mssql", 0003, "hardening"),
    migration!("mssql", 0004, "sql_api"),
    migration!("mssql", 0005, "membership"),
    migration!("mssql", 0006, "partition_count"),
    migration!("mssql", 0007, "trace_links"),
    migration!("mssql", 0008, "destination_health"),
    migration!("mssql", 0009, "lean_attempts"),
    migration!("mssql", 0010, "pooler_safe_sessions"),
    migration!("mssql", 0011, "claim_honours_holds"),
    migration!("mssql", 0012, "claim_room_per_destination"),
    migration!("mssql", 0013, "queue_layout"),
    migration!("mssql", 0014, "request_rules"),
    migration!("mssql", 0015, "producer_role"),
    migration!("mssql", 0016, "component_roles"),
    migration!("mssql", 0017, "content_at_rest"),
    migration!("mssql", 0018, "database_roles"),
    migration!("mssql", 0019, "minute_stats"),
    migration!("mssql", 0020, "producer_procedure"),
];

/// The migrations this build carries for `backend`, in order.
pub fn migrations(backend: Backend) -> &'static [Migration] {
    match backend {
        Backend::Postgres => POSTGRES,
        Backend::Sqlite => SQLITE,
        Backend::Mssql => MSSQL,
    }
}

/// What a migration run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MigrationReport {
    /// `NNNN_name` of each migration applied by this run, in order.
    pub applied: Vec<String>,
    /// `NNNN_name` of each migration that was already applied and unchanged.
    pub already_applied: Vec<String>,
}

/// Compares what the database recorded with what this build carries and returns the
/// migrations still to apply, or the reason the schema cannot be trusted.
pub(crate) fn plan(
    known: &'static [Migration],
    applied: &[AppliedMigration],
) -> Result<(Vec<&'static Migration>, MigrationReport), MigrateError> {
    let mut report = MigrationReport::default();
    for row in applied {
        let Some(m) = known.iter().find(|m| m.version == row.version) else {
            return Err(MigrateError::Unknown {
                version: row.version,
                name: row.name.clone(),
            });
        };
        let current = m.checksum();
        if current != row.checksum {
            return Err(MigrateError::Changed {
                version: m.version,
                name: m.name.to_owned(),
                recorded: row.checksum.clone(),
                current,
            });
        }
        report.already_applied.push(label(m));
    }
    let pending = known
        .iter()
        .filter(|m| !applied.iter().any(|a| a.version == m.version))
        .collect();
    Ok((pending, report))
}

/// Applies the migrations this build carries that the database lacks, in one transaction that
/// no other migrating process runs beside (the same flow for every backend).
///
/// A schema already up to date is told apart first, by a plain read without the migration
/// lock: processes that start together (a fleet of dispatchers scaling out) then neither wait
/// for each other nor hold that lock. The recorded checksums are checked all the same; anything
/// pending, or no record yet, takes the locked path.
pub(crate) async fn run<D: Driver>(d: &D) -> Result<MigrationReport, crate::Error> {
    if let Some(report) = up_to_date(d).await? {
        return Ok(report);
    }
    let mut tx = d.begin_migration().await?;
    D::migration_table_create(&mut tx).await?;
    let applied = D::migration_list(&mut tx).await?;
    let (pending, mut report) = plan(migrations(D::BACKEND), &applied)?;
    for m in pending {
        D::migration_apply(&mut tx, m).await.map_err(|e| match e {
            crate::Error::Store(s) if s.kind() == crate::StoreErrorKind::Denied => {
                MigrateError::Denied {
                    version: m.version,
                    name: m.name.to_owned(),
                    reason: s.to_string(),
                }
                .into()
            }
            e => e,
        })?;
        report.applied.push(label(m));
    }
    D::commit(tx).await?;
    Ok(report)
}

/// The report when nothing is pending, read without the migration lock; `None` when something
/// is (or the record cannot be read yet: no table).
async fn up_to_date<D: Driver>(d: &D) -> Result<Option<MigrationReport>, crate::Error> {
    let Ok(mut tx) = d.begin().await else {
        return Ok(None);
    };
    let listed = D::migration_list(&mut tx).await;
    let _ = D::rollback(tx).await;
    let Ok(applied) = listed else {
        return Ok(None);
    };
    let (pending, report) = plan(migrations(D::BACKEND), &applied)?;
    Ok(pending.is_empty().then_some(report))
}

/// `NNNN_name`, as in the file name.
pub(crate) fn label(m: &Migration) -> String {
    format!("{:04}_{}", m.version, m.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(m: &Migration) -> AppliedMigration {
        AppliedMigration {
            version: m.version,
            name: m.name.into(),
            checksum: m.checksum(),
        }
    }

    #[test]
    fn a_fresh_database_gets_every_migration_in_order() {
        let (pending, report) = plan(POSTGRES, &[]).unwrap();
        assert_eq!(pending.len(), POSTGRES.len());
        assert!(pending.windows(2).all(|w| w[0].version < w[1].version));
        assert!(report.already_applied.is_empty());
    }

    #[test]
    fn applied_and_unchanged_migrations_are_skipped() {
        let done: Vec<_> = SQLITE.iter().map(applied).collect();
        let (pending, report) = plan(SQLITE, &done).unwrap();
        assert!(pending.is_empty());
        assert_eq!(
            report.already_applied,
            [
                "0001_init",
                "0002_admin",
                "0003_hardening",
                "0004_sql_api",
                "0005_membership",
                "0006_partition_count",
                "0007_trace_links",
                "0008_destination_health",
                "0009_lean_attempts",
                "0010_pooler_safe_sessions",
                "0011_claim_honours_holds",
                "0012_claim_room_per_destination",
                "0013_queue_layout",
                "0014_request_rules",
                "0015_producer_role",
                "0016_component_roles",
                "0017_content_at_rest",
                "0018_database_roles",
                "0019_minute_stats",
                "0020_producer_procedure"
            ]
        );
    }

    #[test]
    fn a_changed_applied_file_is_an_error() {
        let mut done: Vec<_> = SQLITE.iter().map(applied).collect();
        done[0].checksum = "0".repeat(64);
        assert!(matches!(
            plan(SQLITE, &done),
            Err(MigrateError::Changed { version: 1, .. })
        ));
    }

    #[test]
    fn an_unknown_applied_version_is_an_error() {
        let done = vec![AppliedMigration {
            version: 9999,
            name: "future".into(),
            checksum: "x".into(),
        }];
        assert!(matches!(
            plan(SQLITE, &done),
            Err(MigrateError::Unknown { version: 9999, .. })
        ));
    }

    #[test]
    fn checksums_are_hex_sha256() {
        let c = POSTGRES[0].checksum();
        assert_eq!(c.len(), 64);
        assert!(c.chars().all(|c| c.is_ascii_hexdigit()));
    }
}

//! The integration suite: every guarantee written once as `async fn(TestDb)` and run against
//! every backend (SQLite and PostgreSQL always; SQL Server when `OUTBOX_MSSQL_URL` is set and
//! the run includes ignored tests). One binary, so the PostgreSQL cluster starts once.

#[macro_use]
extern crate outbox_tests;

mod architecture;
mod destination_health;
mod erasure;
mod guarantees;
mod keeper;
mod lease_model;
mod membership;
mod migrations;
mod minute_stats;
mod partition_count;
mod pooler_probe;
mod regression;
mod server_product;
mod sql_api;

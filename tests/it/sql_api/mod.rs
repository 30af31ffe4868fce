//! The producer contract as SQL (migration 0004_sql_api): PostgreSQL's `outbox.*` functions and
//! SQL Server's `outbox.*` procedures, called the way a worker in another language calls them,
//! over a plain driver connection and inside the caller's own transaction.

mod mssql;
mod postgres;
mod rust_producer;

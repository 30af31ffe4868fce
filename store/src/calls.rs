//! Which way a store's producer calls (leases and enqueues) reach the tables (issue 37): as
//! [`ProducerCalls`] is configured, or for [`ProducerCalls::Auto`] as the backend answered once
//! asked whether this login may write the tables itself.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::OnceCell;

use crate::ProducerCalls;
use crate::error::Error;
use crate::op::{EnqueueResult, Enqueued, NotEnqueued};

/// The configured choice and, for [`ProducerCalls::Auto`], the answer once asked.
#[derive(Debug, Clone)]
pub(crate) struct CallsChoice {
    configured: ProducerCalls,
    /// Whether the calls go through the SQL API, once asked.
    asked: Arc<OnceCell<bool>>,
}

impl CallsChoice {
    pub(crate) fn new(configured: ProducerCalls) -> CallsChoice {
        CallsChoice {
            configured,
            asked: Arc::new(OnceCell::new()),
        }
    }

    /// Whether the calls go through the SQL API's functions (PostgreSQL) or procedures (SQL
    /// Server). For `Auto`, `may_write` asks the database whether this login may insert
    /// requests and write leases itself: `None` while the schema does not exist yet, an answer
    /// not kept, so it is asked again once it does (a producer that migrates first).
    pub(crate) async fn through_api<F, Fut>(&self, may_write: F) -> Result<bool, Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<bool>, Error>>,
    {
        match self.configured {
            ProducerCalls::Statements => return Ok(false),
            ProducerCalls::Functions => return Ok(true),
            ProducerCalls::Auto => {}
        }
        if let Some(through_api) = self.asked.get() {
            return Ok(*through_api);
        }
        let Some(may_write) = may_write().await? else {
            return Ok(false);
        };
        let _ = self.asked.set(!may_write);
        Ok(!may_write)
    }
}

/// The outcome of a single enqueue made through the SQL API's batch call, which answers a
/// row per op: its one op, or why it was not enqueued; an answer without a row is an error,
/// never a panic.
pub(crate) fn the_one(
    backend: crate::Backend,
    answer: Result<Vec<Enqueued>, NotEnqueued>,
) -> Result<EnqueueResult, Error> {
    let ops = match answer {
        Ok(ops) => ops,
        Err(not) => return Ok(Err(not)),
    };
    let one = ops.into_iter().next().ok_or_else(|| {
        crate::StoreError::new(
            backend,
            crate::StoreErrorKind::Other,
            "the SQL API answered no row for the op it was given",
        )
    })?;
    Ok(Ok(one))
}

/// The field a refusal of the SQL API names, as the builder's own checks name it: `op` for a
/// name it does not use.
pub(crate) fn api_field(name: &str) -> &'static str {
    const FIELDS: &[&str] = &[
        "resource",
        "owner_id",
        "token",
        "ttl",
        "ops",
        "op",
        "op_id",
        "stage",
        "destination",
        "method",
        "path",
        "headers",
        "body",
        "content_type",
        "idempotency_key",
        "order_key",
        "not_before",
        "traceparent",
        "tracestate",
        "request_hash",
        "partition",
    ];
    FIELDS.iter().find(|f| **f == name).copied().unwrap_or("op")
}

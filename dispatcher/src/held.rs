//! The ops a partition's leader claimed beyond the slots it had free (`dispatcher.claim_ahead`),
//! held in its memory by destination, in the claim's order, until a slot of their destination
//! frees. In the database they are in flight under the term's lease like the ops being sent, so
//! a term that ends gives them back (`Leader::step_down`), and one that dies leaves them to the
//! next leader's re-queue.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use opentelemetry::trace::SpanContext;
use outbox_store::ClaimedOp;
use tokio::time::Instant;

use crate::metrics as m;

/// One held op, the span of the claim that took it, and since when it waits here.
#[derive(Debug)]
struct Waiting {
    op: ClaimedOp,
    claim: Option<SpanContext>,
    since: Instant,
}

/// The held ops of one term, by destination. Shown as `outbox_claimed_ahead` (all terms of the
/// process together).
#[derive(Debug, Default)]
pub(crate) struct Held {
    ops: Mutex<HashMap<String, VecDeque<Waiting>>>,
}

impl Held {
    /// Holds `op` (taken by the claim whose span is `claim`) until a slot of its destination
    /// frees; behind those of its destination already held.
    pub(crate) fn push(&self, op: ClaimedOp, claim: Option<SpanContext>) {
        metrics::gauge!(m::CLAIMED_AHEAD).increment(1.0);
        self.lock()
            .entry(op.destination.clone())
            .or_default()
            .push_back(Waiting {
                op,
                claim,
                since: Instant::now(),
            });
    }

    /// Up to `n` of `destination`'s held ops, oldest claimed first, each with its claim's span.
    /// Its attempt starts now: the op's `claimed_at` (the attempt's start as recorded) moves
    /// on by the time it was held, on the database's clock as the claim read it.
    pub(crate) fn take(
        &self,
        destination: &str,
        n: usize,
    ) -> Vec<(ClaimedOp, Option<SpanContext>)> {
        let mut ops = self.lock();
        let Some(queue) = ops.get_mut(destination) else {
            return Vec::new();
        };
        let taken: Vec<_> = queue
            .drain(..n.min(queue.len()))
            .map(|w| {
                let mut op = w.op;
                op.claimed_at += w.since.elapsed();
                (op, w.claim)
            })
            .collect();
        if queue.is_empty() {
            ops.remove(destination);
        }
        drop(ops);
        metrics::gauge!(m::CLAIMED_AHEAD).decrement(taken.len() as f64);
        taken
    }

    /// Every held op of `destination`, to give back.
    pub(crate) fn take_all(&self, destination: &str) -> Vec<ClaimedOp> {
        self.take(destination, usize::MAX)
            .into_iter()
            .map(|(op, _)| op)
            .collect()
    }

    /// Every held op, to give back (the term ends).
    pub(crate) fn drain(&self) -> Vec<ClaimedOp> {
        let ops: Vec<ClaimedOp> = self
            .lock()
            .drain()
            .flat_map(|(_, queue)| queue.into_iter().map(|w| w.op))
            .collect();
        metrics::gauge!(m::CLAIMED_AHEAD).decrement(ops.len() as f64);
        ops
    }

    /// Whether ops of `destination` are held.
    pub(crate) fn has(&self, destination: &str) -> bool {
        self.lock().contains_key(destination)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, VecDeque<Waiting>>> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // A term that died with ops held (lost lease): they leave the gauge with it.
        let left: usize = self.lock().values().map(VecDeque::len).sum();
        metrics::gauge!(m::CLAIMED_AHEAD).decrement(left as f64);
    }
}

#[cfg(test)]
mod tests {
    use outbox_store::FencingToken;
    use time::OffsetDateTime;

    use super::*;

    fn op(seq: i64, destination: &str, claimed_at: OffsetDateTime) -> ClaimedOp {
        ClaimedOp {
            seq,
            op_id: uuid::Uuid::nil(),
            resource: "billing:1".into(),
            token: FencingToken::new(1),
            destination: destination.into(),
            idempotency_key: format!("k{seq}"),
            method: "POST".into(),
            path: "/v1/a".into(),
            headers: Vec::new(),
            content_type: None,
            body: Vec::new(),
            body_bytes: 0,
            attempt: 1,
            created_at: claimed_at,
            claimed_at,
            trace_context: None,
            trace_state: None,
            previous_attempt: None,
            budget_attempt: 1,
            budget_since: claimed_at,
        }
    }

    fn seqs(taken: Vec<(ClaimedOp, Option<SpanContext>)>) -> Vec<i64> {
        taken.into_iter().map(|(o, _)| o.seq).collect()
    }

    /// Ops come back by destination in the order they were held, at most as many as asked;
    /// an op's start moves on by the time it waited; the rest can all be given back.
    #[tokio::test]
    async fn held_ops_come_back_in_order_and_start_when_taken() {
        let held = Held::default();
        let at = OffsetDateTime::now_utc();
        for (seq, d) in [(1, "a"), (2, "b"), (3, "a"), (4, "a")] {
            held.push(op(seq, d, at), None);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let first = held.take("a", 2);
        assert!(first[0].0.claimed_at - at >= time::Duration::milliseconds(50));
        assert_eq!(seqs(first), [1, 3]);
        assert!(held.has("a") && held.has("b"));
        assert_eq!(seqs(held.take("a", 5)), [4]);
        assert!(held.take("a", 1).is_empty());
        assert!(!held.has("a") && held.has("b"));
        held.push(op(5, "c", at), None);
        assert_eq!(
            held.take_all("c")
                .into_iter()
                .map(|o| o.seq)
                .collect::<Vec<_>>(),
            [5]
        );
        let rest: Vec<i64> = held.drain().into_iter().map(|o| o.seq).collect();
        assert_eq!(rest, [2]);
        assert!(!held.has("b"));
    }
}

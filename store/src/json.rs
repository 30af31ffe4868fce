//! Lists and batches as JSON text, for the backends without array parameters: SQLite reads
//! them with `json_each`, SQL Server with `OPENJSON`. SQLite's batch carries its bytes as
//! lowercase hex; SQL Server's carries them apart, in one binary parameter (Babelfish for
//! PostgreSQL ignores `CONVERT`'s hex style, and binary is half the size anyway).

use time::OffsetDateTime;

use crate::dispatch::Completion;
use crate::model::OrderKey;
use crate::op::NewOp;

/// A list of values as a JSON array.
pub(crate) fn list<T: serde::Serialize>(items: &[T]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_owned())
}

/// A batch as the JSON array SQLite's `op_insert_batch_if_lease_held.sql` reads: one object
/// per op with the keys of [`op_object`], and hash and body as hex.
pub(crate) fn batch(ops: &[NewOp]) -> String {
    let ops: Vec<serde_json::Value> = ops
        .iter()
        .map(|o| {
            let mut object = op_object(o);
            object.insert("hash".into(), hex(&o.request_hash).into());
            object.insert("body".into(), hex(&o.body).into());
            object.into()
        })
        .collect();
    serde_json::Value::Array(ops).to_string()
}

/// A batch as SQL Server's `op_insert_batch_if_lease_held.sql` reads it: the JSON array of
/// [`op_object`]s, each with `at` (where its 32-byte request hash starts in the bytes, from 1,
/// as T-SQL's SUBSTRING counts) and `body_bytes` (its body's length, right after the hash),
/// and the bytes: every op's hash and body, one after the other. With `supersede`, each object
/// also says whether its op supersedes older pending ones (`outbox.EnqueueOps` reads that).
pub(crate) fn batch_bytes_apart(ops: &[NewOp], supersede: bool) -> (String, Vec<u8>) {
    let mut bytes = Vec::with_capacity(ops.iter().map(|o| 32 + o.body.len()).sum());
    let ops: Vec<serde_json::Value> = ops
        .iter()
        .map(|o| {
            let mut object = op_object(o);
            object.insert("at".into(), (bytes.len() as u64 + 1).into());
            object.insert("body_bytes".into(), (o.body.len() as u64).into());
            if supersede {
                object.insert("supersede".into(), o.supersede_pending.into());
            }
            bytes.extend_from_slice(&o.request_hash);
            bytes.extend_from_slice(&o.body);
            object.into()
        })
        .collect();
    (serde_json::Value::Array(ops).to_string(), bytes)
}

/// An op's text and numbers as one JSON object: op_id, destination, key, order_key,
/// partition, method, path, headers, content_type, expire, delay_ms, trace and trace_state.
fn op_object(o: &NewOp) -> serde_json::Map<String, serde_json::Value> {
    let object = serde_json::json!({
        "op_id": o.op_id.hyphenated().to_string(),
        "destination": o.destination.as_str(),
        "key": o.idempotency_key.as_str(),
        "order_key": o.order_key.as_ref().map(OrderKey::as_str),
        "partition": o.partition,
        "method": o.method.as_str(),
        "path": o.path,
        "headers": o.headers_json,
        "content_type": o.content_type,
        "expire": o.expire_with_generation,
        "delay_ms": o.delay_ms,
        "trace": o.trace_context,
        "trace_state": o.trace_state,
    });
    match object {
        serde_json::Value::Object(map) => map,
        _ => unreachable!("json! of braces is an object"),
    }
}

/// Completions as the JSON array each backend's `op_complete_batch_if_claimed.sql` reads: one
/// object per completion (seq, state, delay_ms, error, attempt, started_at, outcome,
/// http_status, excerpt, trace), the start time written as the backend reads a time.
pub(crate) fn completions(
    completions: &[Completion],
    started_at: fn(OffsetDateTime) -> String,
) -> String {
    let items: Vec<serde_json::Value> = completions
        .iter()
        .map(|c| {
            serde_json::json!({
                "seq": c.seq,
                "state": c.next.state(),
                "delay_ms": c.next.delay_ms(),
                "error": c.stored_error(),
                "attempt": c.attempt,
                "started_at": started_at(c.started_at),
                "outcome": c.outcome.as_str(),
                "http_status": c.http_status.map(i32::from),
                "excerpt": c.stored_excerpt(),
                "trace": c.trace_context,
            })
        })
        .collect();
    serde_json::Value::Array(items).to_string()
}

/// Lowercase hex, as SQLite's `unhex` reads it.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_bytes_have_the_forms_the_statements_read() {
        assert_eq!(list(&["a", "b\"c"]), r#"["a","b\"c"]"#);
        assert_eq!(list::<i64>(&[]), "[]");
        assert_eq!(hex(&[0, 15, 255]), "000fff");
    }
}

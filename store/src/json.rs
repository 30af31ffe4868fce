//! Lists and batches as JSON text, for the backends without array parameters: SQLite reads
//! them with `json_each`, SQL Server with `OPENJSON`. One shape for both, so their statements
//! take the same parameter; bytes are lowercase hex.

use crate::model::OrderKey;
use crate::op::NewOp;

/// A list of values as a JSON array.
pub(crate) fn list<T: serde::Serialize>(items: &[T]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_owned())
}

/// A batch as the JSON array `op_insert_batch_if_lease_held.sql` reads: one object per op
/// with the keys op_id, destination, key, hash, order_key, partition, method, path, headers,
/// content_type, body, expire, delay_ms, trace and trace_state.
pub(crate) fn batch(ops: &[NewOp]) -> String {
    let ops: Vec<serde_json::Value> = ops
        .iter()
        .map(|o| {
            serde_json::json!({
                "op_id": o.op_id.hyphenated().to_string(),
                "destination": o.destination.as_str(),
                "key": o.idempotency_key.as_str(),
                "hash": hex(&o.request_hash),
                "order_key": o.order_key.as_ref().map(OrderKey::as_str),
                "partition": o.partition,
                "method": o.method.as_str(),
                "path": o.path,
                "headers": o.headers_json,
                "content_type": o.content_type,
                "body": hex(&o.body),
                "expire": o.expire_with_generation,
                "delay_ms": o.delay_ms,
                "trace": o.trace_context,
                "trace_state": o.trace_state,
            })
        })
        .collect();
    serde_json::Value::Array(ops).to_string()
}

/// Lowercase hex, as SQLite's `unhex` and SQL Server's `CONVERT(varbinary(max), x, 2)` read it.
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

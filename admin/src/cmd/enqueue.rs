//! `outboxctl enqueue`: record an op for delivery, fenced by a lease the caller holds.

use std::io::Read as _;

use outbox_producer::{Method, Operation, Outbox};

use crate::cli::EnqueueArgs;
use crate::cmd::lease;
use crate::exit::CliError;
use crate::render;

pub(crate) async fn run(outbox: &Outbox, args: EnqueueArgs, json: bool) -> Result<(), CliError> {
    let lease = lease::from_args(&args.lease)?;
    let op = build(args)?;
    let done = outbox.enqueue(&lease, &op).await?;
    if json {
        render::json_line(&done);
    } else if done.duplicate {
        println!(
            "duplicate: op {} (seq {}) already holds this request, state {}",
            done.op_id, done.seq, done.state
        );
    } else {
        println!(
            "accepted op {} (seq {}), state {}",
            done.op_id, done.seq, done.state
        );
    }
    Ok(())
}

fn build(args: EnqueueArgs) -> Result<Operation, CliError> {
    let method: Method = args.method.parse()?;
    let mut op = Operation::builder(args.destination, method, args.path)
        .idempotency_key(args.idempotency_key);
    for header in &args.headers {
        let (name, value) = header.split_once(':').ok_or_else(|| {
            CliError::invalid(format!("--header {header:?} is not 'Name: value'"))
        })?;
        op = op.header(name.trim(), value.trim());
    }
    if let Some(body) = read_body(args.body, args.body_file.as_deref())? {
        let content_type = args
            .content_type
            .unwrap_or_else(|| default_content_type(&body).to_owned());
        op = op.body(body, content_type);
    } else if args.content_type.is_some() {
        return Err(CliError::invalid(
            "--content-type needs --body or --body-file",
        ));
    }
    if let Some(key) = args.order_key {
        op = op.order_key(key);
    }
    if args.unordered {
        op = op.unordered();
    }
    if let Some(delay) = args.not_before {
        op = op.not_before(delay);
    }
    if args.supersede_pending {
        op = op.supersede_pending();
    }
    if args.expire_with_generation {
        op = op.expire_with_generation();
    }
    if let Some(tp) = args.traceparent {
        op = op.traceparent(tp);
    }
    if let Some(ts) = args.tracestate {
        op = op.tracestate(ts);
    }
    Ok(op.build()?)
}

fn read_body(text: Option<String>, file: Option<&str>) -> Result<Option<Vec<u8>>, CliError> {
    match (text, file) {
        (Some(text), _) => Ok(Some(text.into_bytes())),
        (None, Some("-")) => {
            let mut body = Vec::new();
            std::io::stdin().read_to_end(&mut body).map_err(|e| {
                CliError::invalid(format!("cannot read the body from standard input: {e}"))
            })?;
            Ok(Some(body))
        }
        (None, Some(path)) => std::fs::read(path)
            .map(Some)
            .map_err(|e| CliError::invalid(format!("cannot read --body-file {path}: {e}"))),
        (None, None) => Ok(None),
    }
}

/// JSON bodies are labelled as such; anything else is opaque bytes.
fn default_content_type(body: &[u8]) -> &'static str {
    if serde_json::from_slice::<serde_json::Value>(body).is_ok() {
        "application/json"
    } else {
        "application/octet-stream"
    }
}

#[cfg(test)]
mod tests {
    use super::default_content_type;

    #[test]
    fn json_bodies_default_to_application_json() {
        assert_eq!(default_content_type(br#"{"a":1}"#), "application/json");
        assert_eq!(
            default_content_type(b"plain words"),
            "application/octet-stream"
        );
    }
}

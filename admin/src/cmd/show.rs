//! `outboxctl show`: what happened to one op, attempt by attempt.

use outbox_console::describe;
use outbox_producer::Keys;
use outbox_store::Store;
use outbox_store::admin::{OpContent, OpDetail};

use crate::cli::ShowArgs;
use crate::cmd::select;
use crate::exit::{self, CliError};
use crate::render;

/// Bytes of body shown with --body in the table view (JSON shows all of it).
const BODY_PREVIEW: usize = 4096;

pub(crate) async fn run(
    store: &Store,
    keys: Option<&Keys>,
    args: &ShowArgs,
    json: bool,
) -> Result<(), CliError> {
    let seq = match (&args.op, &args.destination, &args.key) {
        (Some(op), _, _) => select::resolve(store, op).await?,
        (None, Some(destination), Some(key)) => store
            .admin_op_find_by_key(destination, key)
            .await?
            .ok_or_else(|| {
                CliError::new(
                    exit::NOT_FOUND,
                    format!("no op for key {key:?} at {destination}"),
                )
            })?,
        _ => {
            return Err(CliError::invalid(
                "name an op: SEQ, op id, or --destination and --key",
            ));
        }
    };
    let op = store
        .admin_op_show(seq)
        .await?
        .ok_or_else(|| CliError::new(exit::NOT_FOUND, format!("no op {seq}")))?;
    // The content (header values and body) only when asked for: a role that may not read it
    // (outbox_viewer) still shows everything else.
    let content = if args.body {
        let stored = store
            .admin_op_content(seq)
            .await?
            .ok_or_else(|| CliError::new(exit::NOT_FOUND, format!("no op {seq}")))?;
        Some(Shown::of(stored, keys, &op.summary.destination))
    } else {
        None
    };
    if json {
        let mut value = serde_json::to_value(&op).map_err(|e| CliError::other(e.to_string()))?;
        match &content {
            Some(Shown::Clear { content, sealed }) => {
                value["headers"] = serde_json::json!(content.headers);
                value["body"] = String::from_utf8_lossy(&content.body).into_owned().into();
                value["encrypted_with"] = serde_json::json!(sealed);
            }
            Some(Shown::Sealed { sealed, why }) => {
                value["encrypted_with"] = serde_json::json!(sealed);
                value["content"] = why.as_str().into();
            }
            None => {}
        }
        render::json_line(&value);
        return Ok(());
    }
    print_op(&op, content.as_ref());
    Ok(())
}

/// What `--body` shows of an op's content: clear (stored so, or opened with the keys given),
/// or only which keys seal it and why it stays sealed.
enum Shown {
    /// Readable; `sealed` names the keys it was opened with (empty: stored clear).
    Clear {
        content: OpContent,
        sealed: Vec<String>,
    },
    /// Sealed with keys outboxctl does not hold, or not opening with them.
    Sealed { sealed: Vec<String>, why: String },
}

impl Shown {
    fn of(stored: OpContent, keys: Option<&Keys>, destination: &str) -> Shown {
        let sealed = outbox_seal::sealed_with(&stored.headers, &stored.body);
        if sealed.is_empty() {
            return Shown::Clear {
                content: stored,
                sealed,
            };
        }
        let opened = keys.map(|k| k.open_content(destination, &stored.headers, &stored.body));
        match opened {
            Some(Ok(Some(clear))) => Shown::Clear {
                content: OpContent {
                    headers: clear.headers,
                    body: clear.body,
                },
                sealed,
            },
            Some(Err(e)) => Shown::Sealed {
                why: format!("{e}: give outboxctl the key with --encryption-key ID=SOURCE"),
                sealed,
            },
            _ => Shown::Sealed {
                why: format!(
                    "encrypted with {}: give outboxctl the key with --encryption-key ID=SOURCE to read it",
                    sealed.join(", ")
                ),
                sealed,
            },
        }
    }
}

fn print_op(op: &OpDetail, content: Option<&Shown>) {
    let s = &op.summary;
    let newest = match op.resource_token {
        Some(t) if t > s.token => format!(" (superseded: the resource's newest token is {t})"),
        _ => String::new(),
    };
    let lines = [
        ("op", format!("{} (seq {})", s.op_id, s.seq)),
        ("state", s.state.clone()),
        ("resource", s.resource.clone()),
        ("token", format!("{}{newest}", s.token)),
        ("owner", op.owner_id.clone()),
        ("destination", s.destination.clone()),
        ("request", format!("{} {}", op.method, op.path)),
        ("idempotency key", s.idempotency_key.clone()),
        ("order key", render::or_dash(op.order_key.as_deref())),
        (
            "enqueued",
            format!(
                "{} ({})",
                render::relative(s.created_at),
                render::exact(s.created_at)
            ),
        ),
        ("attempts", describe::attempts_line(op)),
        (
            "next attempt",
            describe::next_attempt(op).unwrap_or_else(|| "-".to_owned()),
        ),
        (
            "delivered",
            op.delivered_at
                .map(render::relative)
                .unwrap_or_else(|| "-".to_owned()),
        ),
        ("last error", render::or_dash(s.last_error.as_deref())),
        ("trace", trace_line(op)),
        ("body", describe::body_line(op)),
    ];
    // Every value may hold a producer's text: each line is printed as a cell.
    for (name, value) in lines {
        println!("{name:>16}: {}", render::cell(&value));
    }
    match content {
        None => {
            for name in &op.header_names {
                println!("{:>16}: {}", "header", render::cell(name));
            }
        }
        Some(Shown::Sealed { why, .. }) => {
            for name in &op.header_names {
                println!("{:>16}: {}", "header", render::cell(name));
            }
            println!("{:>16}: {}", "content", render::cell(why));
        }
        Some(Shown::Clear { content, sealed }) => {
            if !sealed.is_empty() {
                println!(
                    "{:>16}: decrypted with {}",
                    "content",
                    render::cell(&sealed.join(", "))
                );
            }
            for (name, value) in &content.headers {
                println!(
                    "{:>16}: {}: {}",
                    "header",
                    render::cell(name),
                    render::cell(value)
                );
            }
            let text = String::from_utf8_lossy(&content.body);
            println!("{}", render::lines(&text, BODY_PREVIEW));
        }
    }
    if op.attempt_history.is_empty() {
        println!("no attempts yet");
        return;
    }
    let mut table = render::table(&[
        "#",
        "DISPATCHER TOKEN",
        "STARTED",
        "DURATION",
        "OUTCOME",
        "STATUS",
        "ERROR",
        "RESPONSE",
        "TRACE ID",
    ]);
    for a in &op.attempt_history {
        table.add_row(vec![
            a.attempt.to_string(),
            a.dispatcher_token.to_string(),
            render::relative(a.started_at),
            a.duration_ms
                .map(|ms| format!("{ms} ms"))
                .unwrap_or_else(|| "-".to_owned()),
            render::or_dash(a.outcome.as_deref()),
            render::or_dash(a.http_status),
            render::clip(a.error.as_deref().unwrap_or("-"), 60),
            render::clip(a.response_excerpt.as_deref().unwrap_or("-"), 60),
            render::or_dash(a.trace_context.as_deref().and_then(describe::trace_id)),
        ]);
    }
    println!("{table}");
}

/// The producer's traceparent and tracestate, as stored.
fn trace_line(op: &OpDetail) -> String {
    match (&op.trace_context, &op.trace_state) {
        (Some(tp), Some(ts)) => format!("{tp} ({ts})"),
        (Some(tp), None) => tp.clone(),
        (None, _) => "-".to_owned(),
    }
}

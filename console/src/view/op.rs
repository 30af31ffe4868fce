//! One op's model: its fields and attempts as `outboxctl show` gives them, without its body or
//! its header values (a header's name is shown, never its value: producers' headers may carry
//! what only the destination should read).

use outbox_store::OpState;
use outbox_store::admin::{AttemptRow, OpDetail};

use super::Links;
use crate::describe;
use crate::text::{self, DASH};

/// What an op's page shows.
#[derive(Debug, Clone)]
pub(crate) struct OpPage {
    /// Its sequence.
    pub(crate) seq: i64,
    /// Its state.
    pub(crate) state: String,
    /// Its fields, in `outboxctl show`'s order.
    pub(crate) fields: Vec<Field>,
    /// The names of the producer's headers (values are never shown).
    pub(crate) header_names: Vec<String>,
    /// Its attempts, first to last.
    pub(crate) attempts: Vec<AttemptView>,
    /// Ops of its state.
    pub(crate) state_href: String,
    /// Whether a replay would take it (dead or cancelled): an operator gets the form.
    pub(crate) can_replay: bool,
    /// Whether a cancel would take it (pending or dead): an operator gets the form.
    pub(crate) can_cancel: bool,
}

/// One line of an op's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    /// Its element id: `field-<id>`.
    pub(crate) id: &'static str,
    /// What it is.
    pub(crate) name: &'static str,
    /// Its value as text.
    pub(crate) value: String,
}

/// One attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttemptView {
    /// 1 for the first.
    pub(crate) number: i32,
    /// The dispatcher's partition token that made it.
    pub(crate) dispatcher_token: i64,
    /// When it started, relative and exact.
    pub(crate) started: String,
    pub(crate) started_exact: String,
    /// How long it took.
    pub(crate) duration: String,
    /// `delivered`, `failed` or `unknown`.
    pub(crate) outcome: String,
    /// The HTTP status.
    pub(crate) status: String,
    /// What went wrong (as stored: bounded, control characters escaped).
    pub(crate) error: String,
    /// The start of the answer's body, kept on its lines.
    pub(crate) excerpt: String,
    /// The trace id of its span, when the dispatcher had traces on.
    pub(crate) trace_id: String,
}

impl OpPage {
    /// The page of `op`.
    pub(crate) fn new(op: &OpDetail, links: &Links) -> OpPage {
        let s = &op.summary;
        let state = s.state.parse::<OpState>().ok();
        OpPage {
            seq: s.seq,
            state: text::clip(&s.state, 40),
            fields: fields(op),
            header_names: op.header_names.iter().map(|n| text::clip(n, 200)).collect(),
            attempts: op.attempt_history.iter().map(attempt).collect(),
            state_href: links.ops(state, None),
            can_replay: matches!(state, Some(OpState::Dead | OpState::Cancelled)),
            can_cancel: matches!(state, Some(OpState::Pending | OpState::Dead)),
        }
    }
}

fn fields(op: &OpDetail) -> Vec<Field> {
    let s = &op.summary;
    let newest = match op.resource_token {
        Some(t) if t > s.token => format!(" (superseded: the resource's newest token is {t})"),
        _ => String::new(),
    };
    let field = |id, name, value: String| Field { id, name, value };
    vec![
        field(
            "op",
            "op",
            format!("{} (seq {})", text::clip(&s.op_id, 40), s.seq),
        ),
        field("state", "state", text::clip(&s.state, 40)),
        field("resource", "resource", text::clip(&s.resource, 400)),
        field("token", "token", format!("{}{newest}", s.token)),
        field("owner", "owner", text::clip(&op.owner_id, 40)),
        field(
            "destination",
            "destination",
            text::clip(&s.destination, 200),
        ),
        field(
            "request",
            "request",
            format!(
                "{} {}",
                text::clip(&op.method, 10),
                text::clip(&op.path, 2000)
            ),
        ),
        field(
            "key",
            "idempotency key",
            text::clip(&s.idempotency_key, 400),
        ),
        field(
            "order-key",
            "order key",
            text::or_dash(op.order_key.as_deref()),
        ),
        field(
            "enqueued",
            "enqueued",
            format!(
                "{} ({})",
                text::relative(s.created_at),
                text::exact(s.created_at)
            ),
        ),
        field("attempts", "attempts", describe::attempts_line(op)),
        field(
            "next-attempt",
            "next attempt",
            describe::next_attempt(op).unwrap_or_else(|| DASH.to_owned()),
        ),
        field(
            "delivered",
            "delivered",
            op.delivered_at
                .map_or_else(|| DASH.to_owned(), text::relative),
        ),
        field(
            "last-error",
            "last error",
            text::or_dash(s.last_error.as_deref()),
        ),
        field(
            "body",
            "body",
            match op.erased_at {
                Some(_) => describe::body_line(op),
                None => format!("{} (not shown)", describe::body_line(op)),
            },
        ),
    ]
}

fn attempt(a: &AttemptRow) -> AttemptView {
    AttemptView {
        number: a.attempt,
        dispatcher_token: a.dispatcher_token.get(),
        started: text::relative(a.started_at),
        started_exact: text::exact(a.started_at),
        duration: a
            .duration_ms
            .map_or_else(|| DASH.to_owned(), |ms| format!("{ms} ms")),
        outcome: text::or_dash(a.outcome.as_deref()),
        status: text::or_dash(a.http_status),
        error: text::or_dash(a.error.as_deref()),
        excerpt: a
            .response_excerpt
            .as_deref()
            .map_or_else(|| DASH.to_owned(), |e| text::lines(e, EXCERPT_SHOWN)),
        trace_id: a
            .trace_context
            .as_deref()
            .and_then(describe::trace_id)
            .unwrap_or(DASH)
            .to_owned(),
    }
}

/// Characters of an answer's excerpt shown: all the dispatcher stores.
const EXCERPT_SHOWN: usize = outbox_store::dispatch::EXCERPT_MAX_CHARS;

#[cfg(test)]
mod tests {
    use outbox_store::FencingToken;
    use outbox_store::admin::OpSummary;
    use time::OffsetDateTime;

    use super::*;

    fn op() -> OpDetail {
        let now = OffsetDateTime::now_utc();
        OpDetail {
            summary: OpSummary {
                seq: 7,
                op_id: "0190a5c2-8c3e-7f00-8000-000000000001".into(),
                resource: "statement:1842".into(),
                token: FencingToken::new(3),
                destination: "statements".into(),
                idempotency_key: "k-1".into(),
                state: "dead".into(),
                attempts: 1,
                next_attempt_at: now,
                created_at: now,
                finished_at: Some(now),
                last_error: Some("HTTP 400".into()),
                body_bytes: 12,
            },
            owner_id: "5f0c0b9e-0000-4000-8000-000000000000".into(),
            order_key: None,
            method: "POST".into(),
            path: "/v1/statements".into(),
            header_names: vec!["X-Secret-Note".into()],
            content_type: Some("application/json".into()),
            claimed_by_token: None,
            delivered_at: None,
            erased_at: None,
            trace_context: None,
            trace_state: None,
            retry_base_attempts: 0,
            retry_since: None,
            resource_token: Some(FencingToken::new(4)),
            attempt_history: vec![AttemptRow {
                id: 1,
                seq: 7,
                op_id: "0190a5c2-8c3e-7f00-8000-000000000001".into(),
                destination: "statements".into(),
                resource: "statement:1842".into(),
                attempt: 1,
                dispatcher_token: FencingToken::new(1),
                started_at: now,
                duration_ms: Some(12),
                outcome: Some("failed".into()),
                http_status: Some(400),
                error: Some("HTTP 400".into()),
                response_excerpt: Some("line one\nline\ttwo\x1b".into()),
                trace_context: None,
            }],
        }
    }

    #[test]
    fn an_op_shows_its_fields_and_attempts_but_no_body_and_no_header_value() {
        let page = OpPage::new(&op(), &Links::new(""));
        let all = format!("{page:?}");
        assert!(!all.contains("hunter2") && !all.contains("1234"), "{all}");
        assert_eq!(page.header_names, ["X-Secret-Note"]);
        let token = page.fields.iter().find(|f| f.id == "token").unwrap();
        assert_eq!(
            token.value,
            "3 (superseded: the resource's newest token is 4)"
        );
        let body = page.fields.iter().find(|f| f.id == "body").unwrap();
        assert_eq!(body.value, "12 bytes, application/json (not shown)");
        assert_eq!(page.attempts[0].excerpt, "line one\nline\ttwo\\x1b");
        assert_eq!(page.attempts[0].status, "400");
        assert_eq!(page.state_href, "/ops?state=dead");
        assert!(page.can_replay && page.can_cancel, "a dead op");
    }
}

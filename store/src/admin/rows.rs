//! Row mappings both sqlx backends share: their admin statements return the same column names
//! and types, so one macro per row type reads either (a macro, since `sqlx::Row` for two
//! databases has no common trait worth writing). And the `list` filter, pushed as the same
//! fragments to either query builder.

/// An [`OpSummary`] from a row of `admin_op_list.sql` or `admin_op_show.sql` (either backend:
/// both return the same column names and types).
macro_rules! op_summary {
    ($r:expr) => {
        $crate::admin::OpSummary {
            seq: $r.try_get("id")?,
            op_id: $r.try_get("op_id")?,
            resource: $r.try_get("resource")?,
            token: $crate::model::FencingToken::new($r.try_get("fence")?),
            destination: $r.try_get("destination")?,
            idempotency_key: $r.try_get("idempotency_key")?,
            state: $r.try_get("state")?,
            attempts: $r.try_get("attempts")?,
            next_attempt_at: $r.try_get("next_attempt_at")?,
            created_at: $r.try_get("created_at")?,
            finished_at: $r.try_get("finished_at")?,
            last_error: $r.try_get("last_error")?,
            body_bytes: $r.try_get("body_bytes")?,
        }
    };
}
pub(crate) use op_summary;

/// An [`AttemptRow`] from a row of `admin_attempt_list.sql` or `admin_attempt_tail.sql`.
macro_rules! attempt_row {
    ($r:expr) => {
        $crate::admin::AttemptRow {
            id: $r.try_get("id")?,
            seq: $r.try_get("seq")?,
            op_id: $r.try_get("op_id")?,
            destination: $r.try_get("destination")?,
            resource: $r.try_get("resource")?,
            attempt: $r.try_get("attempt")?,
            dispatcher_token: $crate::model::FencingToken::new($r.try_get("dispatcher_fence")?),
            started_at: $r.try_get("started_at")?,
            duration_ms: $r.try_get("duration_ms")?,
            outcome: $r.try_get("outcome")?,
            http_status: $r.try_get("http_status")?,
            error: $r.try_get("error")?,
            response_excerpt: $r.try_get("response_excerpt")?,
            trace_context: $r.try_get("trace_context")?,
        }
    };
}
pub(crate) use attempt_row;

/// An [`OpDetail`] from a row of `admin_op_show.sql`, without its headers (the caller parses
/// the `headers` column) and attempts.
macro_rules! op_detail {
    ($r:expr) => {
        $crate::admin::OpDetail {
            summary: $crate::admin::rows::op_summary!($r),
            owner_id: $r.try_get("owner_id")?,
            order_key: $r.try_get("order_key")?,
            method: $r.try_get("method")?,
            path: $r.try_get("path")?,
            headers: Vec::new(),
            content_type: $r.try_get("content_type")?,
            body: $r.try_get("body")?,
            claimed_by_token: $r
                .try_get::<Option<i64>, _>("claimed_by_fence")?
                .map($crate::model::FencingToken::new),
            delivered_at: $r.try_get("delivered_at")?,
            trace_context: $r.try_get("trace_context")?,
            trace_state: $r.try_get("trace_state")?,
            retry_base_attempts: $r.try_get("retry_base_attempts")?,
            retry_since: $r.try_get("retry_since")?,
            resource_token: $r
                .try_get::<Option<i64>, _>("resource_fence")?
                .map($crate::model::FencingToken::new),
            attempt_history: Vec::new(),
        }
    };
}
pub(crate) use op_detail;

/// A [`Locked`] op from a row of `admin_op_lock.sql`.
macro_rules! locked_op {
    ($r:expr) => {
        $crate::admin::change::Locked {
            seq: $r.try_get("id")?,
            op_id: $r.try_get("op_id")?,
            state: $r.try_get("state")?,
            token: $r.try_get("fence")?,
            resource_token: $r.try_get("resource_fence")?,
        }
    };
}
pub(crate) use locked_op;

/// Adds `filter`'s conditions (fixed fragments, bound values) and its order and page size to a
/// `list` query builder; both backends take the same fragments. `$destinations`: every
/// destination in use, for a key looked up without one. `$walk_ids`: what keeps a destination
/// filter from choosing the (destination, key) index, which would sort all of that
/// destination's ops; walking ids newest first stops at the page's end instead (SQLite: `+`;
/// PostgreSQL's planner walks the primary key by itself: empty).
macro_rules! push_filter {
    ($qb:expr, $filter:expr, $destinations:expr, $time:expr, $walk_ids:expr) => {{
        let f = $filter;
        let destinations: &[String] = $destinations;
        if !f.states.is_empty() {
            $qb.push("\n  AND state IN (");
            let mut list = $qb.separated(", ");
            for s in &f.states {
                list.push_bind(s.as_str());
            }
            $qb.push(")");
            if f.only_attention_states() {
                // The index's predicate, word for word (SQLite uses a partial index only then).
                $qb.push("\n  AND state IN ('dead', 'cancelled', 'superseded')");
            }
        }
        if let Some(d) = &f.destination {
            if f.idempotency_key.is_some() {
                $qb.push("\n  AND destination = ").push_bind(d.clone());
            } else {
                $qb.push(format_args!("\n  AND {}destination = ", $walk_ids))
                    .push_bind(d.clone());
            }
        }
        if let Some(r) = &f.resource {
            $qb.push("\n  AND resource = ").push_bind(r.clone());
        }
        if let Some(k) = &f.idempotency_key {
            $qb.push("\n  AND idempotency_key = ").push_bind(k.clone());
            if f.destination.is_none() {
                // One probe of the (destination, key) index per destination in use.
                $qb.push("\n  AND destination IN (");
                let mut list = $qb.separated(", ");
                list.push_bind(""); // never a destination: keeps the list valid when empty
                for d in destinations {
                    list.push_bind(d.clone());
                }
                $qb.push(")");
            }
        }
        if let Some(t) = f.created_since {
            $qb.push("\n  AND created_at >= ").push_bind($time(t));
        }
        if let Some(t) = f.created_before {
            $qb.push("\n  AND created_at < ").push_bind($time(t));
        }
        if let Some(seq) = f.before_seq {
            $qb.push("\n  AND id < ").push_bind(seq);
        }
        $qb.push("\nORDER BY id DESC\nLIMIT ")
            .push_bind(i64::from(f.limit));
    }};
}
pub(crate) use push_filter;

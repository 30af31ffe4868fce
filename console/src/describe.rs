//! Plain-text descriptions that `outboxctl` and the console share, so a terminal and a page
//! say the same thing the same way: relative times, and an op's attempts and next attempt.

use outbox_store::admin::OpDetail;
use time::OffsetDateTime;

/// `in 12.3s`, `4m 5s ago`, `in 2h 5m` or `1d 3h ago` from a signed number of milliseconds.
pub fn relative_ms(ms: i64) -> String {
    let abs = ms.unsigned_abs();
    let text = if abs < 60_000 {
        format!("{:.1}s", abs as f64 / 1000.0)
    } else if abs < 3_600_000 {
        format!("{}m {}s", abs / 60_000, abs % 60_000 / 1000)
    } else if abs < 86_400_000 {
        format!("{}h {}m", abs / 3_600_000, abs % 3_600_000 / 60_000)
    } else {
        format!("{}d {}h", abs / 86_400_000, abs % 86_400_000 / 3_600_000)
    };
    if ms >= 0 {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

/// How long ago (or ahead) `t` is from now, as [`relative_ms`] says it.
pub fn relative(t: OffsetDateTime) -> String {
    let ms = (t - OffsetDateTime::now_utc()).whole_milliseconds();
    relative_ms(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// An op's attempts, and how many came before its last replay.
pub fn attempts_line(op: &OpDetail) -> String {
    match op.retry_since {
        Some(at) => format!(
            "{} ({} before the replay {})",
            op.summary.attempts,
            op.retry_base_attempts,
            relative(at)
        ),
        None => op.summary.attempts.to_string(),
    }
}

/// When an op is attempted next: a pending op's due time, an in-flight op's dispatcher token,
/// `None` for a finished one.
pub fn next_attempt(op: &OpDetail) -> Option<String> {
    match op.summary.state.as_str() {
        "pending" => Some(relative(op.summary.next_attempt_at)),
        "in_flight" => Some(format!(
            "in flight (dispatcher token {})",
            op.claimed_by_token
                .map_or_else(|| "-".to_owned(), |t| t.to_string())
        )),
        _ => None,
    }
}

/// An op's body: its size and content type, or, once erasure after delivery cleared the body
/// and the header values (`dispatcher.erase_after`), when that was.
pub fn body_line(op: &OpDetail) -> String {
    let content_type = op.content_type.as_deref().unwrap_or("-");
    match op.erased_at {
        Some(at) => format!(
            "erased {} with the header values (names kept); it was {content_type}",
            relative(at)
        ),
        None => format!("{} bytes, {content_type}", op.summary.body_bytes),
    }
}

/// The trace id of a stored traceparent (`00-<trace id>-<span id>-<flags>`): what a tracing
/// system finds an attempt's span by. `None` unless it is 32 lower-case hex digits.
pub fn trace_id(traceparent: &str) -> Option<&str> {
    traceparent
        .split('-')
        .nth(1)
        .filter(|id| id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

#[cfg(test)]
mod tests {
    use super::{relative_ms, trace_id};

    #[test]
    fn a_trace_id_is_taken_only_from_a_well_formed_traceparent() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(trace_id(tp), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        assert_eq!(trace_id("00-<script>-x-01"), None);
        assert_eq!(trace_id(""), None);
    }

    #[test]
    fn relative_times_read_naturally() {
        assert_eq!(relative_ms(12_345), "in 12.3s");
        assert_eq!(relative_ms(-245_000), "4m 5s ago");
        assert_eq!(relative_ms(7_500_000), "in 2h 5m");
        assert_eq!(relative_ms(-97_200_000), "1d 3h ago");
    }
}

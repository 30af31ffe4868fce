//! Classifying an attempt's result and computing the next delay: pure functions.
//! 2xx delivers; statuses in `retry_statuses`, connection errors, resets and timeouts retry;
//! any other status (3xx included: redirects are not followed) is permanent. Retries wait an
//! exponentially growing, fully jittered delay capped at `cap`, or what `Retry-After` asks (up
//! to `cap`); after `max_attempts` attempts or `max_age` since enqueue the op is dead.

use std::time::{Duration, SystemTime};

use outbox_store::{AttemptOutcome, NextState};

use crate::config::RetryPolicy;

/// How one HTTP attempt ended, before the retry policy is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptResult {
    /// An answer with this status.
    Status {
        /// The HTTP status.
        code: u16,
        /// The `Retry-After` delay the destination asked for, if any.
        retry_after: Option<Duration>,
    },
    /// No connection could be made, or it failed before the request was sent.
    NotSent(String),
    /// The request was sent (or may have been) and no complete answer came: timed out or cut off.
    Unknown(String),
    /// The stored op cannot be turned into a request (it never will be): permanent.
    Invalid(String),
}

/// What the policy decides for an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The attempt's stored outcome.
    pub outcome: AttemptOutcome,
    /// The op's next state.
    pub next: NextState,
    /// Why, for the op's `last_error` (None when delivered).
    pub reason: Option<String>,
}

/// Decides the outcome of attempt number `attempt` of an op enqueued `age` ago. `jitter` is a
/// number in [0, 1) that picks the point in the full-jitter window.
pub fn decide(
    policy: &RetryPolicy,
    result: &AttemptResult,
    attempt: u32,
    age: Duration,
    jitter: f64,
) -> Decision {
    let (outcome, retryable, retry_after, reason) = match result {
        AttemptResult::Status { code, .. } if (200..300).contains(code) => {
            return Decision {
                outcome: AttemptOutcome::Delivered,
                next: NextState::Delivered,
                reason: None,
            };
        }
        AttemptResult::Status { code, retry_after } => (
            AttemptOutcome::Failed,
            policy.retry_statuses.contains(code),
            *retry_after,
            format!("HTTP {code}"),
        ),
        AttemptResult::NotSent(e) => (AttemptOutcome::Failed, true, None, e.clone()),
        AttemptResult::Unknown(e) => (AttemptOutcome::Unknown, true, None, e.clone()),
        AttemptResult::Invalid(e) => (AttemptOutcome::Failed, false, None, e.clone()),
    };
    if !retryable {
        return Decision {
            outcome,
            next: NextState::Dead,
            reason: Some(format!("{reason}: not retryable")),
        };
    }
    if attempt >= policy.max_attempts {
        return Decision {
            outcome,
            next: NextState::Dead,
            reason: Some(format!("{reason}: gave up after {attempt} attempts")),
        };
    }
    let delay = retry_after
        .map(|d| d.min(policy.cap))
        .unwrap_or_else(|| backoff(policy, attempt, jitter));
    if age + delay > policy.max_age {
        return Decision {
            outcome,
            next: NextState::Dead,
            reason: Some(format!(
                "{reason}: the next attempt would come after max_age"
            )),
        };
    }
    Decision {
        outcome,
        next: NextState::RetryAfter(delay),
        reason: Some(reason),
    }
}

/// Full jitter: a point in [0, min(cap, base * 2^(attempt-1))).
pub fn backoff(policy: &RetryPolicy, attempt: u32, jitter: f64) -> Duration {
    let exp = policy.base.saturating_mul(
        1u32.checked_shl(attempt.saturating_sub(1).min(31))
            .unwrap_or(u32::MAX),
    );
    exp.min(policy.cap).mul_f64(jitter.clamp(0.0, 1.0))
}

/// Reads `Retry-After`: delay-seconds or an HTTP date (relative to `now`).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when =
        time::OffsetDateTime::parse(value, &time::format_description::well_known::Rfc2822).ok()?;
    let when = SystemTime::from(when);
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(3600),
            max_attempts: 5,
            max_age: Duration::from_secs(3 * 24 * 3600),
            retry_statuses: vec![408, 409, 425, 429, 500, 502, 503, 504],
        }
    }

    fn status(code: u16) -> AttemptResult {
        AttemptResult::Status {
            code,
            retry_after: None,
        }
    }

    #[test]
    fn two_hundreds_deliver_and_listed_statuses_retry() {
        assert_eq!(
            decide(&policy(), &status(204), 1, Duration::ZERO, 0.5).next,
            NextState::Delivered
        );
        let d = decide(&policy(), &status(503), 1, Duration::ZERO, 0.5);
        assert_eq!(
            (d.outcome, d.next),
            (
                AttemptOutcome::Failed,
                NextState::RetryAfter(Duration::from_millis(500))
            )
        );
    }

    #[test]
    fn other_statuses_and_redirects_are_permanent() {
        for code in [400, 401, 404, 422, 301, 302, 307, 501] {
            assert_eq!(
                decide(&policy(), &status(code), 1, Duration::ZERO, 0.5).next,
                NextState::Dead,
                "{code}"
            );
        }
    }

    #[test]
    fn timeouts_after_sending_are_unknown_and_retried() {
        let d = decide(
            &policy(),
            &AttemptResult::Unknown("timed out".into()),
            1,
            Duration::ZERO,
            0.0,
        );
        assert_eq!(
            (d.outcome, d.next),
            (
                AttemptOutcome::Unknown,
                NextState::RetryAfter(Duration::ZERO)
            )
        );
        let d = decide(
            &policy(),
            &AttemptResult::NotSent("connection refused".into()),
            2,
            Duration::ZERO,
            0.99,
        );
        assert_eq!(d.outcome, AttemptOutcome::Failed);
        assert!(matches!(d.next, NextState::RetryAfter(x) if x < Duration::from_secs(2)));
    }

    #[test]
    fn backoff_grows_exponentially_with_full_jitter_and_a_cap() {
        let p = RetryPolicy {
            cap: Duration::from_secs(10),
            ..policy()
        };
        assert_eq!(
            backoff(&p, 1, 0.999_999),
            Duration::from_secs(1).mul_f64(0.999_999)
        );
        assert_eq!(backoff(&p, 3, 0.5), Duration::from_secs(2));
        assert_eq!(
            backoff(&p, 30, 0.5),
            Duration::from_secs(5),
            "capped at 10 s"
        );
        assert_eq!(
            backoff(&p, 200, 1.0),
            Duration::from_secs(10),
            "no overflow"
        );
        assert_eq!(backoff(&p, 3, 0.0), Duration::ZERO);
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let ask = |secs| AttemptResult::Status {
            code: 429,
            retry_after: Some(Duration::from_secs(secs)),
        };
        assert_eq!(
            decide(&policy(), &ask(2), 1, Duration::ZERO, 0.0).next,
            NextState::RetryAfter(Duration::from_secs(2))
        );
        let capped = RetryPolicy {
            cap: Duration::from_secs(60),
            ..policy()
        };
        assert_eq!(
            decide(&capped, &ask(7200), 1, Duration::ZERO, 0.0).next,
            NextState::RetryAfter(Duration::from_secs(60))
        );
    }

    #[test]
    fn attempts_and_age_run_out() {
        let d = decide(&policy(), &status(503), 5, Duration::ZERO, 0.5);
        assert_eq!(d.next, NextState::Dead);
        assert!(d.reason.unwrap().contains("5 attempts"));
        let old = Duration::from_secs(3 * 24 * 3600);
        assert_eq!(
            decide(&policy(), &status(503), 1, old, 0.5).next,
            NextState::Dead
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_784_000_000);
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        let later = time::OffsetDateTime::from(now + Duration::from_secs(30));
        let date = later
            .format(&time::format_description::well_known::Rfc2822)
            .unwrap();
        assert_eq!(parse_retry_after(&date, now), Some(Duration::from_secs(30)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 +0000", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }
}

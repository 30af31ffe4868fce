//! Parsers of single values shared by the checks of every table (`validate.rs`) and of
//! `[telemetry]` (`telemetry.rs`): durations, bounded durations and bounded integers, each
//! error naming its key.

use std::time::Duration;

use super::{ConfigError, err};

/// A duration written like `500ms`, `15s` or `3d`.
pub(super) fn duration(key: &str, text: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(text).map_err(|e| {
        err(
            key,
            format!("{text:?} is not a duration like 500ms, 15s or 3d: {e}"),
        )
    })
}

/// `value` when it lies in `range`, converted to the field's type; otherwise an error naming
/// `key` and the range.
pub(super) fn int<T: TryFrom<i64>>(
    key: &str,
    value: i64,
    range: std::ops::RangeInclusive<i64>,
) -> Result<T, ConfigError> {
    if !range.contains(&value) {
        return Err(err(
            key,
            format!("must be {}..={}, got {value}", range.start(), range.end()),
        ));
    }
    T::try_from(value).map_err(|_| err(key, format!("{value} is out of range")))
}

/// A duration between `min` and `max`, inclusive.
pub(super) fn bounded_duration(
    key: &str,
    text: &str,
    min: Duration,
    max: Duration,
) -> Result<Duration, ConfigError> {
    let d = duration(key, text)?;
    if d < min || d > max {
        let h = |d: Duration| humantime::format_duration(d).to_string();
        let min = if min.is_zero() {
            "0s".to_owned()
        } else {
            h(min)
        };
        return Err(err(key, format!("must be between {min} and {}", h(max))));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_key_and_the_bounds() {
        assert_eq!(int::<u8>("k", 7, 1..=9).unwrap(), 7);
        assert_eq!(
            int::<u8>("k", 0, 1..=9).unwrap_err().0,
            "k: must be 1..=9, got 0"
        );
        let day = Duration::from_secs(86_400);
        assert_eq!(
            bounded_duration("d", "2h", Duration::ZERO, day).unwrap(),
            Duration::from_secs(7_200)
        );
        let e = bounded_duration("d", "2d", Duration::ZERO, day).unwrap_err();
        assert_eq!(e.0, "d: must be between 0s and 1day");
        assert!(
            duration("d", "soon")
                .unwrap_err()
                .0
                .starts_with("d: \"soon\" is not")
        );
    }
}

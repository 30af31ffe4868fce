//! Values as the pages write them: relative and exact times, and text from outside (a
//! destination's answer, a producer's row) with its control characters written as escapes and
//! cut to a bound. HTML escaping is the templates' part (askama escapes every value).

use outbox_store::text::printable;
use time::OffsetDateTime;

pub(crate) use crate::describe::{relative, relative_ms};

/// A duration of `ms` milliseconds without a direction: `12.3s`, `4m 5s`.
pub(crate) fn age_ms(ms: i64) -> String {
    let shown = relative_ms(ms.saturating_abs());
    shown.trim_start_matches("in ").to_owned()
}

/// `t` as RFC 3339, to the millisecond.
pub(crate) fn exact(t: OffsetDateTime) -> String {
    let t = t.replace_millisecond(t.millisecond()).unwrap_or(t);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Text from outside on one line: control characters (newlines too) as escapes like `\x1b`,
/// cut to `max` characters (counted after escaping) with … when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    let shown = printable(text);
    match shown.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &shown[..i]),
        None => shown.into_owned(),
    }
}

/// Text from outside kept on its lines (for a `<pre>`): newlines and tabs stay, every other
/// control character becomes an escape; cut to `max` characters with … when cut.
pub(crate) fn lines(text: &str, max: usize) -> String {
    let shown = text
        .split('\n')
        .map(|line| {
            line.split('\t')
                .map(printable)
                .collect::<Vec<_>>()
                .join("\t")
        })
        .collect::<Vec<_>>()
        .join("\n");
    match shown.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &shown[..i]),
        None => shown,
    }
}

/// The value's text, or `—` when there is none.
pub(crate) fn or_dash<T: std::fmt::Display>(value: Option<T>) -> String {
    value
        .map(|v| clip(&v.to_string(), usize::MAX))
        .unwrap_or_else(|| DASH.to_owned())
}

/// What the pages show for a value that is absent or unknown.
pub(crate) const DASH: &str = "—";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_naturally() {
        assert_eq!(relative_ms(12_345), "in 12.3s");
        assert_eq!(relative_ms(-245_000), "4m 5s ago");
        assert_eq!(relative_ms(7_500_000), "in 2h 5m");
        assert_eq!(relative_ms(-90_000_000), "1d 1h ago");
        assert_eq!(age_ms(1_500), "1.5s");
        assert_eq!(age_ms(-1_500), "1.5s");
        let t = OffsetDateTime::from_unix_timestamp_nanos(123_456_789).unwrap();
        assert_eq!(exact(t), "1970-01-01T00:00:00.123Z");
    }

    #[test]
    fn outside_text_is_kept_on_one_line_and_bounded() {
        assert_eq!(clip("a\r\nb\x1b[2J", 100), "a\\x0d\\x0ab\\x1b[2J");
        assert_eq!(clip("abcdef", 3), "abc…");
        assert_eq!(
            clip("<script>", 100),
            "<script>",
            "HTML is the template's part"
        );
        assert_eq!(lines("a\r\nb\tc\x07", 100), "a\\x0d\nb\tc\\x07");
        assert_eq!(lines("abc\ndef", 5), "abc\nd…");
        assert_eq!(or_dash(None::<i64>), "—");
        assert_eq!(or_dash(Some(7)), "7");
    }
}

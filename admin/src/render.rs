//! Output: readable tables with relative times for people, JSON for scripts. Text from a
//! destination or a producer reaches people only through [`cell`], [`clip`], [`or_dash`] or
//! [`lines`], which escape control characters; JSON is exact (serde escapes them itself).

use std::borrow::Cow;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use outbox_store::LeaseRow;
use outbox_store::text::printable;
use serde::Serialize;
use time::OffsetDateTime;

/// A table with these column headers, drawn plainly so it survives copy and paste.
pub(crate) fn table(headers: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY)
        .set_header(headers.iter().copied());
    t
}

/// Prints one JSON object on its own line.
pub(crate) fn json_line<T: Serialize + ?Sized>(value: &T) {
    match serde_json::to_string(value) {
        Ok(s) => println!("{s}"),
        // Our own types always serialize; say so loudly if that ever changes.
        Err(e) => eprintln!("outboxctl: cannot render JSON: {e}"),
    }
}

/// `1 lease`, `2 leases`.
pub(crate) fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

pub(crate) use outbox_console::describe::{relative, relative_ms};

/// A lease's row: resource, token, state, owner, expiry.
pub(crate) fn lease_cells(row: &LeaseRow) -> Vec<String> {
    let state = match (row.held, row.owner_id) {
        (true, _) => "held",
        (false, Some(_)) => "expired",
        (false, None) => "free",
    };
    vec![
        cell(row.resource.as_str()),
        row.token.to_string(),
        state.to_owned(),
        or_dash(row.owner_id),
        row.remaining_ms
            .map(relative_ms)
            .unwrap_or_else(|| "-".to_owned()),
    ]
}

/// Text from outside (a destination's answer, a producer's row) safe to print on one
/// terminal line: control characters, newlines included, written as escapes like `\x1b`.
pub(crate) fn cell(text: &str) -> String {
    printable(text).into_owned()
}

/// The value as a [`cell`], or `-` when there is none.
pub(crate) fn or_dash<T: std::fmt::Display>(value: Option<T>) -> String {
    value
        .map(|v| cell(&v.to_string()))
        .unwrap_or_else(|| "-".to_owned())
}

/// `t` as RFC 3339, for where an exact time matters.
pub(crate) fn exact(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// `text` as a [`cell`] cut to `max` characters (counted after escaping), with … when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    cut(&printable(text), max).into_owned()
}

/// `text` cut to `max` characters, with … when cut, kept on its own lines: every control
/// character but the newlines between lines escaped (a `\r` before a newline too).
pub(crate) fn lines(text: &str, max: usize) -> String {
    cut(text, max)
        .split('\n')
        .map(printable)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` cut to `max` characters, with … when cut.
fn cut(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        Some((i, _)) => Cow::Owned(format!("{}…", &text[..i])),
        None => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::{cell, clip, lines, or_dash, relative_ms};

    #[test]
    fn relative_times_read_naturally() {
        assert_eq!(relative_ms(12_345), "in 12.3s");
        assert_eq!(relative_ms(-245_000), "4m 5s ago");
        assert_eq!(relative_ms(7_500_000), "in 2h 5m");
    }

    #[test]
    fn text_from_outside_is_printed_with_its_controls_escaped() {
        assert_eq!(cell("a\x1b[31mb\r\n"), "a\\x1b[31mb\\x0d\\x0a");
        assert_eq!(or_dash(Some("\x07")), "\\x07");
        assert_eq!(or_dash(None::<&str>), "-");
        assert_eq!(clip("\x1b[2Jabc", 6), "\\x1b[2…");
        assert_eq!(
            lines("one\r\ntwo\tthree\x1b", 100),
            "one\\x0d\ntwo\\x09three\\x1b"
        );
    }
}

//! Output: readable tables with relative times for people, JSON for scripts.

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use outbox_store::LeaseRow;
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

/// `in 12.3s` or `4m 5s ago` from a signed number of milliseconds.
pub(crate) fn relative_ms(ms: i64) -> String {
    let abs = ms.unsigned_abs();
    let text = if abs < 60_000 {
        format!("{:.1}s", abs as f64 / 1000.0)
    } else if abs < 3_600_000 {
        format!("{}m {}s", abs / 60_000, abs % 60_000 / 1000)
    } else {
        format!("{}h {}m", abs / 3_600_000, abs % 3_600_000 / 60_000)
    };
    if ms >= 0 {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

/// A lease's row: resource, token, state, owner, expiry.
pub(crate) fn lease_cells(row: &LeaseRow) -> Vec<String> {
    let state = match (row.held, row.owner_id) {
        (true, _) => "held",
        (false, Some(_)) => "expired",
        (false, None) => "free",
    };
    vec![
        row.resource.to_string(),
        row.token.to_string(),
        state.to_owned(),
        or_dash(row.owner_id),
        row.remaining_ms
            .map(relative_ms)
            .unwrap_or_else(|| "-".to_owned()),
    ]
}

/// The value, or `-` when there is none.
pub(crate) fn or_dash<T: std::fmt::Display>(value: Option<T>) -> String {
    value
        .map(|v| v.to_string())
        .unwrap_or_else(|| "-".to_owned())
}

/// How long ago (or ahead) `t` is from now, as [`relative_ms`] says it.
pub(crate) fn relative(t: OffsetDateTime) -> String {
    let ms = (t - OffsetDateTime::now_utc()).whole_milliseconds();
    relative_ms(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// `t` as RFC 3339, for where an exact time matters.
pub(crate) fn exact(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// `text` cut to `max` characters, with … when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::relative_ms;

    #[test]
    fn relative_times_read_naturally() {
        assert_eq!(relative_ms(12_345), "in 12.3s");
        assert_eq!(relative_ms(-245_000), "4m 5s ago");
        assert_eq!(relative_ms(7_500_000), "in 2h 5m");
    }
}

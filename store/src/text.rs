//! Text that came from outside (a destination's answer, a producer's row, an error message)
//! made safe to store and to print: valid UTF-8 with every control character written out as
//! a readable escape. NUL becomes `\u0000` (as JSON and PostgreSQL write it, and PostgreSQL
//! cannot store it in `text`), other ASCII controls `\xHH` (ESC is `\x1b`), other control
//! characters `\uHHHH`, and bytes that are not UTF-8 `\xHH`. The result cannot move a
//! terminal's cursor, change its colours or be refused by a database as invalid text.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with its control characters escaped. Newlines and tabs are kept when `keep_lines`
/// (stored excerpts stay readable); everything else, and those too otherwise, is escaped.
fn escape(text: &str, keep_lines: bool) -> Cow<'_, str> {
    let needs = |c: char| c.is_control() && !(keep_lines && matches!(c, '\n' | '\t'));
    if !text.chars().any(needs) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs(c) {
            push_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn push_escape(out: &mut String, c: char) {
    let _ = match u32::from(c) {
        0 => write!(out, "\\u0000"),
        n @ 0..=0x7f => write!(out, "\\x{n:02x}"),
        n => write!(out, "\\u{n:04x}"),
    };
}

/// `text` as it may be stored: control characters escaped but newlines and tabs, cut to at
/// most `max_chars` characters (counted after escaping, so it fits the column's bound).
pub fn storable(text: &str, max_chars: usize) -> String {
    truncate(escape(text, true).into_owned(), max_chars)
}

/// `bytes` as storable text (see [`storable`]): UTF-8 where they are UTF-8, `\xHH` for each
/// byte that is not, cut to at most `max_chars` characters.
pub fn storable_bytes(bytes: &[u8], max_chars: usize) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        out.push_str(&escape(chunk.valid(), true));
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
        if out.len() > max_chars.saturating_mul(4) + 16 {
            break; // far past the bound already: the rest would be cut anyway
        }
    }
    truncate(out, max_chars)
}

/// `text` safe to print on one terminal line: every control character escaped, newlines and
/// tabs included.
pub fn printable(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// `text` cut to at most `max` characters, at a character boundary.
fn truncate(mut text: String, max: usize) -> String {
    if let Some((cut, _)) = text.char_indices().nth(max) {
        text.truncate(cut);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_become_readable_escapes() {
        assert_eq!(storable("a\0b", 100), "a\\u0000b");
        assert_eq!(storable("\x1b[31mred\x1b[0m", 100), "\\x1b[31mred\\x1b[0m");
        assert_eq!(storable("line\nnext\ttab\r", 100), "line\nnext\ttab\\x0d");
        assert_eq!(storable("\u{85}\u{7f}", 100), "\\u0085\\x7f");
        assert_eq!(printable("a\nb\tc"), "a\\x0ab\\x09c");
        assert!(matches!(printable("plain text é"), Cow::Borrowed(_)));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_written_as_hex() {
        assert_eq!(storable_bytes(b"ok \xff\xfe end", 100), "ok \\xff\\xfe end");
        assert_eq!(storable_bytes("é\0".as_bytes(), 100), "é\\u0000");
    }

    #[test]
    fn the_bound_counts_characters_after_escaping() {
        assert_eq!(storable("\0\0\0", 7), "\\u0000\\");
        assert_eq!(storable("héllo", 2), "hé");
        let long = vec![0u8; 1 << 20];
        assert_eq!(storable_bytes(&long, 1024).chars().count(), 1024);
    }

    #[test]
    fn nothing_stored_or_printed_holds_a_control_character() {
        let all: String = (0u32..0x110000).filter_map(char::from_u32).collect();
        assert!(
            !storable(&all, usize::MAX)
                .contains(|c: char| c.is_control() && c != '\n' && c != '\t')
        );
        assert!(!printable(&all).contains(char::is_control));
    }
}

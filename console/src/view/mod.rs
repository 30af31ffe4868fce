//! The page models: what each page shows, built from what the store returns and already
//! written as text (relative times, outside text clipped), so the templates only lay it out.
//! Pure functions of their inputs, unit-tested here; [`Links`] makes every link of a page.

mod charts;
mod op;
mod ops;
mod overview;
mod svg;

pub(crate) use charts::{Charts, Window};
pub(crate) use op::OpPage;
pub(crate) use ops::{ListQuery, OpsList};
pub(crate) use overview::{Overview, REJECTIONS_SHOWN};

use outbox_store::OpState;

/// Every op state, in the order of an op's life (DESIGN.md), as the pages list them.
pub(crate) const STATES: [OpState; 6] = [
    OpState::Pending,
    OpState::InFlight,
    OpState::Delivered,
    OpState::Dead,
    OpState::Cancelled,
    OpState::Superseded,
];

/// The console's links, under its base path. Every value put in a query is percent-encoded,
/// so a link never holds more than the base path, fixed words and encoded values.
#[derive(Debug, Clone)]
pub(crate) struct Links {
    base: String,
}

impl Links {
    /// Links under `base` (empty, or `/name`).
    pub(crate) fn new(base: &str) -> Links {
        Links {
            base: base.to_owned(),
        }
    }

    /// The base path itself, for the stylesheet.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// The overview.
    pub(crate) fn overview(&self) -> String {
        format!("{}/", self.base)
    }

    /// The charts over `window`.
    pub(crate) fn charts(&self, window: Window) -> String {
        format!("{}/charts?window={}", self.base, window.as_str())
    }

    /// Ops, newest first, of one state and destination or any.
    pub(crate) fn ops(&self, state: Option<OpState>, destination: Option<&str>) -> String {
        let mut query = Vec::new();
        if let Some(s) = state {
            query.push(format!("state={}", s.as_str()));
        }
        if let Some(d) = destination {
            query.push(format!("destination={}", encode(d)));
        }
        if query.is_empty() {
            format!("{}/ops", self.base)
        } else {
            format!("{}/ops?{}", self.base, query.join("&"))
        }
    }

    /// `href` with `pairs` added to its query, each value percent-encoded.
    pub(crate) fn with_query(&self, href: String, pairs: &[(&str, &str)]) -> String {
        let mut out = href;
        for (name, value) in pairs {
            out.push(if out.contains('?') { '&' } else { '?' });
            out += &format!("{name}={}", encode(value));
        }
        out
    }

    /// One op's page: by its op id when the row holds a UUID, else by its sequence.
    pub(crate) fn op(&self, seq: i64, op_id: &str) -> String {
        match uuid::Uuid::parse_str(op_id) {
            Ok(id) => format!("{}/ops/{id}", self.base),
            Err(_) => format!("{}/ops/{seq}", self.base),
        }
    }
}

/// `text` percent-encoded for a query value: only unreserved characters stay as they are.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One count of ops of a state, linking to those ops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Count {
    /// The state's stored name.
    pub(crate) state: &'static str,
    /// How many ops.
    pub(crate) ops: i64,
    /// The list of those ops.
    pub(crate) href: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_stay_under_the_base_path_and_encode_their_values() {
        let links = Links::new("/console");
        assert_eq!(links.overview(), "/console/");
        assert_eq!(
            links.ops(Some(OpState::Dead), Some("a b&c<\"")),
            "/console/ops?state=dead&destination=a%20b%26c%3C%22"
        );
        assert_eq!(links.ops(None, None), "/console/ops");
        let id = "0190a5c2-8c3e-7f00-8000-000000000001";
        assert_eq!(links.op(7, id), format!("/console/ops/{id}"));
        assert_eq!(
            links.op(7, "javascript:alert(1)"),
            "/console/ops/7",
            "a row's op id that is no UUID never becomes part of a link"
        );
        assert_eq!(Links::new("").overview(), "/");
    }
}

//! The ops list's model: ops newest first, of one state and destination or any (as
//! `outboxctl list`), one page at a time, paged by sequence; and its query, checked.

use std::str::FromStr;

use outbox_store::OpState;
use outbox_store::admin::{OpFilter, OpSummary};

use super::{Links, STATES};
use crate::error::PageError;
use crate::text::{self, DASH};

/// Ops per page.
pub(crate) const PAGE: u32 = 50;
/// Characters of an op's last error shown in the list (the op's page shows all of it).
const ERROR_SHOWN: usize = 200;

/// The list's query as it came: every value text, checked by [`ListQuery::filter`].
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub(crate) struct ListQuery {
    /// An op state's stored name.
    pub(crate) state: Option<String>,
    /// A destination's name.
    pub(crate) destination: Option<String>,
    /// Show ops older than this sequence (the last one of the previous page).
    pub(crate) after: Option<String>,
}

impl ListQuery {
    /// The store's filter for this query; a 400 page naming the value that is wrong.
    pub(crate) fn filter(&self) -> Result<OpFilter, PageError> {
        let state = match self.state.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => Some(OpState::from_str(s).map_err(|_| {
                PageError::bad_request(format!(
                    "state={} is not an op state; use one of {}",
                    text::clip(s, 40),
                    STATES.map(|s| s.as_str()).join(", ")
                ))
            })?),
        };
        let destination = self.destination.clone().filter(|d| !d.is_empty());
        if destination
            .as_ref()
            .is_some_and(|d| d.chars().count() > 200)
        {
            return Err(PageError::bad_request(
                "destination= is longer than 200 characters",
            ));
        }
        let before_seq = match self.after.as_deref().filter(|a| !a.is_empty()) {
            None => None,
            Some(a) => Some(a.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                PageError::bad_request(format!(
                    "after={} is not an op's sequence (a positive whole number)",
                    text::clip(a, 40)
                ))
            })?),
        };
        Ok(OpFilter {
            states: state.into_iter().collect(),
            destination,
            before_seq,
            limit: PAGE,
            ..OpFilter::default()
        })
    }
}

/// What the ops list shows.
#[derive(Debug, Clone)]
pub(crate) struct OpsList {
    /// What is listed, e.g. "dead ops at statements".
    pub(crate) heading: String,
    /// One tab per state (and "all"), keeping the destination.
    pub(crate) tabs: Vec<Tab>,
    /// The ops, newest first.
    pub(crate) rows: Vec<OpRow>,
    /// The next page, when this one is full.
    pub(crate) older_href: Option<String>,
    /// The same list from its first page, when this is not it.
    pub(crate) newest_href: Option<String>,
    /// For a list of dead ops: the destination it is filtered by (empty: any), which an
    /// operator's replay-by-filter form carries.
    pub(crate) replay_destination: Option<String>,
}

/// A tab of the ops list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tab {
    /// `all` or a state's name.
    pub(crate) label: &'static str,
    /// Its list.
    pub(crate) href: String,
    /// Whether it is the list shown.
    pub(crate) active: bool,
}

/// An op as the list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpRow {
    /// Its sequence.
    pub(crate) seq: i64,
    /// Its page.
    pub(crate) href: String,
    /// Its op id.
    pub(crate) op_id: String,
    /// Its state.
    pub(crate) state: String,
    /// Its destination.
    pub(crate) destination: String,
    /// Its resource, clipped.
    pub(crate) resource: String,
    /// The producer's token.
    pub(crate) token: i64,
    /// Its idempotency key, clipped.
    pub(crate) key: String,
    /// Attempts made.
    pub(crate) attempts: i32,
    /// When it was enqueued, relative and exact.
    pub(crate) enqueued: String,
    pub(crate) enqueued_exact: String,
    /// Its last error, clipped (`—` when none).
    pub(crate) last_error: String,
}

impl OpsList {
    /// The list of `ops` found for `filter`.
    pub(crate) fn new(filter: &OpFilter, ops: &[OpSummary], links: &Links) -> OpsList {
        let state = filter.states.first().copied();
        let destination = filter.destination.as_deref();
        let mut tabs = vec![Tab {
            label: "all",
            href: links.ops(None, destination),
            active: state.is_none(),
        }];
        tabs.extend(STATES.iter().map(|&s| Tab {
            label: s.as_str(),
            href: links.ops(Some(s), destination),
            active: state == Some(s),
        }));
        let here = links.ops(state, destination);
        let older_href = match ops.last() {
            Some(last) if ops.len() >= filter.limit as usize => Some(format!(
                "{here}{}after={}",
                if here.contains('?') { '&' } else { '?' },
                last.seq
            )),
            _ => None,
        };
        OpsList {
            heading: heading(state, destination),
            tabs,
            rows: ops.iter().map(|o| row(o, links)).collect(),
            older_href,
            newest_href: filter.before_seq.map(|_| here),
            replay_destination: (state == Some(OpState::Dead))
                .then(|| destination.unwrap_or_default().to_owned()),
        }
    }
}

fn heading(state: Option<OpState>, destination: Option<&str>) -> String {
    let ops = match state {
        Some(s) => format!("{} ops", s.as_str().replace('_', " ")),
        None => "ops".to_owned(),
    };
    match destination {
        Some(d) => format!("{ops} at {}", text::clip(d, 200)),
        None => ops,
    }
}

fn row(o: &OpSummary, links: &Links) -> OpRow {
    OpRow {
        seq: o.seq,
        href: links.op(o.seq, &o.op_id),
        op_id: text::clip(&o.op_id, 40),
        state: text::clip(&o.state, 40),
        destination: text::clip(&o.destination, 200),
        resource: text::clip(&o.resource, 120),
        token: o.token.get(),
        key: text::clip(&o.idempotency_key, 60),
        attempts: o.attempts,
        enqueued: text::relative(o.created_at),
        enqueued_exact: text::exact(o.created_at),
        last_error: o
            .last_error
            .as_deref()
            .map_or_else(|| DASH.to_owned(), |e| text::clip(e, ERROR_SHOWN)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(state: &str, destination: &str, after: &str) -> ListQuery {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        ListQuery {
            state: some(state),
            destination: some(destination),
            after: some(after),
        }
    }

    #[test]
    fn a_query_becomes_a_filter_or_a_400_naming_the_value() {
        let f = query("dead", "statements", "42").filter().unwrap();
        assert_eq!(f.states, [OpState::Dead]);
        assert_eq!(f.destination.as_deref(), Some("statements"));
        assert_eq!((f.before_seq, f.limit), (Some(42), PAGE));
        assert!(query("", "", "").filter().unwrap().states.is_empty());
        for (q, words) in [
            (query("<b>", "", ""), "state=<b> is not an op state"),
            (query("", "", "x"), "after=x is not an op's sequence"),
            (query("", "", "-1"), "after=-1"),
        ] {
            let e = q.filter().unwrap_err();
            assert!(e.message().contains(words), "{}", e.message());
        }
    }

    #[test]
    fn tabs_keep_the_destination_and_a_full_page_links_to_the_next() {
        let f = query("dead", "a b", "").filter().unwrap();
        let list = OpsList::new(&f, &[], &Links::new("/console"));
        assert_eq!(list.heading, "dead ops at a b");
        let active: Vec<&str> = list
            .tabs
            .iter()
            .filter(|t| t.active)
            .map(|t| t.label)
            .collect();
        assert_eq!(active, ["dead"]);
        assert_eq!(list.tabs[0].href, "/console/ops?destination=a%20b");
        assert_eq!(list.older_href, None);
        assert_eq!(list.newest_href, None);
        assert_eq!(list.replay_destination.as_deref(), Some("a b"));
    }
}

//! What an operator may do from the console, each a plain HTML POST carrying the session's
//! CSRF token and a reason: replay one op, cancel one op, replay the dead ops of a filter
//! (a dry run to preview, then a confirmation), pause and resume a destination. Each goes
//! through the store method `outboxctl` uses and is logged in `outbox_admin_log` with actor
//! `console:<user>` and the reason; then a 303 back to the page, which says what was done.
//!
//! Checked in this order, and nothing changes when one fails: the token (403), the role (403
//! for a viewer), the reason (400, as `outboxctl`'s `Change::validate`). A database login
//! that may not make the change gets a 403 page naming the role it needs.

use axum::Extension;
use axum::extract::rejection::{FormRejection, PathRejection};
use axum::extract::{Form, Path, Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use outbox_store::admin::{Change, ChangeReport, OpFilter};
use outbox_store::{OpState, StoreErrorKind};

use crate::Console;
use crate::access::Role;
use crate::auth::Principal;
use crate::error::PageError;
use crate::pages::{self, Chrome, ConfirmPage};
use crate::text;
use crate::view::Links;

/// Skipped ops the replay preview lists (the count says how many in all).
const SKIPPED_SHOWN: usize = 20;

/// An action form's fields; each action reads the ones it needs.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ActionForm {
    csrf: Option<String>,
    reason: Option<String>,
    /// Replay by filter: the state (only `dead`).
    state: Option<String>,
    /// Replay by filter (empty: any), pause and resume: the destination.
    destination: Option<String>,
    /// Replay by filter: present once the preview was confirmed.
    confirm: Option<String>,
}

type Who = Option<Extension<Principal>>;
type Fields = Result<Form<ActionForm>, FormRejection>;

/// `POST <base>/ops/{seq}/replay`.
pub(crate) async fn replay_op(
    State(c): State<Console>,
    who: Who,
    op: Result<Path<String>, PathRejection>,
    form: Fields,
) -> Response {
    answer(&c, one_op(&c, who, op, form, Verb::Replay).await)
}

/// `POST <base>/ops/{seq}/cancel`.
pub(crate) async fn cancel_op(
    State(c): State<Console>,
    who: Who,
    op: Result<Path<String>, PathRejection>,
    form: Fields,
) -> Response {
    answer(&c, one_op(&c, who, op, form, Verb::Cancel).await)
}

/// `POST <base>/replay`: the dead ops of a destination (or of all), previewed, then confirmed.
pub(crate) async fn replay_dead(State(c): State<Console>, who: Who, form: Fields) -> Response {
    answer(&c, by_filter(&c, who, form).await)
}

/// `POST <base>/destinations/pause`.
pub(crate) async fn pause(State(c): State<Console>, who: Who, form: Fields) -> Response {
    answer(&c, set_paused(&c, who, form, true).await)
}

/// `POST <base>/destinations/resume`.
pub(crate) async fn resume(State(c): State<Console>, who: Who, form: Fields) -> Response {
    answer(&c, set_paused(&c, who, form, false).await)
}

fn answer(c: &Console, result: Result<Response, PageError>) -> Response {
    result.unwrap_or_else(|e| pages::error(c, &e))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Replay,
    Cancel,
}

impl Verb {
    fn past(self) -> &'static str {
        match self {
            Verb::Replay => "replayed",
            Verb::Cancel => "cancelled",
        }
    }
}

async fn one_op(
    c: &Console,
    who: Who,
    op: Result<Path<String>, PathRejection>,
    form: Fields,
    verb: Verb,
) -> Result<Response, PageError> {
    let form = fields(form)?;
    let p = authorize(c, who, &form)?;
    let change = change(&p, &form, false)?;
    let Ok(Path(op)) = op else {
        return Err(PageError::bad_request(
            "the op's sequence is not valid UTF-8",
        ));
    };
    let seq = op.parse::<i64>().ok().filter(|s| *s > 0).ok_or_else(|| {
        PageError::bad_request(format!(
            "{} is not an op's sequence; nothing changed",
            text::clip(&op, 60)
        ))
    })?;
    let store = c.store().ok_or_else(PageError::not_attached)?;
    let report = match verb {
        Verb::Replay => store.admin_replay(&[seq], &change).await,
        Verb::Cancel => store.admin_cancel(&[seq], &change).await,
    }
    .map_err(refused)?;
    if !report.missing.is_empty() {
        return Err(PageError::not_found(format!(
            "there is no op {seq}; nothing changed"
        )));
    }
    log(&p, verb.past(), &report);
    let back = format!("{}/ops/{seq}", c.base());
    Ok(see_other(&done_href(back, verb.past(), &report)))
}

async fn by_filter(c: &Console, who: Who, form: Fields) -> Result<Response, PageError> {
    let form = fields(form)?;
    let p = authorize(c, who, &form)?;
    let confirmed = form.confirm.as_deref().is_some_and(|v| !v.is_empty());
    let change = change(&p, &form, !confirmed)?;
    if form.state.as_deref() != Some("dead") {
        return Err(PageError::bad_request(
            "the console replays by filter the dead ops only (state=dead); nothing changed",
        ));
    }
    let destination = destination(&form, false)?;
    let filter = OpFilter {
        states: vec![OpState::Dead],
        destination: destination.clone(),
        ..OpFilter::default()
    };
    let store = c.store().ok_or_else(PageError::not_attached)?;
    let seqs = store.admin_op_seqs(&filter).await?;
    let report = store.admin_replay(&seqs, &change).await.map_err(refused)?;
    let links = Links::new(c.base());
    let back = links.ops(Some(OpState::Dead), destination.as_deref());
    if confirmed {
        log(&p, "replayed by filter", &report);
        return Ok(see_other(&done_href(back, "replayed", &report)));
    }
    let what = match &destination {
        Some(d) => format!("dead ops at {}", text::clip(d, 200)),
        None => "dead ops".to_owned(),
    };
    let skipped: Vec<String> = report
        .skipped
        .iter()
        .take(SKIPPED_SHOWN)
        .map(|s| {
            format!(
                "op {} ({}): {}",
                s.seq,
                text::clip(&s.state, 40),
                text::clip(&s.why, 300)
            )
        })
        .collect();
    let chrome =
        Chrome::new(c, format!("Replay the {what}?")).with_user(Some(p.signed_in(c.base())));
    let action = format!("{}/replay", c.base());
    let page = ConfirmPage {
        chrome,
        what: &what,
        would_replay: report.changed.len(),
        skipped: &skipped,
        skipped_count: report.skipped.len(),
        action: &action,
        destination: destination.as_deref().unwrap_or(""),
        reason: &change.reason,
        back_href: &back,
    };
    Ok(pages::html(StatusCode::OK, &page))
}

async fn set_paused(
    c: &Console,
    who: Who,
    form: Fields,
    pause: bool,
) -> Result<Response, PageError> {
    let form = fields(form)?;
    let p = authorize(c, who, &form)?;
    let change = change(&p, &form, false)?;
    let Some(name) = destination(&form, true)? else {
        return Err(PageError::bad_request("which destination? nothing changed"));
    };
    let store = c.store().ok_or_else(PageError::not_attached)?;
    let done = store
        .destination_set_paused(&name, pause, &change)
        .await
        .map_err(refused)?;
    let verb = match (done.is_some(), pause) {
        (false, _) => "unchanged",
        (true, true) => "paused",
        (true, false) => "resumed",
    };
    tracing::info!(user = %p.user, destination = %text::clip(&name, 200), verb, "console: an operator's change");
    let links = Links::new(c.base());
    let href = links.with_query(links.overview(), &[("done", verb), ("destination", &name)]);
    Ok(see_other(&href))
}

/// The form, or a 400 when it is malformed.
fn fields(form: Fields) -> Result<ActionForm, PageError> {
    form.map(|Form(f)| f)
        .map_err(|_| PageError::bad_request("the form is malformed; nothing changed"))
}

/// The operator behind a form with its session's token; 403 for anyone else, token first.
fn authorize(c: &Console, who: Who, form: &ActionForm) -> Result<Principal, PageError> {
    let Some(Extension(p)) = who else {
        return Err(PageError::forbidden("sign in first; nothing changed"));
    };
    if !p.accepts(c.access(), form.csrf.as_deref()) {
        return Err(PageError::forbidden(
            "the form's token is missing or wrong (an old page, or a form from another site): reload the page and try again; nothing changed",
        ));
    }
    if p.role != Role::Operator {
        return Err(PageError::forbidden(
            "viewers may not change anything: ask for the operator role; nothing changed",
        ));
    }
    Ok(p)
}

/// The change as the store records it: actor `console:<user>`, the form's reason, checked
/// as outboxctl's are.
fn change(p: &Principal, form: &ActionForm, dry_run: bool) -> Result<Change, PageError> {
    let change = Change {
        actor: p.actor(),
        reason: form.reason.as_deref().unwrap_or("").trim().to_owned(),
        force: false,
        dry_run,
    };
    change
        .validate()
        .map_err(|e| PageError::bad_request(format!("{e}; nothing changed")))?;
    Ok(change)
}

/// The form's destination: `None` when empty (refused when `required`), 400 past 200 characters.
fn destination(form: &ActionForm, required: bool) -> Result<Option<String>, PageError> {
    let d = form.destination.clone().filter(|d| !d.is_empty());
    if d.as_ref().is_some_and(|d| d.chars().count() > 200) {
        return Err(PageError::bad_request(
            "the destination is longer than 200 characters",
        ));
    }
    if required && d.is_none() {
        return Err(PageError::bad_request("which destination? nothing changed"));
    }
    Ok(d)
}

/// A store error of an action: the database refusing the login's rights is a 403 naming
/// the role it needs; bad input a 400; anything else the pages' 503.
fn refused(e: outbox_store::Error) -> PageError {
    match &e {
        outbox_store::Error::Store(s) if s.kind() == StoreErrorKind::Denied => {
            tracing::warn!(error = %e, "console: the database refused an operator's change");
            PageError::forbidden(
                "the database refused the change: the console's database login lacks the rights of the outbox_operator role. \
                 Give the console a login holding outbox_operator ([console] database_url, or OUTBOX_CONSOLE_DATABASE_URL; \
                 see docs/security.md), or make the change with outboxctl as an operator. Nothing changed",
            )
        }
        outbox_store::Error::Invalid(i) => PageError::bad_request(format!("{i}; nothing changed")),
        _ => PageError::from(e),
    }
}

fn log(p: &Principal, what: &str, report: &ChangeReport) {
    tracing::info!(
        user = %p.user,
        changed = report.changed.len(),
        skipped = report.skipped.len(),
        "console: an operator {what} ops"
    );
}

fn see_other(href: &str) -> Response {
    Redirect::to(href).into_response()
}

/// `href` with what a replay or cancel did, for the page to say.
fn done_href(href: String, verb: &str, report: &ChangeReport) -> String {
    let n = report.changed.len().to_string();
    let skipped = report.skipped.len().to_string();
    Links::new("").with_query(href, &[("done", verb), ("n", &n), ("skipped", &skipped)])
}

/// What the query of a page reached after an action says was done.
#[derive(Debug, Default, serde::Deserialize)]
struct Done {
    done: Option<String>,
    n: Option<String>,
    skipped: Option<String>,
    destination: Option<String>,
}

/// The sentence a page shows after an action, from its query: fixed phrasings around numbers
/// and a destination's name, so a link cannot make the page say anything else.
pub(crate) fn done(uri: &Uri) -> Option<String> {
    let Query(q) = Query::<Done>::try_from_uri(uri).ok()?;
    let count = |v: &Option<String>| v.as_deref().and_then(|n| n.parse::<u64>().ok());
    let ops = |n: u64| {
        if n == 1 {
            "1 op".to_owned()
        } else {
            format!("{n} ops")
        }
    };
    let destination = q.destination.as_deref().map(|d| text::clip(d, 200));
    match (q.done.as_deref()?, destination) {
        (verb @ ("replayed" | "cancelled"), _) => {
            let n = count(&q.n)?;
            let skipped = count(&q.skipped).unwrap_or(0);
            let mut line = format!("{}{} {}.", verb[..1].to_uppercase(), &verb[1..], ops(n));
            if skipped > 0 {
                line.pop();
                line += &format!(
                    "; {} skipped: their state no longer allowed it (outbox_admin_log has why).",
                    ops(skipped)
                );
            }
            Some(line)
        }
        ("paused", Some(d)) => Some(format!(
            "Paused {d}: its ops stay pending, and it is not probed, until resumed."
        )),
        ("resumed", Some(d)) => Some(format!(
            "Resumed {d}: dispatchers claim its ops again within a poll interval."
        )),
        ("unchanged", Some(d)) => Some(format!("{d} already was in that state; nothing changed.")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::done;

    #[test]
    fn only_fixed_phrasings_are_shown_after_an_action() {
        let said = |q: &str| done(&format!("/x?{q}").parse().unwrap());
        assert_eq!(
            said("done=replayed&n=3&skipped=0").as_deref(),
            Some("Replayed 3 ops.")
        );
        assert_eq!(
            said("done=cancelled&n=1&skipped=2").as_deref(),
            Some(
                "Cancelled 1 op; 2 ops skipped: their state no longer allowed it (outbox_admin_log has why)."
            )
        );
        assert_eq!(
            said("done=paused&destination=a%20b").as_deref(),
            Some("Paused a b: its ops stay pending, and it is not probed, until resumed.")
        );
        for q in [
            "done=hacked&n=1",
            "done=replayed&n=x",
            "done=paused",
            "",
            "done=%ZZ",
            "n=1",
        ] {
            assert_eq!(said(q), None, "{q}");
        }
    }
}

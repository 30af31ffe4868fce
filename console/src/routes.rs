//! The routes and their handlers, under the console's base path: `/` (overview), `/charts`
//! (the last hour or day), `/ops`
//! (ops by state and destination), `/ops/{op}` (one op, by op id or sequence), `/style.css`;
//! anything else under the base is a 404 page. Every page answers GET and HEAD; any other
//! method gets a 405 page. Only with logins configured are there more: `/login`, `/logout`
//! and the operators' POST actions (`actions`), behind the gate of `auth`.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{MethodRouter, get, post};
use axum::{Extension, Router};

use crate::auth::{self, Principal};
use crate::error::PageError;
use crate::pages::{self, ChartsPage, Chrome, OpDetailPage, OpsPage, OverviewPage};
use crate::text;
use crate::view::{Charts, Links, ListQuery, OpPage, OpsList, Overview, REJECTIONS_SHOWN, Window};
use crate::{Console, actions, headers, login};

/// The console's router: its pages under its base path, with the console's headers on every
/// answer.
pub(crate) fn router(console: Console) -> Router {
    let base = console.base().to_owned();
    let mut router = Router::new()
        .route(&format!("{base}/"), page(get(overview)))
        .route(&format!("{base}/charts"), page(get(charts)))
        .route(&format!("{base}/ops"), page(get(ops)))
        .route(&format!("{base}/ops/{{op}}"), page(get(op)))
        .route(&format!("{base}/style.css"), page(get(style)))
        .route(&format!("{base}/{{*rest}}"), page(get(not_found)));
    if !base.is_empty() {
        let slash = format!("{base}/");
        router = router.route(
            &base,
            page(get(move || async move { Redirect::permanent(&slash) })),
        );
    }
    if !console.access().enabled() {
        return router
            .layer(axum::middleware::map_response(headers::add))
            .with_state(console);
    }
    router
        .route(
            &format!("{base}/login"),
            page(get(login::form).post(login::submit)),
        )
        .route(&format!("{base}/logout"), form(post(login::logout)))
        .route(
            &format!("{base}/ops/{{op}}/replay"),
            form(post(actions::replay_op)),
        )
        .route(
            &format!("{base}/ops/{{op}}/cancel"),
            form(post(actions::cancel_op)),
        )
        .route(&format!("{base}/replay"), form(post(actions::replay_dead)))
        .route(
            &format!("{base}/destinations/pause"),
            form(post(actions::pause)),
        )
        .route(
            &format!("{base}/destinations/resume"),
            form(post(actions::resume)),
        )
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            auth::gate,
        ))
        // A form is a few fields: a bigger body is refused before anything reads it.
        .layer(axum::extract::DefaultBodyLimit::max(FORM_MAX_BYTES))
        .layer(axum::middleware::map_response(headers::add_with_forms))
        .with_state(console)
}

/// The largest form body taken (a reason of 2,000 characters, encoded, and a few fields).
const FORM_MAX_BYTES: usize = 32 * 1024;

/// `method` answering 405 to every method it does not route.
fn page(method: MethodRouter<Console>) -> MethodRouter<Console> {
    method.fallback(|State(c): State<Console>| async move {
        pages::error(&c, &PageError::method_not_allowed())
    })
}

/// `method` (a form's POST) answering 405 to every other method.
fn form(method: MethodRouter<Console>) -> MethodRouter<Console> {
    method.fallback(
        |State(c): State<Console>| async move { pages::error(&c, &PageError::post_only()) },
    )
}

/// The answer for `result`: the page, or the page of its error.
fn answer(console: &Console, result: Result<Response, PageError>) -> Response {
    result.unwrap_or_else(|e| pages::error(console, &e))
}

/// Who is signed in, when logins are configured (the gate put them there).
type Who = Option<Extension<Principal>>;

/// The chrome of a page for whoever is signed in, saying what their last action did.
fn chrome(c: &Console, title: impl Into<String>, who: &Who, uri: &Uri) -> Chrome {
    Chrome::new(c, title)
        .with_user(who.as_ref().map(|Extension(p)| p.signed_in(c.base())))
        .with_done(who.as_ref().and_then(|_| actions::done(uri)))
}

async fn overview(State(c): State<Console>, who: Who, uri: Uri) -> Response {
    let chrome = chrome(&c, "Overview", &who, &uri);
    answer(&c, overview_page(&c, chrome).await)
}

async fn overview_page(c: &Console, chrome: Chrome) -> Result<Response, PageError> {
    let store = c.store().ok_or_else(PageError::not_attached)?;
    let status = store.admin_status().await?;
    let health = store.destination_list().await?;
    let rejections = store.rejection_list(REJECTIONS_SHOWN).await?;
    let configured = c.options().configured_destinations.as_deref();
    let o = Overview::new(
        &status,
        &health,
        &rejections,
        configured,
        &Links::new(c.base()),
    );
    let page = OverviewPage { chrome, o: &o };
    Ok(pages::html(StatusCode::OK, &page))
}

/// `/charts?window=hour|day`.
#[derive(Debug, serde::Deserialize)]
struct ChartsQuery {
    window: Option<String>,
}

async fn charts(
    State(c): State<Console>,
    who: Who,
    uri: Uri,
    query: Result<Query<ChartsQuery>, QueryRejection>,
) -> Response {
    let chrome = chrome(&c, "Charts", &who, &uri);
    answer(&c, charts_page(&c, chrome, query).await)
}

async fn charts_page(
    c: &Console,
    chrome: Chrome,
    query: Result<Query<ChartsQuery>, QueryRejection>,
) -> Result<Response, PageError> {
    let bad = || PageError::bad_request("window must be hour or day");
    let Query(query) = query.map_err(|_| bad())?;
    let window = Window::parse(query.window.as_deref()).ok_or_else(bad)?;
    let store = c.store().ok_or_else(PageError::not_attached)?;
    let now = time::OffsetDateTime::now_utc();
    let start = window.start(now);
    let stats = store.stats_read(start).await?;
    let health = store.destination_list().await?;
    let holds = store.destination_hold_list(start).await?;
    let links = Links::new(c.base());
    let charts = Charts::new(window, now, &stats, &health, &holds, |w| links.charts(w));
    let mut chrome = chrome;
    chrome.title = format!("Charts, last {}", window.as_str());
    let page = ChartsPage {
        chrome,
        ch: &charts,
    };
    Ok(pages::html(StatusCode::OK, &page))
}

async fn ops(
    State(c): State<Console>,
    who: Who,
    uri: Uri,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let chrome = chrome(&c, "", &who, &uri);
    answer(&c, ops_page(&c, chrome, query).await)
}

async fn ops_page(
    c: &Console,
    mut chrome: Chrome,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, PageError> {
    let Query(query) = query.map_err(|e| {
        PageError::bad_request(format!(
            "the query is malformed: {}",
            text::clip(&e.body_text(), 200)
        ))
    })?;
    let filter = query.filter()?;
    let store = c.store().ok_or_else(PageError::not_attached)?;
    let found = store.admin_op_list(&filter).await?;
    let list = OpsList::new(&filter, &found, &Links::new(c.base()));
    chrome.title = list.heading.clone();
    let page = OpsPage {
        chrome,
        list: &list,
    };
    Ok(pages::html(StatusCode::OK, &page))
}

async fn op(
    State(c): State<Console>,
    who: Who,
    uri: Uri,
    op: Result<Path<String>, PathRejection>,
) -> Response {
    let chrome = chrome(&c, "", &who, &uri);
    answer(&c, op_page(&c, chrome, op).await)
}

async fn op_page(
    c: &Console,
    mut chrome: Chrome,
    op: Result<Path<String>, PathRejection>,
) -> Result<Response, PageError> {
    let Path(op) = op.map_err(|_| PageError::bad_request("the op's id is not valid UTF-8"))?;
    let named = OpName::parse(&op)?;
    let store = c.store().ok_or_else(PageError::not_attached)?;
    let seq = match named {
        OpName::Seq(seq) => Some(seq),
        OpName::Id(id) => store.admin_op_find(id).await?,
    };
    let missing = || PageError::not_found(format!("there is no op {}", text::clip(&op, 60)));
    let Some(seq) = seq else {
        return Err(missing());
    };
    let detail = store.admin_op_show(seq).await?.ok_or_else(missing)?;
    let shown = OpPage::new(&detail, &Links::new(c.base()));
    chrome.title = format!("Op {}", shown.seq);
    let page = OpDetailPage { chrome, op: &shown };
    Ok(pages::html(StatusCode::OK, &page))
}

/// How a link names an op: by its op id (a UUID), or by its sequence as `outboxctl` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpName {
    Id(uuid::Uuid),
    Seq(i64),
}

impl OpName {
    fn parse(text: &str) -> Result<OpName, PageError> {
        if let Ok(id) = uuid::Uuid::parse_str(text) {
            return Ok(OpName::Id(id));
        }
        match text.parse::<i64>() {
            Ok(seq) if seq > 0 => Ok(OpName::Seq(seq)),
            _ => Err(PageError::bad_request(format!(
                "{} is not an op id (a UUID) or an op's sequence",
                text::clip(text, 60)
            ))),
        }
    }
}

async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../static/style.css"),
    )
}

async fn not_found(State(c): State<Console>) -> Response {
    pages::error(&c, &PageError::not_found("the console has no such page"))
}

#[cfg(test)]
mod tests {
    use super::OpName;

    #[test]
    fn ops_are_named_by_uuid_or_sequence_and_anything_else_is_a_400() {
        let id = "0190a5c2-8c3e-7f00-8000-000000000001";
        assert_eq!(OpName::parse(id), Ok(OpName::Id(id.parse().unwrap())));
        assert_eq!(OpName::parse("42"), Ok(OpName::Seq(42)));
        for bad in ["0", "-3", "x", "42abc", "<script>", ""] {
            let e = OpName::parse(bad).unwrap_err();
            assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST, "{bad}");
        }
    }
}

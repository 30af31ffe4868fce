//! The templates (`templates/*.html`, checked at compile time by askama) and their rendering
//! into answers. `.html` templates escape every value they print; nothing here marks a value
//! as safe, so text from the database always reaches the browser as text.

use askama::Template;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use time::OffsetDateTime;

use crate::Console;
use crate::error::PageError;
use crate::text;
use crate::view::{Charts, Links, OpPage, OpsList, Overview, Window};

/// What every page has around its content: title, navigation, refresh.
#[derive(Debug, Clone)]
pub(crate) struct Chrome {
    /// The page's own title (the site's name follows it).
    pub(crate) title: String,
    /// The base path, for the stylesheet.
    pub(crate) base: String,
    /// Seconds between reloads; 0: none.
    pub(crate) refresh_seconds: u64,
    pub(crate) overview_href: String,
    pub(crate) charts_href: String,
    pub(crate) dead_href: String,
    pub(crate) ops_href: String,
    /// When the page was made (RFC 3339).
    pub(crate) rendered_at: String,
}

impl Chrome {
    /// The chrome of a page of `console` titled `title`.
    pub(crate) fn new(console: &Console, title: impl Into<String>) -> Chrome {
        let links = Links::new(console.base());
        Chrome {
            title: title.into(),
            base: links.base().to_owned(),
            refresh_seconds: console.options().refresh.as_secs(),
            overview_href: links.overview(),
            charts_href: links.charts(Window::Hour),
            dead_href: links.ops(Some(outbox_store::OpState::Dead), None),
            ops_href: links.ops(None, None),
            rendered_at: text::exact(OffsetDateTime::now_utc()),
        }
    }
}

/// `/`.
#[derive(Debug, Template)]
#[template(path = "overview.html")]
pub(crate) struct OverviewPage<'a> {
    pub(crate) chrome: Chrome,
    pub(crate) o: &'a Overview,
}

/// `/charts`.
#[derive(Debug, Template)]
#[template(path = "charts.html")]
pub(crate) struct ChartsPage<'a> {
    pub(crate) chrome: Chrome,
    pub(crate) ch: &'a Charts,
}

/// `/ops`.
#[derive(Debug, Template)]
#[template(path = "ops.html")]
pub(crate) struct OpsPage<'a> {
    pub(crate) chrome: Chrome,
    pub(crate) list: &'a OpsList,
}

/// `/ops/{op}`.
#[derive(Debug, Template)]
#[template(path = "op.html")]
pub(crate) struct OpDetailPage<'a> {
    pub(crate) chrome: Chrome,
    pub(crate) op: &'a OpPage,
}

/// Any page that could not be shown.
#[derive(Debug, Template)]
#[template(path = "error.html")]
pub(crate) struct ErrorPage<'a> {
    pub(crate) chrome: Chrome,
    pub(crate) status: u16,
    pub(crate) reason: &'a str,
    pub(crate) message: &'a str,
}

/// `page` rendered as an HTML answer with `status`.
pub(crate) fn html(status: StatusCode, page: &impl Template) -> Response {
    match page.render() {
        Ok(body) => (status, Html(body)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "console: a page could not be rendered");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the console could not render this page\n",
            )
                .into_response()
        }
    }
}

/// The page saying why `e` happened, with its status.
pub(crate) fn error(console: &Console, e: &PageError) -> Response {
    let status = e.status();
    let reason = status.canonical_reason().unwrap_or("error");
    let mut chrome = Chrome::new(console, format!("{} {reason}", status.as_u16()));
    if status != StatusCode::SERVICE_UNAVAILABLE {
        chrome.refresh_seconds = 0; // only an outage may pass by itself
    }
    let page = ErrorPage {
        chrome,
        status: status.as_u16(),
        reason,
        message: e.message(),
    };
    let mut response = html(status, &page);
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response.headers_mut().insert(
            axum::http::header::ALLOW,
            axum::http::HeaderValue::from_static("GET, HEAD"),
        );
    }
    response
}

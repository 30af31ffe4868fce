//! What a page answers when it cannot show what was asked: 400 (a malformed op id, query or
//! form), 403 (not signed in, not an operator, no valid form token, or a database login that
//! may not change ops), 404 (no such op or page), 405 (a method the page does not take), 503
//! (the store failed or is not attached yet). A store error shows its backend and class only; the whole error goes to the
//! log, since its text may name tables, rows or hosts that the page's reader need not see.

use axum::http::StatusCode;

/// A page that could not be shown, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageError {
    status: StatusCode,
    message: String,
}

impl PageError {
    /// 400: the request named something malformed.
    pub(crate) fn bad_request(message: impl Into<String>) -> PageError {
        PageError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404: nothing of that name.
    pub(crate) fn not_found(message: impl Into<String>) -> PageError {
        PageError::new(StatusCode::NOT_FOUND, message)
    }

    /// 405: the console only reads.
    pub(crate) fn method_not_allowed() -> PageError {
        PageError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "the console only reads (GET). Replay, cancel, purge, pause and resume are outboxctl commands, logged in outbox_admin_log",
        )
    }

    /// 405: an address that takes a form's POST only.
    pub(crate) fn post_only() -> PageError {
        PageError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "this address takes a form's POST only; the page with the form is one step back",
        )
    }

    /// 403: not signed in, not allowed, or a form without its token.
    pub(crate) fn forbidden(message: impl Into<String>) -> PageError {
        PageError::new(StatusCode::FORBIDDEN, message)
    }

    /// 500: the console itself failed (no randomness from the system).
    pub(crate) fn internal(message: impl Into<String>) -> PageError {
        PageError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// 503: the console has no store yet (the dispatcher has not connected).
    pub(crate) fn not_attached() -> PageError {
        PageError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the console has not connected to the outbox database yet",
        )
    }

    fn new(status: StatusCode, message: impl Into<String>) -> PageError {
        PageError {
            status,
            message: message.into(),
        }
    }

    /// The status the page answers with.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// What the page says.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }
}

impl From<outbox_store::Error> for PageError {
    fn from(e: outbox_store::Error) -> PageError {
        tracing::warn!(error = %e, "console: a store call failed");
        let class = match &e {
            outbox_store::Error::Store(e) => format!("{} {}", e.backend(), e.kind()),
            outbox_store::Error::Invalid(_) => "invalid input".to_owned(),
            outbox_store::Error::Migrate(_) => "schema version".to_owned(),
        };
        PageError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the outbox database did not answer ({class} error); the log has the details"),
        )
    }
}

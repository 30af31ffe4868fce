//! The headers on every answer of the console: a content security policy that allows no
//! script at all (only the console's own stylesheet and images, and forms posting to the
//! console alone), no sniffing, no referrer, no framing and no caching (the pages show live
//! state and hold forms' tokens, and may be read by someone else later).

use axum::http::HeaderValue;
use axum::http::header;
use axum::response::Response;

/// No scripts from anywhere, inline or not; styles and images only from the console itself;
/// no forms, no `<base>`, no framing. Even text that escaped escaping could not run.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The same with logins configured, whose pages hold forms: they may post to the console only.
pub(crate) const CONTENT_SECURITY_POLICY_WITH_FORMS: &str = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Adds the console's headers to `response` (the read-only console: no forms).
pub(crate) async fn add(response: Response) -> Response {
    set(response, CONTENT_SECURITY_POLICY)
}

/// Adds the console's headers to `response` when logins are configured (forms post to it).
pub(crate) async fn add_with_forms(response: Response) -> Response {
    set(response, CONTENT_SECURITY_POLICY_WITH_FORMS)
}

fn set(mut response: Response, policy: &'static str) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, policy),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

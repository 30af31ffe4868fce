//! One HTTP attempt with reqwest. The row is trusted for nothing (G11): it is checked against
//! the producer's rules again, and the URL is the destination's base URL joined with the op's
//! path by a URL library and required to keep the base's scheme, host, port and path prefix.
//! No ambient proxy (only a destination's own `proxy`), redirects are not followed, the whole
//! attempt has the destination's timeout, and at most 64 KiB of the answer is read (1 KiB
//! kept, escaped, as the excerpt). Every attempt carries the op's idempotency key,
//! `X-Fencing-Token`, `X-Outbox-Op-Id`, `X-Outbox-Attempt`, `traceparent` and `tracestate`
//! when there is a trace (the attempt span's with traces on, else the producer's as stored), and Standard
//! Webhooks signature headers when configured. A destination's configured headers are the
//! only values sent under their names.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use outbox_seal::{Keys, OpenError};
use outbox_store::ClaimedOp;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::config::Destination;
use crate::retry::{AttemptResult, parse_retry_after};

/// The most of an answer's body that is read.
pub const READ_LIMIT: usize = 64 * 1024;
/// The most of an answer's body kept on the attempt row.
pub const EXCERPT_LIMIT: usize = 1024;

/// The dispatcher's own header names.
pub mod headers {
    /// The producer's fencing token, for destinations that can fence.
    pub const FENCING_TOKEN: &str = "x-fencing-token";
    /// The op's public id.
    pub const OP_ID: &str = "x-outbox-op-id";
    /// The attempt number, 1 for the first.
    pub const ATTEMPT: &str = "x-outbox-attempt";
    /// W3C trace context: the attempt span's, or the producer's while traces are off.
    pub const TRACEPARENT: &str = "traceparent";
    /// W3C trace state: the producer's, carried on by the attempt span.
    pub const TRACESTATE: &str = "tracestate";
    /// Standard Webhooks message id (the op id).
    pub const WEBHOOK_ID: &str = "webhook-id";
    /// Standard Webhooks timestamp, in seconds.
    pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
    /// Standard Webhooks signature.
    pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";
}

/// The W3C trace context an attempt sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceHeaders {
    /// `00-<trace id>-<span id>-<flags>`.
    pub traceparent: String,
    /// The vendors' list, if any.
    pub tracestate: Option<String>,
}

/// What an attempt produced.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// How it ended.
    pub result: AttemptResult,
    /// The start of the answer's body, if one came.
    pub excerpt: Option<String>,
    /// How long it took.
    pub duration: Duration,
}

/// Sends ops to one destination over a pooled client.
#[derive(Debug, Clone)]
pub struct Sender {
    client: reqwest::Client,
    destination: Destination,
    max_body_bytes: usize,
    keys: Arc<Keys>,
}

impl Sender {
    /// A client for `destination`: rustls, HTTP/1.1 and HTTP/2, no redirects, never a proxy
    /// from the environment (`HTTP_PROXY` and the like would see every request and its
    /// credentials), only the destination's own `proxy` when it names one. Ops whose body is
    /// larger than `max_body_bytes` are never sent.
    pub fn new(destination: &Destination, max_body_bytes: usize) -> Result<Sender, reqwest::Error> {
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(destination.timeout)
            .connect_timeout(destination.timeout.min(Duration::from_secs(5)))
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(concat!("fenced-outbox/", env!("CARGO_PKG_VERSION")));
        if let Some(proxy) = &destination.proxy {
            builder = builder.proxy(reqwest::Proxy::all(proxy.expose())?);
        }
        Ok(Sender {
            client: builder.build()?,
            destination: destination.clone(),
            max_body_bytes,
            keys: Arc::default(),
        })
    }

    /// Opens ops' sealed header values and bodies with `keys` before sending them.
    pub fn with_keys(mut self, keys: Arc<Keys>) -> Sender {
        self.keys = keys;
        self
    }

    /// The destination this sender serves.
    pub fn destination(&self) -> &Destination {
        &self.destination
    }

    /// Makes one attempt of `op`, with `trace` as its trace context, if any.
    pub async fn send(&self, op: &ClaimedOp, trace: Option<&TraceHeaders>) -> Attempt {
        let started = Instant::now();
        let (result, excerpt) = match self.open(op) {
            Ok(clear) => match self.request(clear.as_ref().unwrap_or(op), trace) {
                Ok(request) => self.exchange(request).await,
                Err(e) => (AttemptResult::Invalid(e), None),
            },
            Err(e) => (e, None),
        };
        Attempt {
            result,
            excerpt,
            duration: started.elapsed(),
        }
    }

    /// `op` with its sealed header values and body opened (`None`: nothing in it is sealed),
    /// or the attempt's result when they cannot be: a key this process does not hold is a
    /// failure to retry (the key can be added), one that does not open is never sent (G11).
    fn open(&self, op: &ClaimedOp) -> Result<Option<ClaimedOp>, AttemptResult> {
        let clear = match self
            .keys
            .open_content(&op.destination, &op.headers, &op.body)
        {
            Ok(Some(clear)) => clear,
            Ok(None) => return Ok(None),
            Err(e @ OpenError::UnknownKey { .. }) => {
                return Err(AttemptResult::NotSent(format!("{e}: not sent")));
            }
            Err(e @ OpenError::Damaged { .. }) => {
                return Err(AttemptResult::Invalid(format!("{e}, never sent")));
            }
        };
        let mut op = op.clone();
        // A body the claim left out (larger than max_body_bytes as stored) keeps its stored
        // size, so the check below refuses it; one read whole is checked at its clear size.
        if usize::try_from(op.body_bytes).is_ok_and(|n| n == op.body.len()) {
            op.body_bytes = i64::try_from(clear.body.len()).unwrap_or(i64::MAX);
        }
        op.headers = clear.headers;
        op.body = clear.body;
        Ok(Some(op))
    }

    async fn exchange(&self, request: reqwest::Request) -> (AttemptResult, Option<String>) {
        let mut response = match self.client.execute(request).await {
            Ok(r) => r,
            Err(e) => return (classify(&e), None),
        };
        let code = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    body.extend_from_slice(&chunk[..chunk.len().min(READ_LIMIT - body.len())]);
                    if body.len() >= READ_LIMIT {
                        break;
                    }
                }
                Ok(None) => break,
                // The status arrived; a body cut short does not change what it said.
                Err(_) => break,
            }
        }
        let excerpt = (!body.is_empty()).then(|| {
            outbox_store::text::storable_bytes(
                &body[..body.len().min(EXCERPT_LIMIT)],
                EXCERPT_LIMIT,
            )
        });
        (AttemptResult::Status { code, retry_after }, excerpt)
    }

    /// The request for `op` with `trace` (checked like the stored one), or why it must
    /// never be sent: the rule the row breaks, or what could not be built (never a secret).
    pub fn request(
        &self,
        op: &ClaimedOp,
        trace: Option<&TraceHeaders>,
    ) -> Result<reqwest::Request, String> {
        op.check(self.max_body_bytes)
            .map_err(|e| format!("the stored op breaks a rule, never sent: {e}"))?;
        let d = &self.destination;
        let url = join(&d.base_url, &op.path)?;
        let method = reqwest::Method::from_bytes(op.method.as_bytes())
            .map_err(|_| format!("invalid method {:?}", op.method))?;
        let mut h = HeaderMap::new();
        for (name, value) in &op.headers {
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("invalid header name {name:?}"))?;
            let v = HeaderValue::from_str(value)
                .map_err(|_| format!("invalid value for header {name}"))?;
            h.append(n, v);
        }
        // After the producer's headers, replacing any of the same name: the configured value
        // is the only one sent.
        for (name, value) in &d.headers {
            let mut v = HeaderValue::from_str(value.expose())
                .map_err(|_| format!("invalid configured value for {name}"))?;
            v.set_sensitive(true);
            h.insert(name.clone(), v);
        }
        if let Some(ct) = &op.content_type {
            h.insert(
                CONTENT_TYPE,
                HeaderValue::from_str(ct).map_err(|_| "invalid content type".to_owned())?,
            );
        }
        let text = |s: String| {
            HeaderValue::from_str(&s).map_err(|_| "invalid generated header".to_owned())
        };
        h.insert(
            d.idempotency_header.clone(),
            text(op.idempotency_key.clone())?,
        );
        h.insert(headers::FENCING_TOKEN, text(op.token.to_string())?);
        let op_id = op.op_id.to_string();
        h.insert(headers::OP_ID, text(op_id.clone())?);
        h.insert(headers::ATTEMPT, text(op.attempt.to_string())?);
        if let Some(trace) = trace {
            outbox_store::request::check_traceparent(&trace.traceparent)
                .map_err(|e| format!("invalid trace context: {e}"))?;
            h.insert(headers::TRACEPARENT, text(trace.traceparent.clone())?);
            if let Some(ts) = &trace.tracestate {
                outbox_store::request::check_tracestate(ts)
                    .map_err(|e| format!("invalid trace context: {e}"))?;
                h.insert(headers::TRACESTATE, text(ts.clone())?);
            }
        }
        if let Some(key) = &d.signing_key {
            let timestamp = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            h.insert(headers::WEBHOOK_ID, text(op_id.clone())?);
            h.insert(headers::WEBHOOK_TIMESTAMP, text(timestamp.to_string())?);
            h.insert(
                headers::WEBHOOK_SIGNATURE,
                text(key.sign(&op_id, timestamp, &op.body))?,
            );
        }
        let mut request = reqwest::Request::new(method, url);
        *request.headers_mut() = h;
        *request.body_mut() = Some(op.body.clone().into());
        Ok(request)
    }
}

/// The URL of `path` (path and query) below `base`: built by the URL library, never by
/// concatenating text, and refused unless it keeps the base's scheme, user info, host, port
/// and path prefix, whatever the path holds (`@other-host/x`, `.other.example/x`, `:8443/x`,
/// dot segments, encoded or not).
pub fn join(base: &reqwest::Url, path: &str) -> Result<reqwest::Url, String> {
    let (route, query) = match path.split_once('?') {
        Some((route, query)) => (route, Some(query)),
        None => (path, None),
    };
    let prefix = base.path().trim_end_matches('/');
    let mut url = base.clone();
    url.set_path(&format!("{prefix}{route}"));
    url.set_query(query);
    url.set_fragment(None);
    let within = url.path() == prefix
        || url
            .path()
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'));
    let same_origin = url.scheme() == base.scheme()
        && url.username() == base.username()
        && url.password() == base.password()
        && url.host() == base.host()
        && url.port_or_known_default() == base.port_or_known_default();
    if !same_origin || !within {
        return Err(format!(
            "the path {:?} leaves the destination's base URL, never sent",
            outbox_store::text::printable(path)
        ));
    }
    Ok(url)
}

/// Connection failures before anything was sent are definite failures; anything after the
/// connection was made (timeouts, resets) may have reached the destination: unknown.
fn classify(e: &reqwest::Error) -> AttemptResult {
    // Never the URL: it is config, and query strings can hold data.
    let text = e
        .to_string()
        .replace(e.url().map(|u| u.as_str()).unwrap_or("\u{0}"), "<url>");
    let detail = std::error::Error::source(e)
        .map(|s| format!("{text}: {s}"))
        .unwrap_or(text);
    if e.is_connect() {
        AttemptResult::NotSent(detail)
    } else if e.is_timeout() {
        AttemptResult::Unknown(format!("timed out: {detail}"))
    } else {
        AttemptResult::Unknown(detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use reqwest::Url;

    #[test]
    fn paths_join_below_the_base_url() {
        let base = Url::parse("https://api.example:8443/v2/").unwrap();
        for (path, url) in [
            (
                "/items?draft=1",
                "https://api.example:8443/v2/items?draft=1",
            ),
            ("/", "https://api.example:8443/v2/"),
            ("/a%2Fb", "https://api.example:8443/v2/a%2Fb"),
        ] {
            assert_eq!(join(&base, path).unwrap().as_str(), url);
        }
        let root = Url::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!(
            join(&root, "/x?y").unwrap().as_str(),
            "http://127.0.0.1:9000/x?y"
        );
    }

    #[test]
    fn paths_that_would_leave_the_base_url_are_refused() {
        let base = Url::parse("http://127.0.0.1:9000/api").unwrap();
        let root = Url::parse("http://127.0.0.1:9000").unwrap();
        for path in [
            "@127.0.0.1:9001/stolen",
            ".evil.example/x",
            ":8443/x",
            "/../admin",
            "/%2e%2e/admin",
            "/x/../../admin",
        ] {
            assert!(join(&base, path).is_err(), "{path}");
        }
        // Without a base path, what matters is that the host and port stay.
        for path in ["@127.0.0.1:9001/stolen", ":8443/x", ".evil.example/x"] {
            let joined = join(&root, path);
            assert!(
                joined
                    .as_ref()
                    .map_or(true, |u| u.host_str() == Some("127.0.0.1")
                        && u.port() == Some(9000)),
                "{path}: {joined:?}"
            );
        }
    }

    fn base_url() -> impl Strategy<Value = Url> {
        (
            prop_oneof![Just("http"), Just("https")],
            prop_oneof![
                Just("api.example".to_owned()),
                Just("127.0.0.1".to_owned()),
                Just("[::1]".to_owned()),
                "[a-z]{1,10}(\\.[a-z]{1,5}){0,2}",
            ],
            proptest::option::of(1u16..),
            proptest::collection::vec("[a-zA-Z0-9._~%-]{1,8}", 0..3),
            any::<bool>(),
        )
            .prop_filter_map(
                "a valid base URL",
                |(scheme, host, port, segments, slash)| {
                    let port = port.map(|p| format!(":{p}")).unwrap_or_default();
                    let path = segments.iter().map(|s| format!("/{s}")).collect::<String>();
                    let slash = if slash { "/" } else { "" };
                    let url = Url::parse(&format!("{scheme}://{host}{port}{path}{slash}")).ok()?;
                    // Dot segments in the base itself are the operator's own choice.
                    (!url.path().split('/').any(|s| s == "." || s == "..")).then_some(url)
                },
            )
    }

    proptest! {
        /// For any path the producer's rules accept and any base URL, the joined URL has the
        /// base's origin and stays below its path.
        #[test]
        fn accepted_paths_keep_the_base_origin_and_prefix(
            base in base_url(),
            path in "/[!-~]{0,60}",
        ) {
            prop_assume!(outbox_store::request::check_path(&path).is_ok());
            let url = join(&base, &path).expect("an accepted path joins");
            prop_assert_eq!(url.scheme(), base.scheme());
            prop_assert_eq!(url.host(), base.host());
            prop_assert_eq!(url.port_or_known_default(), base.port_or_known_default());
            let prefix = base.path().trim_end_matches('/');
            prop_assert!(url.path().starts_with(prefix), "{} below {}", url, base);
        }

        /// Whatever the path, a joined URL never leaves the base's origin.
        #[test]
        fn no_path_moves_the_origin(base in base_url(), path in any::<String>()) {
            if let Ok(url) = join(&base, &path) {
                prop_assert_eq!(url.host(), base.host());
                prop_assert_eq!(url.port_or_known_default(), base.port_or_known_default());
                prop_assert_eq!(url.scheme(), base.scheme());
            }
        }
    }
}

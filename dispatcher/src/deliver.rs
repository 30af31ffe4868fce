//! One HTTP attempt with reqwest: the URL is the destination's base URL plus the op's path,
//! redirects are not followed, the whole attempt has the destination's timeout, and at most
//! 64 KiB of the answer is read (1 KiB kept as the excerpt). Every attempt carries the op's
//! idempotency key, `X-Fencing-Token`, `X-Outbox-Op-Id`, `X-Outbox-Attempt`, `traceparent`
//! when the producer had one, and Standard Webhooks signature headers when configured.

use std::time::{Duration, Instant, SystemTime};

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
    /// W3C trace context.
    pub const TRACEPARENT: &str = "traceparent";
    /// Standard Webhooks message id (the op id).
    pub const WEBHOOK_ID: &str = "webhook-id";
    /// Standard Webhooks timestamp, in seconds.
    pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
    /// Standard Webhooks signature.
    pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";
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
}

impl Sender {
    /// A client for `destination`: rustls, HTTP/1.1 and HTTP/2, no redirects, no ambient proxy.
    pub fn new(destination: &Destination) -> Result<Sender, reqwest::Error> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(destination.timeout)
            .connect_timeout(destination.timeout.min(Duration::from_secs(5)))
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(concat!("fenced-outbox/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Sender {
            client,
            destination: destination.clone(),
        })
    }

    /// The destination this sender serves.
    pub fn destination(&self) -> &Destination {
        &self.destination
    }

    /// Makes one attempt of `op`.
    pub async fn send(&self, op: &ClaimedOp) -> Attempt {
        let started = Instant::now();
        let (result, excerpt) = match self.request(op) {
            Ok(request) => self.exchange(request).await,
            Err(e) => (AttemptResult::Invalid(e), None),
        };
        Attempt {
            result,
            excerpt,
            duration: started.elapsed(),
        }
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
            let text = String::from_utf8_lossy(&body[..body.len().min(EXCERPT_LIMIT)]).into_owned();
            text.chars().take(EXCERPT_LIMIT).collect()
        });
        (AttemptResult::Status { code, retry_after }, excerpt)
    }

    /// The request for `op`; an error describes what could not be built (never a secret).
    pub fn request(&self, op: &ClaimedOp) -> Result<reqwest::Request, String> {
        let d = &self.destination;
        let url = format!("{}{}", d.base_url.as_str().trim_end_matches('/'), op.path);
        let url = reqwest::Url::parse(&url)
            .map_err(|e| format!("invalid URL from path {:?}: {e}", op.path))?;
        let method = reqwest::Method::from_bytes(op.method.as_bytes())
            .map_err(|_| format!("invalid method {:?}", op.method))?;
        let mut h = HeaderMap::new();
        for (name, value) in &d.headers {
            let mut v = HeaderValue::from_str(value.expose())
                .map_err(|_| format!("invalid configured value for {name}"))?;
            v.set_sensitive(true);
            h.append(name.clone(), v);
        }
        for (name, value) in &op.headers {
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("invalid header name {name:?}"))?;
            let v = HeaderValue::from_str(value)
                .map_err(|_| format!("invalid value for header {name}"))?;
            h.append(n, v);
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
        if let Some(tp) = &op.trace_context {
            h.insert(headers::TRACEPARENT, text(tp.clone())?);
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

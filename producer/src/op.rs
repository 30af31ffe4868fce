//! `Operation`: one intended external call, built and checked before it goes near the
//! database. Every G10 check of an op lives here, pure and unit-tested: destination names,
//! methods, relative paths without `..`, header names and values (no CR/LF, no reserved names,
//! no credentials), idempotency and order keys, delays and trace context.

use std::time::Duration;

use outbox_seal::{Content, Keys};
use outbox_store::{
    DestinationName, IdempotencyKey, InvalidInput, Lease, Method, NewOp, OrderKey, op,
};
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

pub use outbox_store::request::{
    DEFAULT_MAX_BODY_BYTES, MAX_BODY_BYTES_CEILING, MAX_HEADER_VALUE_LEN, MAX_HEADERS, MAX_PATH_LEN,
};
use outbox_store::request::{
    check_content_type, check_headers, check_path, check_traceparent, check_tracestate,
};

/// The longest delay before the first attempt.
pub const MAX_NOT_BEFORE: Duration = Duration::from_secs(365 * 24 * 3600);
/// Which order key an op gets.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ordering {
    /// The lease's resource (the default).
    Resource,
    /// A key of the caller's.
    Key(OrderKey),
    /// None: delivered beside anything.
    Unordered,
}

/// One intended external call, checked and ready to enqueue. Build it with
/// [`Operation::post`] (or `get`, `put`, `patch`, `delete`) and [`OperationBuilder::build`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    destination: DestinationName,
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    content_type: Option<String>,
    body: Vec<u8>,
    idempotency_key: IdempotencyKey,
    ordering: Ordering,
    not_before: Duration,
    supersede_pending: bool,
    expire_with_generation: bool,
    traceparent: Option<String>,
    tracestate: Option<String>,
}

/// Collects an op's parts; [`OperationBuilder::build`] checks them all at once.
#[derive(Debug, Clone)]
#[must_use = "an OperationBuilder does nothing until .build()"]
pub struct OperationBuilder {
    destination: String,
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    content_type: Option<String>,
    body: Vec<u8>,
    json_error: Option<String>,
    idempotency_key: Option<String>,
    order_key: Option<String>,
    unordered: bool,
    not_before: Duration,
    supersede_pending: bool,
    expire_with_generation: bool,
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl Operation {
    /// An op calling `method` on `path` (below the destination's base URL) of the destination
    /// named `destination` in the dispatcher's config.
    ///
    /// ```
    /// use outbox_producer::{Method, Operation};
    /// let op = Operation::builder("billing", Method::Post, "/invoices?draft=false")
    ///     .json(&serde_json::json!({"account": 1842, "amount_cents": 1250}))
    ///     .idempotency_key("invoice-1842-2026-07")
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(op.path(), "/invoices?draft=false");
    /// assert!(Operation::builder("billing", Method::Post, "https://evil.example/").build().is_err());
    /// ```
    pub fn builder(
        destination: impl Into<String>,
        method: Method,
        path: impl Into<String>,
    ) -> OperationBuilder {
        OperationBuilder {
            destination: destination.into(),
            method,
            path: path.into(),
            headers: Vec::new(),
            content_type: None,
            body: Vec::new(),
            json_error: None,
            idempotency_key: None,
            order_key: None,
            unordered: false,
            not_before: Duration::ZERO,
            supersede_pending: false,
            expire_with_generation: false,
            traceparent: None,
            tracestate: None,
        }
    }

    /// A POST; see [`Operation::builder`].
    pub fn post(destination: impl Into<String>, path: impl Into<String>) -> OperationBuilder {
        Operation::builder(destination, Method::Post, path)
    }

    /// A PUT; see [`Operation::builder`].
    pub fn put(destination: impl Into<String>, path: impl Into<String>) -> OperationBuilder {
        Operation::builder(destination, Method::Put, path)
    }

    /// A PATCH; see [`Operation::builder`].
    pub fn patch(destination: impl Into<String>, path: impl Into<String>) -> OperationBuilder {
        Operation::builder(destination, Method::Patch, path)
    }

    /// A DELETE; see [`Operation::builder`].
    pub fn delete(destination: impl Into<String>, path: impl Into<String>) -> OperationBuilder {
        Operation::builder(destination, Method::Delete, path)
    }

    /// A GET; see [`Operation::builder`].
    pub fn get(destination: impl Into<String>, path: impl Into<String>) -> OperationBuilder {
        Operation::builder(destination, Method::Get, path)
    }

    /// The destination's name.
    pub fn destination(&self) -> &DestinationName {
        &self.destination
    }

    /// The HTTP method.
    pub fn method(&self) -> Method {
        self.method
    }

    /// Path and query below the destination's base URL.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The idempotency key.
    pub fn idempotency_key(&self) -> &IdempotencyKey {
        &self.idempotency_key
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The header values and body sealed with `keys`' sealing key, still within the stored
    /// limits once the envelope is added.
    fn sealed(&self, keys: &Keys) -> Result<Content, InvalidInput> {
        let sealed = keys
            .seal_content(self.destination.as_str(), &self.headers, &self.body)
            .map_err(|e| InvalidInput::new("encryption", e.to_string()))?;
        if sealed.body.len() > MAX_BODY_BYTES_CEILING {
            return Err(InvalidInput::new(
                "body",
                format!(
                    "is {} bytes once encrypted, the limit is {MAX_BODY_BYTES_CEILING}",
                    sealed.body.len()
                ),
            ));
        }
        check_headers(&sealed.headers)
            .map_err(|e| InvalidInput::new(e.field, format!("{} once encrypted", e.reason)))?;
        Ok(sealed)
    }

    /// SHA-256 over method, path, headers, content type and body, each length-prefixed: what
    /// "the same request" means for an idempotency key (G7).
    pub fn request_hash(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        let mut part = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        };
        part(self.method.as_str().as_bytes());
        part(self.path.as_bytes());
        part(&(self.headers.len() as u64).to_be_bytes());
        for (name, value) in &self.headers {
            part(name.as_bytes());
            part(value.as_bytes());
        }
        part(self.content_type.as_deref().unwrap_or("").as_bytes());
        part(&self.body);
        h.finalize().into()
    }

    /// The row to insert for this op under `lease`, checking the body against `max_body_bytes`;
    /// with `keys`, its header values and body sealed after the request hash is taken over the
    /// clear request (G7: a rerun is a duplicate whatever key sealed the first).
    pub(crate) fn to_new_op(
        &self,
        lease: &Lease,
        max_body_bytes: usize,
        keys: Option<&Keys>,
    ) -> Result<NewOp, InvalidInput> {
        outbox_store::request::check_body(self.body.len(), max_body_bytes)?;
        let sealed = keys.map(|keys| self.sealed(keys)).transpose()?;
        let op_id = Uuid::now_v7();
        let order_key = match &self.ordering {
            Ordering::Resource => Some(OrderKey::from(&lease.resource)),
            Ordering::Key(k) => Some(k.clone()),
            Ordering::Unordered => None,
        };
        // Without keys the op's own headers are encoded as they are, not copied first.
        let headers = sealed.as_ref().map_or(&self.headers, |c| &c.headers);
        let headers_json = serde_json::to_string(headers)
            .map_err(|e| InvalidInput::new("headers", format!("cannot be encoded: {e}")))?;
        Ok(NewOp {
            op_id,
            partition: op::partition_slot(order_key.as_ref(), op_id),
            destination: self.destination.clone(),
            idempotency_key: self.idempotency_key.clone(),
            request_hash: self.request_hash(),
            order_key,
            method: self.method,
            path: self.path.clone(),
            headers_json,
            content_type: self.content_type.clone(),
            body: sealed.map_or_else(|| self.body.clone(), |c| c.body),
            expire_with_generation: self.expire_with_generation,
            supersede_pending: self.supersede_pending,
            // Bounded by MAX_NOT_BEFORE, so it fits.
            delay_ms: self.not_before.as_millis() as i64,
            trace_context: self.traceparent.clone(),
            trace_state: self.tracestate.clone(),
        })
    }
}

impl OperationBuilder {
    /// Adds a header. Names the dispatcher sets (Host, Idempotency-Key, X-Fencing-Token,
    /// traceparent, X-Outbox-*, webhook-*, …), Content-Type (use [`Self::body`]) and
    /// credentials (Authorization: configure them on the destination) are refused at build.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body and its content type.
    pub fn body(mut self, bytes: impl Into<Vec<u8>>, content_type: impl Into<String>) -> Self {
        self.body = bytes.into();
        self.content_type = Some(content_type.into());
        self
    }

    /// Sets the body to `value` as JSON, with content type `application/json`.
    pub fn json<T: Serialize + ?Sized>(mut self, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(bytes) => self.body(bytes, "application/json"),
            Err(e) => {
                self.json_error = Some(e.to_string());
                self
            }
        }
    }

    /// The idempotency key (required): 1..=255 visible ASCII characters, unique per
    /// destination, sent on every attempt.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Orders this op with others of the same key instead of the default, its resource.
    pub fn order_key(mut self, key: impl Into<String>) -> Self {
        self.order_key = Some(key.into());
        self
    }

    /// Opts out of ordering: this op may be delivered beside any other.
    pub fn unordered(mut self) -> Self {
        self.unordered = true;
        self
    }

    /// Delays the first attempt by `delay` from the enqueue (database clock).
    pub fn not_before(mut self, delay: Duration) -> Self {
        self.not_before = delay;
        self
    }

    /// When this op is accepted, pending ops of older tokens for the same resource and
    /// destination become `superseded` in the same transaction and are never sent.
    pub fn supersede_pending(mut self) -> Self {
        self.supersede_pending = true;
        self
    }

    /// Deliver this op only while its token is still the newest of its resource; otherwise
    /// the dispatcher marks it `superseded` when it would claim it.
    pub fn expire_with_generation(mut self) -> Self {
        self.expire_with_generation = true;
        self
    }

    /// The producer's W3C trace context (`00-<trace id>-<parent id>-<flags>`): the delivery
    /// joins this trace (the dispatcher's attempt span is its child, and the destination gets
    /// the attempt's traceparent, or this one while the dispatcher has traces off). Without
    /// it, with the `otel` feature, the op takes the current span's context at
    /// [`Self::build`] (tracing-opentelemetry, else OpenTelemetry's current context).
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> Self {
        self.traceparent = Some(traceparent.into());
        self
    }

    /// The producer's W3C `tracestate` (vendors' `key=value` list), sent on with the
    /// traceparent; it needs [`Self::traceparent`]. Taken with the current span's context when
    /// that is where the traceparent came from.
    pub fn tracestate(mut self, tracestate: impl Into<String>) -> Self {
        self.tracestate = Some(tracestate.into());
        self
    }

    /// Checks every part and returns the op, or the first problem found.
    pub fn build(self) -> Result<Operation, InvalidInput> {
        let destination = DestinationName::new(self.destination)?;
        check_path(&self.path)?;
        check_headers(&self.headers)?;
        if let Some(e) = self.json_error {
            return Err(InvalidInput::new(
                "body",
                format!("cannot be encoded as JSON: {e}"),
            ));
        }
        if let Some(ct) = &self.content_type {
            check_content_type(ct)?;
        }
        let idempotency_key = IdempotencyKey::new(
            self.idempotency_key
                .ok_or_else(|| InvalidInput::new("idempotency_key", "is required"))?,
        )?;
        let ordering = match (self.order_key, self.unordered) {
            (Some(_), true) => {
                return Err(InvalidInput::new(
                    "order_key",
                    "cannot be combined with unordered()",
                ));
            }
            (Some(k), false) => Ordering::Key(OrderKey::new(k)?),
            (None, true) => Ordering::Unordered,
            (None, false) => Ordering::Resource,
        };
        if self.not_before > MAX_NOT_BEFORE {
            return Err(InvalidInput::new(
                "not_before",
                format!("{:?} is beyond the limit of 365 days", self.not_before),
            ));
        }
        let (traceparent, tracestate) = match self.traceparent {
            Some(tp) => (Some(tp), self.tracestate),
            None if self.tracestate.is_some() => {
                return Err(InvalidInput::new(
                    "tracestate",
                    "needs a traceparent: it only travels with one",
                ));
            }
            None => match crate::trace::current_context() {
                Some((tp, ts)) => (Some(tp), ts),
                None => (None, None),
            },
        };
        if let Some(tp) = &traceparent {
            check_traceparent(tp)?;
        }
        if let Some(ts) = &tracestate {
            check_tracestate(ts)?;
        }
        Ok(Operation {
            destination,
            method: self.method,
            path: self.path,
            headers: self.headers,
            content_type: self.content_type,
            body: self.body,
            idempotency_key,
            ordering,
            not_before: self.not_before,
            supersede_pending: self.supersede_pending,
            expire_with_generation: self.expire_with_generation,
            traceparent,
            tracestate,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> OperationBuilder {
        Operation::post("billing", "/invoices").idempotency_key("k-1")
    }

    fn field(b: OperationBuilder) -> &'static str {
        b.build().expect_err("should be refused").field
    }

    #[test]
    fn a_plain_op_builds() {
        let op = base().json(&serde_json::json!({"a": 1})).build().unwrap();
        assert_eq!(op.method(), Method::Post);
        assert_eq!(op.body(), br#"{"a":1}"#);
        assert_eq!(op.content_type.as_deref(), Some("application/json"));
    }

    #[test]
    fn destinations_must_be_configured_names() {
        for bad in [
            "",
            "Billing",
            "billing.example.com",
            "https://billing",
            &"d".repeat(65),
        ] {
            assert_eq!(
                field(Operation::post(bad, "/x").idempotency_key("k")),
                "destination",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn paths_are_relative_and_cannot_climb() {
        for ok in ["/", "/invoices", "/a/b?x=1&y=%20z", "/v1/items/..x", "/%2F"] {
            assert!(
                Operation::post("d", ok)
                    .idempotency_key("k")
                    .build()
                    .is_ok(),
                "{ok:?}"
            );
        }
        for bad in [
            "invoices",
            "https://evil.example/x",
            "//evil.example/x",
            "/a/../b",
            "/..",
            "/a/%2e%2e/b",
            "/a/.%2E/b",
            "/a b",
            "/a\r\nHost: evil",
            "/tab\there",
            "/é",
            "/a\\b",
            "/a#frag",
            &format!("/{}", "p".repeat(2048)),
        ] {
            assert_eq!(
                field(Operation::post("d", bad).idempotency_key("k")),
                "path",
                "{bad:?}"
            );
        }
        // `..` after the query is data, not a segment.
        assert!(
            Operation::post("d", "/search?q=..")
                .idempotency_key("k")
                .build()
                .is_ok()
        );
    }

    #[test]
    fn headers_refuse_injection_reserved_names_and_credentials() {
        assert!(
            base()
                .header("X-Request-Source", "billing-job 7")
                .header("Accept", "application/json")
                .build()
                .is_ok()
        );
        assert_eq!(
            field(base().header("X-Evil", "a\r\nHost: evil")),
            "header_value"
        );
        assert_eq!(
            field(base().header("X-Evil", "line\nbreak")),
            "header_value"
        );
        assert_eq!(field(base().header("X-Bell", "\u{7}")), "header_value");
        assert_eq!(field(base().header("Bad Name", "v")), "header_name");
        assert_eq!(field(base().header("", "v")), "header_name");
        assert_eq!(field(base().header("X-Colon:", "v")), "header_name");
        for reserved in [
            "Host",
            "content-length",
            "Transfer-Encoding",
            "Connection",
            "Idempotency-Key",
            "X-Fencing-Token",
            "traceparent",
            "TraceState",
            "X-Outbox-Op-Id",
            "x-outbox-anything",
            "webhook-signature",
            "Webhook-Id",
            "Content-Type",
            "Authorization",
        ] {
            assert_eq!(
                field(base().header(reserved, "v")),
                "header_name",
                "{reserved}"
            );
        }
        let too_many = (0..=MAX_HEADERS).fold(base(), |b, i| b.header(format!("X-H{i}"), "v"));
        assert_eq!(field(too_many), "headers");
    }

    #[test]
    fn header_errors_never_quote_the_value() {
        let err = base().header("X-Secret", "hunter2\n").build().unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn keys_are_required_and_checked() {
        assert_eq!(field(Operation::post("d", "/x")), "idempotency_key");
        assert_eq!(
            field(Operation::post("d", "/x").idempotency_key("")),
            "idempotency_key"
        );
        assert_eq!(
            field(Operation::post("d", "/x").idempotency_key("has space")),
            "idempotency_key"
        );
        assert_eq!(
            field(Operation::post("d", "/x").idempotency_key("k".repeat(256))),
            "idempotency_key"
        );
        assert_eq!(field(base().order_key("")), "order_key");
        assert_eq!(field(base().order_key("a\u{0}")), "order_key");
        assert_eq!(field(base().order_key("a").unordered()), "order_key");
    }

    #[test]
    fn delays_content_types_and_trace_context_are_bounded() {
        assert!(base().not_before(Duration::from_secs(10)).build().is_ok());
        assert_eq!(
            field(base().not_before(MAX_NOT_BEFORE + Duration::from_secs(1))),
            "not_before"
        );
        assert_eq!(
            field(base().body(b"x".to_vec(), "text/plain\r\nX: y")),
            "content_type"
        );
        assert_eq!(field(base().body(b"x".to_vec(), "")), "content_type");
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(base().traceparent(tp).build().is_ok());
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-XYZ-00f067aa0ba902b7-01",
        ] {
            assert_eq!(field(base().traceparent(bad)), "traceparent", "{bad:?}");
        }
    }

    #[test]
    fn a_tracestate_needs_a_traceparent_and_w3c_members() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        for good in [
            "congo=t61rcWkgMzE",
            "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE",
            "fw529a3039@dt=ZGRhYWM5, 1a-2f@x/y=a b c",
        ] {
            let op = base().traceparent(tp).tracestate(good).build();
            assert!(op.is_ok(), "{good:?}: {op:?}");
        }
        assert_eq!(field(base().tracestate("congo=t61")), "tracestate");
        let long = (0..32)
            .map(|i| format!("k{i}={}", "v".repeat(20)))
            .collect::<Vec<_>>()
            .join(",");
        for bad in [
            "",
            " , ",
            "congo",
            "Congo=x",
            "congo=a,congo=b",
            "congo=a=b",
            "congo=a\nb",
            "congo=é",
            "1abc=x",
            long.as_str(),
            &format!(
                "{},k33=v",
                (0..32)
                    .map(|i| format!("k{i}=v"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        ] {
            assert_eq!(
                field(base().traceparent(tp).tracestate(bad)),
                "tracestate",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_body_limit_is_checked_against_the_outbox_setting() {
        let lease = Lease {
            resource: outbox_store::ResourceName::new("r").unwrap(),
            owner_id: outbox_store::OwnerId::new_random(),
            token: outbox_store::FencingToken::new(1),
            expires_at: time::OffsetDateTime::UNIX_EPOCH,
        };
        let op = base()
            .body(vec![0u8; 11], "application/octet-stream")
            .build()
            .unwrap();
        assert_eq!(op.to_new_op(&lease, 10, None).unwrap_err().field, "body");
        let new = op.to_new_op(&lease, 11, None).unwrap();
        assert_eq!(
            new.order_key.as_ref().map(OrderKey::as_str),
            Some("r"),
            "default order key: the resource"
        );
        assert_eq!(new.request_hash, op.request_hash());
    }

    #[test]
    fn the_request_hash_covers_every_part_of_the_request() {
        let a = base().body(b"1".to_vec(), "text/plain").build().unwrap();
        let variants = [
            base().body(b"2".to_vec(), "text/plain"),
            base().body(b"1".to_vec(), "text/csv"),
            base().body(b"1".to_vec(), "text/plain").header("X-A", "b"),
            Operation::put("billing", "/invoices")
                .idempotency_key("k-1")
                .body(b"1".to_vec(), "text/plain"),
            Operation::post("billing", "/invoices2")
                .idempotency_key("k-1")
                .body(b"1".to_vec(), "text/plain"),
        ];
        for v in variants {
            assert_ne!(v.build().unwrap().request_hash(), a.request_hash());
        }
        // Delivery options are not part of the request.
        let b = base()
            .body(b"1".to_vec(), "text/plain")
            .unordered()
            .not_before(Duration::from_secs(5))
            .build()
            .unwrap();
        assert_eq!(b.request_hash(), a.request_hash());
    }

    proptest::proptest! {
        /// The builder never panics, whatever it is given; what it accepts passes the rules
        /// the dispatcher checks again on every claimed op.
        #[test]
        fn the_builder_never_panics_and_what_it_accepts_obeys_the_rules(
            destination in proptest::prelude::any::<String>(),
            path in proptest::prelude::any::<String>(),
            headers in proptest::collection::vec(
                (proptest::prelude::any::<String>(), proptest::prelude::any::<String>()),
                0..4,
            ),
            key in proptest::prelude::any::<String>(),
            order_key in proptest::option::of(proptest::prelude::any::<String>()),
            content_type in proptest::prelude::any::<String>(),
            traceparent in proptest::option::of(proptest::prelude::any::<String>()),
            not_before in proptest::prelude::any::<u64>(),
        ) {
            let mut b = Operation::post(destination, path)
                .idempotency_key(key)
                .body(b"x".to_vec(), content_type)
                .not_before(Duration::from_millis(not_before));
            for (name, value) in headers {
                b = b.header(name, value);
            }
            if let Some(k) = order_key {
                b = b.order_key(k);
            }
            if let Some(tp) = traceparent {
                b = b.traceparent(tp);
            }
            if let Ok(op) = b.build() {
                proptest::prop_assert!(check_path(&op.path).is_ok());
                proptest::prop_assert!(check_headers(&op.headers).is_ok());
            }
        }
    }
}

//! The rules every op's request obeys (G10, G11), written once: the producer's builder checks
//! them before an op goes near the database, and the dispatcher checks them again on every
//! claimed op, since a row may have been written by anything (a SQL writer, a bug, the SQL
//! API). Pure functions; each refusal names the field and the rule.

use crate::error::InvalidInput;

/// The default limit on an op's body: 1 MiB (the producer's and the dispatcher's).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// The hard ceiling on an op's body, whatever is configured: 16 MiB. A dispatcher holds up to
/// a claim batch of bodies in memory at once; the tables' CHECK constraints say the same.
pub const MAX_BODY_BYTES_CEILING: usize = 16 * 1024 * 1024;

/// Checks a configured body limit against the ceiling.
pub fn check_body_limit(field: &'static str, limit: usize) -> Result<(), InvalidInput> {
    if limit == 0 || limit > MAX_BODY_BYTES_CEILING {
        return Err(InvalidInput::new(
            field,
            format!("must be 1..={MAX_BODY_BYTES_CEILING} bytes (16 MiB), got {limit}"),
        ));
    }
    Ok(())
}

/// A body of `len` bytes against `limit`.
pub fn check_body(len: usize, limit: usize) -> Result<(), InvalidInput> {
    if len > limit {
        return Err(InvalidInput::new(
            "body",
            format!("is {len} bytes, the limit is {limit}"),
        ));
    }
    Ok(())
}

/// A content type: a header value that is not blank.
pub fn check_content_type(content_type: &str) -> Result<(), InvalidInput> {
    check_header_value("content_type", content_type)?;
    if content_type.trim().is_empty() {
        return Err(InvalidInput::new("content_type", "must not be empty"));
    }
    Ok(())
}

/// The longest path (with query) an op may have.
pub const MAX_PATH_LEN: usize = 2048;
/// The most headers an op may carry.
pub const MAX_HEADERS: usize = 64;
/// The longest header value.
pub const MAX_HEADER_VALUE_LEN: usize = 8192;
/// Headers the dispatcher sets itself, or that would smuggle credentials or break framing.
const RESERVED: &[(&str, &str)] = &[
    (
        "host",
        "the dispatcher sends to the destination's configured base URL",
    ),
    ("content-length", "the dispatcher frames the body itself"),
    ("transfer-encoding", "the dispatcher frames the body itself"),
    ("connection", "connection management is the dispatcher's"),
    ("keep-alive", "connection management is the dispatcher's"),
    ("upgrade", "connection management is the dispatcher's"),
    ("te", "connection management is the dispatcher's"),
    ("trailer", "connection management is the dispatcher's"),
    (
        "idempotency-key",
        "the dispatcher sends the op's idempotency key on every attempt",
    ),
    (
        "x-fencing-token",
        "the dispatcher sends the op's fencing token",
    ),
    ("traceparent", "set the trace context with .traceparent()"),
    (
        "tracestate",
        "set the trace context with .traceparent() and .tracestate()",
    ),
    (
        "content-type",
        "give the content type with .body() or .json()",
    ),
    (
        "authorization",
        "credentials belong in the dispatcher's destination config, never in op rows",
    ),
    (
        "proxy-authorization",
        "credentials belong in the dispatcher's destination config, never in op rows",
    ),
];

/// Reserved header name prefixes.
const RESERVED_PREFIXES: &[(&str, &str)] = &[
    ("x-outbox-", "X-Outbox-* headers are the dispatcher's"),
    (
        "webhook-",
        "webhook-* headers are the dispatcher's Standard Webhooks signature",
    ),
];

/// A path below the destination's base URL: `/…`, printable ASCII, no `..` segment.
pub fn check_path(path: &str) -> Result<(), InvalidInput> {
    let bad = |reason: String| Err(InvalidInput::new("path", reason));
    if !path.starts_with('/') {
        return bad(
            "must start with / (a path below the destination's base URL, not a URL)".into(),
        );
    }
    if path.starts_with("//") {
        return bad("must not start with // (that names a host)".into());
    }
    if path.len() > MAX_PATH_LEN {
        return bad(format!(
            "is {} bytes long, the limit is {MAX_PATH_LEN}",
            path.len()
        ));
    }
    if let Some(c) = path.chars().find(|c| !c.is_ascii_graphic()) {
        return bad(format!(
            "contains {c:?}: percent-encode spaces, control and non-ASCII characters"
        ));
    }
    if let Some(c) = path.chars().find(|c| matches!(c, '\\' | '#')) {
        return bad(format!(
            "contains {c:?}, which destinations read differently"
        ));
    }
    let route = path.split('?').next().unwrap_or(path);
    for segment in route.split('/') {
        let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
        if decoded == ".." {
            return bad("must not contain a .. segment".into());
        }
    }
    Ok(())
}

/// At most [`MAX_HEADERS`] headers, each with a valid, unreserved name and a safe value.
pub fn check_headers(headers: &[(String, String)]) -> Result<(), InvalidInput> {
    if headers.len() > MAX_HEADERS {
        return Err(InvalidInput::new(
            "headers",
            format!("{} headers, the limit is {MAX_HEADERS}", headers.len()),
        ));
    }
    for (name, value) in headers {
        check_header_name(name)?;
        check_header_value("header_value", value)
            .map_err(|e| InvalidInput::new("header_value", format!("of {name}: {}", e.reason)))?;
    }
    Ok(())
}

/// A token of 1..=128 characters that is not one of the dispatcher's own or a credential.
pub fn check_header_name(name: &str) -> Result<(), InvalidInput> {
    let is_tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || name.len() > 128 || !name.chars().all(is_tchar) {
        return Err(InvalidInput::new(
            "header_name",
            format!("{name:?} is not a valid header name (1..=128 token characters)"),
        ));
    }
    let lower = name.to_ascii_lowercase();
    if let Some((_, why)) = RESERVED.iter().find(|(n, _)| *n == lower) {
        return Err(InvalidInput::new(
            "header_name",
            format!("{name} is reserved: {why}"),
        ));
    }
    if let Some((_, why)) = RESERVED_PREFIXES.iter().find(|(p, _)| lower.starts_with(p)) {
        return Err(InvalidInput::new(
            "header_name",
            format!("{name} is reserved: {why}"),
        ));
    }
    Ok(())
}

/// Visible ASCII, spaces and tabs only: no CR/LF (header injection), no other controls.
/// The reason never quotes the value: it may be sensitive.
pub fn check_header_value(field: &'static str, value: &str) -> Result<(), InvalidInput> {
    if value.len() > MAX_HEADER_VALUE_LEN {
        return Err(InvalidInput::new(
            field,
            format!(
                "is {} bytes, the limit is {MAX_HEADER_VALUE_LEN}",
                value.len()
            ),
        ));
    }
    if value.contains(['\r', '\n']) {
        return Err(InvalidInput::new(field, "contains CR or LF"));
    }
    if value
        .chars()
        .any(|c| !(c == ' ' || c == '\t' || c.is_ascii_graphic()))
    {
        return Err(InvalidInput::new(
            field,
            "may hold only visible ASCII, spaces and tabs",
        ));
    }
    Ok(())
}

/// `00-<32 hex>-<16 hex>-<2 hex>`, ids not all zero (W3C Trace Context, version 00).
pub fn check_traceparent(tp: &str) -> Result<(), InvalidInput> {
    let parts: Vec<&str> = tp.split('-').collect();
    let hex = |s: &str, len: usize| {
        s.len() == len && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
    };
    let ok = parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
        && parts[1].chars().any(|c| c != '0')
        && parts[2].chars().any(|c| c != '0');
    if ok {
        Ok(())
    } else {
        Err(InvalidInput::new(
            "traceparent",
            "must be 00-<32 hex>-<16 hex>-<2 hex> with non-zero ids",
        ))
    }
}

/// The longest `tracestate` stored, in bytes (W3C Trace Context: vendors may cut what is longer).
pub const MAX_TRACESTATE_LEN: usize = 512;

/// A W3C `tracestate`: 1 to 32 comma-separated `key=value` members with distinct keys, at most
/// [`MAX_TRACESTATE_LEN`] bytes. A key is lower-case letters, digits and `_-*/`, optionally
/// `tenant@system`; a value is up to 256 visible ASCII characters (spaces inside) without `,`
/// or `=`. It travels only with a traceparent.
pub fn check_tracestate(ts: &str) -> Result<(), InvalidInput> {
    let bad = |reason: String| Err(InvalidInput::new("tracestate", reason));
    if ts.len() > MAX_TRACESTATE_LEN {
        return bad(format!(
            "is {} bytes, the limit is {MAX_TRACESTATE_LEN}",
            ts.len()
        ));
    }
    let members: Vec<&str> = ts
        .split(',')
        .map(|m| m.trim_matches([' ', '\t']))
        .filter(|m| !m.is_empty())
        .collect();
    if members.is_empty() || members.len() > 32 {
        return bad(format!(
            "must hold 1 to 32 key=value members, got {}",
            members.len()
        ));
    }
    let mut keys = Vec::with_capacity(members.len());
    for member in members {
        let Some((key, value)) = member.split_once('=') else {
            return bad(format!("member {member:?} is not key=value"));
        };
        if !tracestate_key(key) {
            return bad(format!(
                "key {key:?} must be lower-case letters, digits and _-*/ (or tenant@system), up to 256"
            ));
        }
        let printable = |c: char| (' '..='~').contains(&c) && c != ',' && c != '=';
        if value.is_empty()
            || value.len() > 256
            || !value.chars().all(printable)
            || value.ends_with(' ')
        {
            return bad(format!(
                "the value of {key:?} must be 1 to 256 visible ASCII characters without , or ="
            ));
        }
        if keys.contains(&key) {
            return bad(format!("key {key:?} appears twice"));
        }
        keys.push(key);
    }
    Ok(())
}

/// A tracestate key: `simple` or `tenant@system` (W3C Trace Context).
fn tracestate_key(key: &str) -> bool {
    let part = |s: &str, max: usize, first_digit: bool| {
        !s.is_empty()
            && s.len() <= max
            && s.chars().enumerate().all(|(i, c)| match c {
                'a'..='z' => true,
                '0'..='9' => i > 0 || first_digit,
                '_' | '-' | '*' | '/' => i > 0,
                _ => false,
            })
    };
    match key.split_once('@') {
        None => part(key, 256, false),
        Some((tenant, system)) => part(tenant, 241, true) && part(system, 14, false),
    }
}

/// A method the outbox sends: GET, POST, PUT, PATCH or DELETE, as stored (upper case).
pub fn check_method(method: &str) -> Result<crate::Method, InvalidInput> {
    let parsed: crate::Method = method.parse()?;
    if parsed.as_str() != method {
        return Err(InvalidInput::new(
            "method",
            format!("{method:?} is not stored in upper case"),
        ));
    }
    Ok(parsed)
}

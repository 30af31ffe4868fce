//! A request's content as `outboxctl keys rotate` reads it and writes it back: the stored
//! header values and body (sealed or clear), never printed.

/// One request's content as stored (sealed or clear), read for `outboxctl keys rotate`.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredContent {
    /// The op's sequence (row id).
    pub seq: i64,
    /// Its destination: part of what a sealed value is bound to.
    pub destination: String,
    /// The headers, names and values as stored.
    pub headers: Vec<(String, String)>,
    /// The headers' JSON text as read, which a rewrite must find unchanged.
    pub headers_json: String,
    /// The body as stored.
    pub body: Vec<u8>,
}

impl std::fmt::Debug for StoredContent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredContent")
            .field("seq", &self.seq)
            .field("destination", &self.destination)
            .field("body_bytes", &self.body.len())
            .finish_non_exhaustive()
    }
}

/// A request's content to write in place of what was read, if it is still that.
#[derive(Clone, PartialEq, Eq)]
pub struct ContentRewrite {
    /// The op's sequence (row id).
    pub seq: i64,
    /// The headers' JSON text as read.
    pub headers_json_read: String,
    /// The body as read.
    pub body_read: Vec<u8>,
    /// The new headers, names and values, in order.
    pub headers: Vec<(String, String)>,
    /// The new body.
    pub body: Vec<u8>,
}

impl std::fmt::Debug for ContentRewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContentRewrite")
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

//! Encryption keys for the tests (issue 37): two key files, `k1` (32 bytes of 0x01) and `k2`
//! (of 0x02), in base64, in a folder that lives as long as the value.

use outbox_producer::Keys;

/// The key files `k1.key` and `k2.key`.
#[derive(Debug)]
pub struct KeyFiles(tempfile::TempDir);

impl KeyFiles {
    /// Writes both files.
    pub fn new() -> KeyFiles {
        let dir = tempfile::tempdir().expect("a key folder");
        for (id, key) in [
            ("k1", "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="),
            ("k2", "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI="),
        ] {
            std::fs::write(dir.path().join(format!("{id}.key")), format!("{key}\n"))
                .expect("a key file");
        }
        KeyFiles(dir)
    }

    /// `file:/path` of key `id`.
    pub fn source(&self, id: &str) -> String {
        format!("file:{}", self.0.path().join(format!("{id}.key")).display())
    }

    /// `ID=file:/path` of key `id`, as `outboxctl --encryption-key` takes it.
    pub fn arg(&self, id: &str) -> String {
        format!("{id}={}", self.source(id))
    }

    /// The keys `ids`, sealing with `seal`.
    pub fn keys(&self, ids: &[&str], seal: Option<&str>) -> Keys {
        let sources: Vec<(String, String)> = ids
            .iter()
            .map(|id| ((*id).to_owned(), self.source(id)))
            .collect();
        Keys::load(&sources, seal, &|_| None).expect("the test keys")
    }

    /// The dispatcher's `[encryption]` table with the keys `ids`.
    pub fn table(&self, ids: &[&str]) -> String {
        let keys: Vec<String> = ids
            .iter()
            .map(|id| format!("{id} = {:?}", self.source(id)))
            .collect();
        format!("[encryption]\nkeys = {{ {} }}\n", keys.join(", "))
    }
}

impl Default for KeyFiles {
    fn default() -> Self {
        KeyFiles::new()
    }
}

//! `[encryption]`: the keys read and checked at load, so a dispatcher that could not open what
//! producers seal does not start.

use std::collections::HashMap;

use super::raw::RawEncryption;
use super::{ConfigError, EncryptionConfig, err};

/// The keys of `raw`, each read from its file or from `env` when `read` (else only their ids
/// and sources checked).
pub(super) fn encryption(
    raw: &RawEncryption,
    env: &HashMap<String, String>,
    read: bool,
) -> Result<EncryptionConfig, ConfigError> {
    let sources: Vec<(String, String)> = raw
        .keys
        .iter()
        .map(|(id, source)| (id.clone(), source.clone()))
        .collect();
    if !read {
        for (id, source) in &sources {
            outbox_seal::KeySource::parse(source)
                .map_err(|reason| err("encryption.keys", format!("key {id}: {reason}")))?;
        }
        return Ok(EncryptionConfig {
            keys: outbox_seal::Keys::default(),
            sources,
        });
    }
    let keys = outbox_seal::Keys::load(&sources, None, &|name| env.get(name).cloned())
        .map_err(|e| err("encryption.keys", e))?;
    Ok(EncryptionConfig { keys, sources })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use crate::Config;

    const DEST: &str = "[destinations.b]\nbase_url = \"https://x.example\"\n";
    const KEY: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";

    fn load(encryption: &str, env: &[(&str, &str)]) -> Result<Config, String> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load(Some(&format!("{encryption}\n{DEST}")), &env).map_err(|e| e.to_string())
    }

    /// Issue 37, item 3: keys from files and variables, checked at load, shown by source only.
    #[test]
    fn keys_load_from_files_and_variables_and_are_never_shown() {
        assert!(load("", &[]).unwrap().encryption.keys.is_empty());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("k1.key");
        std::fs::write(&file, format!("{KEY}\n")).unwrap();
        let c = load(
            &format!(
                "[encryption]\nkeys = {{ k1 = \"file:{}\", k2 = \"env:OUTBOX_K2\" }}",
                file.display()
            ),
            &[("OUTBOX_K2", KEY)],
        )
        .unwrap();
        assert_eq!(c.encryption.keys.ids().collect::<Vec<_>>(), ["k1", "k2"]);
        let shown = c.redacted();
        assert!(shown.contains("k2 = \"env:OUTBOX_K2\""), "{shown}");
        assert!(
            !shown.contains(KEY) && !format!("{c:?}").contains(KEY),
            "{shown}"
        );

        // outboxctl reads the file for its database without reading the keys.
        let unreadable = "[encryption]\nkeys = { k = \"file:/nonexistent/k\" }";
        let c = Config::load_without_keys(Some(&format!("{unreadable}\n{DEST}")), &HashMap::new())
            .unwrap();
        assert!(c.encryption.keys.is_empty());
        assert_eq!(c.encryption.sources.len(), 1);

        for (text, env, says) in [
            ("[encryption]\nkeys = { k = \"env:NOPE\" }", vec![], "NOPE"),
            (
                "[encryption]\nkeys = { k = \"vault:x\" }",
                vec![],
                "file:/path",
            ),
            (
                "[encryption]\nkeys = { k = \"env:SHORT\" }",
                vec![("SHORT", "AQID")],
                "bytes",
            ),
            (
                "[encryption]\nkeys = { k = \"file:/nonexistent/k\" }",
                vec![],
                "cannot read",
            ),
            (
                "[encryption]\nkeys = { \"bad id\" = \"env:X\" }",
                vec![("X", KEY)],
                "key id",
            ),
        ] {
            let e = load(text, &env).unwrap_err();
            assert!(
                e.contains("encryption.keys: ") && e.contains(says),
                "{text}: {e}"
            );
            assert!(!e.contains(KEY), "{e}");
        }
    }
}

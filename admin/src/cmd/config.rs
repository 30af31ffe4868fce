//! The dispatcher's config file as outboxctl reads it (`--config`): its database, its
//! destinations and its keys, read the way the dispatcher reads it.

use std::collections::HashMap;

use crate::cli::Global;
use crate::exit::CliError;

/// --database-url, else the database of the dispatcher's config file (read the way the
/// dispatcher reads it: OUTBOX_* overrides and ${ENV} interpolation included).
pub(crate) fn database_url(global: &Global) -> Result<String, CliError> {
    if let Some(url) = &global.database_url {
        return Ok(url.clone());
    }
    let Some(path) = &global.config else {
        return Err(CliError::invalid(
            "no database: pass --database-url URL (or OUTBOX_DATABASE_URL) or --config FILE",
        ));
    };
    Ok(read_config(path)?.database_url.expose().to_owned())
}

/// The dispatcher's config file, when `--config` names one (for `web`: its destinations and
/// its `[console]` logins).
pub(crate) fn optional_config(
    global: &Global,
) -> Result<Option<outbox_dispatcher::Config>, CliError> {
    global.config.as_deref().map(read_config).transpose()
}

/// The dispatcher's config file at `path`, read the way the dispatcher reads it.
pub(crate) fn read_config(path: &str) -> Result<outbox_dispatcher::Config, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::invalid(format!("cannot read config {path}: {e}")))?;
    let env: HashMap<String, String> = std::env::vars().collect();
    // Its keys are read only where a command needs them (keys.rs): a user who may not read
    // them still reads the database's address here.
    outbox_dispatcher::config::Config::load_without_keys(Some(&text), &env)
        .map_err(|e| CliError::invalid(format!("config {path}: {e}")))
}

/// Where the keys come from: the config file's `[encryption] keys` (with `--config`), then
/// each `--key` (or `OUTBOX_KEYS`) entry.
pub(crate) fn key_sources(global: &Global) -> Result<Vec<(String, String)>, CliError> {
    let mut sources = match &global.config {
        Some(path) => read_config(path)?.encryption.sources,
        None => Vec::new(),
    };
    sources.extend(global.keys.iter().cloned());
    Ok(sources)
}

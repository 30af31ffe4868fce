//! Encryption keys in `outboxctl`: the keys it holds (`--key`, `OUTBOX_KEYS`, the config's
//! `[encryption]`), and `keys rotate`, which moves the ops' sealed content to another key in
//! batches while dispatchers keep running.

use std::collections::BTreeMap;

use outbox_producer::Keys;
use outbox_store::Store;
use outbox_store::admin::ContentRewrite;
use serde::Serialize;

use crate::cli::{Global, RotateArgs};
use crate::cmd::config;
use crate::exit::CliError;
use crate::render;

/// The keys given, sealing with `--encrypt-with`; `None` when none is given.
pub(crate) fn load(global: &Global) -> Result<Option<Keys>, CliError> {
    let sources = config::key_sources(global)?;
    if sources.is_empty() {
        return match &global.encrypt_with {
            Some(id) => Err(CliError::invalid(format!(
                "--encrypt-with {id}: no keys given (--encryption-key ID=file:/path or ID=env:NAME)"
            ))),
            None => Ok(None),
        };
    }
    let env = |name: &str| std::env::var(name).ok();
    Keys::load(&sources, global.encrypt_with.as_deref(), &env)
        .map(Some)
        .map_err(|e| CliError::invalid(e.to_string()))
}

/// The keys to read content with (`show --body`): a key that cannot be read is said on stderr
/// and left out, and the content it seals stays encrypted in the output.
pub(crate) fn load_to_read(global: &Global) -> Option<Keys> {
    match load(global) {
        Ok(keys) => keys,
        Err(e) => {
            eprintln!(
                "outboxctl: {}; encrypted content stays encrypted",
                e.message()
            );
            None
        }
    }
}

/// How many skipped requests a report names one by one.
const SKIPPED_SHOWN: usize = 20;

/// What a rotation did (or, dry, would do).
#[derive(Debug, Default, Serialize)]
struct Rotation {
    to: String,
    dry_run: bool,
    /// Requests read.
    read: u64,
    /// Requests whose content was sealed with each key when read.
    sealed_with: BTreeMap<String, u64>,
    /// Requests written under the new key.
    rewritten: u64,
    /// Requests already under it, or clear and left so.
    unchanged: u64,
    /// Requests changed between read and write (erased or purged): left as they are now.
    changed_meanwhile: u64,
    /// Requests whose content would not open, with why (the first few).
    skipped: Vec<(i64, String)>,
    /// How many would not open.
    skipped_count: u64,
}

/// `outboxctl keys rotate`.
pub(crate) async fn rotate(
    store: &Store,
    keys: Option<&Keys>,
    args: &RotateArgs,
    json: bool,
) -> Result<(), CliError> {
    let keys = keys.ok_or_else(|| {
        CliError::invalid(
            "keys rotate needs the keys: --encryption-key ID=SOURCE for every key the content names, and --to's",
        )
    })?;
    let to = keys.key(&args.to).ok_or_else(|| {
        CliError::invalid(format!(
            "--to {}: not among the keys given ({})",
            args.to,
            keys.ids().collect::<Vec<_>>().join(", ")
        ))
    })?;
    let change = args.log.change(false);
    change.validate()?;
    let mut report = Rotation {
        to: args.to.clone(),
        dry_run: args.log.dry_run,
        ..Rotation::default()
    };
    let mut after = 0;
    loop {
        let page = store.admin_content_page(after, args.batch).await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        let mut rewrites = Vec::new();
        for row in page {
            report.read += 1;
            for id in outbox_seal::sealed_with(&row.headers, &row.body) {
                *report.sealed_with.entry(id).or_default() += 1;
            }
            let resealed = keys.reseal_content(
                to,
                &row.destination,
                &row.headers,
                &row.body,
                args.include_clear,
            );
            match resealed {
                Ok(None) => report.unchanged += 1,
                Ok(Some(content)) => rewrites.push(ContentRewrite {
                    seq: row.seq,
                    headers_json_read: row.headers_json,
                    body_read: row.body,
                    headers: content.headers,
                    body: content.body,
                }),
                Err(e) => {
                    report.skipped_count += 1;
                    if report.skipped.len() < SKIPPED_SHOWN {
                        report.skipped.push((row.seq, e.to_string()));
                    }
                }
            }
        }
        if rewrites.is_empty() {
            continue;
        }
        if args.log.dry_run {
            report.rewritten += rewrites.len() as u64;
            continue;
        }
        let written = store.admin_content_replace(&rewrites).await?;
        report.rewritten += written.len() as u64;
        report.changed_meanwhile += (rewrites.len() - written.len()) as u64;
    }
    if !args.log.dry_run {
        let details = serde_json::to_string(&report).map_err(|e| CliError::other(e.to_string()))?;
        store.admin_log(&change, "rotate", &details).await?;
    }
    if json {
        render::json_line(&report);
    } else {
        print(&report);
    }
    if report.skipped_count > 0 {
        return Err(CliError::other(format!(
            "{} request(s) did not open with the keys given and were left as they are",
            report.skipped_count
        )));
    }
    Ok(())
}

fn print(r: &Rotation) {
    let verb = if r.dry_run {
        "would rewrite"
    } else {
        "rewrote"
    };
    println!(
        "read {} request(s); {verb} {} under {}; {} unchanged; {} changed meanwhile (left as they are)",
        r.read, r.rewritten, r.to, r.unchanged, r.changed_meanwhile
    );
    for (id, n) in &r.sealed_with {
        println!("  sealed with {id} when read: {n}");
    }
    for (seq, why) in &r.skipped {
        println!("  skipped op {seq}: {why}");
    }
}

//! The [`Store`] methods of `outboxctl`: what operators ask and change. The rules are in
//! [`change`](super::change), the statements in `sqlx_admin.rs` (PostgreSQL, SQLite) and `mssql/admin.rs`.

use std::time::Duration;

use crate::admin;
use crate::admin::sqlx_admin::SqlxAdmin as _;
use crate::error::Error;
use crate::model::{Change, Partition};
use crate::op::{OpState, RejectionRow};
use crate::{BackendStore, Store, on_backend};

impl Store {
    /// Counts by state and destination, the oldest pending op's age, ops due now, dead ops of
    /// the last day, rejections of the last hour, each dispatcher partition's lease, the
    /// dispatcher instances and the partition count in force.
    pub async fn admin_status(&self) -> Result<admin::Status, Error> {
        let mut status = on_backend!(self, b => b.admin_status().await)?;
        status.partitions = self
            .lease_list()
            .await?
            .into_iter()
            .filter(|l| l.resource.as_str().starts_with(Partition::LEASE_PREFIX))
            .collect();
        status.instances = self.instance_list().await?;
        status.partition_count = self.partition_count().await?;
        Ok(status)
    }

    /// One page of ops matching `filter`, newest first.
    pub async fn admin_op_list(
        &self,
        filter: &admin::OpFilter,
    ) -> Result<Vec<admin::OpSummary>, Error> {
        on_backend!(self, b => b.admin_op_list(filter).await)
    }

    /// The sequence of every op matching `filter` (its `before_seq` and `limit` are ignored),
    /// newest first, paging through the list query: the ops a replay or cancel by filter
    /// takes, for `outboxctl` and the console alike.
    pub async fn admin_op_seqs(&self, filter: &admin::OpFilter) -> Result<Vec<i64>, Error> {
        const PAGE: u32 = 1000;
        let mut page_filter = admin::OpFilter {
            before_seq: None,
            limit: PAGE,
            ..filter.clone()
        };
        let mut seqs = Vec::new();
        loop {
            let page = self.admin_op_list(&page_filter).await?;
            seqs.extend(page.iter().map(|o| o.seq));
            match page.last() {
                Some(last) if page.len() == PAGE as usize => {
                    page_filter.before_seq = Some(last.seq)
                }
                _ => return Ok(seqs),
            }
        }
    }

    /// The sequence of the op with this public id.
    pub async fn admin_op_find(&self, op_id: uuid::Uuid) -> Result<Option<i64>, Error> {
        on_backend!(self, b => b.admin_op_find(op_id).await)
    }

    /// The sequence of the op holding this (destination, idempotency key).
    pub async fn admin_op_find_by_key(
        &self,
        destination: &str,
        key: &str,
    ) -> Result<Option<i64>, Error> {
        on_backend!(self, b => b.admin_op_find_by_key(destination, key).await)
    }

    /// One op with its attempts.
    pub async fn admin_op_show(&self, seq: i64) -> Result<Option<admin::OpDetail>, Error> {
        on_backend!(self, b => b.admin_op_show(seq).await)
    }

    /// One op's content: its headers with their values and its body (`show --body`). A role
    /// that may not read them (the viewer's) is refused with [`crate::StoreErrorKind::Denied`].
    pub async fn admin_op_content(&self, seq: i64) -> Result<Option<admin::OpContent>, Error> {
        on_backend!(self, b => b.admin_op_content(seq).await)
    }

    /// The newest attempt's id (0 when none): where `tail` starts.
    pub async fn admin_attempt_last_id(&self) -> Result<i64, Error> {
        on_backend!(self, b => b.admin_attempt_last_id().await)
    }

    /// Attempts recorded after `last_id`, oldest first, at most `limit`.
    pub async fn admin_attempts_after(
        &self,
        last_id: i64,
        limit: u32,
    ) -> Result<Vec<admin::AttemptRow>, Error> {
        on_backend!(self, b => b.admin_attempts_after(last_id, limit).await)
    }

    /// Moves dead or cancelled ops (delivered and superseded ones too with `force`) back to
    /// pending, due now, with a fresh retry budget; in-flight ops are always skipped. One
    /// transaction per [`admin::CHANGE_BATCH`] ops, each logged in `outbox_admin_log`.
    pub async fn admin_replay(
        &self,
        seqs: &[i64],
        change: &Change,
    ) -> Result<admin::ChangeReport, Error> {
        self.admin_change(admin::Action::Replay, seqs, change).await
    }

    /// Cancels pending or dead ops: they are never sent afterwards (G5). Batched and logged
    /// like [`Store::admin_replay`].
    pub async fn admin_cancel(
        &self,
        seqs: &[i64],
        change: &Change,
    ) -> Result<admin::ChangeReport, Error> {
        self.admin_change(admin::Action::Cancel, seqs, change).await
    }

    async fn admin_change(
        &self,
        action: admin::Action,
        seqs: &[i64],
        change: &Change,
    ) -> Result<admin::ChangeReport, Error> {
        change.validate()?;
        let mut all = admin::ChangeReport {
            dry_run: change.dry_run,
            ..admin::ChangeReport::default()
        };
        for batch in seqs.chunks(admin::CHANGE_BATCH) {
            let report =
                on_backend!(self, b => admin::change::apply(b, action, batch, change).await)?;
            all.changed.extend(report.changed);
            all.skipped.extend(report.skipped);
            all.missing.extend(report.missing);
        }
        Ok(all)
    }

    /// Deletes ops of final `states` that finished more than `older_than` ago, with their
    /// attempts, in batches; refuses states that are not final. Logged in `outbox_admin_log`.
    pub async fn admin_purge(
        &self,
        states: &[OpState],
        older_than: Duration,
        change: &Change,
    ) -> Result<admin::PurgeReport, Error> {
        change.validate()?;
        admin::change::check_purge_states(states)?;
        let ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        on_backend!(self, b => admin::change::purge(b, states, ms, change).await)
    }

    /// Up to `limit` requests' content (sealed or clear) after row id `after`, by row id: what
    /// `outboxctl keys rotate` reads, a page at a time.
    pub async fn admin_content_page(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<admin::StoredContent>, Error> {
        on_backend!(self, b => admin::content::page(b, after, limit).await)
    }

    /// Writes each rewrite's content in one transaction, each only while its request still
    /// holds what was read (an erase or purge since wins). Returns the sequences written.
    pub async fn admin_content_replace(
        &self,
        rewrites: &[admin::ContentRewrite],
    ) -> Result<Vec<i64>, Error> {
        on_backend!(self, b => admin::content::replace(b, rewrites).await)
    }

    /// Records an operator's `action` with `details` (JSON) in `outbox_admin_log`.
    pub async fn admin_log(
        &self,
        change: &Change,
        action: &str,
        details: &str,
    ) -> Result<(), Error> {
        change.validate()?;
        on_backend!(self, b => admin::content::log(b, change, action, details).await)
    }

    /// Rejected enqueues of the last `since`, newest first, of one resource or all.
    pub async fn admin_rejections(
        &self,
        since: Duration,
        resource: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RejectionRow>, Error> {
        let ms = i64::try_from(since.as_millis()).unwrap_or(i64::MAX);
        on_backend!(self, b => b.admin_rejections(ms, resource, limit).await)
    }
}

//! The partition count in force on SQL Server: read, adopted by a starting dispatcher, and
//! locked and written in `outboxctl partitions set`'s transaction (`crate::partitioning`).

use super::*;
use crate::partitioning::PartitionCount;

const PARTITION_COUNT_GET: &str = include_str!("../../sql/mssql/partition_count_get.sql");
const PARTITION_COUNT_ADOPT: &str = include_str!("../../sql/mssql/partition_count_adopt.sql");
const PARTITION_COUNT_LOCK: &str = include_str!("../../sql/mssql/partition_count_lock.sql");
const PARTITION_COUNT_WRITE: &str = include_str!("../../sql/mssql/partition_count_write.sql");

impl MsStore {
    pub(crate) async fn partition_count(&self) -> Result<Option<PartitionCount>, Error> {
        let row = self.fetch_optional(Stmt::new(PARTITION_COUNT_GET)).await?;
        row.map(|r| {
            Ok(PartitionCount {
                partitions: r.col::<i32>("partitions")?.max(0) as u32,
                changed_at: r.col("changed_at")?,
                changed_by: r.col("changed_by")?,
                reason: r.col("reason")?,
            })
        })
        .transpose()
    }

    pub(crate) async fn partition_count_adopt(
        &self,
        partitions: u32,
        by: &str,
        reason: &str,
    ) -> Result<(), Error> {
        self.execute(
            Stmt::new(PARTITION_COUNT_ADOPT)
                .bind(partitions as i32)
                .bind(by)
                .bind(reason),
        )
        .await
    }
}

/// `partition_count_lock.sql`.
pub(super) async fn lock(c: &mut Client) -> Result<Option<u32>, Error> {
    let row = Stmt::new(PARTITION_COUNT_LOCK).fetch_optional(c).await?;
    row.map(|r| Ok(r.col::<i32>("partitions")?.max(0) as u32))
        .transpose()
}

/// `partition_count_write.sql`.
pub(super) async fn write(c: &mut Client, partitions: u32, change: &Change) -> Result<(), Error> {
    Stmt::new(PARTITION_COUNT_WRITE)
        .bind(partitions as i32)
        .bind(change.actor.as_str())
        .bind(change.reason.as_str())
        .execute(c)
        .await
}

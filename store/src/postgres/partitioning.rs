//! The partition count in force on PostgreSQL: read, adopted by a starting dispatcher, and
//! locked and written in `outboxctl partitions set`'s transaction (`crate::partitioning`).

use super::*;
use crate::partitioning::PartitionCount;

const PARTITION_COUNT_GET: &str = include_str!("../../sql/postgres/partition_count_get.sql");
const PARTITION_COUNT_ADOPT: &str = include_str!("../../sql/postgres/partition_count_adopt.sql");
const PARTITION_COUNT_LOCK: &str = include_str!("../../sql/postgres/partition_count_lock.sql");
const PARTITION_COUNT_WRITE: &str = include_str!("../../sql/postgres/partition_count_write.sql");

impl PgStore {
    pub(crate) async fn partition_count(&self) -> Result<Option<PartitionCount>, Error> {
        let row = query(PARTITION_COUNT_GET).optional_on(self).await?;
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
        query(PARTITION_COUNT_ADOPT)
            .bind(partitions as i32)
            .bind(by)
            .bind(reason)
            .execute_on(self)
            .await?;
        Ok(())
    }
}

/// `partition_count_lock.sql`.
pub(super) async fn lock(c: &mut PgConnection) -> Result<Option<u32>, Error> {
    let n: Option<i32> = sqlx::query_scalar(PARTITION_COUNT_LOCK)
        .persistent(!super::pooler::through_pooler())
        .fetch_optional(c)
        .await
        .map_err(map_err)?;
    Ok(n.map(|n| n.max(0) as u32))
}

/// `partition_count_write.sql`.
pub(super) async fn write(
    c: &mut PgConnection,
    partitions: u32,
    change: &Change,
) -> Result<(), Error> {
    query(PARTITION_COUNT_WRITE)
        .bind(partitions as i32)
        .bind(&change.actor)
        .bind(&change.reason)
        .execute(c)
        .await
        .map_err(map_err)?;
    Ok(())
}

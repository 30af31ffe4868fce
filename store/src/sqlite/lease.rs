//! Lease statements on SQLite: acquire, renew, release, list, and the partition count a
//! dispatcher's lease records (G1-G3, G12). Lease time is the database's, inside the SQL.

use super::*;

const LEASE_ACQUIRE_IF_FREE: &str = include_str!("../../sql/sqlite/lease_acquire_if_free.sql");
const LEASE_RENEW_IF_OWNER: &str = include_str!("../../sql/sqlite/lease_renew_if_owner.sql");
const LEASE_RELEASE_IF_OWNER: &str = include_str!("../../sql/sqlite/lease_release_if_owner.sql");
const LEASE_LIST: &str = include_str!("../../sql/sqlite/lease_list.sql");
const LEASE_SET_PARTITIONS_IF_OWNER: &str =
    include_str!("../../sql/sqlite/lease_set_partitions_if_owner.sql");
const LEASE_LIST_PARTITION_CONFLICTS: &str =
    include_str!("../../sql/sqlite/lease_list_partition_conflicts.sql");

impl SqliteStore {
    pub(crate) async fn lease_acquire(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        ttl_ms: i64,
    ) -> Result<Option<(OwnerId, FencingToken, OffsetDateTime)>, Error> {
        let row = sqlx::query(LEASE_ACQUIRE_IF_FREE)
            .bind(resource.as_str())
            .bind(owner.as_uuid().hyphenated())
            .bind(ttl_ms)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.map(|r| {
            Ok((
                owner,
                FencingToken::new(r.col("fence")?),
                r.col("expires_at")?,
            ))
        })
        .transpose()
    }

    pub(crate) async fn lease_renew(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        token: FencingToken,
        ttl_ms: i64,
    ) -> Result<Option<OffsetDateTime>, Error> {
        let row = sqlx::query(LEASE_RENEW_IF_OWNER)
            .bind(resource.as_str())
            .bind(owner.as_uuid().hyphenated())
            .bind(token.get())
            .bind(ttl_ms)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.map(|r| r.col("expires_at")).transpose()
    }

    pub(crate) async fn lease_release(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        token: FencingToken,
    ) -> Result<bool, Error> {
        let done = sqlx::query(LEASE_RELEASE_IF_OWNER)
            .bind(resource.as_str())
            .bind(owner.as_uuid().hyphenated())
            .bind(token.get())
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }

    pub(crate) async fn lease_list(&self) -> Result<Vec<LeaseRow>, Error> {
        let rows = sqlx::query(LEASE_LIST)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                let owner_id = r
                    .col::<Option<String>>("owner_id")?
                    .map(|s| s.parse::<OwnerId>())
                    .transpose()?;
                Ok(LeaseRow {
                    resource: ResourceName::new(r.col::<String>("resource")?)?,
                    owner_id,
                    token: FencingToken::new(r.col("fence")?),
                    expires_at: r.col("expires_at")?,
                    held: r.col("held")?,
                    remaining_ms: r.col("remaining_ms")?,
                    partitions: r.col::<Option<u32>>("partitions")?,
                })
            })
            .collect()
    }

    pub(crate) async fn lease_set_partitions(
        &self,
        lease: &Lease,
        partitions: u32,
    ) -> Result<bool, Error> {
        let done = sqlx::query(LEASE_SET_PARTITIONS_IF_OWNER)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid().hyphenated())
            .bind(lease.token.get())
            .bind(partitions)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }

    pub(crate) async fn lease_partition_conflicts(
        &self,
        resources: &[String],
        partitions: u32,
    ) -> Result<Vec<(String, u32)>, Error> {
        let rows = sqlx::query(LEASE_LIST_PARTITION_CONFLICTS)
            .bind(json_list(resources))
            .bind(partitions)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| Ok((r.col("resource")?, r.col("partitions")?)))
            .collect()
    }
}

//! Lease statements on PostgreSQL: acquire, renew, release, list, and the partition count a
//! dispatcher's lease records (G1-G3, G12). Lease time is the database's, inside the SQL.

use super::*;

const LEASE_ACQUIRE_IF_FREE: &str = include_str!("../../sql/postgres/lease_acquire_if_free.sql");
const LEASE_RENEW_IF_OWNER: &str = include_str!("../../sql/postgres/lease_renew_if_owner.sql");
const LEASE_RELEASE_IF_OWNER: &str = include_str!("../../sql/postgres/lease_release_if_owner.sql");
const LEASE_LIST: &str = include_str!("../../sql/postgres/lease_list.sql");
const LEASE_SET_PARTITIONS_IF_OWNER: &str =
    include_str!("../../sql/postgres/lease_set_partitions_if_owner.sql");
const LEASE_LIST_PARTITION_CONFLICTS: &str =
    include_str!("../../sql/postgres/lease_list_partition_conflicts.sql");

impl PgStore {
    pub(crate) async fn lease_acquire(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        ttl_ms: i64,
    ) -> Result<Option<(OwnerId, FencingToken, OffsetDateTime)>, Error> {
        if self.producer_functions().await? {
            return self.lease_acquire_by_function(resource, ttl_ms).await;
        }
        let row = query(LEASE_ACQUIRE_IF_FREE)
            .bind(resource.as_str())
            .bind(owner.as_uuid())
            .bind(ttl_ms)
            .optional_on(self)
            .await?;
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
        if self.producer_functions().await? {
            return self
                .lease_renew_by_function(resource, owner, token, ttl_ms)
                .await;
        }
        let row = query(LEASE_RENEW_IF_OWNER)
            .bind(resource.as_str())
            .bind(owner.as_uuid())
            .bind(token.get())
            .bind(ttl_ms)
            .optional_on(self)
            .await?;
        row.map(|r| r.col("expires_at")).transpose()
    }

    pub(crate) async fn lease_release(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        token: FencingToken,
    ) -> Result<bool, Error> {
        if self.producer_functions().await? {
            return self.lease_release_by_function(resource, owner, token).await;
        }
        let done = query(LEASE_RELEASE_IF_OWNER)
            .bind(resource.as_str())
            .bind(owner.as_uuid())
            .bind(token.get())
            .execute_on(self)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub(crate) async fn lease_list(&self) -> Result<Vec<LeaseRow>, Error> {
        let rows = query(LEASE_LIST).all_on(self).await?;
        rows.iter()
            .map(|r| {
                Ok(LeaseRow {
                    resource: ResourceName::new(r.col::<String>("resource")?)?,
                    owner_id: r.col::<Option<Uuid>>("owner_id")?.map(OwnerId::from),
                    token: FencingToken::new(r.col("fence")?),
                    expires_at: r.col("expires_at")?,
                    held: r.col("held")?,
                    remaining_ms: r.col("remaining_ms")?,
                    partitions: r.col::<Option<i32>>("partitions")?.map(|n| n as u32),
                })
            })
            .collect()
    }

    pub(crate) async fn lease_set_partitions(
        &self,
        lease: &Lease,
        partitions: u32,
    ) -> Result<bool, Error> {
        let done = query(LEASE_SET_PARTITIONS_IF_OWNER)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid())
            .bind(lease.token.get())
            .bind(partitions as i32)
            .execute_on(self)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub(crate) async fn lease_partition_conflicts(
        &self,
        resources: &[String],
        partitions: u32,
    ) -> Result<Vec<(String, u32)>, Error> {
        let rows = query(LEASE_LIST_PARTITION_CONFLICTS)
            .bind(resources)
            .bind(partitions as i32)
            .all_on(self)
            .await?;
        rows.iter()
            .map(|r| Ok((r.col("resource")?, r.col::<i32>("partitions")? as u32)))
            .collect()
    }
}

//! Lease statements on SQL Server, as the seed writes them: acquire under `UPDLOCK, HOLDLOCK`
//! on the key range, renew and release matching owner and fence, list, and the partition count
//! a dispatcher's lease records (G1-G3, G12). Lease time is `SYSUTCDATETIME()`, inside the SQL.

use super::*;

const LEASE_ACQUIRE_IF_FREE: &str = include_str!("../../sql/mssql/lease_acquire_if_free.sql");
const LEASE_RENEW_IF_OWNER: &str = include_str!("../../sql/mssql/lease_renew_if_owner.sql");
const LEASE_RELEASE_IF_OWNER: &str = include_str!("../../sql/mssql/lease_release_if_owner.sql");
const LEASE_LIST: &str = include_str!("../../sql/mssql/lease_list.sql");
const LEASE_SET_PARTITIONS_IF_OWNER: &str =
    include_str!("../../sql/mssql/lease_set_partitions_if_owner.sql");
const LEASE_LIST_PARTITION_CONFLICTS: &str =
    include_str!("../../sql/mssql/lease_list_partition_conflicts.sql");

impl MsStore {
    pub(crate) async fn lease_acquire(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        ttl_ms: i64,
    ) -> Result<Option<(OwnerId, FencingToken, OffsetDateTime)>, Error> {
        check_resource(resource)?;
        if self.producer_procedures().await? {
            return Box::pin(self.lease_acquire_by_procedure(resource, ttl_ms)).await;
        }
        let row = self
            .fetch_optional(
                Stmt::new(LEASE_ACQUIRE_IF_FREE)
                    .bind(resource.as_str())
                    .bind(owner.as_uuid())
                    .bind(ttl_ms),
            )
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
        if self.producer_procedures().await? {
            return Box::pin(self.lease_renew_by_procedure(resource, owner, token, ttl_ms)).await;
        }
        let row = self
            .fetch_optional(
                Stmt::new(LEASE_RENEW_IF_OWNER)
                    .bind(resource.as_str())
                    .bind(owner.as_uuid())
                    .bind(token.get())
                    .bind(ttl_ms),
            )
            .await?;
        row.map(|r| r.col("expires_at")).transpose()
    }

    pub(crate) async fn lease_release(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        token: FencingToken,
    ) -> Result<bool, Error> {
        if self.producer_procedures().await? {
            return Box::pin(self.lease_release_by_procedure(resource, owner, token)).await;
        }
        let done = self
            .affected(
                Stmt::new(LEASE_RELEASE_IF_OWNER)
                    .bind(resource.as_str())
                    .bind(owner.as_uuid())
                    .bind(token.get()),
            )
            .await?;
        Ok(done == 1)
    }

    pub(crate) async fn lease_list(&self) -> Result<Vec<LeaseRow>, Error> {
        let rows = self.fetch_all(Stmt::new(LEASE_LIST)).await?;
        rows.iter()
            .map(|r| {
                Ok(LeaseRow {
                    resource: ResourceName::new(r.col::<String>("resource")?)?,
                    owner_id: r.col::<Option<Uuid>>("owner_id")?.map(OwnerId::from),
                    token: FencingToken::new(r.col("fence")?),
                    expires_at: r.col("expires_at")?,
                    held: r.col("held")?,
                    remaining_ms: r.col("remaining_ms")?,
                    partitions: r
                        .col::<Option<i32>>("partitions")?
                        .and_then(|n| u32::try_from(n).ok()),
                })
            })
            .collect()
    }

    pub(crate) async fn lease_set_partitions(
        &self,
        lease: &Lease,
        partitions: u32,
    ) -> Result<bool, Error> {
        let done = self
            .affected(
                Stmt::new(LEASE_SET_PARTITIONS_IF_OWNER)
                    .bind(lease.resource.as_str())
                    .bind(lease.owner_id.as_uuid())
                    .bind(lease.token.get())
                    .bind(i32::try_from(partitions).unwrap_or(i32::MAX)),
            )
            .await?;
        Ok(done == 1)
    }

    pub(crate) async fn lease_partition_conflicts(
        &self,
        resources: &[String],
        partitions: u32,
    ) -> Result<Vec<(String, u32)>, Error> {
        let rows = self
            .fetch_all(
                Stmt::new(LEASE_LIST_PARTITION_CONFLICTS)
                    .bind(json_list(resources))
                    .bind(i32::try_from(partitions).unwrap_or(i32::MAX)),
            )
            .await?;
        rows.iter()
            .map(|r| {
                let n: i32 = r.col("partitions")?;
                Ok((r.col("resource")?, u32::try_from(n).unwrap_or(0)))
            })
            .collect()
    }
}

/// SQL Server's `=` ignores trailing spaces, even in a binary collation: `r ` would share the
/// lease row, and so the tokens, of `r`. Such a name is refused here rather than silently
/// merged; PostgreSQL and SQLite tell the two apart.
pub(crate) fn check_resource(resource: &ResourceName) -> Result<(), InvalidInput> {
    if resource.as_str().ends_with(' ') {
        return Err(InvalidInput::new(
            "resource",
            "ends with a space, which SQL Server ignores when it compares names: it would share the lease of the name without it",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ending_in_a_space_are_refused_on_sql_server() {
        assert!(check_resource(&ResourceName::new("statement:1").unwrap()).is_ok());
        assert!(check_resource(&ResourceName::new(" leading and inner  ok").unwrap()).is_ok());
        let err = check_resource(&ResourceName::new("statement:1 ").unwrap()).unwrap_err();
        assert_eq!(err.field, "resource");
    }
}

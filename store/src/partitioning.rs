//! The partition count in force: which `dispatcher.partitions` every dispatcher must serve,
//! kept in the database so that changing it is an operation (`outboxctl partitions set`),
//! never an accident of one config file. The first dispatcher to start records its count;
//! a dispatcher started with another refuses to serve; a change is locked, written and logged
//! in one transaction, and running dispatchers follow it (they step down and serve the new
//! count once no partition lease of the old one is live). Ops keep their slot: the count only
//! regroups the slots (`op::partition_slot`).

use serde::Serialize;
use time::OffsetDateTime;

use crate::driver::Driver;
use crate::error::{Error, InvalidInput};
use crate::model::Change;
use crate::op::PARTITION_SLOTS;

/// The partition count in force, and who set it when and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionCount {
    /// The count every dispatcher must serve.
    pub partitions: u32,
    /// When it was set, by the database clock.
    #[serde(with = "time::serde::rfc3339")]
    pub changed_at: OffsetDateTime,
    /// Who set it: an operator, or `dispatcher` for the first dispatcher's count.
    pub changed_by: String,
    /// Why.
    pub reason: String,
}

/// What `outboxctl partitions set` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionCountChange {
    /// The count in force before, if there was one.
    pub before: Option<u32>,
    /// The count in force now.
    pub after: u32,
    /// Whether anything changed (false when `after` already was the count in force).
    pub changed: bool,
}

/// Who a dispatcher's first count is recorded as.
pub const ADOPTED_BY: &str = "dispatcher";

/// The reason recorded with a dispatcher's first count.
pub fn adopted_reason(partitions: u32) -> String {
    format!("the first dispatcher to start served dispatcher.partitions = {partitions}")
}

/// Checks a partition count: 1..=[`PARTITION_SLOTS`].
pub fn check_count(partitions: u32) -> Result<(), InvalidInput> {
    if partitions == 0 || partitions > PARTITION_SLOTS {
        return Err(InvalidInput::new(
            "partitions",
            format!("must be 1..={PARTITION_SLOTS}, got {partitions}"),
        ));
    }
    Ok(())
}

/// Sets the count in force to `partitions`, logged with `change`'s actor and reason, in one
/// transaction; a dry run or an unchanged count writes nothing.
pub(crate) async fn set<D: Driver>(
    d: &D,
    partitions: u32,
    change: &Change,
) -> Result<PartitionCountChange, Error> {
    check_count(partitions)?;
    change.validate()?;
    let mut tx = d.begin().await?;
    let before = D::partition_count_lock(&mut tx).await?;
    let report = PartitionCountChange {
        before,
        after: partitions,
        changed: before != Some(partitions),
    };
    if change.dry_run || !report.changed {
        D::rollback(tx).await?;
        return Ok(report);
    }
    D::partition_count_write(&mut tx, partitions, change).await?;
    let details = serde_json::json!({"before": before, "after": partitions}).to_string();
    D::admin_log_insert(&mut tx, change, "partitions", &details).await?;
    D::commit(tx).await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_one_to_the_slot_count() {
        assert!(check_count(1).is_ok());
        assert!(check_count(PARTITION_SLOTS).is_ok());
        for bad in [0, PARTITION_SLOTS + 1, u32::MAX] {
            assert_eq!(check_count(bad).unwrap_err().field, "partitions");
        }
    }
}

//! Partitions: which share of the ops a dispatcher partition serves, and the resource of its
//! lease. The statements claim, complete and re-queue by it.

use crate::error::InvalidInput;
use crate::op::PARTITION_SLOTS;

/// Which share of the ops a dispatcher partition serves: slots with `slot % count == index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    count: u32,
    index: u32,
}

impl Partition {
    /// What every partition lease's resource name starts with.
    pub const LEASE_PREFIX: &'static str = "dispatcher/";

    /// Partition `index` of `count` (1..=1024 partitions).
    pub fn new(index: u32, count: u32) -> Result<Self, InvalidInput> {
        if count == 0 || count > PARTITION_SLOTS {
            return Err(InvalidInput::new(
                "partitions",
                format!("must be 1..={PARTITION_SLOTS}, got {count}"),
            ));
        }
        if index >= count {
            return Err(InvalidInput::new(
                "partition",
                format!("{index} is not below the partition count {count}"),
            ));
        }
        Ok(Partition { count, index })
    }

    /// How many partitions there are.
    pub fn count(self) -> u32 {
        self.count
    }

    /// This partition's number.
    pub fn index(self) -> u32 {
        self.index
    }

    /// The resource of this partition's dispatcher lease: `dispatcher/<index>`.
    pub fn lease_resource(self) -> String {
        format!("{}{}", Self::LEASE_PREFIX, self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_bounded_and_named() {
        assert_eq!(
            Partition::new(0, 1).unwrap().lease_resource(),
            "dispatcher/0"
        );
        assert!(Partition::new(1, 1).is_err());
        assert!(Partition::new(0, 0).is_err());
        assert!(Partition::new(0, 1025).is_err());
    }
}

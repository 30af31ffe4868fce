//! The store's vocabulary: the types the statements speak and the flows above them share.
//! Validated names (`names`), leases (`lease`), partitions (`partition`), an operator's change
//! (`change`), a request's content (`content`), destination health and holds (`health`) and migrations (`migration`), one
//! concern per file. They name no flow and no backend; both name them.

mod change;
mod content;
mod health;
mod lease;
mod migration;
mod names;
mod partition;

pub use change::Change;
pub use content::{ContentRewrite, StoredContent};
pub use health::{BreakerState, DestinationHealth, Hold, Pause};
pub use lease::{Lease, LeaseRow, TtlBounds};
pub use migration::{AppliedMigration, Migration};
pub use names::{
    DESTINATION_MAX_LEN, DestinationName, FencingToken, IdempotencyKey, KEY_MAX_LEN, OrderKey,
    OwnerId, RESOURCE_MAX_CHARS, ResourceName,
};
pub use partition::Partition;

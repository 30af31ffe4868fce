//! Whose turn it is: the runs of this binary go two at a time (one per core), except the
//! 32-dispatcher fleet (`fleet.rs`), which takes the machine alone, so that neither its
//! convergence times nor the others' timing margins measure the other's load.

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static TURN: RwLock<()> = RwLock::const_new(());

/// A turn beside the other ordinary runs; waits while the fleet runs or waits to.
pub(crate) async fn shared() -> RwLockReadGuard<'static, ()> {
    TURN.read().await
}

/// The machine alone: waits for the runs under way to end, and keeps new ones waiting.
pub(crate) async fn alone() -> RwLockWriteGuard<'static, ()> {
    TURN.write().await
}

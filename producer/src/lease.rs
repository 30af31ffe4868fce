//! Leases for applications: [`Outbox::try_acquire`], [`Outbox::renew`], [`Outbox::release`].
//!
//! Invariant: at most one unexpired lease per resource by the database clock (G2), and every
//! acquisition gets a token larger than all before it (G1). A paused process keeps its `Lease`
//! value but not the lease: once the database says it expired, renewing and releasing fail (G3),
//! and anything fenced by the old token is refused. A crash leaves the lease to expire; a
//! database restart keeps every token, because lease rows are never deleted.
//!
//! The leases on `dispatcher/<n>` belong to `outbox-dispatcher` (G9): this API refuses them.

use std::time::Duration;

use outbox_store::{InvalidInput, Lease, LeaseRow, Partition, ResourceName};

use crate::{Error, Outbox};

impl Outbox {
    /// Acquires `resource` for `ttl` if nobody holds it; `None` when another owner does.
    /// The returned lease has a fresh owner id and a token larger than any before (G1).
    /// `dispatcher/<n>` is refused with [`Error::Invalid`]: those leases are the dispatcher's.
    pub async fn try_acquire(&self, resource: &str, ttl: Duration) -> Result<Option<Lease>, Error> {
        let resource = ResourceName::new(resource)?;
        refuse_dispatcher_lease(&resource)?;
        Ok(self.store.lease_try_acquire(&resource, ttl).await?)
    }

    /// Extends `lease` to `ttl` from now, keeping its token. Returns the renewed lease, or
    /// `None` when it is lost: expired (even if nobody took it) or held by a newer owner (G3).
    pub async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>, Error> {
        refuse_dispatcher_lease(&lease.resource)?;
        Ok(self.store.lease_renew(lease, ttl).await?)
    }

    /// Releases `lease`; `false` when this owner and token no longer hold it (G3).
    pub async fn release(&self, lease: &Lease) -> Result<bool, Error> {
        refuse_dispatcher_lease(&lease.resource)?;
        Ok(self.store.lease_release(lease).await?)
    }

    /// Every lease row with whether it is held now, by the database clock.
    pub async fn list_leases(&self) -> Result<Vec<LeaseRow>, Error> {
        Ok(self.store.lease_list().await?)
    }
}

/// Refuses a dispatcher partition lease (`dispatcher/<n>`): only `outbox-dispatcher` takes,
/// renews or releases those (G9), and no op may be fenced by one. A producer holding one
/// would stall its partition; one renewing or releasing the dispatcher's would change who
/// delivers behind the dispatcher's back.
pub(crate) fn refuse_dispatcher_lease(resource: &ResourceName) -> Result<(), InvalidInput> {
    if resource.as_str().starts_with(Partition::LEASE_PREFIX) {
        return Err(InvalidInput::new(
            "resource",
            format!(
                "{resource} is a dispatcher partition lease: only outbox-dispatcher takes those"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_resources_under_the_dispatcher_prefix_are_refused() {
        let refused = |r: &str| refuse_dispatcher_lease(&ResourceName::new(r).unwrap()).is_err();
        assert!(refused("dispatcher/0") && refused("dispatcher/anything"));
        assert!(
            !refused("dispatcher") && !refused("jobs/dispatcher/0") && !refused("Dispatcher/0")
        );
    }
}

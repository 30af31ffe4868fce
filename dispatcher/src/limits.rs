//! Destination limits that hold across every live instance: a destination's `max_in_flight`
//! and `rate_limit` are split over the `dispatcher.partitions` partitions, and each instance
//! gets the part of the partitions it leads now. Partition leases are exclusive (G9), so the
//! parts of all instances add up to at most the whole, whatever the membership; no instance
//! needs to know the others' shares. Partition `p` of `P` gets `L / P` in-flight slots, plus
//! one when `p < L % P` (the lowest partitions, which the fair split spreads over the
//! instances first), and `1 / P` of the rate. An instance that leads partitions whose part
//! rounds to nothing still gets one slot, so no partition stalls: the in-flight limit is exact
//! while `max_in_flight` is at least the number of instances leading partitions (always, under
//! the fair split, when it is at least the partition count), and otherwise at most one per
//! leading instance. Before a graceful hand-over the giver shrinks its part and waits for its
//! attempts to fit it (bounded by the attempt timeout), so the taker never adds to a full
//! destination. docs/scaling.md says the same for operators.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::Notify;

/// One destination's in-flight slots in this process: at most `limit` taken at once. The limit
/// moves with the partitions led; slots already taken are never revoked, they are waited for.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    limit: AtomicUsize,
    taken: AtomicUsize,
    freed: Notify,
}

/// One taken slot, given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot(Arc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.taken.fetch_sub(1, Ordering::AcqRel);
        self.0.freed.notify_waiters();
    }
}

impl Slots {
    /// Takes a slot when fewer than the limit are taken.
    pub(crate) fn try_take(self: &Arc<Self>) -> Option<Slot> {
        let mut taken = self.taken.load(Ordering::Acquire);
        loop {
            if taken >= self.limit.load(Ordering::Acquire) {
                return None;
            }
            match self.taken.compare_exchange_weak(
                taken,
                taken + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(Slot(self.clone())),
                Err(now) => taken = now,
            }
        }
    }

    /// How many more could be taken now.
    pub(crate) fn available(&self) -> usize {
        self.limit
            .load(Ordering::Acquire)
            .saturating_sub(self.taken.load(Ordering::Acquire))
    }

    /// How many are taken now.
    pub(crate) fn taken(&self) -> usize {
        self.taken.load(Ordering::Acquire)
    }

    pub(crate) fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Release);
    }

    /// Returns once no more than the limit are taken.
    pub(crate) async fn fit(&self) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.taken() <= self.limit.load(Ordering::Acquire) {
                return;
            }
            freed.await;
        }
    }
}

/// This process's in-flight slots for a destination allowing `total` at once over
/// `partitions` partitions, when it leads `led` (partition indexes).
pub(crate) fn in_flight_part(total: usize, partitions: u32, led: &[u32]) -> usize {
    let p = partitions.max(1) as usize;
    let part: usize = led
        .iter()
        .map(|&i| total / p + usize::from((i as usize) < total % p))
        .sum();
    if led.is_empty() { 0 } else { part.max(1) }
}

/// This process's rate limiter for a destination allowing `n` requests per `per` over
/// `partitions` partitions, when it leads `led` of them: `n · led / partitions` per `per`, with
/// a burst of as many (at least one). `None` when it leads none (it sends nothing then), and
/// the gap between two requests at that rate, for how long to leave the destination out of
/// claims once the budget is spent.
pub(crate) fn rate_part(
    n: NonZeroU32,
    per: Duration,
    partitions: u32,
    led: usize,
) -> Option<(DefaultDirectRateLimiter, Duration)> {
    if led == 0 {
        return None;
    }
    let (p, k) = (u128::from(partitions.max(1)), led as u128);
    // The config allows at most one request per microsecond over the whole destination, and
    // an instance's part is never more than the whole, so the gap is at least that.
    let gap_ns = per.as_nanos().saturating_mul(p) / (u128::from(n.get()) * k);
    let gap = Duration::from_nanos(u64::try_from(gap_ns).unwrap_or(u64::MAX));
    let burst = u32::try_from(u128::from(n.get()) * k / p).unwrap_or(u32::MAX);
    let quota =
        Quota::with_period(gap)?.allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN));
    Some((RateLimiter::direct(quota), gap))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fair split of 8 partitions over 1, 2, 3 and 4 instances (partition p to instance
    /// p % n), as `membership::fair_share` computes it.
    fn split(n: u32) -> Vec<Vec<u32>> {
        (0..n)
            .map(|i| (0..8).filter(|p| p % n == i).collect())
            .collect()
    }

    #[test]
    fn the_parts_of_the_fair_split_add_up_to_the_limit() {
        for total in [1usize, 2, 3, 4, 5, 7, 8, 9, 16, 100, 1024] {
            for n in 1..=4u32 {
                let parts: Vec<usize> = split(n)
                    .iter()
                    .map(|led| in_flight_part(total, 8, led))
                    .collect();
                let sum: usize = parts.iter().sum();
                assert!(parts.iter().all(|&x| x >= 1), "{total} over {n}: {parts:?}");
                if total >= n as usize {
                    assert_eq!(sum, total, "{total} over {n}: {parts:?}");
                } else {
                    // Fewer slots than leading instances: one each, never more.
                    assert_eq!(sum, n as usize, "{total} over {n}: {parts:?}");
                }
            }
        }
    }

    #[test]
    fn any_exclusive_leadership_stays_within_the_limit_when_parts_are_whole() {
        // However the partitions are led (not only the fair split), the parts add up to at
        // most the limit when it is at least the partition count (every partition's part is
        // at least one slot).
        let total = 20;
        for mask in 0u32..256 {
            let a: Vec<u32> = (0..8).filter(|p| mask & (1 << p) != 0).collect();
            let b: Vec<u32> = (0..8).filter(|p| mask & (1 << p) == 0).collect();
            assert_eq!(
                in_flight_part(total, 8, &a) + in_flight_part(total, 8, &b),
                total
            );
        }
        assert_eq!(in_flight_part(total, 8, &[]), 0);
    }

    #[test]
    fn the_rate_is_split_by_the_partitions_led() {
        let n = NonZeroU32::new(100).unwrap();
        let (_, whole) = rate_part(n, Duration::from_secs(1), 8, 8).unwrap();
        assert_eq!(whole, Duration::from_millis(10));
        let (_, half) = rate_part(n, Duration::from_secs(1), 8, 4).unwrap();
        assert_eq!(half, Duration::from_millis(20));
        let (_, three) = rate_part(n, Duration::from_secs(1), 8, 3).unwrap();
        // 37.5/s: one request every 26.67 ms.
        assert_eq!(three.as_micros(), 26_666);
        assert!(rate_part(n, Duration::from_secs(1), 8, 0).is_none());
        // The largest rate the config accepts, on one partition of 1024.
        let fast = NonZeroU32::new(1_000_000).unwrap();
        let (limiter, gap) = rate_part(fast, Duration::from_secs(1), 1024, 1).unwrap();
        assert_eq!(gap, Duration::from_nanos(1_024_000));
        assert!(limiter.check().is_ok());
    }

    #[tokio::test]
    async fn slots_follow_the_limit_and_shrinking_waits_for_the_taken() {
        let slots = Arc::new(Slots::default());
        assert!(slots.try_take().is_none(), "no partition led, no slot");
        slots.set_limit(2);
        let a = slots.try_take().unwrap();
        let b = slots.try_take().unwrap();
        assert!(slots.try_take().is_none());
        assert_eq!(slots.available(), 0);
        slots.set_limit(1);
        let waiter = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.fit().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(a);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(slots.try_take().is_none(), "one taken, limit one");
        drop(b);
        assert!(slots.try_take().is_some());
    }
}

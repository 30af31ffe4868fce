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
//! leading instance. The rate's buckets keep what was spent when the part changes. Before a graceful hand-over the giver shrinks its part and waits for its
//! attempts to fit it (bounded by the attempt timeout), so the taker never adds to a full
//! destination. docs/scaling.md says the same for operators.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use std::time::Instant;

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

    /// How many may be taken at once now.
    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Acquire)
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

/// This process's part of a destination's rate limit of `n` requests per `per` over
/// `partitions` partitions, when it leads `led` of them: the gap between two requests
/// (`per · partitions / (n · led)`) and a burst of `n · led / partitions` requests, at least
/// one. `None` when it leads none: it may send nothing then.
pub(crate) fn rate_part(
    n: NonZeroU32,
    per: Duration,
    partitions: u32,
    led: usize,
) -> Option<(Duration, u32)> {
    if led == 0 {
        return None;
    }
    let (p, k) = (u128::from(partitions.max(1)), led as u128);
    // The config allows at most one request per microsecond over the whole destination, and
    // an instance's part is never more than the whole, so the gap is at least that.
    let gap_ns = per.as_nanos().saturating_mul(p) / (u128::from(n.get()) * k);
    let gap = Duration::from_nanos(u64::try_from(gap_ns).unwrap_or(u64::MAX))
        .max(Duration::from_nanos(1));
    let burst = u32::try_from(u128::from(n.get()) * k / p)
        .unwrap_or(u32::MAX)
        .max(1);
    Some((gap, burst))
}

/// A token bucket whose rate and burst change with the partitions led and which keeps what was
/// spent across a change (a fresh bucket per change would hand out a full burst each time, and
/// a starting dispatcher changes its part once per partition it wins). A bucket that starts
/// leading is full: the burst of its first part (the whole burst for a lone dispatcher of one
/// partition); after that, tokens only build up at the rate.
#[derive(Debug)]
pub(crate) struct Bucket {
    part: Option<(Duration, u32)>,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A bucket that admits nothing until it gets a part.
    pub(crate) fn new(now: Instant) -> Bucket {
        Bucket {
            part: None,
            tokens: 0.0,
            at: now,
        }
    }

    /// Sets the part (gap, burst), or none: tokens earned so far are kept, up to the new burst.
    pub(crate) fn set_part(&mut self, part: Option<(Duration, u32)>, now: Instant) {
        self.refill(now);
        if let (None, Some((_, burst))) = (self.part, part) {
            self.tokens = self.tokens.max(f64::from(burst));
        }
        self.part = part;
        let burst = self.part.map_or(0.0, |(_, b)| f64::from(b));
        self.tokens = self.tokens.min(burst);
    }

    /// Spends a token, or says how long until the next one (at most a minute).
    #[cfg(test)]
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        self.take_up_to(1, now).map(|_| ())
    }

    /// Spends up to `n` tokens at once, for a claim's ops before it is sent: how many were
    /// spent, or, when none is left, how long until the next one (at most a minute).
    pub(crate) fn take_up_to(&mut self, n: usize, now: Instant) -> Result<usize, Duration> {
        self.refill(now);
        if n == 0 {
            return Ok(0);
        }
        let Some((gap, _)) = self.part else {
            return Err(Duration::from_millis(100));
        };
        let whole = self.tokens.floor().min(n as f64);
        if whole < 1.0 {
            // Asked again after at most a minute, however slow the limit.
            return Err(gap.mul_f64(1.0 - self.tokens).min(Duration::from_secs(60)));
        }
        self.tokens -= whole;
        Ok(whole as usize)
    }

    /// Gives back `n` tokens spent for ops a claim did not take (never past the burst).
    pub(crate) fn give_back(&mut self, n: usize) {
        let burst = self.part.map_or(0.0, |(_, b)| f64::from(b));
        self.tokens = (self.tokens + n as f64).min(burst);
    }

    fn refill(&mut self, now: Instant) {
        if let Some((gap, burst)) = self.part {
            let earned = now.saturating_duration_since(self.at).as_secs_f64() / gap.as_secs_f64();
            self.tokens = (self.tokens + earned).min(f64::from(burst));
        }
        self.at = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fair split of 8 partitions over 1, 2, 3 and 4 instances, as
    /// `membership::fair_share` computes it.
    fn split(n: u32) -> Vec<Vec<u32>> {
        let ids: Vec<uuid::Uuid> = (1..=u128::from(n)).map(uuid::Uuid::from_u128).collect();
        ids.iter()
            .map(|me| {
                let share = crate::membership::fair_share(*me, &ids, 8);
                (0..8).filter(|&p| share[p as usize]).collect()
            })
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
        let s = Duration::from_secs(1);
        assert_eq!(
            rate_part(n, s, 8, 8),
            Some((Duration::from_millis(10), 100))
        );
        assert_eq!(rate_part(n, s, 8, 4), Some((Duration::from_millis(20), 50)));
        // 37.5/s: one request every 26.67 ms, a burst of 37.
        let (gap, burst) = rate_part(n, s, 8, 3).unwrap();
        assert_eq!((gap.as_micros(), burst), (26_666, 37));
        assert_eq!(rate_part(n, s, 8, 0), None);
        // The largest rate the config accepts, on one partition of 1024; the slowest.
        let fast = NonZeroU32::new(1_000_000).unwrap();
        assert_eq!(
            rate_part(fast, s, 1024, 1),
            Some((Duration::from_nanos(1_024_000), 976))
        );
        let slow = rate_part(NonZeroU32::MIN, Duration::from_secs(3600), 1024, 1).unwrap();
        assert_eq!(slow, (Duration::from_secs(3600 * 1024), 1));
    }

    #[test]
    fn a_bucket_keeps_what_was_spent_when_its_part_changes() {
        let t0 = Instant::now();
        let mut b = Bucket::new(t0);
        assert!(b.take(t0).is_err(), "no part, nothing sent");
        // Starting to lead: the burst at once (10/s, burst 2), then the rate.
        b.set_part(Some((Duration::from_millis(100), 2)), t0);
        assert!(b.take(t0).is_ok() && b.take(t0).is_ok());
        let wait = b.take(t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        // A change of part (more partitions led) hands out no fresh burst.
        b.set_part(Some((Duration::from_millis(50), 10)), t0);
        assert!(b.take(t0).is_err());
        let t1 = t0 + Duration::from_millis(100);
        assert!(b.take(t1).is_ok() && b.take(t1).is_ok() && b.take(t1).is_err());
        // Tokens build up to the burst at most, and a smaller part clamps them.
        let t2 = t1 + Duration::from_secs(60);
        b.set_part(Some((Duration::from_millis(100), 3)), t2);
        let sent = (0..10).filter(|_| b.take(t2).is_ok()).count();
        assert_eq!(sent, 3);
        // No part any more: nothing.
        b.set_part(None, t2 + Duration::from_secs(5));
        assert!(b.take(t2 + Duration::from_secs(10)).is_err());
    }

    #[test]
    fn a_claim_spends_what_it_may_take_and_gives_back_what_it_did_not() {
        let t0 = Instant::now();
        let mut b = Bucket::new(t0);
        b.set_part(Some((Duration::from_millis(100), 5)), t0);
        assert_eq!(b.take_up_to(3, t0), Ok(3));
        assert_eq!(b.take_up_to(3, t0), Ok(2), "what is left of the burst");
        assert_eq!(b.take_up_to(3, t0), Err(Duration::from_millis(100)));
        b.give_back(4);
        assert_eq!(b.take_up_to(10, t0), Ok(4));
        b.give_back(100);
        assert_eq!(b.take_up_to(10, t0), Ok(5), "never past the burst");
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

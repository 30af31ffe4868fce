//! What every partition loop shares: the store, the config, and one route per destination
//! (its sender and its limits: in-flight slots, rate limit, throttling), with this process's
//! slot count, the partitions it leads (which size its part of every destination's limits,
//! `limits`), the loops' wake-ups, readiness, and why the loops were stopped; and what a claim
//! may take, reserved before it is sent ([`Reservation`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_store::{ClaimRoom, Partition, Store};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::deliver::Sender;
use crate::limits::{self, Bucket, Slot, Slots};
use crate::metrics as m;

/// One destination's sender and this process's part of its limits.
#[derive(Debug)]
pub(crate) struct Route {
    sender: Sender,
    slots: Arc<Slots>,
    /// This process's part of the rate limit; `None` when the destination has none.
    limiter: Option<Mutex<Bucket>>,
}

impl Route {
    pub(crate) fn sender(&self) -> &Sender {
        &self.sender
    }
}

/// The slots one attempt holds: one of this process's, one of its destination's.
pub(crate) type Permits = (OwnedSemaphorePermit, Slot);

/// What every partition loop shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Store,
    pub(crate) config: Config,
    routes: HashMap<String, Route>,
    names: Vec<String>,
    /// The destinations with a circuit breaker: a claim leaves them out while it is not closed.
    breakers: Vec<String>,
    global: Arc<Semaphore>,
    /// One per partition loop, woken by enqueue notifications and by finished attempts (a
    /// slot freed up). Each keeps a permit when nobody waits, so no wake-up is lost.
    wakes: Vec<Notify>,
    /// Counts the wake-ups that may mean new due ops (an enqueue notification, an op made
    /// pending again, a hold ended); a loop that found a destination with nothing due asks
    /// again only once this moved (or its next due time came), not at every freed slot.
    work: AtomicU64,
    pub(crate) ready: Arc<AtomicBool>,
    /// Destinations that hit their rate limit, and until when to leave them out of claims.
    throttled: Mutex<HashMap<String, Instant>>,
    /// The partition count in force when it changed from the one served; `stop` is then
    /// cancelled, and the daemon serves the new count once every loop has stepped down.
    recount: Mutex<Option<u32>>,
    stop: CancellationToken,
    /// This process's id in the membership table, fresh at every start.
    pub(crate) instance_id: uuid::Uuid,
    /// The partitions this process leads now (indexes, sorted); they size its part of every
    /// destination's limits.
    led: Mutex<Vec<u32>>,
    /// This process's fair share of the partitions (`share[p]`), from the membership; `None`
    /// until the membership was first read: then every partition is tried, as before there was
    /// one. Leases decide who leads either way (G9); the share only says what to try for.
    share: tokio::sync::watch::Sender<Option<Arc<Vec<bool>>>>,
    /// The destinations' breaker state and pauses, as this process knows them.
    pub(crate) health: crate::health::Health,
}

/// One partition this process leads, counted while it lives.
#[derive(Debug)]
pub(crate) struct Leading<'a>(&'a Shared, Partition);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.0.stop_leading(self.1);
    }
}

impl Shared {
    pub(crate) fn new(
        store: Store,
        config: Config,
        ready: Arc<AtomicBool>,
        stop: CancellationToken,
        instance_id: uuid::Uuid,
    ) -> Result<Shared, reqwest::Error> {
        let mut routes = HashMap::new();
        for (name, d) in &config.destinations {
            // No partition is led yet: no slot and no budget until one is (`start_leading`).
            routes.insert(
                name.clone(),
                Route {
                    sender: Sender::new(d, config.dispatcher.max_body_bytes)?,
                    slots: Arc::default(),
                    limiter: d
                        .rate_limit
                        .map(|_| Mutex::new(Bucket::new(std::time::Instant::now()))),
                },
            );
        }
        let names = config.destinations.keys().cloned().collect();
        let breakers = config
            .destinations
            .iter()
            .filter(|(_, d)| d.breaker.is_some())
            .map(|(name, _)| name.clone())
            .collect();
        let global = Arc::new(Semaphore::new(config.dispatcher.max_in_flight));
        Ok(Shared {
            store,
            routes,
            names,
            breakers,
            global,
            wakes: (0..config.dispatcher.partitions)
                .map(|_| Notify::new())
                .collect(),
            work: AtomicU64::new(0),
            ready,
            throttled: Mutex::default(),
            recount: Mutex::default(),
            stop,
            config,
            instance_id,
            led: Mutex::default(),
            share: tokio::sync::watch::Sender::new(None),
            health: crate::health::Health::default(),
        })
    }

    /// Steps every loop down: the partition count in force is now `partitions`, which the
    /// daemon serves next.
    pub(crate) fn recount(&self, partitions: u32) {
        if let Ok(mut recount) = self.recount.lock() {
            recount.get_or_insert(partitions);
        }
        self.stop.cancel();
    }

    /// The count to serve next, if the loops stepped down for a change of the count in force.
    pub(crate) fn take_recount(&self) -> Option<u32> {
        self.recount.lock().ok()?.take()
    }

    /// Wakes every partition loop (they look for work at once).
    pub(crate) fn wake_all(&self) {
        for wake in &self.wakes {
            wake.notify_one();
        }
    }

    /// Wakes every partition loop for what may be new due ops (see `work`).
    pub(crate) fn new_work(&self) {
        self.work.fetch_add(1, Ordering::AcqRel);
        self.wake_all();
    }

    /// How many wake-ups for new due ops there were so far: read before a claim is sent, so
    /// one that came while it ran is never missed.
    pub(crate) fn work_seen(&self) -> u64 {
        self.work.load(Ordering::Acquire)
    }

    /// Returns when `partition`'s loop is woken (at once if a wake-up came while it was busy).
    pub(crate) async fn woken(&self, partition: Partition) {
        self.wakes[partition.index() as usize].notified().await;
    }

    pub(crate) fn destination_names(&self) -> &[String] {
        &self.names
    }

    /// How many partitions this process leads now.
    pub(crate) fn led(&self) -> u32 {
        self.led.lock().map_or(0, |led| led.len() as u32)
    }

    /// Sets this process's share of the partitions; wakes the loops only when it changed.
    pub(crate) fn set_share(&self, share: Vec<bool>) {
        self.share.send_if_modified(|current| {
            if current.as_deref() == Some(&share) {
                return false;
            }
            *current = Some(Arc::new(share));
            true
        });
    }

    /// The share, to wait for changes of.
    pub(crate) fn watch_share(&self) -> tokio::sync::watch::Receiver<Option<Arc<Vec<bool>>>> {
        self.share.subscribe()
    }

    /// Counts a partition this process leads, and adds its part to every destination's
    /// limits, until the returned guard is dropped (also when the loop unwinds from a panic, so
    /// the count never drifts) or [`Shared::stop_leading`].
    pub(crate) fn leading(&self, partition: Partition) -> Leading<'_> {
        self.change_led(|led| {
            if let Err(at) = led.binary_search(&partition.index()) {
                led.insert(at, partition.index());
            }
        });
        Leading(self, partition)
    }

    /// Takes `partition`'s part out of every destination's limits (again: it is idempotent).
    /// A graceful hand-over calls it before waiting for [`Shared::fit_limits`] and releasing
    /// the lease, so the next leader's part never adds to attempts still running here.
    pub(crate) fn stop_leading(&self, partition: Partition) {
        self.change_led(|led| led.retain(|p| *p != partition.index()));
    }

    fn change_led(&self, change: impl FnOnce(&mut Vec<u32>)) {
        let Ok(mut led) = self.led.lock() else {
            return;
        };
        let before = led.len();
        change(&mut led);
        if led.len() == before {
            return;
        }
        let partitions = self.config.dispatcher.partitions;
        for (name, route) in &self.routes {
            let d = &self.config.destinations[name];
            route
                .slots
                .set_limit(limits::in_flight_part(d.max_in_flight, partitions, &led));
            if let (Some((n, per)), Some(Ok(mut bucket))) =
                (d.rate_limit, route.limiter.as_ref().map(Mutex::lock))
            {
                let part = limits::rate_part(n, per, partitions, led.len());
                bucket.set_part(part, std::time::Instant::now());
            }
        }
        metrics::gauge!(m::PARTITIONS_LED).set(led.len() as f64);
    }

    /// Returns once every destination's attempts in this process fit its part of the limits.
    pub(crate) async fn fit_limits(&self) {
        for route in self.routes.values() {
            route.slots.fit().await;
        }
    }

    pub(crate) fn db_ok(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    pub(crate) fn db_failed(&self, call: m::DbCall, e: &outbox_store::Error) {
        self.ready.store(false, Ordering::Relaxed);
        let operation = call.as_str();
        metrics::counter!(m::DB_ERRORS, "operation" => operation).increment(1);
        tracing::warn!(operation, error = %e, "database call failed; retrying");
    }

    /// The route to `destination`, if it is configured.
    pub(crate) fn route(&self, destination: &str) -> Option<&Route> {
        self.routes.get(destination)
    }

    /// How many ops one claim may take: free global slots, at most `claim_batch`.
    pub(crate) fn room(&self) -> usize {
        self.global
            .available_permits()
            .min(self.config.dispatcher.claim_batch as usize)
    }

    /// Reserves what the next claim may take: of every destination that can start attempts
    /// now, is not throttled and not `skipped`, its free slots, this process's free global
    /// slots and its rate budget for them, at most `claim_batch` in all; the claim then takes
    /// no more of each destination's ops than it can start (issue 34). A destination is
    /// worth a claim while none of its attempts runs (an idle one claims at once, for
    /// latency), otherwise once half of what it may have in flight at once (its slots, at
    /// most `claim_batch` and the global limit) is free: while attempts are running, claims of
    /// one op at a time would cost the database a statement per op. Reserving before the
    /// claim is sent also keeps the partition loops of this process from claiming the same
    /// free slots twice.
    pub(crate) fn reserve(&self, skipped: impl Fn(&str) -> bool) -> Reservation<'_> {
        let batch = self.config.dispatcher.claim_batch as usize;
        let whole = self.config.dispatcher.max_in_flight.min(batch);
        let now = Instant::now();
        let mut throttled = self.throttled.lock().unwrap_or_else(|p| p.into_inner());
        throttled.retain(|_, until| *until > now);
        let mut rooms = Vec::new();
        let mut left = self.room();
        // In name order (the config's), so the global slots go the same way every time.
        for name in &self.names {
            let route = &self.routes[name];
            if left == 0 {
                break;
            }
            if throttled.contains_key(name) || skipped(name) {
                continue;
            }
            let free = route.slots.available().min(left);
            let most = route.slots.limit().min(whole);
            if free == 0 || (route.slots.taken() > 0 && free < (most / 2).max(1)) {
                continue;
            }
            let budget = match &route.limiter {
                None => free,
                Some(bucket) => {
                    let mut bucket = bucket.lock().unwrap_or_else(|p| p.into_inner());
                    match bucket.take_up_to(free, std::time::Instant::now()) {
                        Ok(n) => n,
                        Err(gap) => {
                            throttled.insert(name.clone(), Instant::now() + gap);
                            continue;
                        }
                    }
                }
            };
            let mut permits = Vec::with_capacity(budget);
            while permits.len() < budget {
                match (
                    self.global.clone().try_acquire_owned(),
                    route.slots.try_take(),
                ) {
                    (Ok(global), Some(slot)) => permits.push((global, slot)),
                    _ => break,
                }
            }
            if let (Some(bucket), unused) = (&route.limiter, budget - permits.len())
                && unused > 0
            {
                bucket
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .give_back(unused);
            }
            if permits.is_empty() {
                continue;
            }
            left -= permits.len();
            rooms.push(Room {
                destination: name.clone(),
                permits,
            });
        }
        Reservation {
            shared: self,
            rooms,
        }
    }

    /// How many requests this process is sending now to destinations without a breaker (their
    /// slots are freed when the exchange ends; a breaker's are held until the outcome is
    /// recorded, so they would count attempts already waiting for the recorder).
    pub(crate) fn sending(&self) -> usize {
        self.routes
            .iter()
            .filter(|(name, _)| !self.has_breaker(name))
            .map(|(_, r)| r.slots.taken())
            .sum()
    }

    /// The longest timeout among `destinations`: what a claim for them must leave time for.
    pub(crate) fn longest_timeout(&self, destinations: &[String]) -> Duration {
        destinations
            .iter()
            .filter_map(|d| self.routes.get(d))
            .map(|r| r.sender.destination().timeout)
            .max()
            .unwrap_or_default()
    }

    /// The destinations that have a circuit breaker (fixed by the config): a claim leaves them
    /// out while their breaker is not closed.
    pub(crate) fn breakers(&self) -> &[String] {
        &self.breakers
    }

    /// Whether `destination` has a circuit breaker configured.
    pub(crate) fn has_breaker(&self, destination: &str) -> bool {
        self.config
            .destinations
            .get(destination)
            .is_some_and(|d| d.breaker.is_some())
    }

    /// Held destinations whose probe may be due, with a free slot and not throttled.
    pub(crate) fn probe_destinations(&self) -> Vec<String> {
        self.startable(|name| {
            self.config
                .destinations
                .get(name)
                .and_then(|d| d.breaker.as_ref())
                .is_some_and(|policy| self.health.probe_due(name, policy))
        })
    }

    fn startable(&self, wanted: impl Fn(&str) -> bool) -> Vec<String> {
        let now = Instant::now();
        let mut throttled = self.throttled.lock().expect("throttle map");
        throttled.retain(|_, until| *until > now);
        self.routes
            .iter()
            .filter(|(name, r)| r.slots.available() > 0 && !throttled.contains_key(*name))
            .filter(|(name, _)| wanted(name))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The slots for one attempt to `destination` (a breaker's probe), or `None` when it is not
    /// configured, a slot is taken or its rate limit has no budget left; out of budget, it is
    /// left out of claims for one request's gap. The budget is spent only with the slots in
    /// hand: a destination without a free slot is not throttled by attempts it never made.
    pub(crate) fn admit(&self, destination: &str) -> Option<Permits> {
        let route = self.routes.get(destination)?;
        let global = self.global.clone().try_acquire_owned().ok()?;
        let slot = route.slots.try_take()?;
        let budget = match &route.limiter {
            None => Ok(()),
            Some(bucket) => bucket
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(std::time::Instant::now()),
        };
        match budget {
            Ok(()) => Some((global, slot)),
            Err(gap) => {
                self.throttled
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(destination.to_owned(), Instant::now() + gap);
                None
            }
        }
    }
}

/// One destination's part of a [`Reservation`]: the slots its claimed ops will use.
#[derive(Debug)]
struct Room {
    destination: String,
    permits: Vec<Permits>,
}

/// What the next claim may take, reserved before it is sent (`Shared::reserve`): of each
/// destination, the slots (and rate budget) of as many ops as it can start now. The claim
/// takes no more than that of each; every op it took gets its slots from here
/// ([`Reservation::take`]), and what it did not use is given back when this is dropped.
#[derive(Debug)]
pub(crate) struct Reservation<'a> {
    shared: &'a Shared,
    rooms: Vec<Room>,
}

impl Reservation<'_> {
    /// Whether nothing was reserved: no destination can start anything worth a claim.
    pub(crate) fn is_empty(&self) -> bool {
        self.rooms.is_empty()
    }

    /// The claim's rooms: each destination and how many of its ops it may take.
    pub(crate) fn rooms(&self) -> Vec<ClaimRoom> {
        self.rooms
            .iter()
            .map(|r| ClaimRoom::new(r.destination.clone(), r.permits.len() as u32))
            .collect()
    }

    /// How many ops the claim may take in all.
    pub(crate) fn total(&self) -> usize {
        self.rooms.iter().map(|r| r.permits.len()).sum()
    }

    /// The destinations reserved for.
    pub(crate) fn destinations(&self) -> Vec<String> {
        self.rooms.iter().map(|r| r.destination.clone()).collect()
    }

    /// The slots for one claimed op of `destination`; `None` when none is left (the claim took
    /// more than it was given room for: it never does).
    pub(crate) fn take(&mut self, destination: &str) -> Option<Permits> {
        self.rooms
            .iter_mut()
            .find(|r| r.destination == destination)?
            .permits
            .pop()
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        // Unused slots go back as their permits drop; the rate budget spent for them, here.
        for room in &self.rooms {
            let unused = room.permits.len();
            let bucket = self
                .shared
                .routes
                .get(&room.destination)
                .and_then(|r| r.limiter.as_ref());
            if let (Some(bucket), true) = (bucket, unused > 0) {
                bucket
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .give_back(unused);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dispatcher's shared state for `config_text` (its database a SQLite file in `dir`),
    /// leading every partition.
    async fn shared(dir: &tempfile::TempDir, config_text: &str) -> Shared {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let text = format!(
            "[database]\nurl = \"sqlite://{}\"\n{config_text}",
            dir.path().join("o.db").display()
        );
        let config = Config::load(Some(&text), &HashMap::new()).unwrap();
        let store = outbox_store::Store::connect(config.database_url.expose(), Default::default())
            .await
            .unwrap();
        Shared::new(
            store,
            config,
            Arc::default(),
            CancellationToken::new(),
            uuid::Uuid::new_v4(),
        )
        .unwrap()
    }

    fn rooms(shared: &Shared) -> Vec<(String, u32)> {
        let reserved = shared.reserve(|_| false);
        reserved
            .rooms()
            .into_iter()
            .map(|r| (r.destination, r.ops))
            .collect()
    }

    /// Issue 34, item 4: with `dispatcher.max_in_flight = 16` and one destination of 64, the
    /// threshold was half of 64 and could never be met while anything was in flight: the loop
    /// sent in stop-and-wait batches. Half of what may be in flight at once is what counts.
    #[tokio::test]
    async fn the_global_limit_bounds_what_a_claim_waits_for() {
        let dir = tempfile::tempdir().unwrap();
        let shared = shared(
            &dir,
            "[dispatcher]\npartitions = 1\nmax_in_flight = 16\n\
             [destinations.a]\nbase_url = \"http://127.0.0.1:1\"\nmax_in_flight = 64\n",
        )
        .await;
        let _leading = shared.leading(Partition::new(0, 1).unwrap());
        assert_eq!(rooms(&shared), [("a".to_owned(), 16)], "idle: all at once");
        let mut running: Vec<Permits> = (0..16).filter_map(|_| shared.admit("a")).collect();
        assert_eq!(running.len(), 16);
        assert!(rooms(&shared).is_empty(), "nothing free");
        running.truncate(9);
        assert!(rooms(&shared).is_empty(), "7 free: less than half of 16");
        running.truncate(8);
        assert_eq!(rooms(&shared), [("a".to_owned(), 8)], "8 free of 16");
    }

    /// Issue 34, items 3 and 4: a slow destination with one slot free of 200 does not make an
    /// idle one wait, and a claim's room is each destination's own, not their sum.
    #[tokio::test]
    async fn each_destination_is_worth_a_claim_on_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let shared = shared(
            &dir,
            "[dispatcher]\npartitions = 1\nmax_in_flight = 256\nclaim_batch = 128\n\
             [destinations.a]\nbase_url = \"http://127.0.0.1:1\"\nmax_in_flight = 200\n\
             [destinations.b]\nbase_url = \"http://127.0.0.1:1\"\nmax_in_flight = 32\n",
        )
        .await;
        let _leading = shared.leading(Partition::new(0, 1).unwrap());
        let running: Vec<Permits> = (0..199).filter_map(|_| shared.admit("a")).collect();
        assert_eq!(running.len(), 199);
        // a: one slot free of 200, not worth a claim yet; b idle: at once, its own 32 slots
        // (and the 57 global slots left do not add up to anything more for it).
        assert_eq!(rooms(&shared), [("b".to_owned(), 32)]);
        // What a claim reserved is not reserved again by the next (another partition's loop).
        let first = shared.reserve(|_| false);
        assert_eq!(first.total(), 32);
        assert!(rooms(&shared).is_empty(), "b's slots are the first claim's");
        drop(first);
        assert_eq!(rooms(&shared), [("b".to_owned(), 32)], "given back");
    }

    /// Issue 34, item 3: admission spent a rate-limit token even when no slot was free, so a
    /// rate-limited destination was throttled further by attempts it never made.
    #[tokio::test]
    async fn no_budget_is_spent_without_a_slot() {
        let dir = tempfile::tempdir().unwrap();
        let shared = shared(
            &dir,
            "[dispatcher]\npartitions = 1\n\
             [destinations.r]\nbase_url = \"http://127.0.0.1:1\"\nmax_in_flight = 1\n\
             rate_limit = \"2/h\"\n",
        )
        .await;
        let _leading = shared.leading(Partition::new(0, 1).unwrap());
        let first = shared.admit("r").expect("a slot and a token");
        for _ in 0..5 {
            assert!(shared.admit("r").is_none(), "no slot free");
        }
        drop(first);
        assert!(
            shared.admit("r").is_some(),
            "the second token of the burst is still there"
        );
    }

    /// Issue 12, item 7: the largest values the config accepts build the daemon's shared
    /// state without panicking (before, a semaphore larger than tokio's limit, or a rate
    /// limit whose period rounded to zero, panicked here).
    #[tokio::test]
    async fn the_largest_accepted_limits_do_not_panic() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[database]\nurl = \"sqlite://{}\"\n[dispatcher]\nmax_in_flight = 65536\nclaim_batch = 1000\n\
             [destinations.b]\nbase_url = \"http://127.0.0.1:1\"\nmax_in_flight = 65536\nrate_limit = \"1000000/s\"\n\
             [destinations.c]\nbase_url = \"http://127.0.0.1:1\"\nrate_limit = \"1/h\"\n",
            dir.path().join("o.db").display()
        );
        let config = Config::load(Some(&text), &HashMap::new()).unwrap();
        let store = outbox_store::Store::connect(config.database_url.expose(), Default::default())
            .await
            .unwrap();
        let shared = Shared::new(
            store,
            config,
            Arc::default(),
            CancellationToken::new(),
            uuid::Uuid::new_v4(),
        )
        .unwrap();
        assert_eq!(shared.global.available_permits(), 65536);
        let count = shared.config.dispatcher.partitions;
        let all: Vec<Leading<'_>> = (0..count)
            .map(|i| shared.leading(Partition::new(i, count).unwrap()))
            .collect();
        assert_eq!(shared.routes["b"].slots.available(), 65536);
        for name in ["b", "c"] {
            assert!(shared.routes[name].limiter.is_some());
            assert!(shared.admit(name).is_some(), "{name}");
        }
        drop(all);
        assert_eq!(shared.led(), 0);
        assert!(
            shared.admit("b").is_none(),
            "no partition led, nothing admitted"
        );
    }
}

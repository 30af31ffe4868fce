//! Admission: one route per destination (its sender and this process's part of its limits:
//! in-flight slots, rate limit, throttling), this process's global slots, and the partitions it
//! leads, which size its part of every destination's limits (`limits`). A claim reserves here
//! what it may take before it is sent ([`Reservation`]), for work and for a breaker's probe
//! alike; nothing here reads the database or the destinations' health.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use outbox_store::{ClaimRoom, Partition};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::config::{Config, Destination};
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
    /// The destination's HTTP sender (and through it, its configuration).
    pub(crate) fn sender(&self) -> &Sender {
        &self.sender
    }

    fn destination(&self) -> &Destination {
        self.sender.destination()
    }
}

/// The slots one attempt holds: one of this process's, one of its destination's.
pub(crate) type Permits = (OwnedSemaphorePermit, Slot);

/// Every destination's route and this process's limits, shared by the partition loops.
#[derive(Debug)]
pub(crate) struct Routes {
    routes: HashMap<String, Route>,
    /// The destinations' names in the config's order: reservations walk them in it.
    names: Vec<String>,
    /// The destinations with a circuit breaker: a claim leaves them out while it is not closed.
    breakers: Vec<String>,
    global: Arc<Semaphore>,
    /// `dispatcher.max_in_flight`: the global slots in all.
    max_in_flight: usize,
    /// `dispatcher.claim_batch`: the most one claim takes.
    claim_batch: usize,
    /// `dispatcher.partitions`: what every destination's limits are split into.
    partitions: u32,
    /// Destinations that hit their rate limit, and until when to leave them out of claims.
    throttled: Mutex<HashMap<String, Instant>>,
    /// The partitions this process leads now (indexes, sorted); they size its part of every
    /// destination's limits.
    led: Mutex<Vec<u32>>,
}

/// One partition this process leads, counted in [`Routes`] while it lives.
#[derive(Debug)]
pub(crate) struct Leading(Arc<Routes>, Partition);

impl Drop for Leading {
    fn drop(&mut self) {
        self.0.stop_leading(self.1);
    }
}

impl Routes {
    /// The routes of `config`'s destinations. No partition is led yet: no slot and no budget
    /// until one is ([`Routes::leading`]).
    pub(crate) fn new(config: &Config) -> Result<Routes, reqwest::Error> {
        let mut routes = HashMap::new();
        let keys = Arc::new(config.encryption.keys.clone());
        for (name, d) in &config.destinations {
            routes.insert(
                name.clone(),
                Route {
                    sender: Sender::new(d, config.dispatcher.max_body_bytes)?
                        .with_keys(keys.clone()),
                    slots: Arc::default(),
                    limiter: d
                        .rate_limit
                        .map(|_| Mutex::new(Bucket::new(std::time::Instant::now()))),
                },
            );
        }
        Ok(Routes {
            routes,
            names: config.destinations.keys().cloned().collect(),
            breakers: config
                .destinations
                .iter()
                .filter(|(_, d)| d.breaker.is_some())
                .map(|(name, _)| name.clone())
                .collect(),
            global: Arc::new(Semaphore::new(config.dispatcher.max_in_flight)),
            max_in_flight: config.dispatcher.max_in_flight,
            claim_batch: config.dispatcher.claim_batch as usize,
            partitions: config.dispatcher.partitions,
            throttled: Mutex::default(),
            led: Mutex::default(),
        })
    }

    /// The configured destinations' names, in the config's order.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// The route to `destination`, if it is configured.
    pub(crate) fn route(&self, destination: &str) -> Option<&Route> {
        self.routes.get(destination)
    }

    /// The destinations that have a circuit breaker (fixed by the config): a claim leaves them
    /// out while their breaker is not closed.
    pub(crate) fn breakers(&self) -> &[String] {
        &self.breakers
    }

    /// How many partitions this process leads now.
    pub(crate) fn led(&self) -> u32 {
        self.led.lock().map_or(0, |led| led.len() as u32)
    }

    /// Counts a partition this process leads, and adds its part to every destination's
    /// limits, until the returned guard is dropped (also when the loop unwinds from a panic, so
    /// the count never drifts) or [`Routes::stop_leading`].
    pub(crate) fn leading(self: &Arc<Self>, partition: Partition) -> Leading {
        self.change_led(|led| {
            if let Err(at) = led.binary_search(&partition.index()) {
                led.insert(at, partition.index());
            }
        });
        Leading(self.clone(), partition)
    }

    /// Takes `partition`'s part out of every destination's limits (again: it is idempotent).
    /// A graceful hand-over calls it before waiting for [`Routes::fit_limits`] and releasing
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
        for route in self.routes.values() {
            let d = route.destination();
            route.slots.set_limit(limits::in_flight_part(
                d.max_in_flight,
                self.partitions,
                &led,
            ));
            if let (Some((n, per)), Some(Ok(mut bucket))) =
                (d.rate_limit, route.limiter.as_ref().map(Mutex::lock))
            {
                let part = limits::rate_part(n, per, self.partitions, led.len());
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

    /// `dispatcher.claim_batch`: the most one claim takes, with what it claims ahead.
    pub(crate) fn claim_batch(&self) -> usize {
        self.claim_batch
    }

    /// How many of `destination`'s ops one partition's claim may take beyond its free slots,
    /// to hold until they free (`dispatcher.claim_ahead` caps it over all destinations): this
    /// process's part of its `max_in_flight` shared among the partitions it leads, so a held
    /// op waits about one answer's time for its slot; none with a `rate_limit`, whose budget,
    /// not its slots, says when an op may start.
    pub(crate) fn ahead_room(&self, destination: &str) -> usize {
        let Some(route) = self.routes.get(destination) else {
            return 0;
        };
        if route.limiter.is_some() {
            return 0;
        }
        route.slots.limit().div_ceil(self.led().max(1) as usize)
    }

    /// How many ops one claim may take: free global slots, at most `claim_batch`.
    pub(crate) fn room(&self) -> usize {
        self.global.available_permits().min(self.claim_batch)
    }

    /// Reserves what the next claim may take: of every destination that can start attempts
    /// now, is not throttled and not `skipped`, its free slots, this process's free global
    /// slots and its rate budget for them, at most `claim_batch` in all; the claim then takes
    /// no more of each destination's ops than it can start (issue 34). A destination is
    /// worth a claim while none of its attempts runs (an idle one claims at once, for
    /// latency), otherwise once half of what it may have in flight at once (its slots, at
    /// most `claim_batch` and the global limit) is free: while attempts are running, claims of
    /// one op at a time would cost the database a statement per op. A destination whose ops
    /// are `in_hand` (claimed ahead, `dispatcher.claim_ahead`) is worth it at every free slot:
    /// starting them costs the database nothing. Reserving before the claim is sent also keeps
    /// the partition loops of this process from claiming the same free slots twice.
    pub(crate) fn reserve(
        &self,
        skipped: impl Fn(&str) -> bool,
        in_hand: impl Fn(&str) -> bool,
    ) -> Reservation<'_> {
        let whole = self.max_in_flight.min(self.claim_batch);
        let mut throttled = self.throttled();
        let mut rooms = Vec::new();
        let mut left = self.room();
        // In name order (the config's), so the global slots go the same way every time.
        for name in &self.names {
            if left == 0 {
                break;
            }
            if throttled.contains_key(name) || skipped(name) {
                continue;
            }
            let route = &self.routes[name];
            let free = route.slots.available().min(left);
            let most = route.slots.limit().min(whole);
            let worth = in_hand(name) || route.slots.taken() == 0 || free >= (most / 2).max(1);
            if free == 0 || !worth {
                continue;
            }
            if let Some(room) = self.reserve_room(name, route, free, &mut throttled) {
                left -= room.permits.len();
                rooms.push(room);
            }
        }
        Reservation {
            routes: self,
            rooms,
        }
    }

    /// Reserves the slots (and rate budget) of one attempt to `destination`, whatever is
    /// running there: a breaker's probe. Empty when it is not configured, is throttled, has no
    /// free slot or no budget left; out of budget, it is left out of claims for one request's
    /// gap.
    pub(crate) fn reserve_one(&self, destination: &str) -> Reservation<'_> {
        let mut throttled = self.throttled();
        let room = match self.routes.get_key_value(destination) {
            Some((name, route)) if !throttled.contains_key(name) => {
                self.reserve_room(name, route, 1, &mut throttled)
            }
            _ => None,
        };
        Reservation {
            routes: self,
            rooms: room.into_iter().collect(),
        }
    }

    /// Takes up to `want` slots of `route` and of the global limit, with the rate budget for
    /// them. The budget is spent only for slots in hand: a destination without a free slot is
    /// not throttled by attempts it never made; one out of budget is throttled for its gap.
    fn reserve_room(
        &self,
        name: &str,
        route: &Route,
        want: usize,
        throttled: &mut HashMap<String, Instant>,
    ) -> Option<Room> {
        let mut permits = Vec::with_capacity(want);
        while permits.len() < want {
            match (
                self.global.clone().try_acquire_owned(),
                route.slots.try_take(),
            ) {
                (Ok(global), Some(slot)) => permits.push((global, slot)),
                _ => break,
            }
        }
        if permits.is_empty() {
            return None;
        }
        if let Some(bucket) = &route.limiter {
            match lock(bucket).take_up_to(permits.len(), std::time::Instant::now()) {
                Ok(n) => permits.truncate(n),
                Err(gap) => {
                    throttled.insert(name.to_owned(), Instant::now() + gap);
                    return None;
                }
            }
        }
        Some(Room {
            destination: name.to_owned(),
            permits,
        })
    }

    /// How many requests this process is sending now to destinations without a breaker (their
    /// slots are freed when the exchange ends; a breaker's are held until the outcome is
    /// recorded, so they would count attempts already waiting for the recorder).
    pub(crate) fn sending(&self) -> usize {
        self.routes
            .values()
            .filter(|r| r.destination().breaker.is_none())
            .map(|r| r.slots.taken())
            .sum()
    }

    /// The longest timeout among `destinations`: what a claim for them must leave time for.
    pub(crate) fn longest_timeout(&self, destinations: &[String]) -> Duration {
        destinations
            .iter()
            .filter_map(|d| self.routes.get(d))
            .map(|r| r.destination().timeout)
            .max()
            .unwrap_or_default()
    }

    /// The throttled destinations, those whose gap has passed taken out.
    fn throttled(&self) -> MutexGuard<'_, HashMap<String, Instant>> {
        let now = Instant::now();
        let mut throttled = lock(&self.throttled);
        throttled.retain(|_, until| *until > now);
        throttled
    }
}

/// A lock whose holder panicked still guards a consistent value: take it back.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One destination's part of a [`Reservation`]: the slots its claimed ops will use.
#[derive(Debug)]
struct Room {
    destination: String,
    permits: Vec<Permits>,
}

/// What the next claim may take, reserved before it is sent ([`Routes::reserve`],
/// [`Routes::reserve_one`]): of each destination, the slots (and rate budget) of as many ops as
/// it can start now. The claim takes no more than that of each; every op it took gets its
/// slots from here ([`Reservation::take`]), and what it did not use is given back when this is
/// dropped.
#[derive(Debug)]
pub(crate) struct Reservation<'a> {
    routes: &'a Routes,
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

    /// How many ops of `destination` the slots reserved and not yet taken can start.
    pub(crate) fn left(&self, destination: &str) -> usize {
        self.rooms
            .iter()
            .find(|r| r.destination == destination)
            .map_or(0, |r| r.permits.len())
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
                .routes
                .routes
                .get(&room.destination)
                .and_then(|r| r.limiter.as_ref());
            if let (Some(bucket), true) = (bucket, unused > 0) {
                lock(bucket).give_back(unused);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The routes of `config_text`.
    fn routes(config_text: &str) -> Arc<Routes> {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let text = format!("[database]\nurl = \"sqlite:///unused.db\"\n{config_text}");
        let config = Config::load(Some(&text), &HashMap::new()).unwrap();
        Arc::new(Routes::new(&config).unwrap())
    }

    /// The slots of one attempt to `destination` (as a probe takes them), if it may start one.
    fn admit(routes: &Routes, destination: &str) -> Option<Permits> {
        routes.reserve_one(destination).take(destination)
    }

    fn rooms(shared: &Routes) -> Vec<(String, u32)> {
        let reserved = shared.reserve(|_| false, |_| false);
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
        let shared = routes(
            "[dispatcher]\npartitions = 1\nmax_in_flight = 16\n\
             [destinations.a]\nbase_url = \"http://127.0.0.1:1\"\nmax_in_flight = 64\n",
        );
        let _leading = shared.leading(Partition::new(0, 1).unwrap());
        assert_eq!(rooms(&shared), [("a".to_owned(), 16)], "idle: all at once");
        let mut running: Vec<Permits> = (0..16).filter_map(|_| admit(&shared, "a")).collect();
        assert_eq!(running.len(), 16);
        assert!(rooms(&shared).is_empty(), "nothing free");
        running.truncate(9);
        assert!(rooms(&shared).is_empty(), "7 free: less than half of 16");
        running.truncate(8);
        assert_eq!(rooms(&shared), [("a".to_owned(), 8)], "8 free of 16");
    }

    /// Issue 36, item 3: what a partition's claim may take ahead of its free slots is this
    /// process's part of the destination's `max_in_flight` shared by the partitions it leads;
    /// none for a rate-limited destination (its budget paces it) or one not configured.
    #[tokio::test]
    async fn claims_ahead_take_a_destination_s_part_shared_by_the_partitions_led() {
        let shared = routes(
            "[dispatcher]\npartitions = 4\n\
             [destinations.a]\nbase_url = \"http://127.0.0.1:1\"\nmax_in_flight = 32\n\
             [destinations.b]\nbase_url = \"http://127.0.0.1:1\"\nrate_limit = \"100/s\"\n",
        );
        let _first = shared.leading(Partition::new(0, 4).unwrap());
        assert_eq!(
            shared.ahead_room("a"),
            8,
            "one partition of 4: its part, 8 of 32"
        );
        let _second = shared.leading(Partition::new(1, 4).unwrap());
        assert_eq!(
            shared.ahead_room("a"),
            8,
            "two of 4: 16 of 32, shared by the two"
        );
        let _all: Vec<Leading> = (2..4)
            .map(|p| shared.leading(Partition::new(p, 4).unwrap()))
            .collect();
        assert_eq!(shared.ahead_room("a"), 8, "all four: 32, shared by four");
        assert_eq!(shared.ahead_room("b"), 0, "rate limited");
        assert_eq!(shared.ahead_room("c"), 0, "not configured");
    }

    /// Issue 34, items 3 and 4: a slow destination with one slot free of 200 does not make an
    /// idle one wait, and a claim's room is each destination's own, not their sum.
    #[tokio::test]
    async fn each_destination_is_worth_a_claim_on_its_own() {
        let shared = routes(
            "[dispatcher]\npartitions = 1\nmax_in_flight = 256\nclaim_batch = 128\n\
             [destinations.a]\nbase_url = \"http://127.0.0.1:1\"\nmax_in_flight = 200\n\
             [destinations.b]\nbase_url = \"http://127.0.0.1:1\"\nmax_in_flight = 32\n",
        );
        let _leading = shared.leading(Partition::new(0, 1).unwrap());
        let running: Vec<Permits> = (0..199).filter_map(|_| admit(&shared, "a")).collect();
        assert_eq!(running.len(), 199);
        // a: one slot free of 200, not worth a claim yet; b idle: at once, its own 32 slots
        // (and the 57 global slots left do not add up to anything more for it).
        assert_eq!(rooms(&shared), [("b".to_owned(), 32)]);
        // What a claim reserved is not reserved again by the next (another partition's loop).
        let first = shared.reserve(|_| false, |_| false);
        assert_eq!(first.left("b"), 32);
        assert!(rooms(&shared).is_empty(), "b's slots are the first claim's");
        drop(first);
        assert_eq!(rooms(&shared), [("b".to_owned(), 32)], "given back");
        // With ops of a in hand (claimed ahead), its one free slot is worth reserving.
        let held = shared.reserve(|_| false, |d| d == "a");
        assert_eq!((held.left("a"), held.left("b")), (1, 32));
    }

    /// Issue 34, item 3: admission spent a rate-limit token even when no slot was free, so a
    /// rate-limited destination was throttled further by attempts it never made.
    #[tokio::test]
    async fn no_budget_is_spent_without_a_slot() {
        let shared = routes(
            "[dispatcher]\npartitions = 1\n\
             [destinations.r]\nbase_url = \"http://127.0.0.1:1\"\nmax_in_flight = 1\n\
             rate_limit = \"2/h\"\n",
        );
        let _leading = shared.leading(Partition::new(0, 1).unwrap());
        let first = admit(&shared, "r").expect("a slot and a token");
        for _ in 0..5 {
            assert!(admit(&shared, "r").is_none(), "no slot free");
        }
        drop(first);
        assert!(
            admit(&shared, "r").is_some(),
            "the second token of the burst is still there"
        );
    }

    /// Issue 12, item 7: the largest values the config accepts build the routes without
    /// panicking (before, a semaphore larger than tokio's limit, or a rate
    /// limit whose period rounded to zero, panicked here).
    #[test]
    fn the_largest_accepted_limits_do_not_panic() {
        let shared = routes(
            "[dispatcher]\nmax_in_flight = 65536\nclaim_batch = 1000\n\
             [destinations.b]\nbase_url = \"http://127.0.0.1:1\"\nmax_in_flight = 65536\nrate_limit = \"1000000/s\"\n\
             [destinations.c]\nbase_url = \"http://127.0.0.1:1\"\nrate_limit = \"1/h\"\n",
        );
        assert_eq!(shared.global.available_permits(), 65536);
        let count = shared.partitions;
        let all: Vec<Leading> = (0..count)
            .map(|i| shared.leading(Partition::new(i, count).unwrap()))
            .collect();
        assert_eq!(shared.routes["b"].slots.available(), 65536);
        for name in ["b", "c"] {
            assert!(shared.routes[name].limiter.is_some());
            assert!(admit(&shared, name).is_some(), "{name}");
        }
        drop(all);
        assert_eq!(shared.led(), 0);
        assert!(
            admit(&shared, "b").is_none(),
            "no partition led, nothing admitted"
        );
    }
}

//! A cut or slow network (issue 38). One of the two dispatchers (`d0`) runs in a network
//! namespace of the test's own (`outbox_tests::netns`): it reaches the database over one veth
//! link and the destination over another, each through a relay on the host's end of its link
//! (`outbox_tests::slow_link`). The workers and the other dispatcher stay on this host. While
//! the workers enqueue:
//!
//! - `cut_from_database`: `d0`'s database link is cut for 12 s (`ip link set down`), its
//!   destination still reachable. It cannot renew its partition lease, so it must stop sending
//!   before that lease ends: the destination's relay shows nothing from `d0` after the cut plus
//!   the lease. The other dispatcher takes its partition over.
//! - `cut_from_destination`: the reverse; `d0` keeps its partition and its attempts fail until
//!   the link is healed, then it delivers.
//! - `slow_destination`: what `d0` sends to the destination waits 8 s in the link (a network
//!   queue, past the 3 s lease: the seed's "40 seconds in a network queue") while its database
//!   link is cut, so the other dispatcher takes over and sends the same ops again; `d0`'s
//!   copies arrive after them. The destination sees the same idempotency key, body and
//!   `X-Fencing-Token` on both (docs/guarantees.md, "What a destination must do").
//!
//! Each is checked by the chaos checker's counts and prints the time from the fault's end to
//! the next delivery. The kernel here has no `netem` (`CONFIG_NET_SCH_NETEM` is not set), so
//! the delay is the relay's queue, a separate TCP hop, rather than `tc netem delay`.

use std::time::{Duration, Instant};

use outbox_tests::netns::Netns;
use outbox_tests::slow_link::SlowLink;
use outbox_tests::{TestDb, wait_for};

use crate::fault::{Fault, LEASE, Outcome, run_through};
use crate::procs::Dispatcher;
use crate::run::Run;

/// How long each fault lasts.
const LASTING: Duration = Duration::from_secs(12);
/// How long the slow link holds each piece sent to the destination.
const QUEUED: Duration = Duration::from_secs(8);

/// The database link of `d0`'s namespace.
const DATABASE: usize = 0;
/// Its destination link.
const DESTINATION: usize = 1;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_from_database() {
    let mut fault = Partition::new(Kind::CutFromDatabase);
    let outcome = fault.run(0x2E7_0001).await;
    outcome.assert_recovered("a cut from the database", LEASE * 4, false);
    let after = fault.sent_after_cut.expect("the cut happened");
    // The trusted window ends a tenth of the lease before the lease, counted from the last
    // renewal sent before the cut; attempts end within it. A little slack for the relay.
    let bound = LEASE + Duration::from_millis(500);
    assert!(
        after <= bound,
        "d0 sent to the destination {after:?} after it was cut from the database, past its \
         lease ({LEASE:?}): a leader that cannot renew must stop first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_from_destination() {
    let mut fault = Partition::new(Kind::CutFromDestination);
    let outcome = fault.run(0x2E7_0002).await;
    outcome.assert_recovered("a cut from the destination", LEASE * 4, false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_destination() {
    let mut fault = Partition::new(Kind::SlowDestination);
    let outcome = fault.run(0x2E7_0003).await;
    outcome.assert_recovered("a slow link to the destination", LEASE * 4, false);
    assert!(
        outcome.late_copies > 0,
        "no request of d0 arrived after the new leader's copy had been answered: the run did \
         not show the delayed request"
    );
}

/// Which link fails, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    CutFromDatabase,
    CutFromDestination,
    SlowDestination,
}

/// `d0` in a namespace and the fault on its links.
struct Partition {
    kind: Kind,
    netns: Option<Netns>,
    links: Vec<SlowLink>,
    cut_at: Option<Instant>,
    /// How long after the cut `d0` last sent the destination something.
    sent_after_cut: Option<Duration>,
    /// How long after the cut the other dispatcher led both partitions, when `d0` is cut from
    /// the database.
    takeover: Option<tokio::task::JoinHandle<Duration>>,
}

impl Partition {
    fn new(kind: Kind) -> Partition {
        Partition {
            kind,
            netns: None,
            links: Vec::new(),
            cut_at: None,
            sent_after_cut: None,
            takeover: None,
        }
    }

    async fn run(&mut self, seed: u64) -> Outcome {
        let db = TestDb::postgres_own_cluster()
            .await
            .expect("a PostgreSQL of the test's own (the namespace reaches it through a relay)");
        run_through(db, seed, self, LASTING).await
    }

    fn netns(&self) -> &Netns {
        self.netns.as_ref().expect("prepared")
    }
}

impl Fault for Partition {
    fn name(&self) -> &'static str {
        match self.kind {
            Kind::CutFromDatabase => "cut from the database",
            Kind::CutFromDestination => "cut from the destination",
            Kind::SlowDestination => "slow destination link",
        }
    }

    /// `d0` stopped on this host and started again inside the namespace, on a config of its
    /// own that names the relays on the host's ends of its links.
    async fn prepare(&mut self, run: &mut Run) {
        let netns = Netns::create(2).unwrap_or_else(|e| panic!("{e}"));
        let database = SlowLink::start_on(netns.link(DATABASE).host_ip.into(), run.db.url()).await;
        let destination_url = run.destination.url();
        let destination =
            SlowLink::start_on(netns.link(DESTINATION).host_ip.into(), &destination_url).await;
        let dir = run.logs.path().join("netns");
        std::fs::create_dir(&dir).expect("a folder for d0's config");
        let config = Dispatcher::configure_with_lease(
            &dir,
            &database.in_front_of(run.db.url()),
            &destination.in_front_of(&destination_url),
            2,
            LEASE,
        );
        let old = std::mem::replace(
            &mut run.dispatchers[0],
            Dispatcher::start_in(&config, "d0", &netns),
        );
        old.stop();
        // Each of the two leads one partition before the workers start.
        let store = run.db.store().await;
        let store = &store;
        wait_for(
            Duration::from_secs(60),
            "d0 (in the namespace) and d1 lead a partition each",
            || async move { (outbox_tests::split(store).await == [1, 1]).then_some(()) },
        )
        .await;
        self.links = vec![database, destination];
        self.netns = Some(netns);
    }

    async fn begin(&mut self, run: &Run) -> String {
        let store = run.db.store().await;
        let said = match self.kind {
            Kind::CutFromDatabase => {
                self.cut_at = Some(Instant::now());
                self.netns().cut(DATABASE).unwrap_or_else(|e| panic!("{e}"));
                "d0's database link cut".to_owned()
            }
            Kind::CutFromDestination => {
                self.cut_at = Some(Instant::now());
                self.netns()
                    .cut(DESTINATION)
                    .unwrap_or_else(|e| panic!("{e}"));
                return "d0's destination link cut".to_owned();
            }
            Kind::SlowDestination => {
                // What d0 sends from now on waits in the link; a moment later (requests on
                // their way, attempts timed out and retried) it is cut from the database, so
                // the other dispatcher takes its partition over and sends them again.
                self.links[DESTINATION].queue_requests(QUEUED);
                tokio::time::sleep(Duration::from_millis(1500)).await;
                self.cut_at = Some(Instant::now());
                self.netns().cut(DATABASE).unwrap_or_else(|e| panic!("{e}"));
                format!(
                    "d0's requests held {QUEUED:?} on the way, and 1.5 s later its database \
                     link cut"
                )
            }
        };
        let cut_at = self.cut_at.expect("just cut");
        self.takeover = Some(tokio::spawn(async move {
            while outbox_tests::split(&store).await != [2] {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            cut_at.elapsed()
        }));
        said
    }

    async fn end(&mut self, _run: &Run) -> String {
        if let (Some(cut), Some(last)) = (self.cut_at, self.links[DESTINATION].last_sent())
            && self.kind != Kind::CutFromDestination
        {
            self.sent_after_cut = Some(last.saturating_duration_since(cut));
        }
        match self.kind {
            Kind::CutFromDatabase | Kind::SlowDestination => {
                self.netns()
                    .heal(DATABASE)
                    .unwrap_or_else(|e| panic!("{e}"));
                self.links[DESTINATION].queue_requests(Duration::ZERO);
            }
            Kind::CutFromDestination => {
                self.netns()
                    .heal(DESTINATION)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
        let takeover = match self.takeover.take() {
            Some(task) if task.is_finished() => {
                let took = task.await.expect("the takeover watch");
                format!(
                    "; d1 led both partitions {:.1} s after the cut",
                    took.as_secs_f64()
                )
            }
            Some(task) => {
                task.abort();
                "; d1 did not lead both partitions before the heal".to_owned()
            }
            None => String::new(),
        };
        match self.sent_after_cut {
            Some(d) => format!(
                "healed; d0 last sent the destination {:.1} s after the fault began{takeover}",
                d.as_secs_f64()
            ),
            None => format!("healed{takeover}"),
        }
    }
}

//! The chaos checker: from the workers' logs, the outbox table and what the destination
//! received, counts what a correct system must keep at zero (lost, stale and unexpected sends,
//! order violations, differing duplicates, unclean graceful leaves) and what the run must have
//! exercised (membership changes too, in the variant that makes them).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use outbox_tests::Received;

/// How long the destination holds a stalled request: past the dispatcher's 1 s timeout.
pub(crate) const STALL: Duration = Duration::from_secs(2);

/// How a request was answered, as the dispatcher saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// 2xx in time: the dispatcher learnt it was delivered.
    Ok,
    /// Another status (503): the dispatcher retries.
    Failed,
    /// Held past the dispatcher's timeout: it never learnt the outcome and retries.
    Stalled,
}

impl Answer {
    fn of(request: &Received) -> Answer {
        if request.delay >= STALL {
            Answer::Stalled
        } else if (200..300).contains(&request.status) {
            Answer::Ok
        } else {
            Answer::Failed
        }
    }
}

fn key(request: &Received) -> &str {
    request.header("idempotency-key")
}

fn token(request: &Received) -> &str {
    request.header("x-fencing-token")
}

/// What one enqueue attempt returned, as the worker logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Stored.
    Accepted,
    /// The key was already stored (the same request).
    Duplicate,
    /// Refused: a newer owner holds the resource.
    Stale,
    /// Refused: the lease had expired.
    Expired,
    /// Refused: no lease held.
    NoLease,
    /// The database failed; whether it committed is read from the table.
    Error,
}

/// One logged enqueue attempt.
#[derive(Debug, Clone)]
pub(crate) struct Enqueue {
    /// The worker that tried it.
    pub(crate) worker: String,
    /// The fencing token it used.
    pub(crate) token: i64,
    /// The op's idempotency key.
    pub(crate) key: String,
    /// What it returned.
    pub(crate) outcome: Outcome,
    /// Part of an all-or-nothing batch.
    pub(crate) batch: bool,
}

/// What one worker printed, parsed.
#[derive(Debug, Default)]
pub(crate) struct WorkerLog {
    /// Every enqueue attempt.
    pub(crate) enqueues: Vec<Enqueue>,
    /// Leases acquired (jobs started).
    pub(crate) jobs: usize,
    /// Jobs stopped by the keeper's lost signal before an enqueue.
    pub(crate) lost: usize,
    /// Database errors outside an enqueue (acquire, release).
    pub(crate) errors: usize,
}

impl WorkerLog {
    /// Parses the JSON lines of worker `worker`; panics on a line that is not an event.
    pub(crate) fn parse(worker: &str, lines: &[String]) -> WorkerLog {
        let mut log = WorkerLog::default();
        for line in lines {
            let event: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("worker {worker} printed {line:?}: {e}"));
            match event["event"].as_str() {
                Some("acquired") => log.jobs += 1,
                Some("lost") => log.lost += 1,
                Some("error") => log.errors += 1,
                Some("enqueue") => {
                    let outcome = match event["result"]["outcome"].as_str() {
                        Some("accepted") => Outcome::Accepted,
                        Some("duplicate") => Outcome::Duplicate,
                        Some("stale") => Outcome::Stale,
                        Some("expired") => Outcome::Expired,
                        Some("no_lease") => Outcome::NoLease,
                        Some("error") => Outcome::Error,
                        other => panic!("worker {worker}: unknown outcome {other:?} in {line}"),
                    };
                    log.enqueues.push(Enqueue {
                        worker: worker.to_owned(),
                        token: event["token"].as_i64().expect("token"),
                        key: event["key"].as_str().expect("key").to_owned(),
                        outcome,
                        batch: event["batch"].as_bool().unwrap_or(false),
                    });
                }
                _ => {}
            }
        }
        log
    }
}

/// An op row as the table holds it after the drain.
#[derive(Debug, Clone)]
pub(crate) struct StoredOp {
    /// Idempotency key.
    pub(crate) key: String,
    /// The resource whose lease fenced it.
    pub(crate) resource: String,
    /// Order key; `None` for an unordered op.
    pub(crate) order_key: Option<String>,
    /// Enqueue sequence.
    pub(crate) seq: i64,
    /// Its fencing token.
    pub(crate) fence: i64,
    /// State.
    pub(crate) state: String,
    /// Body.
    pub(crate) body: Vec<u8>,
}

/// The faults the driver injected.
#[derive(Debug, Default, Clone)]
pub(crate) struct Faults {
    /// Workers stopped past their lease.
    pub(crate) pauses: usize,
    /// Dispatcher processes killed with SIGKILL and replaced.
    pub(crate) dispatcher_restarts: usize,
    /// Dispatchers stopped past their partition lease.
    pub(crate) dispatcher_pauses: usize,
    /// Database server restarts.
    pub(crate) database_restarts: usize,
    /// What the membership variant did to the dispatchers; `None` in the other runs.
    pub(crate) membership: Option<Membership>,
}

/// The membership variant's changes: instances joining, leaving gracefully and starting again,
/// and the split of the partitions the driver saw as it changed.
#[derive(Debug, Default, Clone)]
pub(crate) struct Membership {
    /// Instances started while another ran (the second and the third).
    pub(crate) joined: usize,
    /// Graceful leaves (SIGTERM) that exited 0.
    pub(crate) left: usize,
    /// Graceful leaves that did not exit 0, or not in time: how each ended.
    pub(crate) unclean_leaves: Vec<String>,
    /// Instances started again after a graceful leave.
    pub(crate) rejoined: usize,
    /// The partitions each live instance led (largest first), every time the driver saw it
    /// change, from the membership table.
    pub(crate) splits: Vec<Vec<u32>>,
}

impl Membership {
    /// How many live instances led a partition at once, at most.
    pub(crate) fn most_leaders(&self) -> usize {
        let leaders = |s: &Vec<u32>| s.iter().filter(|n| **n > 0).count();
        self.splits.iter().map(leaders).max().unwrap_or(0)
    }

    /// What the run must have exercised: (what, count) pairs that must not be zero.
    fn exercised(&self) -> [(&'static str, usize); 5] {
        [
            ("joins", self.joined),
            ("graceful leaves", self.left + self.unclean_leaves.len()),
            ("starts after a leave", self.rejoined),
            ("split changes", self.splits.len().saturating_sub(1)),
            (
                "splits with three leaders",
                usize::from(self.most_leaders() >= 3),
            ),
        ]
    }
}

impl fmt::Display for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: Vec<String> = self
            .splits
            .iter()
            .take(16)
            .map(|s| format!("{s:?}"))
            .collect();
        let more = self.splits.len().saturating_sub(shown.len());
        write!(
            f,
            "  (g) membership: {} joins, {} graceful leaves ({} exited 0), {} starts after a leave, \
             at most {} leaders at once; split changed {} times: {}{} [{}]",
            self.joined,
            self.left + self.unclean_leaves.len(),
            self.left,
            self.rejoined,
            self.most_leaders(),
            self.splits.len().saturating_sub(1),
            shown.join(" → "),
            if more > 0 {
                format!(" → … ({more} more)")
            } else {
                String::new()
            },
            if self.unclean_leaves.is_empty() && self.exercised().iter().all(|(_, n)| *n > 0) {
                "ok"
            } else {
                "FAILED"
            }
        )
    }
}

/// Everything the checker reads.
#[derive(Debug, Default)]
pub(crate) struct Evidence {
    /// The workers' parsed logs.
    pub(crate) workers: Vec<WorkerLog>,
    /// The outbox table.
    pub(crate) ops: Vec<StoredOp>,
    /// Attempt rows that did not deliver (503, timeouts, killed mid-attempt).
    pub(crate) failed_attempts: usize,
    /// The destination's record, in arrival order.
    pub(crate) requests: Vec<Received>,
    /// Injected faults.
    pub(crate) faults: Faults,
}

/// The checker's findings; [`Report::problems`] lists what breaks a guarantee.
#[derive(Debug, Default)]
pub(crate) struct Report {
    workers: usize,
    jobs: usize,
    lost_signals: usize,
    worker_errors: usize,
    attempts: usize,
    in_batches: usize,
    accepted: usize,
    duplicate_enqueues: usize,
    stale: usize,
    expired: usize,
    no_lease: usize,
    uncertain: usize,
    uncertain_stored: usize,
    requests: usize,
    failed: usize,
    stalled: usize,
    failed_attempts: usize,
    faults: Faults,
    /// (a) accepted keys never answered 200 in time, or not delivered in the table.
    lost: Vec<String>,
    /// (b) refused keys that reached the destination.
    stale_sends: Vec<String>,
    /// (b) refused keys that are in the table anyway.
    stale_stored: Vec<String>,
    /// (b) ops stored after an op of a newer token of their resource.
    stale_accepts: Vec<String>,
    /// (c) requests without a matching accepted op, and table rows no worker accepted.
    unexpected: Vec<String>,
    /// (d) order keys checked.
    order_keys: usize,
    /// (d) first deliveries out of enqueue order.
    out_of_order: Vec<String>,
    /// (e) keys received more than once.
    duplicate_keys: usize,
    /// (e) requests beyond the first of their key.
    duplicate_requests: usize,
    /// (e) keys whose copies differ.
    differing_duplicates: Vec<String>,
}

/// The evidence indexed by idempotency key.
struct Index<'a> {
    /// Ops in the table.
    stored: HashMap<&'a str, &'a StoredOp>,
    /// Keys committed (accepted, or unknown and found in the table), with their token.
    accepted: HashMap<&'a str, i64>,
    /// Keys refused (or unknown and not in the table).
    refused: HashSet<&'a str>,
    /// Requests per key, with their arrival index.
    by_key: HashMap<&'a str, Vec<(usize, &'a Received)>>,
}

impl Report {
    /// Checks (a)–(f) over `evidence`.
    pub(crate) fn new(evidence: &Evidence) -> Report {
        let mut r = Report {
            workers: evidence.workers.len(),
            requests: evidence.requests.len(),
            failed_attempts: evidence.failed_attempts,
            faults: evidence.faults.clone(),
            ..Report::default()
        };
        let ix = r.tally(evidence);
        r.check_lost(&ix);
        r.check_stale(&ix, &evidence.ops);
        r.check_unexpected(&ix, &evidence.ops);
        r.check_order(&ix, &evidence.ops);
        r.check_duplicates(&ix);
        r
    }

    /// Counts the attempts and requests and indexes them; an unknown outcome is resolved by
    /// the table, and a definite refusal found in the table is recorded for (b).
    fn tally<'a>(&mut self, evidence: &'a Evidence) -> Index<'a> {
        let stored: HashMap<&str, &StoredOp> =
            evidence.ops.iter().map(|o| (o.key.as_str(), o)).collect();
        let mut accepted: HashMap<&str, i64> = HashMap::new();
        let mut refused: HashSet<&str> = HashSet::new();
        for log in &evidence.workers {
            self.jobs += log.jobs;
            self.lost_signals += log.lost;
            self.worker_errors += log.errors;
            for e in &log.enqueues {
                self.attempts += 1;
                self.in_batches += usize::from(e.batch);
                match e.outcome {
                    Outcome::Accepted => self.accepted += 1,
                    Outcome::Duplicate => self.duplicate_enqueues += 1,
                    Outcome::Stale => self.stale += 1,
                    Outcome::Expired => self.expired += 1,
                    Outcome::NoLease => self.no_lease += 1,
                    Outcome::Error => self.uncertain += 1,
                }
                let committed = match e.outcome {
                    Outcome::Accepted | Outcome::Duplicate => true,
                    Outcome::Stale | Outcome::Expired | Outcome::NoLease => false,
                    Outcome::Error => {
                        let in_table = stored.contains_key(e.key.as_str());
                        self.uncertain_stored += usize::from(in_table);
                        in_table
                    }
                };
                if committed {
                    accepted.insert(&e.key, e.token);
                } else {
                    if e.outcome != Outcome::Error && stored.contains_key(e.key.as_str()) {
                        self.stale_stored
                            .push(format!("{} (by {}, token {})", e.key, e.worker, e.token));
                    }
                    refused.insert(&e.key);
                }
            }
        }

        let mut by_key: HashMap<&str, Vec<(usize, &Received)>> = HashMap::new();
        for (i, req) in evidence.requests.iter().enumerate() {
            by_key.entry(key(req)).or_default().push((i, req));
            match Answer::of(req) {
                Answer::Ok => {}
                Answer::Failed => self.failed += 1,
                Answer::Stalled => self.stalled += 1,
            }
        }
        Index {
            stored,
            accepted,
            refused,
            by_key,
        }
    }

    /// (a) Every accepted op was answered 2xx in time at least once and is delivered.
    fn check_lost(&mut self, ix: &Index<'_>) {
        let mut lost: Vec<&str> = ix
            .accepted
            .keys()
            .copied()
            .filter(|key| {
                let acknowledged = ix
                    .by_key
                    .get(key)
                    .is_some_and(|reqs| reqs.iter().any(|(_, q)| Answer::of(q) == Answer::Ok));
                let delivered = ix.stored.get(key).is_some_and(|o| o.state == "delivered");
                !(acknowledged && delivered)
            })
            .collect();
        lost.sort_unstable();
        self.lost = lost.into_iter().map(str::to_owned).collect();
    }

    /// (b) No refused key reached the destination; and, whatever the workers believed, per
    /// resource the tokens of stored ops never go down in enqueue order: nothing was accepted
    /// from an owner already superseded.
    fn check_stale(&mut self, ix: &Index<'_>, ops: &[StoredOp]) {
        self.stale_sends = ix
            .refused
            .iter()
            .filter(|key| ix.by_key.contains_key(*key))
            .map(|key| (*key).to_owned())
            .collect();
        self.stale_sends.sort_unstable();
        let mut by_resource: BTreeMap<&str, Vec<&StoredOp>> = BTreeMap::new();
        for op in ops {
            by_resource.entry(&op.resource).or_default().push(op);
        }
        for (resource, mut ops) in by_resource {
            ops.sort_by_key(|o| o.seq);
            for pair in ops.windows(2) {
                if pair[1].fence < pair[0].fence {
                    self.stale_accepts.push(format!(
                        "{resource}: {} (token {}) stored after {} (token {})",
                        pair[1].key, pair[1].fence, pair[0].key, pair[0].fence
                    ));
                }
            }
        }
    }

    /// (c) Every request matches an accepted op (key, token and body), and every row in the
    /// table was enqueued by a worker.
    fn check_unexpected(&mut self, ix: &Index<'_>, ops: &[StoredOp]) {
        for (key, reqs) in &ix.by_key {
            let (Some(token), Some(op)) = (ix.accepted.get(key), ix.stored.get(key)) else {
                if !ix.refused.contains(key) {
                    self.unexpected
                        .push(format!("{key}: {} requests, no op", reqs.len()));
                }
                continue;
            };
            for (i, req) in reqs {
                let sent = self::token(req);
                if sent != token.to_string() || sent != op.fence.to_string() {
                    self.unexpected.push(format!(
                        "{key}: request {i} carries token {sent:?}, accepted with {token}"
                    ));
                }
                if req.body != op.body {
                    self.unexpected
                        .push(format!("{key}: request {i} has a body unlike the op's"));
                }
            }
        }
        for op in ops {
            if !ix.accepted.contains_key(op.key.as_str()) && !ix.refused.contains(op.key.as_str()) {
                self.unexpected
                    .push(format!("{}: in the table, no worker enqueued it", op.key));
            }
        }
        self.unexpected.sort_unstable();
    }

    /// (d) Per order key, first arrivals follow enqueue order.
    fn check_order(&mut self, ix: &Index<'_>, ops: &[StoredOp]) {
        let mut streams: BTreeMap<&str, Vec<&StoredOp>> = BTreeMap::new();
        for op in ops {
            if let Some(order_key) = &op.order_key
                && ix.accepted.contains_key(op.key.as_str())
            {
                streams.entry(order_key).or_default().push(op);
            }
        }
        self.order_keys = streams.len();
        for (order_key, mut ops) in streams {
            ops.sort_by_key(|o| o.seq);
            let mut previous: Option<(usize, &StoredOp)> = None;
            for op in ops {
                let Some(first) = ix.by_key.get(op.key.as_str()).map(|reqs| reqs[0].0) else {
                    continue; // counted as lost
                };
                if let Some((before, earlier)) = previous
                    && first < before
                {
                    self.out_of_order.push(format!(
                        "{order_key}: {} (seq {}) arrived before {} (seq {})",
                        op.key, op.seq, earlier.key, earlier.seq
                    ));
                }
                previous = Some((first, op));
            }
        }
    }

    /// (e) Duplicates are counted; their copies must be identical.
    fn check_duplicates(&mut self, ix: &Index<'_>) {
        for (key, reqs) in &ix.by_key {
            if reqs.len() > 1 {
                self.duplicate_keys += 1;
                self.duplicate_requests += reqs.len() - 1;
                let (_, first) = reqs[0];
                if reqs
                    .iter()
                    .any(|(_, q)| q.body != first.body || token(q) != token(first))
                {
                    self.differing_duplicates.push((*key).to_owned());
                }
            }
        }
        self.differing_duplicates.sort_unstable();
    }

    /// What breaks a guarantee, or shows the run proved nothing; empty when all held.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut zero = |what: &str, found: &[String]| {
            if !found.is_empty() {
                let shown: Vec<&str> = found.iter().take(5).map(String::as_str).collect();
                problems.push(format!(
                    "{what}: {} (e.g. {})",
                    found.len(),
                    shown.join("; ")
                ));
            }
        };
        zero("(a) lost", &self.lost);
        zero("(b) stale sends", &self.stale_sends);
        zero("(b) refused ops in the table", &self.stale_stored);
        zero("(b) stale accepts", &self.stale_accepts);
        zero("(c) unexpected", &self.unexpected);
        zero("(d) out of order", &self.out_of_order);
        zero("(e) differing duplicates", &self.differing_duplicates);
        if let Some(m) = &self.faults.membership {
            zero("(g) graceful leaves that did not exit 0", &m.unclean_leaves);
        }
        for (what, count) in [
            ("stale rejections", self.stale),
            ("dispatcher restarts", self.faults.dispatcher_restarts),
            ("retries", self.failed_attempts),
        ] {
            if count == 0 {
                problems.push(format!("(f) {what} = 0: the run did not exercise it"));
            }
        }
        if let Some(m) = &self.faults.membership {
            for (what, count) in m.exercised() {
                if count == 0 {
                    problems.push(format!("(g) {what} = 0: the run did not exercise it"));
                }
            }
        }
        problems
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = |n: usize| if n == 0 { "ok" } else { "FAILED" };
        writeln!(
            f,
            "  workers {}: {} jobs, {} stopped on the lost signal, {} database errors outside enqueue",
            self.workers, self.jobs, self.lost_signals, self.worker_errors
        )?;
        writeln!(
            f,
            "  enqueue attempts {} ({} in batches): accepted {}, duplicate {}, refused {} (stale {}, \
             expired {}, no lease {}), unknown outcome {} ({} found stored)",
            self.attempts,
            self.in_batches,
            self.accepted,
            self.duplicate_enqueues,
            self.stale + self.expired + self.no_lease,
            self.stale,
            self.expired,
            self.no_lease,
            self.uncertain,
            self.uncertain_stored
        )?;
        writeln!(
            f,
            "  destination: {} requests ({} answered 503, {} stalled past the timeout)",
            self.requests, self.failed, self.stalled
        )?;
        writeln!(
            f,
            "  (a) lost: {} [{}]",
            self.lost.len(),
            verdict(self.lost.len())
        )?;
        writeln!(
            f,
            "  (b) stale sends: {}, refused ops in the table: {}, ops accepted after a newer token's: {} [{}]",
            self.stale_sends.len(),
            self.stale_stored.len(),
            self.stale_accepts.len(),
            verdict(self.stale_sends.len() + self.stale_stored.len() + self.stale_accepts.len())
        )?;
        writeln!(
            f,
            "  (c) unexpected: {} [{}]",
            self.unexpected.len(),
            verdict(self.unexpected.len())
        )?;
        writeln!(
            f,
            "  (d) out of order: {} over {} order keys [{}]",
            self.out_of_order.len(),
            self.order_keys,
            verdict(self.out_of_order.len())
        )?;
        writeln!(
            f,
            "  (e) duplicates: {} keys received more than once ({} extra requests), {} with differing copies [{}]",
            self.duplicate_keys,
            self.duplicate_requests,
            self.differing_duplicates.len(),
            verdict(self.differing_duplicates.len())
        )?;
        let exercised =
            self.stale > 0 && self.faults.dispatcher_restarts > 0 && self.failed_attempts > 0;
        write!(
            f,
            "  (f) exercised: stale rejections {}, dispatcher restarts {}, retried attempts {}, \
             worker pauses {}, dispatcher pauses {}, database restarts {} [{}]",
            self.stale,
            self.faults.dispatcher_restarts,
            self.failed_attempts,
            self.faults.pauses,
            self.faults.dispatcher_pauses,
            self.faults.database_restarts,
            if exercised { "ok" } else { "FAILED" }
        )?;
        if let Some(m) = &self.faults.membership {
            write!(f, "\n{m}")?;
        }
        Ok(())
    }
}

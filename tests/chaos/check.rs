//! The chaos checker: from the workers' logs, the outbox table and what the destination (and
//! the server its redirects point to) received, counts what a correct system must keep at zero
//! (lost, stale and unexpected sends, requests off the destination's origin, order violations,
//! differing duplicates, unclean graceful leaves) and what the run must have exercised
//! (membership changes too, in the variant that makes them). Each answer is classified as the
//! dispatcher reads it: its status line decides, whatever the body does after it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use outbox_tests::Received;

/// How long the destination holds a stalled request: past the dispatcher's 1 s timeout.
pub(crate) const STALL: Duration = Duration::from_secs(2);

/// The statuses the dispatcher retries: its default `retry_statuses`, which the chaos config
/// keeps (dispatcher/config.default.toml). Any other status but 2xx is permanent.
pub(crate) const RETRY_STATUSES: [u16; 8] = [408, 409, 425, 429, 500, 502, 503, 504];

/// How a request was answered, as the dispatcher saw it (dispatcher/src/deliver.rs, retry.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// 2xx in time: the dispatcher learnt it was delivered. The status line decides: the body
    /// after it is read up to 64 KiB or until the attempt's timeout, and a body that never
    /// ends, is cut short or holds any bytes changes nothing.
    Ok,
    /// A status the dispatcher retries ([`RETRY_STATUSES`]: 503, 500).
    Failed,
    /// Any other status: permanent, the op is dead. A 3xx among them: redirects are never
    /// followed (G11).
    Refused,
    /// Held past the dispatcher's timeout: it never learnt the outcome and retries.
    Stalled,
    /// No answer: the connection was reset once the request was read. The outcome is unknown
    /// to the dispatcher, which retries.
    Reset,
}

impl Answer {
    fn of(request: &Received) -> Answer {
        if request.status == 0 {
            Answer::Reset
        } else if request.delay >= STALL {
            Answer::Stalled
        } else if (200..300).contains(&request.status) {
            Answer::Ok
        } else if RETRY_STATUSES.contains(&request.status) {
            Answer::Failed
        } else {
            Answer::Refused
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

/// One lease the database granted a worker, as the worker logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The resource.
    pub(crate) resource: String,
    /// Its fencing token.
    pub(crate) token: i64,
    /// The owner id of that acquisition.
    pub(crate) owner_id: String,
}

/// What one worker printed, parsed.
#[derive(Debug, Default)]
pub(crate) struct WorkerLog {
    /// Every enqueue attempt.
    pub(crate) enqueues: Vec<Enqueue>,
    /// Every lease granted to it, in order.
    pub(crate) grants: Vec<Grant>,
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
                Some("acquired") => {
                    log.jobs += 1;
                    log.grants.push(Grant {
                        resource: event["resource"].as_str().expect("resource").to_owned(),
                        token: event["token"].as_i64().expect("token"),
                        owner_id: event["owner_id"].as_str().expect("owner_id").to_owned(),
                    });
                }
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

/// G1 across all workers: every (resource, token) granted to more than one acquisition (owner
/// id), as "resource token N: K owners"; empty when no token was handed out twice.
pub(crate) fn tokens_granted_twice<'a>(grants: impl IntoIterator<Item = &'a Grant>) -> Vec<String> {
    let mut owners: BTreeMap<(&str, i64), HashSet<&str>> = BTreeMap::new();
    for g in grants {
        owners
            .entry((&g.resource, g.token))
            .or_default()
            .insert(&g.owner_id);
    }
    owners
        .into_iter()
        .filter(|(_, o)| o.len() > 1)
        .map(|((resource, token), o)| format!("{resource} token {token}: {} owners", o.len()))
        .collect()
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

impl From<outbox_tests::OpRow> for StoredOp {
    fn from(o: outbox_tests::OpRow) -> StoredOp {
        StoredOp {
            key: o.idempotency_key,
            resource: o.resource,
            order_key: o.order_key,
            seq: o.seq,
            fence: o.fence,
            state: o.state,
            body: o.body,
        }
    }
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
    /// Database servers stopped cleanly and started again.
    pub(crate) database_restarts: usize,
    /// Database servers crashed (SIGKILL to the postmaster and all its processes) and started
    /// again, with crash recovery.
    pub(crate) database_crashes: usize,
    /// What the membership variant did to the dispatchers; `None` in the other runs.
    pub(crate) membership: Option<Membership>,
    /// The destination's hostile answers and what reached the server its redirects point to;
    /// `None` in runs whose destination answers only statuses, at once or late.
    pub(crate) hostile: Option<Hostile>,
}

/// The destination's hostile answers (G11) that its record cannot tell apart from plain ones,
/// and the record of the other server on 127.0.0.1 that its redirects point to. Resets and
/// redirects are counted from the destination's record itself.
#[derive(Debug, Default, Clone)]
pub(crate) struct Hostile {
    /// Answers whose body holds NUL, bytes that are not UTF-8 and terminal escapes, under odd
    /// headers (bytes that are not UTF-8, empty, repeated, long).
    pub(crate) bytes: usize,
    /// Answers whose body never ends (quickly or in a trickle) or is far larger than the
    /// dispatcher reads.
    pub(crate) endless: usize,
    /// What the other server received: requests off the destination's origin, which must be
    /// none (the dispatcher follows no redirect).
    pub(crate) off_origin: Vec<Received>,
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
    resets: usize,
    refused: usize,
    failed_attempts: usize,
    faults: Faults,
    /// (a) accepted keys neither answered 2xx in time and delivered in the table, nor
    /// answered a permanent status and dead in the table.
    lost: Vec<String>,
    /// (a) accepted keys that ended dead after a permanent answer (a redirect): not lost.
    dead: usize,
    /// (b) refused keys that reached the destination.
    stale_sends: Vec<String>,
    /// (b) refused keys that are in the table anyway.
    stale_stored: Vec<String>,
    /// (b) ops stored after an op of a newer token of their resource.
    stale_accepts: Vec<String>,
    /// (c) requests without a matching accepted op, and table rows no worker accepted.
    unexpected: Vec<String>,
    /// (c) requests that reached the server the destination's redirects point to.
    off_origin: Vec<String>,
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
    /// (i) Requests that reached the destination while another op of their order key was
    /// still there (arrived, not yet answered).
    overlapping: usize,
    /// (h) Leases granted.
    grants: usize,
    /// (h) (resource, token) pairs granted to more than one acquisition (G1).
    grants_twice: Vec<String>,
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
        if let Some(hostile) = &evidence.faults.hostile {
            r.check_off_origin(&hostile.off_origin);
        }
        r.check_order(&ix, &evidence.ops);
        r.count_overlaps(&ix, &evidence.ops);
        r.check_duplicates(&ix);
        let grants = || evidence.workers.iter().flat_map(|w| w.grants.iter());
        r.grants = grants().count();
        r.grants_twice = tokens_granted_twice(grants());
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
                Answer::Refused => self.refused += 1,
                Answer::Stalled => self.stalled += 1,
                Answer::Reset => self.resets += 1,
            }
        }
        Index {
            stored,
            accepted,
            refused,
            by_key,
        }
    }

    /// (a) Every accepted op was answered 2xx in time at least once and is delivered, or was
    /// answered a permanent status (a redirect) and is dead (G6). Nothing else ends an op in a
    /// run: its retries are never used up.
    fn check_lost(&mut self, ix: &Index<'_>) {
        let mut lost: Vec<&str> = Vec::new();
        for key in ix.accepted.keys().copied() {
            let answered = |answer: Answer| {
                ix.by_key
                    .get(key)
                    .is_some_and(|reqs| reqs.iter().any(|(_, q)| Answer::of(q) == answer))
            };
            match ix.stored.get(key).map(|o| o.state.as_str()) {
                Some("delivered") if answered(Answer::Ok) => {}
                Some("dead") if answered(Answer::Refused) => self.dead += 1,
                _ => lost.push(key),
            }
        }
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

    /// (c) Nothing reached the server the destination's redirects point to: the dispatcher
    /// follows no redirect, and sends nowhere but to the destination's origin (G11).
    fn check_off_origin(&mut self, off_origin: &[Received]) {
        self.off_origin = off_origin
            .iter()
            .map(|q| format!("{}: {} {}", key(q), q.method, q.path))
            .collect();
    }

    /// (i) Per order key, requests of different ops at the destination at once: one arrived
    /// before another op's request of the key had been answered. The dispatcher sends one op of
    /// a key at a time (G8), but a copy held in the network, or an answer the destination keeps
    /// past the dispatcher's timeout, can still be there when the next op arrives: counted and
    /// shown (docs/guarantees.md, "What a destination must do"), not a failure.
    fn count_overlaps(&mut self, ix: &Index<'_>, ops: &[StoredOp]) {
        let mut streams: BTreeMap<&str, Vec<(&str, &Received)>> = BTreeMap::new();
        for op in ops {
            if let (Some(order_key), Some(reqs)) = (&op.order_key, ix.by_key.get(op.key.as_str())) {
                let stream = streams.entry(order_key).or_default();
                stream.extend(reqs.iter().map(|(_, r)| (op.key.as_str(), *r)));
            }
        }
        for (_, mut reqs) in streams {
            reqs.sort_by_key(|(_, r)| r.at);
            for (i, (key, r)) in reqs.iter().enumerate() {
                let busy = reqs[..i]
                    .iter()
                    .any(|(k, earlier)| k != key && earlier.done.is_none_or(|done| done > r.at));
                self.overlapping += usize::from(busy);
            }
        }
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

    /// (a) The accepted keys that were not delivered.
    pub(crate) fn lost(&self) -> &[String] {
        &self.lost
    }

    /// (c) The requests and rows that match no accepted op, each starting with its key.
    pub(crate) fn unexpected(&self) -> &[String] {
        &self.unexpected
    }

    /// What the run must have exercised for (f): (what, count) pairs that must not be zero;
    /// with a hostile destination, each kind of hostile answer too.
    fn exercised(&self) -> Vec<(&'static str, usize)> {
        let mut exercised = vec![
            ("stale rejections", self.stale),
            ("dispatcher restarts", self.faults.dispatcher_restarts),
            ("retries", self.failed_attempts),
        ];
        if let Some(h) = &self.faults.hostile {
            exercised.extend([
                ("answers of bytes that are not text", h.bytes),
                ("endless or huge answers", h.endless),
                ("resets", self.resets),
                ("permanent answers (redirects)", self.refused),
            ]);
        }
        exercised
    }

    /// (h) The (resource, token) pairs granted to more than one acquisition.
    pub(crate) fn grants_twice(&self) -> &[String] {
        &self.grants_twice
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
        zero(
            "(c) requests off the destination's origin",
            &self.off_origin,
        );
        zero("(d) out of order", &self.out_of_order);
        zero("(e) differing duplicates", &self.differing_duplicates);
        zero("(h) tokens granted twice", &self.grants_twice);
        if let Some(m) = &self.faults.membership {
            zero("(g) graceful leaves that did not exit 0", &m.unclean_leaves);
        }
        for (what, count) in self.exercised() {
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
        write!(
            f,
            "  destination: {} requests ({} answered a status retried (503, 500), {} stalled past \
             the timeout, {} reset unanswered, {} answered a permanent status (redirects)",
            self.requests, self.failed, self.stalled, self.resets, self.refused
        )?;
        match &self.faults.hostile {
            Some(h) => writeln!(
                f,
                "; hostile bodies: {} of bytes that are not text, {} endless or huge)",
                h.bytes, h.endless
            )?,
            None => writeln!(f, ")")?,
        }
        writeln!(
            f,
            "  (a) lost: {}, dead after a permanent answer (not lost): {} [{}]",
            self.lost.len(),
            self.dead,
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
            "  (c) unexpected: {}, requests off the destination's origin: {} [{}]",
            self.unexpected.len(),
            self.off_origin.len(),
            verdict(self.unexpected.len() + self.off_origin.len())
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
        writeln!(
            f,
            "  (i) requests at the destination while another op of their order key was still there \
             (a copy delayed, or an answer kept past the timeout): {} [counted]",
            self.overlapping
        )?;
        writeln!(
            f,
            "  (h) tokens granted twice for one resource (G1): {} over {} grants [{}]",
            self.grants_twice.len(),
            self.grants,
            verdict(self.grants_twice.len())
        )?;
        let exercised = self.exercised().iter().all(|(_, n)| *n > 0);
        write!(
            f,
            "  (f) exercised: stale rejections {}, dispatcher restarts {}, retried attempts {}, \
             worker pauses {}, dispatcher pauses {}, database restarts {}, database crashes \
             (SIGKILL) {} [{}]",
            self.stale,
            self.faults.dispatcher_restarts,
            self.failed_attempts,
            self.faults.pauses,
            self.faults.dispatcher_pauses,
            self.faults.database_restarts,
            self.faults.database_crashes,
            if exercised { "ok" } else { "FAILED" }
        )?;
        if let Some(m) = &self.faults.membership {
            write!(f, "\n{m}")?;
        }
        Ok(())
    }
}

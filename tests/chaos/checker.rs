//! The checker itself: it must see the violations it exists to catch.

use std::time::{Duration, Instant};

use outbox_tests::Received;

use crate::check::{
    Enqueue, Evidence, Hostile, Membership, Outcome, Report, STALL, StoredOp, WorkerLog,
};

/// How the destination answered, in the tests below.
#[derive(Clone, Copy)]
enum Answer {
    Ok,
    Unavailable,
    Stalled,
    /// A 200 whose body never ended: the destination let go of it a second later.
    Endless,
    /// The connection was reset once the request was read: no status.
    Reset,
    /// A 307 to another server.
    Redirected,
}

fn enqueue(key: &str, token: i64, outcome: Outcome) -> Enqueue {
    Enqueue {
        worker: "w0".to_owned(),
        token,
        key: key.to_owned(),
        outcome,
        batch: false,
    }
}

fn op(key: &str, seq: i64, fence: i64) -> StoredOp {
    StoredOp {
        key: key.to_owned(),
        resource: "statement:1".to_owned(),
        order_key: Some("statement:1".to_owned()),
        seq,
        fence,
        state: "delivered".to_owned(),
        body: key.as_bytes().to_vec(),
    }
}

fn request(key: &str, token: i64, answer: Answer) -> Received {
    let (status, delay) = match answer {
        Answer::Ok | Answer::Endless => (200, Duration::ZERO),
        Answer::Unavailable => (503, Duration::ZERO),
        Answer::Stalled => (200, STALL),
        Answer::Reset => (0, Duration::ZERO),
        Answer::Redirected => (307, Duration::ZERO),
    };
    let busy = match answer {
        Answer::Endless => Duration::from_secs(1),
        _ => delay,
    };
    let at = Instant::now();
    Received {
        method: "POST".to_owned(),
        path: "/v1/statements".to_owned(),
        headers: [
            ("idempotency-key".to_owned(), key.to_owned()),
            ("x-fencing-token".to_owned(), token.to_string()),
        ]
        .into(),
        body: key.as_bytes().to_vec(),
        at,
        status,
        delay,
        done: Some(at + busy),
    }
}

/// Two accepted ops and one stale refusal, delivered correctly after a 503 and a stall.
fn healthy() -> Evidence {
    Evidence {
        workers: vec![WorkerLog {
            enqueues: vec![
                enqueue("k1", 1, Outcome::Accepted),
                enqueue("k2", 2, Outcome::Accepted),
                enqueue("k3", 1, Outcome::Stale),
            ],
            jobs: 2,
            ..WorkerLog::default()
        }],
        ops: vec![op("k1", 1, 1), op("k2", 2, 2)],
        failed_attempts: 1,
        requests: vec![
            request("k1", 1, Answer::Unavailable),
            request("k1", 1, Answer::Stalled),
            request("k1", 1, Answer::Ok),
            request("k2", 2, Answer::Ok),
        ],
        faults: crate::check::Faults {
            pauses: 1,
            dispatcher_restarts: 1,
            ..crate::check::Faults::default()
        },
    }
}

fn problems(evidence: &Evidence) -> String {
    Report::new(evidence).problems().join("\n")
}

#[test]
fn a_correct_run_has_no_problems() {
    assert_eq!(problems(&healthy()), "");
}

#[test]
fn it_catches_a_lost_op() {
    let mut e = healthy();
    e.requests.retain(|r| r.header("idempotency-key") != "k2");
    assert!(problems(&e).contains("(a) lost: 1"), "{}", problems(&e));
    // Answered only after the dispatcher gave up: it never learnt; not delivered either.
    e.requests.push(request("k2", 2, Answer::Stalled));
    assert!(problems(&e).contains("(a) lost: 1"), "{}", problems(&e));
}

#[test]
fn it_catches_a_stale_send_and_a_refused_op_in_the_table() {
    let mut e = healthy();
    e.requests.push(request("k3", 1, Answer::Ok));
    e.ops.push(op("k3", 3, 1));
    let found = problems(&e);
    assert!(found.contains("(b) stale sends: 1"), "{found}");
    assert!(found.contains("(b) refused ops in the table: 1"), "{found}");
}

#[test]
fn it_catches_an_op_accepted_after_a_newer_tokens_op() {
    let mut e = healthy();
    e.workers[0]
        .enqueues
        .push(enqueue("k4", 1, Outcome::Accepted));
    e.ops.push(op("k4", 3, 1));
    e.requests.push(request("k4", 1, Answer::Ok));
    let found = problems(&e);
    assert!(found.contains("(b) stale accepts: 1"), "{found}");
}

#[test]
fn it_catches_an_unexpected_request_and_a_wrong_token() {
    let mut e = healthy();
    e.requests.push(request("nobody", 7, Answer::Ok));
    e.requests.push(request("k2", 9, Answer::Ok));
    assert!(
        problems(&e).contains("(c) unexpected: 2"),
        "{}",
        problems(&e)
    );
}

#[test]
fn it_catches_first_deliveries_out_of_enqueue_order() {
    let mut e = healthy();
    e.requests.insert(0, request("k2", 2, Answer::Unavailable));
    assert!(
        problems(&e).contains("(d) out of order: 1"),
        "{}",
        problems(&e)
    );
}

#[test]
fn it_catches_duplicates_that_differ() {
    let mut e = healthy();
    let mut copy = request("k2", 2, Answer::Ok);
    copy.body = b"something else".to_vec();
    e.requests.push(copy);
    assert!(
        problems(&e).contains("(e) differing duplicates: 1"),
        "{}",
        problems(&e)
    );
}

/// [`healthy`] with a hostile destination: k1 first reset, k2 delivered by an answer whose
/// body never ended, and a third op, k4, redirected and dead; nothing off the origin.
fn hostile() -> Evidence {
    let mut e = healthy();
    e.requests.insert(0, request("k1", 1, Answer::Reset));
    e.requests.retain(|r| r.header("idempotency-key") != "k2");
    e.requests.push(request("k2", 2, Answer::Endless));
    e.workers[0]
        .enqueues
        .push(enqueue("k4", 2, Outcome::Accepted));
    e.ops.push(StoredOp {
        state: "dead".to_owned(),
        ..op("k4", 3, 2)
    });
    e.requests.push(request("k4", 2, Answer::Redirected));
    e.faults.hostile = Some(Hostile {
        bytes: 1,
        endless: 1,
        off_origin: Vec::new(),
    });
    e
}

#[test]
fn a_correct_hostile_run_has_no_problems() {
    let e = hostile();
    assert_eq!(problems(&e), "");
    let report = Report::new(&e).to_string();
    for what in [
        "1 reset unanswered, 1 answered a permanent status",
        "(a) lost: 0, dead after a permanent answer (not lost): 1 [ok]",
        "(c) unexpected: 0, requests off the destination's origin: 0 [ok]",
    ] {
        assert!(report.contains(what), "{what} missing from {report}");
    }
}

#[test]
fn a_hostile_destination_that_was_not_hostile_proves_nothing() {
    let mut e = healthy();
    e.faults.hostile = Some(Hostile::default());
    let found = problems(&e);
    for what in [
        "answers of bytes that are not text",
        "endless or huge answers",
        "resets",
        "permanent answers (redirects)",
    ] {
        assert!(found.contains(&format!("(f) {what} = 0")), "{found}");
    }
}

#[test]
fn it_catches_a_request_off_the_destinations_origin() {
    let mut e = hostile();
    let mut followed = request("k2", 2, Answer::Ok);
    followed.path = "/v1/statements".to_owned();
    if let Some(h) = e.faults.hostile.as_mut() {
        h.off_origin.push(followed);
    }
    let found = problems(&e);
    assert!(
        found.contains(
            "(c) requests off the destination's origin: 1 (e.g. k2: POST /v1/statements)"
        ),
        "{found}"
    );
    let report = Report::new(&e).to_string();
    assert!(
        report.contains("requests off the destination's origin: 1 [FAILED]"),
        "{report}"
    );
}

#[test]
fn a_redirected_op_is_dead_not_lost_and_nothing_else_may_be_dead() {
    let mut e = healthy();
    e.requests.retain(|r| r.header("idempotency-key") != "k2");
    e.requests.push(request("k2", 2, Answer::Redirected));
    e.ops[1].state = "dead".to_owned();
    assert_eq!(problems(&e), "");
    assert!(
        Report::new(&e)
            .to_string()
            .contains("(a) lost: 0, dead after a permanent answer (not lost): 1 [ok]"),
        "{}",
        Report::new(&e)
    );
    // Dead after answers the dispatcher retries: lost.
    e.requests.pop();
    e.requests.push(request("k2", 2, Answer::Unavailable));
    e.requests.push(request("k2", 2, Answer::Reset));
    assert!(problems(&e).contains("(a) lost: 1"), "{}", problems(&e));
    // Delivered in the table, yet only ever redirected: lost.
    e.requests.push(request("k2", 2, Answer::Redirected));
    e.ops[1].state = "delivered".to_owned();
    assert!(problems(&e).contains("(a) lost: 1"), "{}", problems(&e));
}

#[test]
fn a_reset_is_no_answer_and_an_endless_200_is_an_answer() {
    let mut e = healthy();
    e.requests.retain(|r| r.header("idempotency-key") != "k2");
    e.requests.push(request("k2", 2, Answer::Reset));
    assert!(problems(&e).contains("(a) lost: 1"), "{}", problems(&e));
    // The dispatcher reads the status line and at most 64 KiB: it learnt of the delivery.
    e.requests.push(request("k2", 2, Answer::Endless));
    assert_eq!(problems(&e), "");
    let report = Report::new(&e).to_string();
    assert!(report.contains("1 reset unanswered"), "{report}");
}

#[test]
fn a_run_without_faults_proves_nothing() {
    let mut e = healthy();
    e.workers[0].enqueues.pop();
    e.failed_attempts = 0;
    e.faults.dispatcher_restarts = 0;
    let found = problems(&e);
    for what in ["stale rejections", "dispatcher restarts", "retries"] {
        assert!(found.contains(&format!("(f) {what} = 0")), "{found}");
    }
}

/// The membership variant's record of a run where everything it must exercise happened.
fn membership() -> Membership {
    Membership {
        joined: 2,
        left: 1,
        unclean_leaves: Vec::new(),
        rejoined: 1,
        splits: vec![
            vec![4],
            vec![2, 2],
            vec![2, 1, 1],
            vec![2, 2],
            vec![2, 1, 1],
        ],
    }
}

#[test]
fn a_membership_run_that_changed_nothing_proves_nothing() {
    let mut e = healthy();
    e.faults.membership = Some(membership());
    assert_eq!(problems(&e), "");
    e.faults.membership = Some(Membership {
        joined: 0,
        left: 0,
        rejoined: 0,
        splits: vec![vec![4]],
        ..membership()
    });
    let found = problems(&e);
    for what in [
        "joins",
        "graceful leaves",
        "starts after a leave",
        "split changes",
        "splits with three leaders",
    ] {
        assert!(found.contains(&format!("(g) {what} = 0")), "{found}");
    }
}

#[test]
fn it_catches_a_graceful_leave_that_did_not_exit_cleanly() {
    let mut e = healthy();
    e.faults.membership = Some(Membership {
        unclean_leaves: vec!["d1 exited with exit status: 1".to_owned()],
        ..membership()
    });
    let found = problems(&e);
    assert!(
        found.contains("(g) graceful leaves that did not exit 0: 1"),
        "{found}"
    );
}

#[test]
fn an_unknown_outcome_is_resolved_by_the_table() {
    let mut e = healthy();
    e.workers[0].enqueues.push(enqueue("k4", 2, Outcome::Error));
    e.workers[0].enqueues.push(enqueue("k5", 2, Outcome::Error));
    e.ops.push(op("k4", 3, 2));
    e.requests.push(request("k4", 2, Answer::Ok));
    assert_eq!(problems(&e), "");
    e.requests.push(request("k5", 2, Answer::Ok));
    assert!(
        problems(&e).contains("(b) stale sends: 1"),
        "{}",
        problems(&e)
    );
}

#[test]
fn it_counts_requests_of_one_order_key_at_the_destination_at_once_without_failing() {
    // k1's stalled copy is still at the destination when k2 (the same order key) arrives.
    let e = healthy();
    let report = Report::new(&e).to_string();
    assert!(
        report.contains("past the timeout): 1 [counted]"),
        "{report}"
    );
    assert_eq!(problems(&e), "");
    let mut calm = healthy();
    calm.requests
        .retain(|r| r.header("idempotency-key") != "k1" || r.delay.is_zero());
    let report = Report::new(&calm).to_string();
    assert!(
        report.contains("past the timeout): 0 [counted]"),
        "{report}"
    );
}

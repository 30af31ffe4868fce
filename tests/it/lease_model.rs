//! A property test: random acquire / renew / release / advance-time sequences against SQLite,
//! checked step by step against a small reference model of the lease state machine (G1–G3).
//!
//! Time advances by shifting every lease's expiry into the past, which to the leases is the
//! database clock jumping ahead. Durations are multiples of 5 s, so real time passing while a
//! case runs (milliseconds) can never move a lease across its expiry in a way the model misses.

use std::time::Duration;

use outbox_store::{Lease, ResourceName, Store};
use outbox_tests::TestDb;
use proptest::prelude::*;

const RESOURCES: usize = 3;

#[derive(Debug, Clone)]
enum Step {
    Acquire { resource: usize, ttl_s: u64 },
    Renew { handle: usize, ttl_s: u64 },
    Release { handle: usize },
    Advance { secs: u32 },
}

/// Valid TTLs (the test store allows 1 s..=300 s) and a few out of bounds.
fn ttl() -> impl Strategy<Value = u64> {
    prop_oneof![8 => prop::sample::select(vec![5u64, 10, 20, 30]), 1 => prop::sample::select(vec![0u64, 301, 900])]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..RESOURCES, ttl()).prop_map(|(resource, ttl_s)| Step::Acquire { resource, ttl_s }),
        3 => (0..16usize, ttl()).prop_map(|(handle, ttl_s)| Step::Renew { handle, ttl_s }),
        3 => (0..16usize).prop_map(|handle| Step::Release { handle }),
        3 => prop::sample::select(vec![5u32, 10, 15, 30]).prop_map(|secs| Step::Advance { secs }),
    ]
}

/// The reference model: per resource, the last token and who holds it until when.
#[derive(Debug, Default, Clone)]
struct Model {
    now: i64,
    fence: [i64; RESOURCES],
    /// (handle index, expires at in model seconds)
    holder: [Option<(usize, i64)>; RESOURCES],
}

impl Model {
    fn free(&self, r: usize) -> bool {
        self.holder[r].is_none_or(|(_, exp)| exp <= self.now)
    }
}

fn valid(ttl_s: u64) -> bool {
    (1..=300).contains(&ttl_s)
}

async fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let db = TestDb::sqlite().await;
    let store: Store = db.store().await;
    let names: Vec<ResourceName> = (0..RESOURCES)
        .map(|r| ResourceName::new(format!("res-{r}")).unwrap())
        .collect();
    let mut model = Model::default();
    // Every lease ever granted, with the resource it is for; stale ones stay usable as handles.
    let mut handles: Vec<(usize, Lease)> = Vec::new();

    for step in steps {
        match step {
            Step::Acquire { resource: r, ttl_s } => {
                let got = store
                    .lease_try_acquire(&names[r], Duration::from_secs(ttl_s))
                    .await;
                if !valid(ttl_s) {
                    prop_assert!(matches!(got, Err(outbox_store::Error::Invalid(_))));
                    continue;
                }
                let got = got.unwrap();
                prop_assert_eq!(
                    got.is_some(),
                    model.free(r),
                    "acquire r{} at {}",
                    r,
                    model.now
                );
                if let Some(lease) = got {
                    model.fence[r] += 1;
                    prop_assert_eq!(lease.token.get(), model.fence[r]);
                    model.holder[r] = Some((handles.len(), model.now + ttl_s as i64));
                    handles.push((r, lease));
                }
            }
            Step::Renew { handle, ttl_s } => {
                let Some((r, lease)) = handles.get(handle % handles.len().max(1)).cloned() else {
                    continue;
                };
                let h = handle % handles.len();
                let got = store.lease_renew(&lease, Duration::from_secs(ttl_s)).await;
                if !valid(ttl_s) {
                    prop_assert!(matches!(got, Err(outbox_store::Error::Invalid(_))));
                    continue;
                }
                let expect = matches!(model.holder[r], Some((holder, exp)) if holder == h && exp > model.now);
                let got = got.unwrap();
                prop_assert_eq!(got.is_some(), expect, "renew handle {} at {}", h, model.now);
                if let Some(renewed) = got {
                    prop_assert_eq!(renewed.token, lease.token);
                    model.holder[r] = Some((h, model.now + ttl_s as i64));
                }
            }
            Step::Release { handle } => {
                let Some((r, lease)) = handles.get(handle % handles.len().max(1)).cloned() else {
                    continue;
                };
                let h = handle % handles.len();
                let expect = matches!(model.holder[r], Some((holder, _)) if holder == h);
                prop_assert_eq!(
                    store.lease_release(&lease).await.unwrap(),
                    expect,
                    "release handle {}",
                    h
                );
                if expect {
                    model.holder[r] = None;
                }
            }
            Step::Advance { secs } => {
                db.shift_lease_clock(secs).await;
                model.now += i64::from(secs);
            }
        }
        // After every step the table agrees with the model.
        for row in store.lease_list().await.unwrap() {
            let r: usize = row.resource.as_str()["res-".len()..].parse().unwrap();
            prop_assert_eq!(row.token.get(), model.fence[r]);
            prop_assert_eq!(row.held, !model.free(r), "r{} held at {}", r, model.now);
            let owner = model.holder[r].map(|(h, _)| handles[h].1.owner_id);
            prop_assert_eq!(row.owner_id, owner);
        }
    }
    store.close().await;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn sqlite_leases_follow_the_reference_model(steps in prop::collection::vec(step(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run(steps))?;
    }
}

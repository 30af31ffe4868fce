//! The rules of replay, cancel and purge, and their flows, written once for every backend:
//! lock the ops, decide from the state read under that lock, change and log in the same
//! transaction (a dispatcher's claim skips locked rows and its completion waits), so an op is
//! never in two states; a dry run rolls back having changed nothing.

use crate::admin::{ChangeReport, PurgeReport, Skipped};
use crate::driver::Driver;
use crate::error::{Error, InvalidInput};
use crate::model::Change;
use crate::op::OpState;
use crate::rows::Locked;

/// The two changes operators make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Replay,
    Cancel,
}

impl Action {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Action::Replay => "replay",
            Action::Cancel => "cancel",
        }
    }

    /// Whether `op` may change, or why not.
    pub(crate) fn verdict(self, op: &Locked, force: bool) -> Result<(), String> {
        let superseded_token = op.resource_token.is_some_and(|t| t > op.token);
        match (self, op.state.as_str()) {
            (_, "in_flight") => {
                Err("in flight: an attempt is under way; try again after it".into())
            }
            (Action::Replay, _) if op.erased_at.is_some() => Err(
                "its body and header values were erased after it finished: nothing is left to send"
                    .into(),
            ),
            (Action::Replay, "dead" | "cancelled") if superseded_token && !force => Err(format!(
                "its token {} is superseded by {} on its resource (use --force to send it anyway)",
                op.token,
                op.resource_token.unwrap_or_default()
            )),
            (Action::Replay, "dead" | "cancelled") => Ok(()),
            (Action::Replay, "delivered" | "superseded") if force => Ok(()),
            (Action::Replay, "delivered") => {
                Err("already delivered (use --force to send it again)".into())
            }
            (Action::Replay, "superseded") => {
                Err("superseded by a newer token (use --force to send it anyway)".into())
            }
            (Action::Replay, "pending") => Err("already pending".into()),
            (Action::Cancel, "pending" | "dead") => Ok(()),
            (Action::Cancel, state) => Err(format!(
                "{state}: only pending or dead ops can be cancelled"
            )),
            (_, state) => Err(format!("unknown state {state}")),
        }
    }
}

/// Sorts locked ops into changed and skipped, and names the asked-for ones not found.
pub(crate) fn decide(
    action: Action,
    asked: &[i64],
    locked: &[Locked],
    force: bool,
) -> ChangeReport {
    let mut report = ChangeReport::default();
    for op in locked {
        match action.verdict(op, force) {
            Ok(()) => report.changed.push(op.seq),
            Err(why) => report.skipped.push(Skipped {
                seq: op.seq,
                op_id: op.op_id.clone(),
                state: op.state.clone(),
                why,
            }),
        }
    }
    report.missing = asked
        .iter()
        .filter(|s| !locked.iter().any(|l| l.seq == **s))
        .copied()
        .collect();
    report
}

/// The `outbox_admin_log` details of a change: the ops, the counts and the ops skipped.
pub(crate) fn log_details(report: &ChangeReport) -> String {
    serde_json::json!({
        "changed": report.changed,
        "refused": report.skipped.iter().map(|r| serde_json::json!({"seq": r.seq, "state": r.state, "why": r.why})).collect::<Vec<_>>(),
        "missing": report.missing,
    })
    .to_string()
}

/// The last_error note a cancel leaves.
pub(crate) fn cancel_note(change: &Change) -> String {
    format!("cancelled by {}: {}", change.actor, change.reason)
}

/// Adds `n` ops of `state` to a purge report.
pub(crate) fn tally(report: &mut PurgeReport, state: String, n: i64) {
    report.total += n;
    match report.by_state.iter_mut().find(|(s, _)| *s == state) {
        Some((_, count)) => *count += n,
        None => report.by_state.push((state, n)),
    }
}

/// Terminal states only: purge refuses the others.
pub(crate) fn check_purge_states(states: &[OpState]) -> Result<(), InvalidInput> {
    if states.is_empty() {
        return Err(InvalidInput::new(
            "state",
            "name at least one state to purge",
        ));
    }
    if let Some(s) = states
        .iter()
        .find(|s| matches!(s, OpState::Pending | OpState::InFlight))
    {
        return Err(InvalidInput::new(
            "state",
            format!(
                "{s} is not a final state: only delivered, dead, cancelled and superseded ops can be purged"
            ),
        ));
    }
    Ok(())
}

/// One batch of a replay or cancel, in one transaction.
pub(crate) async fn apply<D: Driver>(
    d: &D,
    action: Action,
    seqs: &[i64],
    change: &Change,
) -> Result<ChangeReport, Error> {
    let mut tx = d.begin().await?;
    let locked = D::admin_op_lock(&mut tx, seqs).await?;
    let mut report = decide(action, seqs, &locked, change.force);
    report.dry_run = change.dry_run;
    if change.dry_run {
        D::rollback(tx).await?;
        return Ok(report);
    }
    if !report.changed.is_empty() {
        match action {
            Action::Replay => D::admin_op_replay(&mut tx, &report.changed).await?,
            Action::Cancel => {
                D::admin_op_cancel(&mut tx, &report.changed, &cancel_note(change)).await?
            }
        }
    }
    D::admin_log_insert(&mut tx, change, action.as_str(), &log_details(&report)).await?;
    D::commit(tx).await?;
    Ok(report)
}

/// Deletes finished ops of `states` older than the cut-off in batches (or, dry, counts them),
/// then logs what it deleted.
pub(crate) async fn purge<D: Driver>(
    d: &D,
    states: &[OpState],
    older_than_ms: i64,
    change: &Change,
) -> Result<PurgeReport, Error> {
    let names: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
    let mut report = PurgeReport {
        dry_run: change.dry_run,
        ..PurgeReport::default()
    };
    if change.dry_run {
        for (state, ops) in d.admin_purge_count(&names, older_than_ms).await? {
            tally(&mut report, state, ops);
        }
        return Ok(report);
    }
    loop {
        let deleted = d
            .admin_purge(&names, older_than_ms, super::CHANGE_BATCH)
            .await?;
        for state in &deleted {
            tally(&mut report, state.clone(), 1);
        }
        if deleted.len() < super::CHANGE_BATCH {
            break;
        }
    }
    let details = serde_json::json!({"older_than_ms": older_than_ms, "states": names, "deleted": report.by_state}).to_string();
    let mut tx = d.begin().await?;
    D::admin_log_insert(&mut tx, change, "purge", &details).await?;
    D::commit(tx).await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(state: &str, token: i64, newest: Option<i64>) -> Locked {
        Locked {
            seq: 1,
            op_id: "x".into(),
            state: state.into(),
            token,
            resource_token: newest,
            erased_at: None,
        }
    }

    #[test]
    fn replay_takes_dead_and_cancelled_ops_of_the_newest_token() {
        let r = Action::Replay;
        assert!(r.verdict(&op("dead", 3, Some(3)), false).is_ok());
        assert!(r.verdict(&op("cancelled", 3, None), false).is_ok());
        assert!(r.verdict(&op("dead", 2, Some(3)), false).is_err());
        assert!(r.verdict(&op("dead", 2, Some(3)), true).is_ok());
        assert!(r.verdict(&op("delivered", 3, Some(3)), false).is_err());
        assert!(r.verdict(&op("delivered", 3, Some(3)), true).is_ok());
        assert!(r.verdict(&op("in_flight", 3, Some(3)), true).is_err());
        assert!(r.verdict(&op("pending", 3, Some(3)), true).is_err());
    }

    /// Issue 37, item 4: an erased op has no body left; even --force does not send it.
    #[test]
    fn replay_refuses_an_erased_op() {
        let erased = Locked {
            erased_at: Some(time::OffsetDateTime::UNIX_EPOCH),
            ..op("delivered", 3, Some(3))
        };
        let why = Action::Replay.verdict(&erased, true).unwrap_err();
        assert!(why.contains("erased"), "{why}");
    }

    #[test]
    fn cancel_takes_pending_and_dead_ops_only() {
        let c = Action::Cancel;
        assert!(c.verdict(&op("pending", 1, Some(1)), false).is_ok());
        assert!(c.verdict(&op("dead", 1, Some(1)), false).is_ok());
        for state in ["in_flight", "delivered", "cancelled", "superseded"] {
            assert!(c.verdict(&op(state, 1, Some(1)), true).is_err(), "{state}");
        }
    }

    #[test]
    fn purge_refuses_states_that_are_not_final() {
        assert!(check_purge_states(&[OpState::Delivered, OpState::Dead]).is_ok());
        assert!(check_purge_states(&[OpState::Pending]).is_err());
        assert!(check_purge_states(&[]).is_err());
    }
}

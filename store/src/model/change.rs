//! An operator's change: who makes it, why, and how carefully. Replay, cancel, purge, pauses
//! and partition counts take one; the admin log records its actor and reason.

use crate::error::InvalidInput;

/// Who changes ops, why, and how carefully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Who: an operator's name, recorded in `outbox_admin_log`.
    pub actor: String,
    /// Why, recorded in `outbox_admin_log`.
    pub reason: String,
    /// Replay delivered ops and ops of superseded tokens too.
    pub force: bool,
    /// Decide and report, then roll back: nothing changes, nothing is logged.
    pub dry_run: bool,
}

impl Change {
    /// Checks the actor and reason: both needed, both bounded.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        for (field, value, max) in [("actor", &self.actor, 200), ("reason", &self.reason, 2000)] {
            if value.trim().is_empty() {
                return Err(InvalidInput::new(field, "is required"));
            }
            if value.chars().count() > max {
                return Err(InvalidInput::new(
                    field,
                    format!("is longer than {max} characters"),
                ));
            }
            // Kept in the admin log and shown to other operators: text, not terminal control.
            if value
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
            {
                return Err(InvalidInput::new(field, "must not hold control characters"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_needs_an_actor_and_a_reason() {
        let mut c = Change {
            actor: "ana".into(),
            reason: "destination fixed".into(),
            force: false,
            dry_run: false,
        };
        assert!(c.validate().is_ok());
        c.reason = " ".into();
        assert!(c.validate().is_err());
        c.reason = "fixed\0\x1b[2J".into();
        assert!(c.validate().is_err());
    }
}

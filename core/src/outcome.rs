//! The worker exit-code contract, mapped in exactly one place.
//!
//! | code | meaning     |
//! |------|-------------|
//! | 0    | success     |
//! | 1    | error       |
//! | 2    | checkpoint  |
//! | 3    | blocked     |
//! | 4    | escalation  |
//! | 130  | interrupted |

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Success,
    Error,
    Checkpoint,
    Blocked,
    Escalation,
    Interrupted,
    /// Exit 0, but a blocking verify tier failed.
    VerifyFailed,
    /// Killed by a signal; distinct from exit 130, which the worker chose.
    Signaled,
    /// Idle past its timeout more often than it may be restarted.
    Stalled,
    /// Stopped by the controller's Cancel.
    Cancelled,
    /// The sidecar's own machinery (worktree, fetch, commit, push) failed
    /// after its repairs; not the task's fault, so no retry is spent.
    InfraFailed,
    /// The agent hit its usage limit: its work is kept as a WIP commit and
    /// the task waits for the reset; not the task's fault, so no retry is spent.
    RateLimited,
}

pub const EXIT_SUCCESS: i32 = 0;
pub const EXIT_ERROR: i32 = 1;
pub const EXIT_CHECKPOINT: i32 = 2;
pub const EXIT_BLOCKED: i32 = 3;
pub const EXIT_ESCALATION: i32 = 4;
pub const EXIT_INTERRUPTED: i32 = 130;

impl Outcome {
    /// Maps a worker's exit. `signal` is set when the process died by a
    /// signal, in which case `code` is not looked at: a worker killed by
    /// SIGINT did not choose to exit 130.
    pub fn from_exit(code: Option<i32>, signal: Option<i32>) -> Outcome {
        if signal.is_some() {
            return Outcome::Signaled;
        }
        match code {
            Some(EXIT_SUCCESS) => Outcome::Success,
            Some(EXIT_CHECKPOINT) => Outcome::Checkpoint,
            Some(EXIT_BLOCKED) => Outcome::Blocked,
            Some(EXIT_ESCALATION) => Outcome::Escalation,
            Some(EXIT_INTERRUPTED) => Outcome::Interrupted,
            // 1 and every code outside the contract are errors.
            _ => Outcome::Error,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Error => "error",
            Outcome::Checkpoint => "checkpoint",
            Outcome::Blocked => "blocked",
            Outcome::Escalation => "escalation",
            Outcome::Interrupted => "interrupted",
            Outcome::VerifyFailed => "verify_failed",
            Outcome::Signaled => "signaled",
            Outcome::Stalled => "stalled",
            Outcome::Cancelled => "cancelled",
            Outcome::InfraFailed => "infra_failed",
            Outcome::RateLimited => "rate_limited",
        }
    }

    /// Every outcome, in declaration order.
    pub const ALL: [Outcome; 12] = [
        Outcome::Success,
        Outcome::Error,
        Outcome::Checkpoint,
        Outcome::Blocked,
        Outcome::Escalation,
        Outcome::Interrupted,
        Outcome::VerifyFailed,
        Outcome::Signaled,
        Outcome::Stalled,
        Outcome::Cancelled,
        Outcome::InfraFailed,
        Outcome::RateLimited,
    ];

    pub fn parse(s: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one verify tier went: what the sidecar ran, reports, journals and
/// the controller stores, in one shape (its JSON is the stored form).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TierOutcome {
    pub name: String,
    pub passed: bool,
    pub blocking: bool,
    /// -1 when it could not start or died by a signal.
    pub exit_code: i32,
    pub duration_ms: u64,
    pub output_tail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_map_as_the_contract_says() {
        assert_eq!(Outcome::from_exit(Some(0), None), Outcome::Success);
        assert_eq!(Outcome::from_exit(Some(1), None), Outcome::Error);
        assert_eq!(Outcome::from_exit(Some(2), None), Outcome::Checkpoint);
        assert_eq!(Outcome::from_exit(Some(3), None), Outcome::Blocked);
        assert_eq!(Outcome::from_exit(Some(4), None), Outcome::Escalation);
        assert_eq!(Outcome::from_exit(Some(130), None), Outcome::Interrupted);
        assert_eq!(Outcome::from_exit(Some(77), None), Outcome::Error);
    }

    #[test]
    fn death_by_sigint_is_not_exit_130() {
        assert_eq!(Outcome::from_exit(None, Some(2)), Outcome::Signaled);
        assert_eq!(Outcome::from_exit(Some(130), Some(2)), Outcome::Signaled);
    }
}

//! Task and attempt states, the names every part agrees on, and which
//! moves between them a lifecycle has (`may_become`); the scheduler
//! makes the moves and refuses any other.

use std::fmt;
use std::str::FromStr;

macro_rules! state_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Its position in [`Self::ALL`], for arrays indexed by state.
            pub fn index(self) -> usize {
                // The variants are declared in ALL's order, without explicit
                // discriminants.
                self as usize
            }

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!("unknown {} {other:?}", stringify!($name))),
                }
            }
        }
    };
}

state_enum!(
    /// Where a task is in its lifecycle.
    TaskState {
        Pending = "PENDING",
        Ready = "READY",
        Running = "RUNNING",
        Succeeded = "SUCCEEDED",
        Merging = "MERGING",
        Merged = "MERGED",
        Conflict = "CONFLICT",
        Failed = "FAILED",
        Blocked = "BLOCKED",
        Escalated = "ESCALATED",
        Cancelled = "CANCELLED",
        // REVIEW: succeeded, waits for its reviewer's or the operator's
        // decision. REJECTED: refused by review; it ends there, its branch kept.
        Review = "REVIEW",
        Rejected = "REJECTED",
    }
);

state_enum!(
    /// Where one attempt is.
    AttemptState {
        Assigned = "ASSIGNED",
        Running = "RUNNING",
        Succeeded = "SUCCEEDED",
        Failed = "FAILED",
        Checkpointed = "CHECKPOINTED",
        Lost = "LOST",
        Fenced = "FENCED",
        Cancelled = "CANCELLED",
        Stopped = "STOPPED",
        RateLimited = "RATE_LIMITED",
    }
);

impl TaskState {
    /// No transition leaves these without an operator.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Merged | TaskState::Failed | TaskState::Cancelled | TaskState::Rejected)
    }
}

impl AttemptState {
    /// The attempt still holds its task: reports for it are current.
    pub fn is_live(self) -> bool {
        matches!(self, AttemptState::Assigned | AttemptState::Running)
    }
}

/// A state change the lifecycle does not have: the scheduler refuses it
/// (and says so in its log) rather than record a history no run could
/// have had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IllegalTransition {
    #[error("a task cannot go from {0} to {1}")]
    Task(TaskState, TaskState),
    #[error("an attempt cannot go from {0} to {1}")]
    Attempt(AttemptState, AttemptState),
}

impl TaskState {
    /// Whether a task may move from `self` to `to`. A new reason in the
    /// same state is always allowed.
    pub fn may_become(self, to: TaskState) -> bool {
        use TaskState::*;
        if self == to {
            return true;
        }
        match to {
            // Runnable again (PENDING while a dependency is not merged):
            // a retry, an answer, an unblock, an operator's retry, a
            // reopen for a pull request's feedback; any state may lead here.
            Ready | Pending => true,
            Running => self == Ready,
            // An attempt's success, a review's approval, a child swarm's end.
            Succeeded => matches!(self, Running | Review),
            Review => self == Succeeded,
            Merging => self == Succeeded,
            Merged | Conflict => self == Merging,
            // Exit 3; a budget that READY work would overrun.
            Blocked => matches!(self, Ready | Running),
            Escalated => self == Running,
            Rejected => self == Review,
            // Out of retries, or failed by policy: never once merged.
            Failed => !matches!(self, Merged | Cancelled | Rejected),
            // The operator's cancel reaches everything but merged work.
            Cancelled => self != Merged,
        }
    }
}

impl AttemptState {
    /// Whether an attempt may move from `self` to `to`. Only a live
    /// attempt ends; an ended one changes only when the merge refuses its
    /// success, or when a lost one is fenced.
    pub fn may_become(self, to: AttemptState) -> bool {
        use AttemptState::*;
        match (self, to) {
            (from, to) if from == to => true,
            (Assigned, Running) => true,
            (Assigned | Running, Assigned) => false,
            (Assigned | Running, _) => true,
            (Succeeded, Failed) => true,
            (Lost, Fenced) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_text() {
        for s in TaskState::ALL {
            assert_eq!(s.as_str().parse::<TaskState>(), Ok(*s));
        }
        for s in AttemptState::ALL {
            assert_eq!(s.as_str().parse::<AttemptState>(), Ok(*s));
        }
        assert!("DONE".parse::<TaskState>().is_err());
    }

    #[test]
    fn the_task_lifecycle_runs_forward_and_keeps_merged_work() {
        use TaskState::*;
        for (from, to) in [
            (Pending, Ready),
            (Ready, Running),
            (Running, Succeeded),
            (Succeeded, Review),
            (Review, Succeeded),
            (Succeeded, Merging),
            (Merging, Merged),
            (Merging, Conflict),
            (Merged, Ready),
            (Failed, Ready),
            (Running, Escalated),
            (Escalated, Cancelled),
        ] {
            assert!(from.may_become(to), "{from} -> {to}");
        }
        for (from, to) in [
            (Pending, Running),
            (Pending, Merged),
            (Ready, Succeeded),
            (Running, Merged),
            (Merged, Running),
            (Merged, Failed),
            (Merged, Cancelled),
            (Failed, Merging),
            (Cancelled, Succeeded),
            (Rejected, Merging),
        ] {
            assert!(!from.may_become(to), "{from} -> {to}");
        }
        for s in TaskState::ALL {
            assert!(s.may_become(*s), "a new reason in {s}");
        }
    }

    #[test]
    fn only_a_live_attempt_ends() {
        use AttemptState::*;
        for to in [Running, Succeeded, Failed, Checkpointed, Lost, Fenced, Cancelled, Stopped, RateLimited] {
            assert!(Assigned.may_become(to) && (to == Running || Running.may_become(to)), "-> {to}");
        }
        assert!(!Running.may_become(Assigned));
        assert!(Succeeded.may_become(Failed), "a success the merge refused");
        assert!(Lost.may_become(Fenced));
        for from in [Failed, Checkpointed, Cancelled, Stopped, RateLimited, Fenced] {
            for to in [Running, Succeeded] {
                assert!(!from.may_become(to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn a_states_index_is_its_place_in_all() {
        for (i, s) in TaskState::ALL.iter().enumerate() {
            assert_eq!(s.index(), i, "{s}");
        }
        for (i, s) in AttemptState::ALL.iter().enumerate() {
            assert_eq!(s.index(), i, "{s}");
        }
    }
}

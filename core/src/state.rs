//! Task and attempt states. The transitions themselves live in the
//! controller's scheduler; these are the names every part agrees on.

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
    fn a_states_index_is_its_place_in_all() {
        for (i, s) in TaskState::ALL.iter().enumerate() {
            assert_eq!(s.index(), i, "{s}");
        }
        for (i, s) in AttemptState::ALL.iter().enumerate() {
            assert_eq!(s.index(), i, "{s}");
        }
    }
}

//! Hierarchical, readable ids: `auth` (swarm) / `auth/api` (task) /
//! `auth/api#2` (attempt). Spans and logs carry their `Display` forms.

use std::fmt;
use std::sync::Arc;

use crate::names::check_id;

// Ids are shared, not copied: the controller keys several maps per task
// (the task table, the ready set, ownership, dependents) and a clone of an
// `Arc<str>` costs a reference count where a `String` cost an allocation
// per map, which at 50,000 tasks was a few hundred bytes per task.

/// A validated id of a swarm.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SwarmId(Arc<str>);

/// A validated id of a task inside its swarm (`api`, not `auth/api`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(Arc<str>);

macro_rules! validated_id {
    ($ty:ident) => {
        impl $ty {
            /// Validates `raw` against the strict id pattern.
            pub fn new(raw: impl Into<String>) -> Result<Self, String> {
                let raw = raw.into();
                check_id(&raw)?;
                Ok(Self(raw.into()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

validated_id!(SwarmId);
validated_id!(TaskId);

/// A task named by its swarm: `auth/api`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskKey {
    pub swarm: SwarmId,
    pub task: TaskId,
}

impl TaskKey {
    pub fn new(swarm: SwarmId, task: TaskId) -> Self {
        Self { swarm, task }
    }

    /// Parses `swarm/task`.
    pub fn parse(full: &str) -> Result<Self, String> {
        let (swarm, task) =
            full.split_once('/').ok_or_else(|| format!("{full:?} must have the form <swarm>/<task>"))?;
        Ok(Self {
            swarm: SwarmId::new(swarm).map_err(|e| format!("swarm part: {e}"))?,
            task: TaskId::new(task).map_err(|e| format!("task part: {e}"))?,
        })
    }

    pub fn attempt(&self, number: u32) -> AttemptId {
        AttemptId { task: self.clone(), number }
    }
}

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.swarm, self.task)
    }
}

/// One attempt of a task: `auth/api#2`. Numbers start at 1.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttemptId {
    pub task: TaskKey,
    pub number: u32,
}

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.task, self.number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_display_hierarchically() {
        let key = TaskKey::parse("auth/api").expect("valid");
        assert_eq!(key.to_string(), "auth/api");
        assert_eq!(key.attempt(2).to_string(), "auth/api#2");
    }

    #[test]
    fn task_keys_reject_bad_parts() {
        assert!(TaskKey::parse("auth").is_err());
        assert!(TaskKey::parse("auth/API").is_err());
        assert!(TaskKey::parse("auth/a/b").is_err());
        assert!(TaskKey::parse("/api").is_err());
    }
}

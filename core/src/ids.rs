//! Hierarchical, readable ids: `auth` (swarm) / `auth/api` (task) /
//! `auth/api#2` (attempt). Spans and logs carry their `Display` forms.
//!
//! A task that carries its own plan runs it as a child swarm named by the
//! task: the child of task `auth` in swarm `app` is swarm `app/auth`, its
//! task `login` is `app/auth/login` and that task's first attempt
//! `app/auth/login#1`. A swarm id is therefore one or more id components
//! joined by `/`, and the last `/` of a task key separates the task.

use std::fmt;
use std::sync::Arc;

use crate::names::check_id;

// Ids are shared, not copied: the controller keys several maps per task
// (the task table, the ready set, ownership, dependents) and a clone of an
// `Arc<str>` costs a reference count where a `String` cost an allocation
// per map, which at 50,000 tasks was a few hundred bytes per task.

/// A validated id of a swarm: `app`, or `app/auth` for the child swarm of
/// task `auth` of swarm `app`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SwarmId(Arc<str>);

/// Most components of a swarm id: a root and the deepest nesting a plan
/// may ask for (see `plan::MAX_DEPTH_LIMIT`).
pub const MAX_SWARM_ID_COMPONENTS: usize = 9;

impl SwarmId {
    /// Validates a root or nested swarm id: each `/`-separated component
    /// follows the strict id pattern.
    pub fn new(raw: impl Into<String>) -> Result<Self, String> {
        let raw = raw.into();
        let parts: Vec<&str> = raw.split('/').collect();
        if parts.len() > MAX_SWARM_ID_COMPONENTS {
            return Err(format!("{raw:?} nests more than {MAX_SWARM_ID_COMPONENTS} swarms deep"));
        }
        for part in parts {
            check_id(part)
                .map_err(|rule| if raw.contains('/') { format!("component {rule}") } else { rule })?;
        }
        Ok(Self(raw.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The child swarm run by `task` of this swarm.
    pub fn child(&self, task: &TaskId) -> SwarmId {
        SwarmId(format!("{self}/{task}").into())
    }

    /// The task whose child swarm this is; `None` for a root swarm.
    pub fn parent(&self) -> Option<TaskKey> {
        let (swarm, task) = self.0.rsplit_once('/')?;
        Some(TaskKey { swarm: SwarmId(swarm.into()), task: TaskId(task.into()) })
    }

    /// How deep it nests: 0 for a root swarm.
    pub fn depth(&self) -> usize {
        self.0.matches('/').count()
    }

    /// The root swarm's id (itself for a root swarm).
    pub fn root(&self) -> &str {
        self.0.split('/').next().unwrap_or(&self.0)
    }

    /// The tasks, from the root down, whose child swarms lead to this one.
    pub fn path_from_root(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').skip(1)
    }

    /// Is `other` this swarm or one of its descendants?
    pub fn contains(&self, other: &str) -> bool {
        other == &*self.0 || other.strip_prefix(&*self.0).is_some_and(|rest| rest.starts_with('/'))
    }
}

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

validated_id!(TaskId);

impl fmt::Display for SwarmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for SwarmId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

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

    /// Parses `swarm/task`, where the swarm may be nested (`app/auth/login`
    /// is task `login` of swarm `app/auth`).
    pub fn parse(full: &str) -> Result<Self, String> {
        let (swarm, task) =
            full.rsplit_once('/').ok_or_else(|| format!("{full:?} must have the form <swarm>/<task>"))?;
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
        assert!(TaskKey::parse("auth/a//b").is_err());
        assert!(TaskKey::parse("/api").is_err());
        assert!(TaskKey::parse("auth/a.b/c").is_err());
    }

    #[test]
    fn child_swarms_nest_their_ids() {
        let key = TaskKey::parse("app/auth/login").expect("nested key");
        assert_eq!(key.swarm.as_str(), "app/auth");
        assert_eq!(key.task.as_str(), "login");
        assert_eq!(key.attempt(1).to_string(), "app/auth/login#1");
        let app = SwarmId::new("app").expect("root");
        let child = app.child(&TaskId::new("auth").expect("task"));
        assert_eq!(child, key.swarm);
        assert_eq!(child.parent(), Some(TaskKey::parse("app/auth").expect("key")));
        assert_eq!(app.parent(), None);
        assert_eq!((app.depth(), child.depth(), child.root()), (0, 1, "app"));
        assert!(app.contains("app/auth/x") && app.contains("app") && !app.contains("apple"));
        let deep = ["a"; MAX_SWARM_ID_COMPONENTS + 1].join("/");
        assert!(SwarmId::new(deep).is_err());
    }
}

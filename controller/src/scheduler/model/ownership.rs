//! Which files live attempts own: the index that assignment checks a
//! READY task's globs against.

use std::sync::Arc;

use swarm_core::TaskKey;
use swarm_core::globs::OwnedGlobs;
use swarm_core::plan::TaskSpec;

use super::HashMap;
use super::types::Task;

/// A task's owned globs as the scheduler checks them, with the one meaning
/// the merger and the sidecar's permission policy give them. Globs that
/// are all plain paths are read from the task's spec: most tasks of a big
/// plan own a few plain paths, and compiled globs would cost each of them
/// ~270 bytes at rest. Anything else is compiled once, at creation.
#[derive(Debug, Clone)]
pub enum Ownership {
    Paths(Arc<TaskSpec>),
    Globs(Arc<OwnedGlobs>),
}

impl Ownership {
    /// Compiled globs for `spec` when they are not all plain paths; `None`
    /// when its spec's paths say it all.
    pub fn compile(spec: &TaskSpec) -> Option<Arc<OwnedGlobs>> {
        let own = ownership_of(&spec.files);
        let plain = !own.has_wildcards() && own.literals() == spec.files.as_slice();
        (!plain).then_some(own)
    }

    /// The plain paths owned.
    fn literals(&self) -> &[String] {
        match self {
            Ownership::Paths(spec) => &spec.files,
            Ownership::Globs(g) => g.literals(),
        }
    }

    fn globs(&self) -> Option<&Arc<OwnedGlobs>> {
        match self {
            Ownership::Globs(g) if g.has_wildcards() => Some(g),
            _ => None,
        }
    }

    fn matches(&self, path: &str) -> bool {
        match self {
            Ownership::Paths(spec) => spec.files.iter().any(|p| p == path),
            Ownership::Globs(g) => g.matches(path),
        }
    }

    /// As [`OwnedGlobs::overlaps`]: between plain paths and anything, exact.
    fn overlaps(&self, other: &Ownership) -> bool {
        match (self, other) {
            (Ownership::Globs(a), Ownership::Globs(b)) => a.overlaps(b),
            (Ownership::Paths(spec), o) | (o, Ownership::Paths(spec)) => {
                spec.files.iter().any(|p| o.matches(p))
            }
        }
    }
}

impl Task {
    /// What this task owns, for the overlap checks.
    pub fn ownership(&self) -> Ownership {
        match &self.globs {
            Some(g) => Ownership::Globs(g.clone()),
            None => Ownership::Paths(self.spec.clone()),
        }
    }
}

/// The owned globs of every live attempt, indexed so that checking a task
/// whose globs are plain paths costs a lookup per path rather than a
/// comparison with every live attempt.
#[derive(Debug, Default)]
pub struct LiveOwnership {
    all: HashMap<TaskKey, Ownership>,
    /// Plain paths owned by live attempts, with how many own each.
    literals: HashMap<String, u32>,
    /// Live attempts that own at least one wildcard glob.
    wild: HashMap<TaskKey, Arc<OwnedGlobs>>,
}

impl LiveOwnership {
    pub fn insert(&mut self, key: TaskKey, own: Ownership) {
        if self.all.contains_key(&key) {
            return;
        }
        for p in own.literals() {
            *self.literals.entry(p.clone()).or_insert(0) += 1;
        }
        if let Some(g) = own.globs() {
            self.wild.insert(key.clone(), g.clone());
        }
        self.all.insert(key, own);
    }

    pub fn remove(&mut self, key: &TaskKey) {
        let Some(own) = self.all.remove(key) else { return };
        for p in own.literals() {
            if let Some(n) = self.literals.get_mut(p) {
                *n -= 1;
                if *n == 0 {
                    self.literals.remove(p);
                }
            }
        }
        self.wild.remove(key);
    }

    #[cfg(test)]
    pub fn keys(&self) -> std::collections::BTreeSet<TaskKey> {
        self.all.keys().cloned().collect()
    }

    /// Whether `own` overlaps a live attempt's globs.
    pub fn conflicts(&self, own: &Ownership) -> bool {
        if own.globs().is_none() {
            // A wild live attempt's plain paths are in `literals` too.
            let paths = own.literals();
            paths.iter().any(|p| self.literals.contains_key(p))
                || self.wild.values().any(|o| paths.iter().any(|p| o.matches(p)))
        } else {
            self.all.values().any(|o| o.overlaps(own))
        }
    }
}

impl LiveOwnership {
    /// [`LiveOwnership::conflicts`] for task `key`, leaving out its
    /// ancestors: the tasks of a child an agent spawned own parts of the
    /// files of the task that spawned them, which is RUNNING meanwhile and
    /// merges their work.
    pub fn conflicts_for(&self, key: &TaskKey, own: &Ownership) -> bool {
        // Ids nest a few levels deep at most, so this walk is short.
        let ancestors: Vec<TaskKey> = std::iter::successors(key.swarm.parent(), |p| p.swarm.parent())
            .filter(|p| self.all.contains_key(p))
            .collect();
        if ancestors.is_empty() {
            return self.conflicts(own);
        }
        self.all.iter().any(|(k, o)| !ancestors.contains(k) && o.overlaps(own))
    }
}

/// The plan parser has checked every glob; should one still not compile,
/// the task is taken to own everything, which only serializes it.
pub fn ownership_of(globs: &[String]) -> Arc<OwnedGlobs> {
    Arc::new(OwnedGlobs::new(globs).unwrap_or_else(|e| {
        tracing::error!(error = %e, "owned globs that the plan parser let through; treating them as owning everything");
        OwnedGlobs::everything()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(globs: &[&str]) -> Ownership {
        let files: Vec<String> = globs.iter().map(|g| g.to_string()).collect();
        let spec = swarm_core::plan::Plan::parse(&format!(
            "name = \"s\"\n[[tasks]]\nid = \"t\"\ncommand = \"true\"\nfiles = {files:?}\n"
        ))
        .expect("plan")
        .tasks[0]
            .clone();
        match Ownership::compile(&spec) {
            Some(g) => Ownership::Globs(g),
            None => Ownership::Paths(spec),
        }
    }

    #[test]
    fn live_ownership_tracks_inserts_and_removals() {
        let key = |t: &str| TaskKey::parse(&format!("s/{t}")).expect("key");
        let mut live = LiveOwnership::default();
        live.insert(key("a"), own(&["a.txt", "shared.txt"]));
        live.insert(key("w"), own(&["src/**"]));
        assert!(live.conflicts(&own(&["shared.txt"])), "a plain path held by a");
        assert!(live.conflicts(&own(&["src/x.rs"])), "a plain path under w's glob");
        assert!(live.conflicts(&own(&["src/api/**"])), "a glob nested in w's");
        assert!(live.conflicts(&own(&["*.txt"])), "a glob over a's plain paths");
        assert!(!live.conflicts(&own(&["b.txt"])));
        live.remove(&key("a"));
        assert!(!live.conflicts(&own(&["shared.txt"])), "released with a");
        live.remove(&key("w"));
        assert!(!live.conflicts(&own(&["src/x.rs"])));
    }

    #[test]
    fn a_task_owning_a_directory_and_one_owning_a_file_in_it_never_run_together() {
        let key = |t: &str| TaskKey::parse(&format!("s/{t}")).expect("key");
        let mut live = LiveOwnership::default();
        live.insert(key("docs"), own(&["docs/"]));
        assert!(live.conflicts(&own(&["docs/guide.md"])));
        live.remove(&key("docs"));
        live.insert(key("guide"), own(&["docs/guide.md"]));
        assert!(live.conflicts(&own(&["docs/"])));
    }

    #[test]
    fn plain_paths_are_read_from_the_spec_and_globs_compiled() {
        assert!(matches!(own(&["a.txt", "b/c.rs"]), Ownership::Paths(_)));
        assert!(matches!(own(&["docs/"]), Ownership::Globs(_)), "a directory is a glob");
        assert!(matches!(own(&["src/*.rs"]), Ownership::Globs(_)));
    }
}

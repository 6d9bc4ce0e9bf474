//! Matching READY tasks to idle workers: labels, and exclusive file
//! ownership between live attempts.

use super::HashMap;
use std::sync::Arc;

use swarm_core::globs::OwnedGlobs;
use swarm_core::plan::{TaskSpec, task_branch};
use swarm_core::{AttemptState, TaskKey, TaskState};

use super::model::{AgentRecord, Attempt, Task};
use super::outbound::{AgentAssign, AssignSpec, AttemptHandle, Outbound};
use super::{Effects, Scheduler, now_ms, task_text};

/// A task's owned globs as the scheduler checks them, with the one meaning
/// the integrator and the sidecar's permission policy give them. Globs that
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

/// What the last scans of the ready set found, so they are not repeated
/// while nothing that could change their answer has changed.
#[derive(Debug, Default)]
pub(super) struct ScanMemo {
    /// Bumped by every change that can make a task assignable.
    pub epoch: u64,
    /// Workers whose full scan at that epoch found nothing.
    pub found_nothing: HashMap<String, u64>,
    /// When the earliest task skipped for its backoff becomes assignable.
    pub due_ms: i64,
    /// Scans made, for tests and metrics.
    pub full_scans: u64,
}

impl ScanMemo {
    pub fn new() -> ScanMemo {
        ScanMemo { epoch: 0, found_nothing: HashMap::default(), due_ms: i64::MAX, full_scans: 0 }
    }

    /// Something changed that may make a task assignable.
    pub fn changed(&mut self) {
        self.epoch += 1;
    }
}

impl Scheduler {
    /// Gives READY tasks to idle workers until one side runs out.
    ///
    /// A worker whose scan of the ready set found nothing is not scanned
    /// again until something could change the answer: a task became READY
    /// or left RUNNING, a worker (re)connected, or a skipped task's backoff
    /// ran out. So an idle fleet facing tasks it cannot take costs nothing
    /// per tick, however many tasks wait.
    pub(super) fn schedule(&mut self, fx: &mut Effects) {
        if self.ready.is_empty() {
            return;
        }
        let now = now_ms();
        if now >= self.scan.due_ms {
            self.scan.found_nothing.clear();
            self.scan.due_ms = i64::MAX;
        }
        let epoch = self.scan.epoch;
        let mut idle: Vec<String> = self
            .workers
            .values()
            .filter(|w| w.is_idle() && self.scan.found_nothing.get(&w.id) != Some(&epoch))
            .map(|w| w.id.clone())
            .collect();
        if idle.is_empty() {
            return;
        }
        idle.sort();
        // READY agent tasks a budget holds: BLOCKED after the scan.
        let mut over_budget: Vec<(TaskKey, String)> = Vec::new();
        for worker_id in idle {
            let Some(worker) = self.workers.get(&worker_id) else { continue };
            self.scan.full_scans += 1;
            let mut chosen = None;
            for (_, key) in &self.ready {
                let Some(task) = self.tasks.get(key) else { continue };
                if task.not_before > now {
                    self.scan.due_ms = self.scan.due_ms.min(task.not_before);
                    continue;
                }
                if !worker.satisfies(&task.spec.labels) || self.swarm_paused(key) {
                    continue;
                }
                if task.spec.agent.is_some() {
                    if let Some(why) = self.over_budget(key) {
                        if !over_budget.iter().any(|(k, _)| k == key) {
                            over_budget.push((key.clone(), why));
                        }
                        continue;
                    }
                    if let Some(until) = self.limited_until(worker, now) {
                        self.scan.due_ms = self.scan.due_ms.min(until);
                        continue;
                    }
                    if self.waits_for_its_session(task, &worker_id) {
                        continue;
                    }
                }
                if self.running.conflicts(&task.ownership()) {
                    continue;
                }
                chosen = Some(key.clone());
                break;
            }
            let Some(key) = chosen else {
                self.scan.found_nothing.insert(worker_id, epoch);
                if self.ready.is_empty() {
                    break;
                }
                continue;
            };
            self.assign(&worker_id, &key, fx);
        }
        for (key, why) in over_budget {
            self.block_at_budget(&key, &why, fx);
        }
    }

    /// Creates the next attempt of `key` on `worker_id`.
    fn assign(&mut self, worker_id: &str, key: &TaskKey, fx: &mut Effects) {
        let token = self.next_token;
        self.next_token += 1;
        let Some(task) = self.tasks.get_mut(key) else { return };
        task.attempts += 1;
        task.percent = 0;
        task.step.clear();
        let number = task.attempts;
        let base = if task.resume_commit.is_empty() {
            self.swarms.get(&key.swarm).map(|s| s.integration_head.clone()).unwrap_or_default()
        } else {
            task.resume_commit.clone()
        };
        let _span = tracing::info_span!("assign", swarm = %key.swarm, task = %key, attempt = %key.attempt(number), worker = worker_id)
            .entered();
        let attempt = Attempt::begin(
            key.clone(),
            number,
            AttemptState::Assigned,
            worker_id.to_string(),
            token,
            base,
            AgentRecord {
                kind: task.spec.agent.as_ref().map(|a| a.kind.as_str().to_string()).unwrap_or_default(),
                ..Default::default()
            },
        );
        fx.dirty_attempts.insert((attempt.task.clone(), attempt.number));
        self.attempts.insert((key.clone(), number), attempt);
        if let Some(w) = self.workers.get_mut(worker_id) {
            w.attempt = Some((key.clone(), number));
            w.updated_at = now_ms();
            fx.dirty_workers.insert(w.id.clone());
        }
        self.lease_seen.insert(worker_id.to_string(), self.mono_ms());
        self.set_state(key, TaskState::Running, &format!("attempt {number} assigned to {worker_id}"), fx);
        if let Some(spec) = self.assign_spec(key, number) {
            self.send(worker_id, Outbound::Assign(Box::new(spec)), fx);
        }
    }

    /// The Assign message for an existing attempt (also re-sent when its
    /// sidecar reconnects without it).
    pub(super) fn assign_spec(&self, key: &TaskKey, number: u32) -> Option<AssignSpec> {
        if self.is_reviewer(key, number) {
            return self.review_assign_spec(key, number);
        }
        let task = self.tasks.get(key)?;
        let attempt = self.attempts.get(&(key.clone(), number))?;
        let deps: Vec<(String, String)> = task
            .spec
            .deps
            .iter()
            .filter_map(|d| self.tasks.get(&TaskKey::new(key.swarm.clone(), d.clone())))
            .map(|t| (t.key.task.to_string(), t.notes.summary.clone()))
            .collect();
        Some(AssignSpec {
            attempt: AttemptHandle { task: key.clone(), number, token: attempt.token },
            base_commit: attempt.base_commit.clone(),
            branch: task_branch(&key.swarm, key.task.as_str()),
            title: task.spec.title.clone(),
            task_text: task_text::render(task, number, &deps),
            command: task.spec.command.to_vec(),
            env: task.spec.env.clone(),
            owned_globs: task.spec.files.clone(),
            verify: task.spec.verify.clone(),
            idle_timeout_secs: task.spec.idle_timeout_secs,
            max_restarts: task.spec.max_restarts,
            setup: task.spec.setup.clone(),
            setup_every_attempt: task.spec.setup_on == swarm_core::plan::SetupOn::Attempt,
            traceparent: String::new(),
            agent: task.spec.agent.as_ref().map(|spec| AgentAssign {
                spec: (**spec).clone(),
                resume_session: self
                    .resumable_session(task, number)
                    .filter(|a| a.worker == attempt.worker)
                    .map(|a| a.agent.session_id.clone())
                    .unwrap_or_default(),
            }),
            review_diff_base: None,
            sandbox: task.spec.sandbox.clone(),
            secrets: task.spec.secrets.clone(),
        })
    }

    /// The attempt before `number` if its agent session can be continued:
    /// it stopped with its work kept (checkpoint, usage limit, interrupt,
    /// lost worker) rather than failing, and it named its session. Only its
    /// own worker can resume it: the session and the worktree holding its
    /// work live there.
    pub(super) fn resumable_session(&self, task: &Task, number: u32) -> Option<&Attempt> {
        let previous = self.attempts.get(&(task.key.clone(), number.checked_sub(1)?))?;
        let kept = matches!(
            previous.state,
            AttemptState::Checkpointed
                | AttemptState::RateLimited
                | AttemptState::Cancelled
                | AttemptState::Lost
        );
        (kept && !previous.agent.session_id.is_empty()).then_some(previous)
    }

    /// Whether `task` should wait for the worker that holds its session
    /// rather than start afresh on `worker_id`: while that worker is
    /// connected it will come back for it.
    fn waits_for_its_session(&self, task: &Task, worker_id: &str) -> bool {
        let Some(previous) = self.resumable_session(task, task.attempts + 1) else { return false };
        previous.worker != worker_id
            && self.workers.get(&previous.worker).is_some_and(|w| w.session.is_some() && !w.draining)
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

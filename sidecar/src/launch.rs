//! How an attempt's processes start: the directories private to the
//! attempt, the worker's whole environment, and its confinement. Setup
//! commands, the worker (or agent) and the verify tiers all start from the
//! same [`Launch`], since all of them run code the worker could change.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::assignment::{Assignment, Context};
use crate::outcome::{Failure, InfraFailure, TaskFailure};
use swarm_core::plan::Limits;

use crate::sandbox::limits::{Applied, Cgroup as LimitsBy, apply};
use crate::sandbox::{AttemptCgroup, Confinement, Ending, Place, SandboxReport};
use crate::swarm_files::SwarmFiles;

/// How the attempt's processes are started.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Their whole environment: nothing else of the sidecar's is inherited.
    pub env: Vec<(String, String)>,
    /// None: not confined (the plan opted out, or the kernel has no Landlock).
    pub confinement: Option<Confinement>,
    /// What the `attempt.sandbox` event says.
    pub report: SandboxReport,
    /// The attempt's cgroup, which its confined processes join; the last
    /// clone dropped (when the attempt is over) kills what is left in it.
    pub cgroup: Option<Arc<AttemptCgroup>>,
}

impl Launch {
    /// Kills whatever of the attempt's processes is still in its cgroup
    /// (after its worker ended: what the worker left behind).
    pub fn kill_leftovers(&self) {
        if let Some(cg) = &self.cgroup {
            cg.kill();
        }
    }

    /// The OOM kills in the attempt's cgroup so far (0 without one): the
    /// count before a worker starts, for [`Launch::memory_limit_hit`].
    pub fn oom_kills(&self) -> u64 {
        self.cgroup.as_ref().map_or(0, |cg| cg.oom_kills())
    }

    /// The memory limit, when the cgroup enforces one and its OOM killer
    /// has killed since `before` (what [`Launch::oom_kills`] said then).
    pub fn memory_limit_hit(&self, before: u64) -> Option<u64> {
        let cg = self.cgroup.as_ref()?;
        let limit = cg.enforced().limits.memory?;
        (cg.oom_kills() > before).then_some(limit)
    }
}

/// The attempt's private directories beside its worktree, in the
/// workspaces directory where no other worker's rules reach: `<id>.tmp` (its
/// `TMPDIR`) and `<id>.gitdir` (its git metadata, see
/// [`crate::worker_git`]). Made afresh for a new attempt, kept for a
/// re-adopted worker, removed when the attempt is over.
pub struct Scratch {
    pub worktree: PathBuf,
    pub tmp: PathBuf,
    pub git_dir: PathBuf,
    /// Made for a new attempt (not kept for a re-adopted worker).
    pub fresh: bool,
}

impl Scratch {
    pub fn new(wt: &Path, fresh: bool) -> Result<Scratch, InfraFailure> {
        let name = wt.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = wt.with_file_name(format!("{name}.tmp"));
        let infra = |what: &'static str, source| InfraFailure::Scratch { what, source };
        // The git directory was made with the worktree (see `attempt`).
        let git_dir = crate::worker_git::dir_of(wt);
        if fresh && std::fs::symlink_metadata(&tmp).is_ok() {
            std::fs::remove_dir_all(&tmp).map_err(|e| infra("clearing the attempt's TMPDIR", e))?;
        }
        std::fs::create_dir_all(&tmp).map_err(|e| infra("making the attempt's TMPDIR", e))?;
        {
            use std::os::unix::fs::PermissionsExt as _;
            let private = std::fs::Permissions::from_mode(0o700);
            std::fs::set_permissions(&tmp, private).map_err(|e| infra("making the attempt's TMPDIR", e))?;
        }
        Ok(Scratch { worktree: wt.to_path_buf(), tmp, git_dir, fresh })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.tmp)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.tmp.display(), error = %e, "could not remove the attempt's TMPDIR");
        }
        crate::worker_git::discard(&self.worktree);
    }
}

/// The attempt's [`Launch`]. A `required` sandbox on a kernel that cannot
/// enforce it fails the attempt: such a task only goes to sidecars that
/// label themselves as enforcing it, so this is a misconfiguration.
pub fn launch(
    ctx: &Context,
    a: &Assignment,
    files: &SwarmFiles,
    scratch: &Scratch,
) -> Result<Launch, Failure> {
    let (secrets, redactor) = crate::secrets::read_all(&a.secrets).map_err(InfraFailure::Secrets)?;
    let _ = ctx.redactor.set(redactor);
    let user = ctx.worker_user.as_ref();
    if let Some(u) = user {
        crate::sandbox::ownership::give(&scratch.tmp, &u.ids).map_err(|source| InfraFailure::Scratch {
            what: "handing the attempt's TMPDIR to the worker user",
            source,
        })?;
    }
    let env = worker_env(ctx, a, files, scratch, secrets);
    let place = Place {
        worktree: &scratch.worktree,
        common_dir: &ctx.workspaces.common,
        private: &[&scratch.tmp, &scratch.git_dir],
        agent: a.agent.as_ref().map(|c| (c.kind, c.program.as_str())),
        review: a.review.is_some(),
    };
    let mut confinement = crate::sandbox::confine(&a.sandbox, ctx.sandbox, &ctx.supervisor, &place, &env)
        .map_err(|e| TaskFailure::Sandbox(e.to_string()))?;
    let (cgroup, ending, limits) =
        cgroup(ctx, confinement.as_mut(), &a.sandbox.0.limits, scratch.fresh, a.agent.is_some());
    let mut report = a.sandbox.report(ctx.sandbox, &ending, &limits);
    let found = confinement.as_ref().map(|c| c.policy.toolchains.as_slice()).unwrap_or_default();
    report.enforced.extend(crate::sandbox::toolchains::describe(found));
    if confinement.is_some()
        && let (Some(cfg), Some((_, home))) = (&a.agent, env.iter().find(|(k, _)| k == "HOME"))
    {
        crate::sandbox::make_agent_state(cfg.kind, Path::new(home), user.map(|u| &u.ids)).map_err(
            |source| InfraFailure::AgentState { kind: cfg.kind.to_string(), home: home.clone(), source },
        )?;
    }
    let confinement = crate::sandbox::worker_user::run_as(confinement, user, &ctx.supervisor);
    report.enforced.extend(user.map(crate::sandbox::worker_user::report_line));
    Ok(Launch { env, confinement, report, cgroup })
}

/// The attempt's cgroup with the plan's `limits` in it, which its confined
/// processes then join, with the rlimits of the limits it does not enforce
/// (an unconfined attempt, `sandbox = "off"`, has neither); how its
/// processes end, and how its limits are applied.
fn cgroup(
    ctx: &Context,
    confinement: Option<&mut Confinement>,
    limits: &Limits,
    fresh: bool,
    agent: bool,
) -> (Option<Arc<AttemptCgroup>>, Ending, Applied) {
    let without = |why: &str| match agent {
        true => Ending::GroupOnly { why: why.to_string() },
        false => Ending::Subreaper,
    };
    let Some(confinement) = confinement else {
        return (None, without("sandbox off"), Applied::default());
    };
    let policy = Arc::make_mut(&mut confinement.policy);
    let user = ctx.worker_user.as_ref().map(|u| u.name.as_str());
    let (cgroup, ending, applied) = match ctx.cgroups.attempt(&ctx.repo, &ctx.worker_id, fresh) {
        Ok(Some(mut cg)) => {
            let enforced = cg.set_limits(limits);
            policy.cgroup = Some(cg.path().to_path_buf());
            (Some(Arc::new(cg)), Ending::Cgroup, apply(limits, LimitsBy::Enforces(enforced), user))
        }
        Ok(None) => {
            let why = ctx.cgroups.why_not();
            (None, without(why), apply(limits, LimitsBy::None(why), user))
        }
        Err(e) => {
            tracing::warn!(error = %e, "no cgroup for this attempt");
            (None, without(&e), apply(limits, LimitsBy::None(&e), user))
        }
    };
    policy.rlimits = applied.rlimits;
    (cgroup, ending, applied)
}

/// The worker's whole environment: the allowlisted part of the sidecar's
/// own, the plan's `env` and secrets, then what the sidecar sets (which wins).
fn worker_env(
    ctx: &Context,
    a: &Assignment,
    files: &SwarmFiles,
    scratch: &Scratch,
    secrets: Vec<(String, String)>,
) -> Vec<(String, String)> {
    let mut env = crate::sandbox::inherited_env();
    if let Some(u) = &ctx.worker_user {
        // The worker user's own home: the sidecar's is not its to read.
        env.retain(|(k, _)| k != "HOME");
        env.push(("HOME".to_string(), u.home.to_string_lossy().into_owned()));
    }
    env.extend(a.env.iter().cloned());
    env.extend(secrets);
    let path = |p: &Path| p.to_string_lossy().into_owned();
    env.extend([
        ("TMPDIR".to_string(), path(&scratch.tmp)),
        ("GIT_DIR".to_string(), path(&scratch.git_dir)),
        ("GIT_WORK_TREE".to_string(), path(&scratch.worktree)),
        ("SWARM_SWARM_ID".to_string(), a.attempt.task.swarm.to_string()),
        ("SWARM_TASK_ID".to_string(), a.attempt.task.task.to_string()),
        ("SWARM_ATTEMPT".to_string(), a.attempt.number.to_string()),
        ("SWARM_WORKER_ID".to_string(), ctx.worker_id.clone()),
        ("SWARM_BRANCH".to_string(), a.branch.clone()),
        ("SWARM_BASE_COMMIT".to_string(), a.base_commit.clone()),
        ("SWARM_TASK_FILE".to_string(), path(&files.task)),
        ("SWARM_STATUS_FILE".to_string(), path(&files.status)),
        ("TRACEPARENT".to_string(), a.traceparent.clone()),
    ]);
    // Later entries win, as they would in the process's environment.
    let mut seen = std::collections::HashSet::new();
    let mut env: Vec<_> = env.into_iter().rev().filter(|(k, _)| seen.insert(k.clone())).collect();
    env.reverse();
    env
}

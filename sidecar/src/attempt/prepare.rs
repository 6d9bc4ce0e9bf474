//! The first step: the worktree at the task's base (fetched first when
//! remote, repaired between tries), a fresh `.swarm/` with the task text,
//! the attempt's launch (environment, confinement, private directories),
//! its setup commands and its log.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tracing::Instrument as _;

use crate::assignment::{Adopted, Assignment, Context};
use crate::launch::{Launch, Scratch};
use crate::outcome::{Failure, InfraFailure, TaskFailure};
use crate::report::{Event, Sink};
use crate::swarm_files::SwarmFiles;
use crate::verify::{self, Tier};
use crate::{worker_files, worktree};

/// How many times a failing infrastructure step is tried.
pub(super) const INFRA_TRIES: u32 = 3;

/// A worktree ready for the attempt's worker.
pub(super) struct Prepared {
    pub worktree: PathBuf,
    pub files: SwarmFiles,
    pub launch: Launch,
    pub log_path: PathBuf,
    /// The worker's log, which the sidecar's notes go into too.
    pub log: tokio::fs::File,
    /// Kept until the attempt is over, then removed.
    pub scratch: Scratch,
}

/// Prepares a new attempt, or finds the worktree of a re-adopted one
/// (which is left as its worker has it).
pub(super) async fn prepare(
    ctx: &Context,
    a: &Assignment,
    adopted: Option<Adopted>,
    sink: &Sink,
) -> Result<Prepared, Failure> {
    let fresh = adopted.is_none();
    let (wt, created) = match adopted {
        Some(_) => (own_worktree(ctx).await?, false),
        None => {
            let prepared = prepare_with_repairs(ctx, a, sink).await?;
            (prepared.path, prepared.created)
        }
    };
    let files = SwarmFiles::new(&wt);
    if fresh {
        write_task(&wt, &files, a).await?;
    }
    if let Some(u) = &ctx.worker_user {
        // The worker writes its status here; the sidecar's files stay root's.
        crate::sandbox::ownership::share(&files.dir, &u.ids, false, &[])
            .map_err(|source| InfraFailure::Write { path: files.dir.clone(), source })?;
    }
    let scratch = Scratch::new(&wt, fresh)?;
    let launch = crate::launch::launch(ctx, a, &files, &scratch)?;
    if fresh && (created || a.setup_every_attempt) {
        setup(a, &wt, &launch).await?;
    }
    let log_path = files.log_of(&a.attempt);
    let log = worker_files::append(&log_path)
        .map(tokio::fs::File::from_std)
        .map_err(|source| InfraFailure::Open { path: log_path.clone(), source })?;
    Ok(Prepared { worktree: wt, files, launch, log_path, log, scratch })
}

/// A fresh `.swarm/`; a reviewer's task text carries the diff, which only
/// the worktree has.
async fn write_task(wt: &Path, files: &SwarmFiles, a: &Assignment) -> Result<(), InfraFailure> {
    files
        .start_attempt(&a.task_text)
        .map_err(|source| InfraFailure::Write { path: files.dir.clone(), source })?;
    if let Some(base) = &a.review {
        let text = crate::review::task_text(wt, &a.task_text, base).await;
        let stale = files.dir.join(crate::review::REVIEW_FILE);
        let written = match std::fs::remove_file(&stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => worker_files::write(&files.task, text.as_bytes()),
        };
        written.map_err(|source| InfraFailure::Write { path: files.task.clone(), source })?;
    }
    Ok(())
}

/// The plan's setup commands, in order; the first that fails is the task's.
async fn setup(a: &Assignment, wt: &Path, launch: &Launch) -> Result<(), TaskFailure> {
    for cmd in &a.setup {
        let tier = Tier {
            name: "setup".into(),
            command: cmd.clone(),
            blocking: true,
            timeout: Duration::from_secs(3600),
        };
        let r = verify::run_tier(&tier, wt, &launch.env, launch.confinement.as_ref()).await;
        if !r.passed {
            let output_tail: Vec<String> = r.output_tail.lines().map(str::to_string).collect();
            let c = launch.confinement.as_ref();
            let denied = crate::sandbox::denials::explain(&output_tail, c, &launch.report, &launch.env);
            return Err(TaskFailure::Setup {
                command: cmd.clone(),
                exit_code: r.exit_code,
                output_tail,
                denied,
            });
        }
    }
    Ok(())
}

/// The worktree of an attempt being resumed (it is already prepared).
pub(super) async fn own_worktree(ctx: &Context) -> Result<PathBuf, InfraFailure> {
    ctx.workspaces.worktree(&ctx.worker_id).map_err(|e| InfraFailure::OwnWorktree(e.to_string()))
}

/// Fetches the base (remote mode) and moves the worktree to the task,
/// repairing between tries: stale locks are cleared on every try (inside
/// `prepare`), and the last try recreates the worktree from scratch.
async fn prepare_with_repairs(
    ctx: &Context,
    a: &Assignment,
    sink: &Sink,
) -> Result<worktree::Prepared, InfraFailure> {
    let mut last = String::new();
    for n in 1..=INFRA_TRIES {
        if n > 1 {
            tracing::warn!(error = %last, try_ = n, "preparing the attempt failed; repairing and retrying");
            tokio::time::sleep(Duration::from_millis(200 * u64::from(n))).await;
        }
        if let Some(remote) = &ctx.remote
            && let Err(e) = remote.ensure_commit(&ctx.repo, &a.base_commit).await
        {
            last = format!("fetching base {}: {e}", a.base_commit);
            continue;
        }
        let (ws, id, branch, base) =
            (ctx.workspaces.clone(), ctx.worker_id.clone(), a.branch.clone(), a.base_commit.clone());
        let fresh = n == INFRA_TRIES;
        let tracker = ctx.tracker.clone();
        let user = ctx.worker_user.as_ref().map(|u| u.ids.clone());
        let r = tokio::task::spawn_blocking(move || {
            // The worker's own git metadata is part of a prepared worktree.
            let p = prepare_tracked(&tracker, &ws, &id, &branch, &base, fresh)?;
            crate::worker_git::prepare(&p.path)?;
            if let Some(ids) = &user {
                hand_over(&p.path, ids, &tracker)?;
            }
            Ok::<_, worktree::WorktreeError>(p)
        })
        .instrument(tracing::info_span!("prepare", base = %a.base_commit, branch = %a.branch, try_ = n))
        .await;
        match r {
            Ok(Ok(p)) => {
                for lock in &p.cleared_locks {
                    let message = format!(
                        "sidecar removed a stale git lock {} (left by a crashed process)",
                        lock.display()
                    );
                    sink.journaled(Event::note(&a.attempt, message));
                }
                return Ok(p);
            }
            Ok(Err(worktree::WorktreeError::MissingBase(b))) if ctx.remote.is_none() => {
                return Err(InfraFailure::MissingBase(b));
            }
            Ok(Err(e)) => last = format!("preparing worktree: {e}"),
            Err(e) => last = format!("worktree task failed: {e}"),
        }
    }
    Err(InfraFailure::Prepare { last, tries: INFRA_TRIES })
}

/// Hands the worktree and the worker's git directory to the worker user
/// (see [`crate::sandbox::ownership`]: their top directories, the `.git`
/// file and `.swarm/` stay root's, so git and libgit2 open them as before).
/// Only what the sidecar wrote as root changes owner; the tracker forgets
/// those changes, which are not the worker's (the files' ctime moves, so
/// git re-reads them once).
fn hand_over(
    wt: &Path,
    ids: &crate::sandbox::worker_user::Ids,
    tracker: &crate::changes::SharedTracker,
) -> Result<(), worktree::WorktreeError> {
    use crate::sandbox::ownership::share;
    let git_dir = crate::worker_git::dir_of(wt);
    for (dir, keep) in [(wt, &[".git", worktree::SWARM_DIR][..]), (&git_dir, &[])] {
        share(dir, ids, true, keep)
            .map_err(|source| worktree::WorktreeError::Io { path: dir.to_path_buf(), source })?;
    }
    if let Some(t) = tracker.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        let _ = t.take();
    }
    Ok(())
}

/// Prepares the worker's worktree before any task asks for it (see
/// [`worktree::warm`]): at the repository's HEAD, which is where swarms
/// most often start (and, in a clone of a remote sidecar, close to it, so
/// the first move is a small diff). Holds the tracker's lock throughout, so
/// an attempt that arrives meanwhile waits for it instead of racing it; a
/// worktree that already exists is left alone and untracked, since nothing
/// vouches for what happened in it before this process.
pub fn warm_worktree(tracker: &crate::changes::SharedTracker, ws: &worktree::Workspaces, id: &str) {
    let _span = tracing::info_span!("worktree.warm", worker = id).entered();
    let mut slot = tracker.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_some() {
        return;
    }
    let head = git2::Repository::open(&ws.repo)
        .and_then(|r| r.head().and_then(|h| h.peel_to_commit()).map(|c| c.id().to_string()));
    let Ok(head) = head else {
        tracing::info!("no HEAD commit to prepare the worktree at; the first attempt makes it");
        return;
    };
    let started = std::time::Instant::now();
    match worktree::warm(ws, id, &head) {
        Ok(Some(path)) => {
            match crate::changes::Tracker::start(&path) {
                Ok(t) => *slot = Some(t),
                Err(e) => tracing::info!(error = %e, "not tracking worktree changes; every attempt walks it"),
            }
            tracing::info!(at = %head, ms = started.elapsed().as_millis() as u64, "worktree prepared ahead of the first task");
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "could not prepare the worktree ahead; the first attempt will"),
    }
}

/// Moves the worktree to the attempt's base: only the paths that differ
/// when the tracker vouches that nothing changed since the last commit,
/// otherwise (and after any failure of that) a full checkout, after which
/// a new tracker starts.
fn prepare_tracked(
    tracker: &crate::changes::SharedTracker,
    ws: &worktree::Workspaces,
    id: &str,
    branch: &str,
    base: &str,
    fresh: bool,
) -> Result<worktree::Prepared, worktree::WorktreeError> {
    let mut slot = tracker.lock().unwrap_or_else(|e| e.into_inner());
    if !fresh && slot.as_mut().and_then(|t| t.take()).is_some_and(|changed| changed.is_empty()) {
        let moved = match slot.as_mut().and_then(|t| t.repo_and_memo()) {
            Some((wt, memo)) => crate::changes::move_clean_in(wt, memo, ws, id, branch, base),
            None => crate::changes::move_clean(ws, id, branch, base),
        };
        match moved {
            Ok(p) => {
                // Its own checkout is not a change.
                if slot.as_mut().and_then(|t| t.take()).is_some() {
                    return Ok(p);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "moving the worktree by its changed paths failed; checking it out in full")
            }
        }
    }
    *slot = None;
    if fresh {
        worktree::discard(ws, id)?;
    }
    let p = worktree::prepare(ws, id, branch, base)?;
    match crate::changes::Tracker::start(&p.path) {
        Ok(t) => *slot = Some(t),
        Err(e) => tracing::info!(error = %e, "not tracking worktree changes; every attempt walks it"),
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(repo: &git2::Repository, parent: Option<git2::Oid>, files: &[(&str, &str)]) -> git2::Oid {
        let mut tb = match parent {
            Some(p) => repo.treebuilder(Some(&repo.find_commit(p).expect("parent").tree().expect("tree"))),
            None => repo.treebuilder(None),
        }
        .expect("treebuilder");
        for (path, text) in files {
            tb.insert(path, repo.blob(text.as_bytes()).expect("blob"), 0o100644).expect("insert");
        }
        let tree = repo.find_tree(tb.write().expect("tree")).expect("find tree");
        let sig = git2::Signature::now("t", "t@example.com").expect("sig");
        let parents: Vec<git2::Commit<'_>> =
            parent.map(|p| repo.find_commit(p).expect("parent")).into_iter().collect();
        let parents: Vec<&git2::Commit<'_>> = parents.iter().collect();
        repo.commit(None, &sig, &sig, "c", &tree, &parents).expect("commit")
    }

    /// A tracked worktree whose HEAD moved without its files (nothing the
    /// tracker watches changed) is not moved by its changed paths into a
    /// tree that is not the target's: it is checked out in full.
    #[test]
    fn a_worktree_not_where_its_tracker_says_is_checked_out_in_full() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo_path = dir.path().join("repo");
        let repo = git2::Repository::init(&repo_path).expect("init");
        let base = commit(&repo, None, &[("a.txt", "a\n"), ("b.txt", "1\n")]);
        repo.reference("refs/heads/main", base, true, "base").expect("main");
        repo.set_head("refs/heads/main").expect("head");
        let moved = commit(&repo, Some(base), &[("b.txt", "2\n")]);
        let target = commit(&repo, Some(moved), &[("d.txt", "d\n")]);

        let tracker: crate::changes::SharedTracker = Default::default();
        let ws = worktree::Workspaces::in_repo(&repo_path).expect("workspaces");
        warm_worktree(&tracker, &ws, "w1");
        assert!(tracker.lock().expect("lock").is_some(), "the warmed worktree is tracked");
        let path = ws.worktree("w1").expect("path");
        // HEAD moves to `moved` behind the tracker's back; b.txt still says 1.
        git2::Repository::open(&path).expect("wt").set_head_detached(moved).expect("detach");

        let p =
            prepare_tracked(&tracker, &ws, "w1", "swarm/s/t", &target.to_string(), false).expect("prepared");
        assert_eq!(std::fs::read_to_string(p.path.join("b.txt")).expect("b"), "2\n", "the target's b.txt");
        assert_eq!(std::fs::read_to_string(p.path.join("d.txt")).expect("d"), "d\n");
        let wt = git2::Repository::open(&p.path).expect("wt");
        assert_eq!(wt.head().expect("head").target(), Some(target));
        assert!(wt.statuses(None).expect("status").is_empty(), "index and files are the target's");
    }
}

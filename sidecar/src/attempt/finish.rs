//! The last steps: what the run left to keep is verified and committed
//! (or, for a reviewer, its decision read), and the outcome completed.
//! The worker's group is gone by now, so no process of the attempt
//! touches the worktree while the sidecar commits it.

use std::path::Path;
use std::time::Duration;

use swarm_core::Outcome;
use tracing::Instrument as _;

use super::prepare::{INFRA_TRIES, Prepared};
use crate::assignment::{Assignment, Context};
use crate::launch::Launch;
use crate::outcome::{AttemptOutcome, InfraFailure};
use crate::sandbox::denials;
use crate::verify::{self, TierOutcome};
use crate::worktree;

/// What the run step hands on: the outcome so far and what is left to do.
#[derive(Debug)]
pub(super) struct Ran {
    pub outcome: AttemptOutcome,
    pub next: Next,
}

#[derive(Debug)]
pub(super) enum Next {
    /// The outcome is complete.
    Report,
    /// A reviewer finished: its decision about the worktree's HEAD, with
    /// what it said last.
    Review { said: String },
    /// The worker succeeded: verify, then commit with this message. The
    /// summary is the commit's subject unless one is given.
    Deliver { message: String, summary: Option<String> },
    /// Keep whatever the worker left as a WIP commit with this message.
    Checkpoint { message: String },
}

impl Ran {
    pub fn report(outcome: AttemptOutcome) -> Ran {
        Ran { outcome, next: Next::Report }
    }
}

/// The verify tiers' results, and whether every blocking tier passed.
pub(super) struct Verified {
    pub tiers: Vec<TierOutcome>,
    pub passed: bool,
}

/// A commit made of the worktree.
pub(super) struct Committed {
    pub commit: String,
    pub subject: String,
    pub files_changed: Vec<String>,
}

/// Completes the outcome; if the sidecar cannot keep the work, the attempt
/// is handed back as an infrastructure failure.
pub(super) async fn finish(ctx: &Context, a: &Assignment, p: &Prepared, ran: Ran) -> AttemptOutcome {
    let Ran { mut outcome, next } = ran;
    let wt = &p.worktree;
    let (message, summary) = match next {
        Next::Report => return outcome,
        Next::Review { said } => {
            return match crate::review::conclude(wt, &said) {
                Ok(r) => AttemptOutcome {
                    commit: r.commit,
                    summary: said.trim().to_string(),
                    review: Some(r.verdict),
                    ..outcome
                },
                Err(e) => outcome.infra_failed(e),
            };
        }
        Next::Deliver { message, summary } => {
            let verified = verify(a, wt, &p.launch).await;
            outcome.tiers = verified.tiers;
            if !verified.passed {
                outcome.outcome = Outcome::VerifyFailed;
                outcome.error = "a blocking verify tier failed".into();
                let failed: Vec<String> = outcome
                    .tiers
                    .last()
                    .map(|t| t.output_tail.lines().map(str::to_string).collect())
                    .unwrap_or_default();
                let (c, report, env) = (p.launch.confinement.as_ref(), &p.launch.report, &p.launch.env);
                outcome.error.push_str(&denials::explain(&failed, c, report, env));
            }
            (message, Some(summary))
        }
        Next::Checkpoint { message } => (message, None),
    };
    match commit(ctx, a, wt, message).await {
        Ok(c) => {
            if a.agent.is_some() {
                crate::agent::session::note_commit(wt, &c.commit);
            }
            if let Some(summary) = summary {
                outcome.summary = summary.unwrap_or(c.subject);
            }
            AttemptOutcome { commit: c.commit, files_changed: c.files_changed, ..outcome }
        }
        Err(e) => outcome.infra_failed(e),
    }
}

/// Runs the attempt's verify tiers, confined as its worker was.
pub(super) async fn verify(a: &Assignment, wt: &Path, launch: &Launch) -> Verified {
    let (tiers, passed) = verify::run_tiers(&a.verify, wt, &launch.env, launch.confinement.as_ref()).await;
    Verified { tiers, passed }
}

/// Commits the worktree and, for a remote sidecar, pushes the commit.
pub(super) async fn commit(
    ctx: &Context,
    a: &Assignment,
    wt: &Path,
    message: String,
) -> Result<Committed, InfraFailure> {
    let (commit, subject) = commit_with_repairs(ctx, wt, message).await?;
    let (wt2, base, c) = (wt.to_path_buf(), a.base_commit.clone(), commit.clone());
    let files_changed = tokio::task::spawn_blocking(move || {
        let oid = git2::Oid::from_str(&c)?;
        worktree::files_changed(&wt2, &base, oid).map_err(|e| git2::Error::from_str(&e.to_string()))
    })
    .await
    .map_err(|e| InfraFailure::DiffTask(e.to_string()))?
    .map_err(|e| InfraFailure::ListFiles(e.to_string()))?;
    if let Some(remote) = &ctx.remote {
        let mut tries = 0;
        while let Err(e) = remote.push(&ctx.repo, &a.attempt, &commit, &a.base_commit).await {
            tries += 1;
            if tries >= INFRA_TRIES {
                return Err(InfraFailure::Push { error: e.to_string(), tries });
            }
            tracing::warn!(error = %e, tries, "pushing the result failed; retrying");
            tokio::time::sleep(Duration::from_millis(200 * u64::from(tries))).await;
        }
    }
    Ok(Committed { commit, subject, files_changed })
}

/// Commits the worktree, clearing stale locks first on every try: the
/// worker's group is gone, so no git process of the attempt is left, and a
/// sidecar killed mid-commit leaves `index.lock` for its successor.
async fn commit_with_repairs(
    ctx: &Context,
    wt: &Path,
    message: String,
) -> Result<(String, String), InfraFailure> {
    let mut last = String::new();
    for n in 1..=INFRA_TRIES {
        let (wt, message, common, id) =
            (wt.to_path_buf(), message.clone(), ctx.workspaces.common.clone(), ctx.worker_id.clone());
        let tracker = ctx.tracker.clone();
        let r = tokio::task::spawn_blocking(move || {
            crate::locks::clear_stale(&common, &id, None)?;
            worktree::repair_git_file(&common, &wt)?;
            match crate::worker_git::import(&wt) {
                Ok(Some(head)) => tracing::info!(%head, "took the worker's own commits"),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "left the worker's own commits out; its files are committed")
                }
            }
            let oid = commit_tracked(&tracker, &wt, &message)?;
            let (_, subject) = worktree::head(&wt)?;
            Ok::<_, worktree::WorktreeError>((oid.to_string(), subject))
        })
        .instrument(tracing::info_span!("commit", try_ = n))
        .await;
        match r {
            Ok(Ok(done)) => return Ok(done),
            Ok(Err(e)) => last = format!("committing: {e}"),
            Err(e) => last = format!("commit task failed: {e}"),
        }
        tracing::warn!(error = %last, try_ = n, "commit failed");
        tokio::time::sleep(Duration::from_millis(200 * u64::from(n))).await;
    }
    Err(InfraFailure::Commit { last, tries: INFRA_TRIES })
}

/// Commits what changed: only the paths the tracker saw when it can vouch
/// for them, otherwise everything (a walk of the tree). A failure drops the
/// tracker, so the next attempt starts from a full checkout.
fn commit_tracked(
    tracker: &crate::changes::SharedTracker,
    wt: &Path,
    message: &str,
) -> Result<git2::Oid, worktree::WorktreeError> {
    let mut slot = tracker.lock().unwrap_or_else(|e| e.into_inner());
    let changed = slot.as_mut().and_then(|t| t.take());
    let open = slot.as_mut().and_then(|t| t.repo_and_memo());
    let r = match (&changed, open) {
        (Some(paths), Some((repo, memo))) => crate::changes::commit_paths_in(repo, memo, message, paths),
        (Some(paths), None) => crate::changes::commit_paths(wt, message, paths),
        (None, _) => worktree::commit_all(wt, message),
    };
    if r.is_err() || changed.is_none() {
        *slot = None;
    }
    r.map(|(oid, _)| oid)
}

//! An open pull request, watched: its state (merged or closed by people)
//! and its checks on the pushed commit. A failed check's log goes back to
//! the task whose files it names, through the scheduler, which reopens
//! that task with it (or asks the operator).

use std::collections::{HashMap, HashSet};

use swarm_forge::{Check, CheckSource, CheckState, Forge, Permission, PullState};
use tracing::Instrument as _;

use super::failed::Failed;
use super::pull::{is_open, record};
use super::route::{self, Route};
use crate::scheduler::views::ForgeTarget;
use crate::scheduler::{Command, FeedbackTaken, ForgeFeedback, ForgeState, MAX_FLAKY};

/// The end of a log a task gets: a failure's cause is near its end.
const LOG_TAIL_BYTES: usize = 16 << 10;
/// Feedback remembered this run before the memory starts over (the
/// scheduler's own record decides; this only spares it repeats).
const SEEN_MAX: usize = 10_000;

/// Feedback already handed to the scheduler by this process.
#[derive(Default)]
pub(super) struct Seen(HashSet<String>);

impl Seen {
    fn contains(&self, key: &str) -> bool {
        self.0.contains(key)
    }

    fn insert(&mut self, key: String) -> bool {
        if self.0.len() >= SEEN_MAX {
            self.0.clear();
        }
        self.0.insert(key)
    }
}

pub(super) struct Watch<'a> {
    pub seen: &'a mut Seen,
    /// Checks seen failing (`name@commit`) this run, to tell a flake.
    pub failed: &'a mut Seen,
    /// Each login's role on the repository, as the forge said this run.
    pub permissions: &'a mut HashMap<String, Permission>,
    pub scheduler: &'a flume::Sender<Command>,
    /// Never echoed into a task's text.
    pub secrets: &'a [&'a str],
}

impl Watch<'_> {
    /// Whether `key` was not handed on before by this process.
    pub(super) fn seen_new(&mut self, key: &str) -> bool {
        self.seen.insert(key.to_string())
    }

    /// Reads the pull request and its checks; whether `state` changed.
    pub async fn pull_request(
        &mut self,
        t: &ForgeTarget,
        state: &mut ForgeState,
        forge: &dyn Forge,
    ) -> Result<bool, Failed> {
        let Some(number) = state.pull.as_ref().map(|p| p.number) else { return Ok(false) };
        let pull = forge.get_pull(number).await?;
        let now = record(&pull);
        let mut changed = state.pull.as_ref() != Some(&now);
        if pull.state == PullState::Merged {
            tracing::info!(number, merge_commit = ?pull.merge_commit_sha, "the pull request was merged");
        }
        state.pull = Some(now);
        if !state.pull.as_ref().is_some_and(is_open) || state.pushed.is_empty() {
            return Ok(changed);
        }
        let checks = forge.checks(&state.pushed).await?;
        changed |= self.flakes(state, &checks);
        let summary = summary(&checks);
        changed |= state.checks != summary;
        state.checks = summary;
        for check in checks.iter().filter(|c| matches!(c.state, CheckState::Failure | CheckState::TimedOut)) {
            let key = match check.source {
                CheckSource::CheckRun(id) => format!("check:{id}@{}", state.pushed),
                CheckSource::Status => format!("status:{}@{}", check.name, state.pushed),
            };
            if !self.seen.insert(key.clone()) {
                continue;
            }
            let span = tracing::info_span!("forge.check_failed", swarm = %t.swarm, check = %check.name);
            self.failed(t, state, forge, check, key).instrument(span).await?;
        }
        self.conversation(t, forge, number).await?;
        self.post_replies(t, state, forge, number).await?;
        changed |= self.auto_merge(t, state, forge, number, &checks).await?;
        Ok(changed)
    }

    /// Remembers the checks that failed on the pushed commit and records
    /// as flaky one that passes there later (a re-run); whether it did.
    fn flakes(&mut self, state: &mut ForgeState, checks: &[Check]) -> bool {
        let mut changed = false;
        for check in checks {
            let key = format!("{}@{}", check.name, state.pushed.get(..10).unwrap_or(&state.pushed));
            if matches!(check.state, CheckState::Failure | CheckState::TimedOut) {
                self.failed.insert(key);
            } else if check.state.is_passing() && self.failed.contains(&key) && !state.flaky.contains(&key) {
                tracing::info!(check = %check.name, "a check failed and then passed on the same commit: flaky");
                state.flaky.push(swarm_forge::text::shown(&key, 200));
                if state.flaky.len() > MAX_FLAKY {
                    state.flaky.remove(0);
                }
                changed = true;
            }
        }
        changed
    }

    /// Hands a failed check to the scheduler for the task it names.
    async fn failed(
        &mut self,
        t: &ForgeTarget,
        state: &ForgeState,
        forge: &dyn Forge,
        check: &Check,
        key: String,
    ) -> Result<(), Failed> {
        // A log that cannot be read leaves the check's own words.
        let log = match forge.check_log(check).await {
            Ok(log) => log,
            Err(e) => {
                tracing::warn!(error = %e, "the check's log could not be read; its output is used");
                check.output.clone()
            }
        };
        let text = tail(&swarm_forge::text::redact(&swarm_forge::text::strip_controls(&log), self.secrets));
        let short = state.pushed.get(..10).unwrap_or(&state.pushed);
        let mut title =
            format!("CI check `{}` failed on {short}", swarm_forge::text::shown(&check.name, 200));
        let task = match route::owner(&t.plan, &text) {
            Route::Task(task) => Some(task),
            Route::Ambiguous(tasks) => {
                title.push_str(&format!(" (its log names files of {})", tasks.join(", ")));
                None
            }
            Route::Nobody => None,
        };
        let feedback = ForgeFeedback { key, task, title, text, is_check: true };
        let (reply, rx) = tokio::sync::oneshot::channel();
        let command = Command::ForgeFeedback { swarm: t.swarm.clone(), feedback, reply };
        self.scheduler.send_async(command).await.map_err(|_| Failed::stopping())?;
        match rx.await.map_err(|_| Failed::stopping())? {
            Ok(taken) => {
                tracing::info!(?taken, "check failure handed on");
                if taken == FeedbackTaken::Asked {
                    tracing::warn!("the check's failure waits for the operator");
                }
            }
            Err(e) => tracing::warn!(error = %e, "the scheduler refused the check's failure"),
        }
        Ok(())
    }
}

/// `name ✓` / `name ✗` / `name …` for each check, in name order.
fn summary(checks: &[Check]) -> String {
    let marks: Vec<String> = checks
        .iter()
        .map(|c| {
            let mark = match c.state {
                s if s.is_passing() => "passed",
                CheckState::Pending => "pending",
                _ => "failed",
            };
            format!("{} {mark}", swarm_forge::text::shown(&c.name, 100))
        })
        .collect();
    marks.join(", ")
}

/// The last [`LOG_TAIL_BYTES`] of `text`, cut on a line boundary.
fn tail(text: &str) -> String {
    if text.len() <= LOG_TAIL_BYTES {
        return text.to_string();
    }
    let mut start = text.len() - LOG_TAIL_BYTES;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let rest = &text[start..];
    let rest = rest.split_once('\n').map_or(rest, |(_, after)| after);
    format!("[… the log's start is left out]\n{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_log_keeps_its_end_on_a_line_boundary() {
        let log = format!("{}\nerror: src/a.rs:3 broke\n", "noise line\n".repeat(10_000));
        let kept = tail(&log);
        assert!(kept.len() <= LOG_TAIL_BYTES + 64);
        assert!(kept.starts_with("[… the log's start is left out]\nnoise line\n"), "{}", &kept[..80]);
        assert!(kept.ends_with("error: src/a.rs:3 broke\n"));
        assert_eq!(tail("short"), "short");
    }
}

//! What people say on an open pull request: review comments on a file go
//! to the task owning that file, a review's summary to the task whose
//! files it names, and `/swarm` commands in the conversation act through
//! the scheduler's operator requests. Only users the forge says may write
//! to the repository are heard: anyone else's text would become an agent's
//! prompt, or a command. Each item is taken once, by the forge's own id.

use swarm_core::{SwarmId, TaskKey};
use swarm_forge::{Forge, Permission, ReviewState};
use tokio::sync::oneshot;

use super::failed::Failed;
use super::replies::OURS;
use super::route::{self, Route};
use super::slash::{self, Slash};
use super::watch::Watch;
use crate::scheduler::views::ForgeTarget;
use crate::scheduler::{Command, FeedbackTaken, ForgeFeedback, OperatorOp};

/// The most of a comment a task is given.
const MAX_COMMENT_BYTES: usize = 16 << 10;

impl Watch<'_> {
    /// Reads review comments, reviews and the conversation of pull request
    /// `number`, handing each new item on.
    pub(super) async fn conversation(
        &mut self,
        t: &ForgeTarget,
        forge: &dyn Forge,
        number: u64,
    ) -> Result<(), Failed> {
        for c in forge.review_comments(number).await? {
            let key = format!("review-comment:{}", c.id);
            if c.body.contains(OURS) || !self.seen_new(&key) || !self.may_write(forge, &c.author).await? {
                continue;
            }
            let at = c.line.map(|l| format!("{}:{l}", c.path)).unwrap_or_else(|| c.path.clone());
            let title = format!("Review comment by @{} on `{}`", shown(&c.author), shown(&at));
            self.hand_on(t, key, route::owner(&t.plan, &c.path), title, &c.body).await?;
        }
        for r in forge.reviews(number).await? {
            let asks = matches!(r.state, ReviewState::ChangesRequested | ReviewState::Commented);
            let key = format!("review:{}", r.id);
            if !asks
                || r.body.trim().is_empty()
                || !self.seen_new(&key)
                || !self.may_write(forge, &r.author).await?
            {
                continue;
            }
            let title = format!("Review by @{}", shown(&r.author));
            self.hand_on(t, key, route::owner(&t.plan, &r.body), title, &r.body).await?;
        }
        for c in forge.issue_comments(number, None).await? {
            let key = format!("comment:{}", c.id);
            if c.body.contains(OURS) || !self.seen_new(&key) {
                continue;
            }
            let Some(command) = slash::parse(&c.body) else { continue };
            // Claimed for good before anything acts: a restart never runs it twice.
            if !self
                .ask(|reply| Command::ForgeClaim { swarm: t.swarm.clone(), key, reply })
                .await?
                .unwrap_or(false)
            {
                continue;
            }
            let author = shown(&c.author);
            let answer = if !self.may_write(forge, &c.author).await? {
                tracing::warn!(%author, "a /swarm command from a user without write access was refused");
                format!(
                    "@{author}: only people with write access to this repository can run `/swarm` commands; \
                     nothing was changed."
                )
            } else {
                match command {
                    Ok(command) => self.run(t, command, &author, &c.body, c.id).await?,
                    Err(rule) => format!("@{author}: {rule}"),
                }
            };
            forge.post_comment(number, &format!("{answer}\n\n{OURS}")).await?;
        }
        Ok(())
    }

    /// Runs a `/swarm` command for `author`; the reply to post.
    async fn run(
        &mut self,
        t: &ForgeTarget,
        command: Slash,
        author: &str,
        body: &str,
        id: u64,
    ) -> Result<String, Failed> {
        let swarm = &t.swarm;
        let by = format!("@{author} on the pull request");
        tracing::info!(%swarm, ?command, %author, "a /swarm command");
        let answer = match command {
            Slash::Cancel => {
                let reason = format!("cancelled by {by}");
                let r = self.ask(|reply| {
                    Command::Operator(OperatorOp::CancelSwarm { swarm: swarm.to_string(), reason, reply })
                });
                match r.await? {
                    Ok(n) => format!("@{author}: swarm `{swarm}` cancelled ({n} task(s) stopped)."),
                    Err(e) => format!("@{author}: {e}"),
                }
            }
            Slash::Approve(task) => {
                let Some(key) = task_key(swarm, &task) else {
                    return Ok(format!("@{author}: no task `{task}`"));
                };
                let (decision, message) = ("approve".to_string(), format!("approved by {by}"));
                let r = self.ask(|reply| {
                    Command::Operator(OperatorOp::ReviewTask { task: key, decision, message, reply })
                });
                match r.await? {
                    Ok(_) => format!("@{author}: `{task}` approved."),
                    Err(e) => format!("@{author}: {e}"),
                }
            }
            Slash::Retry(task) => {
                let Some(key) = task_key(swarm, &task) else {
                    return Ok(format!("@{author}: no task `{task}`"));
                };
                let r = self.ask(|reply| Command::Operator(OperatorOp::RetryTask { task: key, reply }));
                match r.await? {
                    Ok(_) => format!("@{author}: `{task}` is retried."),
                    // A merged task is reopened with the comment as its feedback.
                    Err(_) => {
                        let feedback = ForgeFeedback {
                            key: format!("retry:{id}"),
                            task: Some(task.clone()),
                            title: format!("@{author} asked for another attempt"),
                            text: clip(body),
                            is_check: false,
                        };
                        match self.feedback(swarm, feedback).await? {
                            Ok(FeedbackTaken::Reopened | FeedbackTaken::Queued) => {
                                format!("@{author}: `{task}` is reopened with your comment.")
                            }
                            Ok(_) => format!("@{author}: `{task}` cannot be retried now."),
                            Err(e) => format!("@{author}: {e}"),
                        }
                    }
                }
            }
        };
        Ok(answer)
    }

    /// Hands a review item to the task `route` names (or the operator).
    async fn hand_on(
        &mut self,
        t: &ForgeTarget,
        key: String,
        route: Route,
        title: String,
        body: &str,
    ) -> Result<(), Failed> {
        let task = match route {
            Route::Task(task) => Some(task),
            Route::Ambiguous(_) | Route::Nobody => None,
        };
        let feedback = ForgeFeedback { key, task, title, text: clip(body), is_check: false };
        match self.feedback(&t.swarm, feedback).await? {
            Ok(taken) => tracing::info!(?taken, "review feedback handed on"),
            Err(e) => tracing::warn!(error = %e, "the scheduler refused the review feedback"),
        }
        Ok(())
    }

    /// Whether `login` may write to the repository, as the forge says.
    async fn may_write(&mut self, forge: &dyn Forge, login: &str) -> Result<bool, Failed> {
        if let Some(known) = self.permissions.get(login) {
            return Ok(*known >= Permission::Write);
        }
        let permission = match forge.permission(login).await {
            Ok(p) => p,
            Err(swarm_forge::ForgeError::NotFound { .. }) => Permission::None,
            Err(e) => return Err(e.into()),
        };
        self.permissions.insert(login.to_string(), permission);
        Ok(permission >= Permission::Write)
    }

    async fn feedback(
        &mut self,
        swarm: &SwarmId,
        feedback: ForgeFeedback,
    ) -> Result<Result<FeedbackTaken, crate::SchedError>, Failed> {
        self.ask(|reply| Command::ForgeFeedback { swarm: swarm.clone(), feedback, reply }).await
    }

    /// Sends the command `make` builds and waits for its reply.
    pub(super) async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, crate::SchedError>>) -> Command,
    ) -> Result<Result<T, crate::SchedError>, Failed> {
        let (reply, rx) = oneshot::channel();
        self.scheduler.send_async(make(reply)).await.map_err(|_| Failed::stopping())?;
        rx.await.map_err(|_| Failed::stopping())
    }
}

fn task_key(swarm: &SwarmId, task: &str) -> Option<TaskKey> {
    TaskKey::parse(&format!("{swarm}/{task}")).ok()
}

/// A login or path as a title may show it.
fn shown(text: &str) -> String {
    swarm_forge::text::shown(text, 200).replace('`', "'")
}

fn clip(body: &str) -> String {
    swarm_forge::text::shown(body, MAX_COMMENT_BYTES)
}

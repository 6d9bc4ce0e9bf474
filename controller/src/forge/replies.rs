//! Agents' answers on the pull request's threads (their `reply` tool),
//! posted once the work they speak of is pushed: the scheduler queued
//! each only for a thread handed to the agent's task. A review comment is
//! answered in its own thread; a review or a `/swarm retry` comment in the
//! conversation, quoting whom it answers. Each answer carries its id, so
//! a controller that died between posting and recording finds it on the
//! forge and does not post it twice.

use swarm_forge::Forge;
use tracing::Instrument as _;

use super::failed::Failed;
use super::watch::Watch;
use crate::scheduler::views::ForgeTarget;
use crate::scheduler::{Command, ForgeState, PendingReply, SwarmState};

/// What swarm's own comments carry, so it never answers itself.
pub(super) const OURS: &str = "<!-- swarm -->";

impl Watch<'_> {
    /// Posts the queued answers when the swarm's work is all merged and
    /// pushed (the pull request shows what they say was done).
    pub(super) async fn post_replies(
        &mut self,
        t: &ForgeTarget,
        state: &ForgeState,
        forge: &dyn Forge,
        number: u64,
    ) -> Result<(), Failed> {
        let pushed = t.state == SwarmState::Landing && state.pushed == t.integration_head;
        if t.replies.is_empty() || !pushed {
            return Ok(());
        }
        let mut posted: Vec<String> =
            forge.review_comments(number).await?.into_iter().map(|c| c.body).collect();
        posted.extend(forge.issue_comments(number, None).await?.into_iter().map(|c| c.body));
        for reply in &t.replies {
            let mark = marker(reply);
            if !posted.iter().any(|body| body.contains(&mark)) {
                self.post(forge, number, reply, &mark).await?;
            }
            let key = reply.id.clone();
            let claimed =
                self.ask(|reply| Command::ForgeClaim { swarm: t.swarm.clone(), key, reply }).await?;
            if let Err(e) = claimed {
                tracing::warn!(error = %e, "a posted answer was not recorded; it is found on the forge next time");
            }
        }
        Ok(())
    }

    async fn post(
        &self,
        forge: &dyn Forge,
        number: u64,
        reply: &PendingReply,
        mark: &str,
    ) -> Result<(), Failed> {
        let text = swarm_forge::text::shown(&reply.text, swarm_proto::limits::MAX_REPLY);
        let signed = format!("{text}\n\n<sub>— the agent of task `{}`</sub>\n{OURS}{mark}", reply.task);
        let (kind, id) = swarm_proto::limits::check_reply_thread(&reply.thread)
            .map_err(|rule| Failed::settled(format!("a queued answer's thread: {rule}")))?;
        let span = tracing::info_span!("forge.reply", task = %reply.task, thread = %reply.thread);
        let posted = async {
            match kind {
                "review-comment" => forge.reply_review_comment(number, id, &signed).await.map(drop),
                _ => {
                    let what = if kind == "review" { "review" } else { "comment" };
                    let body = format!("In answer to {what} {id}:\n\n{signed}");
                    forge.post_comment(number, &body).await.map(drop)
                }
            }
        };
        posted.instrument(span).await?;
        tracing::info!("the agent's answer was posted");
        Ok(())
    }
}

fn marker(reply: &PendingReply) -> String {
    format!("<!-- swarm:{} -->", reply.id.replace("--", "-"))
}

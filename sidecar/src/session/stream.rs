//! The session's stream after the Welcome: the journal's replay, reports,
//! heartbeats, and each message the controller sends.

use std::time::Duration;

use rand::Rng;
use swarm_proto::v1;
use swarm_proto::v1::controller_message::Body as In;
use swarm_proto::v1::sidecar_message::Body;
use tokio::sync::mpsc;

use super::{DEFAULT_HEARTBEAT, Ended, Note, Session, same_attempt};
use crate::SidecarError;
use crate::attempt::{self, Event, Report, Stop};

impl Session {
    /// The session's stream after the Welcome: replay, reports, heartbeats
    /// and the controller's commands, until it breaks or the sidecar is done.
    pub(super) async fn stream(
        &mut self,
        out: mpsc::Sender<v1::SidecarMessage>,
        inbound: &mut tonic::Streaming<v1::ControllerMessage>,
        welcome: v1::Welcome,
    ) -> Result<Ended, SidecarError> {
        self.resume(welcome.attempt_resumed).await?;
        for (seq, event) in self.journal.unacked() {
            if out.send(crate::wire::message(*seq, event)).await.is_err() {
                return Ok(Ended::Broken(true));
            }
        }
        let interval = match welcome.heartbeat_interval_ms {
            0 => DEFAULT_HEARTBEAT,
            ms => Duration::from_millis(u64::from(ms)),
        };
        let jitter = u64::from(welcome.heartbeat_jitter_ms);
        let next_beat = || {
            interval + Duration::from_millis(if jitter > 0 { rand::rng().random_range(0..jitter) } else { 0 })
        };
        // The first beat goes at once: until the controller hears from a
        // sidecar after its Welcome (whose secret is journaled by now), it
        // gives it no work.
        let beat = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(beat);
        loop {
            if !self.lifecycle.takes_work() && self.current.is_none() && self.journal.unacked().is_empty() {
                tracing::info!("drained; closing the stream");
                return Ok(Ended::Done);
            }
            tokio::select! {
                m = inbound.message() => match m {
                    Ok(Some(m)) => {
                        if let Some(ack) = self.on_message(m).await? {
                            let _ = out.send(ack).await;
                        }
                    }
                    Ok(None) => return Ok(Ended::Broken(true)),
                    Err(e) => {
                        tracing::warn!(error = %e, "stream error");
                        return Ok(Ended::Broken(true));
                    }
                },
                Some(r) = self.reports_rx.recv() => {
                    if let Some(msg) = self.record(r).await?
                        && out.send(msg).await.is_err()
                    {
                        return Ok(Ended::Broken(true));
                    }
                }
                Some(msg) = self.verified_rx.recv() => {
                    if out.send(msg).await.is_err() {
                        return Ok(Ended::Broken(true));
                    }
                }
                _ = &mut beat => {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis() as u64)
                        .unwrap_or_default();
                    let hb = v1::SidecarMessage { seq: 0, body: Some(Body::Heartbeat(v1::Heartbeat { sent_at_unix_ms: now })) };
                    if out.send(hb).await.is_err() {
                        return Ok(Ended::Broken(true));
                    }
                    beat.as_mut().reset(tokio::time::Instant::now() + next_beat());
                }
                _ = self.shutdown.cancelled(), if !self.lifecycle.is_shutting_down() => {
                    self.begin_shutdown();
                    if self.current.is_none() {
                        return Ok(Ended::Done);
                    }
                }
                _ = self.lifecycle.give_up() => {
                    tracing::warn!(unacked = self.journal.unacked().len(), "stopping without all acks; the journal keeps them");
                    return Ok(Ended::Done);
                }
            }
        }
    }

    /// Journals a report from the attempt driver; returns what to send.
    pub(super) async fn record(&mut self, r: Report) -> Result<Option<v1::SidecarMessage>, SidecarError> {
        let redactor = self.current.as_ref().and_then(|c| c.redactor.get());
        match r {
            Report::Pid { pid, restarts } => {
                self.journal.set_pid(pid, restarts)?;
                Ok(None)
            }
            Report::Progress(mut p) => {
                if let Some(r) = redactor {
                    r.progress(&mut p);
                }
                Ok(Some(v1::SidecarMessage { seq: 0, body: Some(Body::Progress((&p).into())) }))
            }
            Report::Journaled(mut event) => {
                if let Some(r) = redactor {
                    r.report(&mut event);
                }
                let current = self.current.as_ref().map(|c| &c.assignment.attempt);
                if let Some(reported) = event.attempt()
                    && !current.is_some_and(|c| c.task == reported.task && c.number == reported.number)
                {
                    // A report of an attempt stopped silently, which must not
                    // end (or be journaled as) the attempt now in hand.
                    tracing::warn!(?reported, "dropping a report of an attempt no longer in hand");
                    return Ok(None);
                }
                let is_result = if let Event::Result(outcome) = &mut event {
                    self.count_infra_failure(outcome);
                    true
                } else {
                    false
                };
                let event = crate::wire::fitted(event);
                if !is_result {
                    let seq = self.journal.append_report(event.clone())?;
                    return Ok(Some(crate::wire::message(seq, &event)));
                }
                // The result and the release, with one fsync.
                let seq = self.journal.append_result(event.clone())?;
                if let Some(c) = self.current.take() {
                    tracing::info!(attempt = %c.assignment.label(), seq, "attempt finished");
                    let _ = c.task.await;
                }
                Ok(Some(crate::wire::message(seq, &event)))
            }
        }
    }

    /// Records an operator's answer or message in the attempt's worktree
    /// (where any worker finds it) and hands it to the attempt's driver (an
    /// agent gets it as a message).
    async fn hand_to_attempt(&self, attempt: Option<&v1::AttemptRef>, note: Note, id: &str, text: &str) {
        let Some(cur) = self.current.as_ref().filter(|c| same_attempt(&c.assignment.attempt, attempt)) else {
            tracing::warn!(?attempt, id, "{note:?} for an attempt not in hand");
            return;
        };
        let (wt, owned_id, owned_text) = (self.worktree.clone(), id.to_string(), text.to_string());
        let recorded = tokio::task::spawn_blocking(move || match note {
            Note::Answer => attempt::record_answer(&wt, &owned_id, &owned_text),
            Note::Message => attempt::record_message(&wt, &owned_id, &owned_text),
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Err(e) = recorded {
            tracing::warn!(id, error = %e, "cannot record the operator's {note:?}");
        }
        let key = match note {
            Note::Answer => id.to_string(),
            Note::Message => format!("{}{id}", crate::agent::driver::MESSAGE_PREFIX),
        };
        let _ = cur.answers.send((key, text.to_string()));
    }

    /// Handles one controller message; may return a message to send.
    async fn on_message(
        &mut self,
        m: v1::ControllerMessage,
    ) -> Result<Option<v1::SidecarMessage>, SidecarError> {
        match m.body {
            Some(In::Ack(a)) => self.journal.ack(a.seq)?,
            Some(In::Assign(a)) => self.on_assign(a)?,
            Some(In::Cancel(c)) => {
                if let Some(cur) = &self.current
                    && same_attempt(&cur.assignment.attempt, c.attempt.as_ref())
                {
                    let grace = if c.grace_ms == 0 {
                        self.cfg.stop_grace()
                    } else {
                        Duration::from_millis(u64::from(c.grace_ms))
                    };
                    tracing::info!(attempt = %cur.assignment.label(), reason = %c.reason, checkpoint = c.checkpoint, "cancel");
                    let stop = if c.checkpoint { Stop::Checkpoint { grace } } else { Stop::Cancel { grace } };
                    let _ = cur.stop.send(Some(stop));
                } else {
                    tracing::warn!(attempt = ?c.attempt, "cancel for an attempt not in hand");
                }
            }
            Some(In::Answer(a)) => {
                self.hand_to_attempt(a.attempt.as_ref(), Note::Answer, &a.question_id, &a.text).await
            }
            Some(In::Message(m)) => {
                self.hand_to_attempt(m.attempt.as_ref(), Note::Message, &m.message_id, &m.text).await
            }
            Some(In::LogRequest(r)) => {
                let mut answer = crate::log_serve::answer(&self.worktree, r).await;
                // Only the attempt in hand's secrets are known here; a
                // finished attempt's log is served as its worker wrote it.
                if let (Some(Body::LogChunk(chunk)), Some(redactor)) =
                    (answer.body.as_mut(), self.current.as_ref().and_then(|c| c.redactor.get()))
                {
                    redactor.redact_bytes(&mut chunk.data);
                }
                return Ok(Some(answer));
            }
            Some(In::VerifyMerge(v)) => {
                let place = crate::verify_job::Verifier {
                    repo: self.repo.clone(),
                    workspaces: self.workspaces.clone(),
                    worker_id: self.worker_id.clone(),
                    remote: self.remote.clone(),
                    exe: self.supervisor.clone(),
                    kernel: self.sandbox,
                    worker_user: self.cfg.worker_user.clone(),
                };
                let tx = self.verified_tx.clone();
                // Off the session loop: heartbeats go on while the tiers run.
                tokio::spawn(async move {
                    let _ = tx.send(crate::verify_job::run(place, v).await);
                });
            }
            Some(In::Drain(d)) => {
                tracing::info!(reason = %d.reason, "draining");
                self.lifecycle.drain();
            }
            Some(In::Welcome(_)) | None => tracing::warn!("unexpected message from controller"),
        }
        Ok(None)
    }
}

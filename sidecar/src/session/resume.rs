//! The Welcome's verdict on the attempt in hand: re-adopt a previous
//! process's worker, checkpoint its lost agent, run what never started,
//! or stop and report what the controller no longer holds.

use swarm_proto::convert::AttemptRef;

use super::{Launch, Session};
use crate::SidecarError;
use crate::attempt::{self, Assignment, Event, Stop};
use crate::outcome::AttemptOutcome;

impl Session {
    /// Applies the Welcome's verdict on the attempt in hand.
    pub(super) async fn resume(&mut self, resumed: bool) -> Result<(), SidecarError> {
        if let Some(held) = self.held.take() {
            let assignment = Assignment::try_from(&held.assign).ok();
            match (resumed, held.adopt, assignment) {
                (true, Some(adopt), Some(assignment)) => {
                    tracing::info!(attempt = %assignment.label(), supervisor = adopt.pid, "re-adopting the worker of a previous sidecar process");
                    self.start(assignment, Some(adopt));
                    return Ok(());
                }
                // Agents run without a supervisor (their stdin is a pipe to the
                // old sidecar process), so one that was started is gone: keep
                // its work and hand its session back instead of losing it.
                (true, None, Some(assignment)) if held.started && assignment.agent.is_some() => {
                    tracing::info!(attempt = %assignment.label(), "the agent of a previous sidecar process is gone; checkpointing its work");
                    self.start_with(assignment, Launch::LostAgent);
                    return Ok(());
                }
                (true, None, Some(assignment)) if !held.started => {
                    tracing::info!(attempt = %assignment.label(), "the previous sidecar process never started its worker; running it now");
                    self.start(assignment, None);
                    return Ok(());
                }
                (_, Some(adopt), _) => {
                    tracing::warn!(
                        supervisor = adopt.pid,
                        "the attempt of a previous sidecar process is not resumed; stopping its worker"
                    );
                    // What left the group is below the supervisor (its subreaper),
                    // while it lives; a pid of one that exited may be anyone's.
                    let exit_file = attempt::SwarmFiles::new(&self.worktree).exit;
                    if crate::supervisor::is_supervisor(adopt.pid, &exit_file) {
                        crate::reaper::kill_descendants(adopt.pid);
                    }
                    crate::runner::kill_group(adopt.pid as i32, nix::sys::signal::Signal::SIGKILL);
                }
                _ => {}
            }
            let lost = held.assign;
            if resumed {
                tracing::warn!("reporting the attempt of a previous sidecar process as lost");
                match lost.attempt.as_ref().map(AttemptRef::try_from) {
                    Some(Ok(attempt)) => {
                        let result = AttemptOutcome::error(attempt, "sidecar restarted; worker lost");
                        self.journal.append_report(Event::Result(result))?;
                    }
                    // Journaled only once it was valid: a damaged journal.
                    _ => {
                        tracing::error!(attempt = ?lost.attempt, "the lost attempt has no valid id; not reporting it")
                    }
                }
            }
            self.journal.release()?;
        }
        if !resumed && let Some(c) = self.current.take() {
            tracing::warn!(attempt = %c.assignment.label(), "controller no longer holds this attempt; stopping it");
            let _ = c.stop.send(Some(Stop::Silent));
            let _ = c.task.await;
            // Whatever it reported on its way out belongs to an attempt the
            // controller no longer holds; left queued, it would be taken
            // for the next attempt's.
            let mut dropped = 0;
            while self.reports_rx.try_recv().is_ok() {
                dropped += 1;
            }
            if dropped > 0 {
                tracing::info!(dropped, "dropped the reports of the stopped attempt");
            }
            self.journal.release()?;
        }
        Ok(())
    }
}

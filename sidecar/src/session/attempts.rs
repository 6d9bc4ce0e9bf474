//! The attempts a session runs: an Assign taken on (or recognised as the
//! one in hand), an attempt started or re-adopted after a restart, and the
//! infrastructure failures that make a sidecar drain itself.

use super::*;

impl Session {
    pub(super) fn on_assign(&mut self, a: v1::Assign) -> Result<(), SidecarError> {
        if let Some(cur) = &self.current {
            if same_attempt(&cur.assignment.attempt, a.attempt.as_ref()) {
                tracing::debug!("assign of the attempt in hand: no-op");
            } else {
                tracing::warn!(attempt = ?a.attempt, "assign while busy (capacity 1); ignored");
            }
            return Ok(());
        }
        if !self.lifecycle.takes_work() {
            tracing::warn!(attempt = ?a.attempt, "assign while draining; ignored");
            return Ok(());
        }
        // After a reconnect the controller re-sends the Assign of an attempt
        // whose result it has not applied yet; the replayed result answers it.
        let finished = self.journal.unacked().iter().any(|(_, e)| match e {
            Event::Result(r) => a.attempt.as_ref() == Some(&v1::AttemptRef::from(&r.attempt)),
            _ => false,
        });
        if finished {
            tracing::info!(attempt = ?a.attempt, "assign of an attempt already finished (result unacked); ignored");
            return Ok(());
        }
        let assignment = match Assignment::try_from(&a) {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "invalid assign");
                if let Some(r) = a.attempt.as_ref().and_then(|r| AttemptRef::try_from(r).ok()) {
                    let result = AttemptOutcome::error(r, format!("invalid assign: {e}"));
                    let _ = self.reports_tx.send(Report::Journaled(Event::Result(result)));
                }
                return Ok(());
            }
        };
        self.journal.set_in_hand(&a)?;
        self.start(assignment, None);
        Ok(())
    }

    /// After [`MAX_INFRA_FAILURES`] infrastructure failures in a row this
    /// host is presumed broken: drain (take no more work), saying why in the
    /// result the controller stores.
    pub(super) fn count_infra_failure(&mut self, r: &mut AttemptOutcome) {
        if r.outcome != swarm_core::Outcome::InfraFailed {
            self.infra_failures = 0;
            return;
        }
        self.infra_failures += 1;
        if self.infra_failures >= MAX_INFRA_FAILURES && self.lifecycle != Lifecycle::Draining {
            tracing::error!(failures = self.infra_failures, error = %r.error,
                "infrastructure failures in a row; draining this sidecar");
            r.error.push_str(&format!(
                " [sidecar {} is draining itself after {} infrastructure failures in a row]",
                self.worker_id, self.infra_failures
            ));
            self.lifecycle.drain();
        }
    }

    /// Starts the driver of an attempt (re-adopting a worker when given).
    pub(super) fn start(&mut self, assignment: Assignment, adopt: Option<attempt::Adopted>) {
        let launch = match adopt {
            Some(ad) => Launch::Adopt(ad),
            None => Launch::Run,
        };
        self.start_with(assignment, launch)
    }

    pub(super) fn start_with(&mut self, assignment: Assignment, launch: Launch) {
        let ctx = Context {
            repo: self.repo.clone(),
            workspaces: self.workspaces.clone(),
            worker_id: self.worker_id.clone(),
            stop_grace: self.cfg.stop_grace(),
            default_idle_timeout: self.cfg.default_idle_timeout(),
            remote: self.remote.clone(),
            link: self.link.clone(),
            supervisor: self.supervisor.clone(),
            tracker: self.tracker.clone(),
            standby: self.standby.clone(),
            sandbox: self.sandbox,
            cgroups: self.cgroups.clone(),
            worker_user: self.cfg.worker_user.clone(),
            redactor: Default::default(),
        };
        let (stop, stop_rx) = watch::channel(None);
        let task_key = &assignment.attempt.task;
        let host = hostname::get().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
        let span = tracing::info_span!("attempt", swarm = %task_key.swarm, task = %task_key,
            attempt = %assignment.label(), worker = %self.worker_id, host = %host);
        // A child of the controller's assignment span; the worker gets this
        // span's context as TRACEPARENT (or the controller's, when spans
        // are not exported here).
        swarm_telemetry::set_parent(&span, &assignment.traceparent);
        let mut assignment = assignment;
        if let Some(traceparent) = swarm_telemetry::traceparent(&span) {
            assignment.traceparent = traceparent;
        }
        tracing::info!(parent: &span, branch = %assignment.branch, "assigned");
        let tx = self.reports_tx.clone();
        let (answers, answers_rx) = mpsc::unbounded_channel();
        let a = assignment.clone();
        let redactor = ctx.redactor.clone();
        let task = match launch {
            Launch::Run => {
                tokio::spawn(attempt::run_with_answers(ctx, a, stop_rx, answers_rx, tx).instrument(span))
            }
            Launch::Adopt(ad) => tokio::spawn(attempt::resume(ctx, a, ad, stop_rx, tx).instrument(span)),
            Launch::LostAgent => tokio::spawn(attempt::checkpoint_lost(ctx, a, tx).instrument(span)),
        };
        self.current = Some(Current { assignment, stop, task, answers, redactor });
    }
}

/// Whether the worker of the journaled attempt can be followed: its
/// supervisor still runs, or it finished and recorded its exit. Otherwise
/// whatever is left of its process group is killed and the worker is lost.
pub(super) fn adoptable(worktree: &std::path::Path, h: &crate::journal::InHand) -> Option<attempt::Adopted> {
    use crate::supervisor::{find_supervisor, is_supervisor, read_exit};
    let exit_file = attempt::SwarmFiles::new(worktree).exit;
    let alive = match h.pid {
        Some(pid) if is_supervisor(pid, &exit_file) => Some(pid),
        // Started but killed before its pid reached the journal.
        _ => find_supervisor(&exit_file),
    };
    if let Some(pid) = alive {
        return Some(attempt::Adopted { pid, restarts: h.restarts });
    }
    // The exit file is removed before each start, so with a journaled pid
    // it belongs to this attempt's worker.
    if let Some(pid) = h.pid {
        if read_exit(&exit_file).is_some() {
            return Some(attempt::Adopted { pid, restarts: h.restarts });
        }
        if crate::runner::group_alive(pid as i32) {
            tracing::warn!(pid, "killing what is left of the worker of a previous sidecar process");
            crate::runner::kill_group(pid as i32, nix::sys::signal::Signal::SIGKILL);
        }
    }
    None
}

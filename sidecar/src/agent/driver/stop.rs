//! Stopping an agent that can end its turn itself: the agent's stop
//! message (ACP's `session/cancel`) goes first, and its turn gets a moment
//! to end — files written whole, the session consistent for a resume —
//! before the process group is signalled.

use std::time::Duration;

use tokio::time::Instant;

use super::Driver;
use crate::agent::process::Output;
use crate::agent::{AgentEvent, clip};

/// The longest an agent may take to end its turn after the stop message.
const TURN_END_WAIT: Duration = Duration::from_secs(5);
/// How long an agent with no more work (its last turn over, its stdin
/// closed) may stay quiet before it is stopped: not every ACP server exits
/// when its stdin closes, and its work is done.
const LINGER: Duration = Duration::from_secs(5);

impl Driver<'_, '_> {
    /// Stops the agent within about twice `grace`: its stop message, its
    /// turn's end awaited for at most `grace` (5 s at most), then the
    /// signals.
    pub(super) async fn stop_agent(&mut self, grace: Duration) {
        if self.proc.is_some()
            && let Some(text) = self.agent.stop_message()
        {
            self.log("asking the agent to end its turn").await;
            self.write(&text).await;
            self.await_turn_end(grace.min(TURN_END_WAIT)).await;
        }
        self.stop_process(grace).await;
    }

    /// Stops an agent that lingers after its work is done (see [`LINGER`]);
    /// the run then ends as its last turn did.
    pub(super) async fn stop_lingering(&mut self) {
        let done = !self.turn_open && !self.waiting && self.asking.is_none();
        let let_go = self.proc.as_ref().is_some_and(|p| !p.stdin_open());
        if done && let_go && self.last_activity.elapsed() >= LINGER {
            self.log("the agent has no more work but has not exited; stopping it").await;
            self.stop_process(self.s.stop_grace).await;
        }
    }

    /// Reads the agent's output until its turn ends or `within` passes. The
    /// turn's end is only recorded: a stopping driver sends nothing more
    /// (no held answer, no next prompt).
    async fn await_turn_end(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        while self.turn_open {
            let Some(p) = self.proc.as_mut() else { return };
            let line = match tokio::time::timeout_at(deadline, p.output.recv()).await {
                Ok(Some(Output::Stdout(line))) => line,
                Ok(Some(other)) => {
                    self.on_output(other).await;
                    continue;
                }
                Ok(None) | Err(_) => return,
            };
            self.raw_log(&line).await;
            for ev in self.agent.parse_line(&line) {
                match ev {
                    AgentEvent::TurnEnded(t) => {
                        self.log(&format!("turn ended on the stop: {}", clip(&t.text, 500))).await;
                        self.turn_open = false;
                        self.last_turn = Some(t);
                    }
                    other => self.on_event(other, &line).await,
                }
            }
        }
    }
}

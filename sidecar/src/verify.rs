//! Verify tiers: `sh -c <command>` in the worktree, each with a timeout.

use crate::sandbox::Confinement;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::runner::{SpawnSpec, Worker};

/// Lines of output kept per tier.
const TAIL_LINES: usize = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    pub name: String,
    pub command: String,
    pub blocking: bool,
    pub timeout: Duration,
}

/// How one tier went.
pub use swarm_core::TierOutcome;

/// Runs the tiers in order; stops after the first failing blocking tier.
/// Returns the results and whether every blocking tier passed.
pub async fn run_tiers(
    tiers: &[Tier],
    cwd: &Path,
    env: &[(String, String)],
    confinement: Option<&Confinement>,
) -> (Vec<TierOutcome>, bool) {
    let mut out = Vec::new();
    for tier in tiers {
        let span = tracing::info_span!("verify", tier = %tier.name, blocking = tier.blocking);
        let r = tracing::Instrument::instrument(run_tier(tier, cwd, env, confinement), span).await;
        let failed_blocking = tier.blocking && !r.passed;
        out.push(r);
        if failed_blocking {
            return (out, false);
        }
    }
    (out, true)
}

pub async fn run_tier(
    tier: &Tier,
    cwd: &Path,
    env: &[(String, String)],
    confinement: Option<&Confinement>,
) -> TierOutcome {
    let started = Instant::now();
    let spec = SpawnSpec {
        argv: vec!["sh".into(), "-c".into(), tier.command.clone()],
        cwd: cwd.to_path_buf(),
        env: env.to_vec(),
        confinement: confinement.cloned(),
    };
    let mut result = TierOutcome {
        name: tier.name.clone(),
        passed: false,
        blocking: tier.blocking,
        exit_code: -1,
        duration_ms: 0,
        output_tail: String::new(),
    };
    let mut worker = match Worker::spawn(&spec) {
        Ok(w) => w,
        Err(e) => {
            result.output_tail = e.to_string();
            return result;
        }
    };
    let mut tail: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + tier.timeout;
    let mut timed_out = false;
    let exit = loop {
        tokio::select! {
            exit = worker.group.wait() => break exit,
            Some(line) = worker.lines.recv() => push_tail(&mut tail, line),
            _ = tokio::time::sleep_until(deadline) => {
                timed_out = true;
                break worker.stop(Duration::from_secs(2)).await;
            }
        }
    };
    for line in worker.drain_lines(Duration::from_millis(200)).await {
        push_tail(&mut tail, line);
    }
    if timed_out {
        tail.push(format!("timed out after {} s", tier.timeout.as_secs()));
    }
    result.exit_code = exit.wire_code();
    result.passed = !timed_out && exit.code == Some(0);
    result.duration_ms = started.elapsed().as_millis() as u64;
    result.output_tail = tail.join("\n");
    result
}

fn push_tail(tail: &mut Vec<String>, line: String) {
    tail.push(line);
    if tail.len() > TAIL_LINES {
        tail.remove(0);
    }
}

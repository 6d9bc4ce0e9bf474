//! The planner as Codex (`codex app-server`, or `codex exec` for an older
//! CLI) or any ACP server, spoken to through the sidecar library's own
//! adapters ([`swarm_sidecar::agent`]): the same command lines, handshakes
//! and output parsers a task's agent gets, with swarm's planner tools
//! (`__planner-mcp`) as the MCP server the sidecar would give a worker.
//!
//! The sidecar's driver reports to a controller; a planner has none, so
//! this is the small loop that remains: start the agent confined
//! ([`super::sandbox`]), send the goal, answer what it asks (its own
//! reading and the planner's tools yes, commands only inside the sandbox,
//! edits never, questions with "no one is here"), add up its usage, and
//! stop at the end of its turn.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use swarm_core::plan::AgentKind;
use swarm_sidecar::agent::{self, AgentConfig, AgentEvent, Host, Verdict, codex};
use swarm_sidecar::worker_mcp::{SERVER_NAME, StdioServer};

use super::dag::Cost;
use super::sandbox::{self, Jail};
use crate::cli::PlannerAgentArgs;

/// What the planner is told when it asks the user something.
const NOBODY: &str = "No one is here to answer while you plan: decide from the repository and the goal, \
                      and say in the plan's task prompts what you assumed.";
/// Longest stdout line read; a longer one is skipped.
const MAX_LINE: usize = agent::MAX_AGENT_LINE;
/// How long an agent whose turn ended may take to exit.
const EXIT_GRACE: Duration = Duration::from_secs(10);
/// How long a planner may go without a line of output (a model's answer
/// can be slow; a planner stuck for this long is not coming back).
const IDLE_LIMIT: Duration = Duration::from_secs(15 * 60);

/// The agent kind `--agent` names.
pub fn kind(name: &str) -> anyhow::Result<AgentKind> {
    match name {
        "claude" => Ok(AgentKind::Claude),
        "codex" => Ok(AgentKind::Codex),
        "acp" => Ok(AgentKind::Acp),
        other => bail!("--agent {other:?}: one of claude, codex, acp"),
    }
}

/// What one planning run needs.
pub struct Run<'a> {
    pub agent: &'a PlannerAgentArgs,
    pub kind: AgentKind,
    pub snapshot: &'a Path,
    /// The tool server's directory (facts in, the proposal out).
    pub dir: &'a Path,
    pub tmp: &'a Path,
    /// The instructions and the goal: these agents take no system prompt.
    pub prompt: &'a str,
}

/// Runs the planner's one turn to its end (blocking: a child process).
pub fn run(r: &Run<'_>) -> anyhow::Result<Cost> {
    let program = match (&r.agent.agent_path, r.kind) {
        (Some(p), _) => p.clone(),
        (None, AgentKind::Acp) => bail!("--agent acp: --agent-path names the ACP server to run"),
        (None, k) => k.as_str().to_string(),
    };
    let env = sandbox::planner_env(r.tmp);
    let mut extra_args = r.agent.extra_args.clone();
    let jail = Jail {
        kind: r.kind,
        program: &program,
        snapshot: r.snapshot,
        tmp: r.tmp,
        env: &env,
        extra_args: &extra_args,
        read: &r.agent.sandbox_read,
        write: &r.agent.sandbox_write,
    };
    let confinement = sandbox::confinement(&jail)?;
    let confined = confinement.is_some();
    if !confined && r.kind == AgentKind::Codex {
        // Without swarm's sandbox, Codex's own keeps it from writing.
        extra_args.extend(["-c".into(), "sandbox_mode=\"read-only\"".into()]);
    }
    let exe = std::env::current_exe().context("swarmctl's own path")?;
    let cfg = AgentConfig {
        program: program.clone(),
        model: r.agent.model.clone(),
        extra_args,
        mcp: Some(StdioServer {
            command: exe.display().to_string(),
            args: vec![super::tools::ARG.to_string(), r.dir.display().to_string()],
            env: Vec::new(),
        }),
        ..AgentConfig::of_kind(r.kind)
    };
    let transport = match r.kind {
        AgentKind::Codex => tokio::runtime::Handle::try_current()
            .map(|h| h.block_on(codex::transport(&program)))
            .unwrap_or(codex::Transport::AppServer),
        _ => codex::Transport::AppServer,
    };
    let host = Host { worktree: r.snapshot, owned_globs: &[], confined, codex: transport };
    let mut agent = agent::for_kind(&cfg, host).map_err(|e| anyhow::anyhow!("--agent {}: {e}", r.kind))?;
    let argv = sandbox::wrap(confinement.as_ref(), &agent.argv(&cfg, None));
    let _span = tracing::info_span!("planner.run", kind = %r.kind, program = %program, ?transport).entered();
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(r.snapshot)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot start the planner {program:?}"))?;
    let opening = agent.opening(r.prompt, None);
    let mut stdin = child.stdin.take();
    write(&mut stdin, &opening.input);
    if opening.close {
        stdin = None;
    }
    let mut cost = Cost::default();
    let mut ended = None;
    let lines = read_lines(child.stdout.take());
    loop {
        // Once the turn is over, the agent has a moment to exit on its
        // closed stdin (an app-server or ACP server runs until then).
        let wait = if ended.is_some() { EXIT_GRACE } else { IDLE_LIMIT };
        let line = match lines.recv_timeout(wait) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if ended.is_none() {
                    eprintln!("the planner said nothing for {} s; stopping it", IDLE_LIMIT.as_secs());
                }
                let _ = child.kill();
                break;
            }
        };
        for ev in agent.parse_line(&line) {
            if let Some(end) = on_event(ev, agent.as_mut(), &mut stdin, &mut cost, confined) {
                ended = Some(end);
            }
        }
        if ended.is_some() {
            stdin = None;
        }
    }
    drop(stdin);
    let status = child.wait()?;
    match ended {
        Some(end) if !end.ok && cost.last_message.is_none() => cost.last_message = Some(end.text),
        None if !status.success() => bail!("the planner exited {status} before its turn ended"),
        _ => {}
    }
    Ok(cost)
}

/// One event; the turn's end when it is one.
fn on_event(
    ev: AgentEvent,
    agent: &mut dyn agent::Agent,
    stdin: &mut Option<ChildStdin>,
    cost: &mut Cost,
    confined: bool,
) -> Option<agent::TurnEnd> {
    match ev {
        AgentEvent::SessionStarted(id) => cost.session = super::dag::one_line(&id),
        AgentEvent::Step(step) => {
            cost.turns += 1;
            tracing::info!(step = %step, "planner.step");
        }
        AgentEvent::Usage(u) => {
            // Each report is the process's running total.
            cost.input_tokens = u.input_tokens;
            cost.output_tokens = u.output_tokens;
            cost.cache_read_tokens = u.cache_read_tokens;
            cost.cost_usd = u.cost_usd;
        }
        AgentEvent::Note(n) => cost.last_message = Some(n),
        AgentEvent::Error(e) => tracing::warn!(error = %e, "planner.error"),
        AgentEvent::PermissionRequest { request_id, tool, input } => {
            let verdict = decide(&tool, confined);
            tracing::info!(tool = %tool, ?verdict, "planner.permission");
            if let Some(reply) = agent.permission_reply(&request_id, &verdict, &input) {
                write(stdin, &reply);
            }
        }
        AgentEvent::ToolHook { request_id, tool, .. } => {
            let deny = match decide(&tool, confined) {
                Verdict::Allow => None,
                Verdict::Deny(why) => Some(why),
            };
            if let Some(reply) = agent.hook_reply(&request_id, deny.as_deref()) {
                write(stdin, &reply);
            }
        }
        AgentEvent::UserQuestion { request_id, input, questions } => {
            let answers: Vec<(String, String)> =
                questions.into_iter().map(|q| (q.text, NOBODY.to_string())).collect();
            if let Some(reply) = agent.answer_reply(&request_id, &input, &answers) {
                write(stdin, &reply);
            }
        }
        AgentEvent::UnsupportedControl { request_id, .. } => {
            if let Some(reply) = agent.refuse_control(&request_id) {
                write(stdin, &reply);
            }
        }
        AgentEvent::Send(text) => write(stdin, &text),
        AgentEvent::TurnEnded(end) => {
            cost.turns += 1;
            if !end.text.trim().is_empty() {
                cost.last_message = Some(end.text.clone());
            }
            return Some(end);
        }
        AgentEvent::ToolsUnavailable(status) => {
            eprintln!("warning: the planner could not start swarm's planner tools ({SERVER_NAME}: {status})")
        }
        AgentEvent::Unparseable(why) => tracing::debug!(why = %why, "planner.unparseable"),
        _ => {}
    }
    None
}

/// What the planner may do: read, and use the planner's tools; run
/// commands only inside swarm's sandbox (where the snapshot is read-only);
/// never edit.
pub fn decide(tool: &str, confined: bool) -> Verdict {
    let ours = tool
        .strip_prefix("mcp__")
        .and_then(|t| t.strip_prefix(SERVER_NAME))
        .is_some_and(|t| t.starts_with("__"));
    match tool {
        _ if ours => Verdict::Allow,
        "Read" | "Grep" | "Glob" | "LS" => Verdict::Allow,
        "Bash" if confined => Verdict::Allow,
        "Bash" => {
            Verdict::Deny("this machine has no sandbox for the planner's commands; read files instead".into())
        }
        _ => Verdict::Deny(format!(
            "{tool}: the planner reads the repository and proposes a plan; it changes nothing"
        )),
    }
}

fn write(stdin: &mut Option<ChildStdin>, text: &str) {
    if text.is_empty() {
        return;
    }
    if let Some(s) = stdin
        && let Err(e) = s.write_all(text.as_bytes()).and_then(|()| s.flush())
    {
        tracing::warn!(error = %e, "writing to the planner");
        *stdin = None;
    }
}

/// The agent's stdout, a line at a time, from a thread of its own (so
/// that a silent agent can be waited for with a bound).
fn read_lines(out: Option<ChildStdout>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(out) = out {
        std::thread::spawn(move || {
            let mut out = BufReader::new(out);
            while let Some(line) = next_line(&mut out) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

/// The next line of the agent's output; a line longer than [`MAX_LINE`]
/// is skipped, not held.
fn next_line(out: &mut impl std::io::BufRead) -> Option<String> {
    loop {
        let mut buf = Vec::new();
        let n = std::io::Read::take(&mut *out, MAX_LINE as u64 + 1).read_until(b'\n', &mut buf).ok()?;
        if n == 0 {
            return None;
        }
        if buf.len() > MAX_LINE && !buf.ends_with(b"\n") {
            if !skip_line(out).ok()? {
                return None;
            }
            continue;
        }
        return Some(String::from_utf8_lossy(&buf).trim_end_matches(['\n', '\r']).to_string());
    }
}

/// Drops the rest of a line; whether a newline ended it.
fn skip_line(out: &mut impl std::io::BufRead) -> std::io::Result<bool> {
    loop {
        let buf = out.fill_buf()?;
        if buf.is_empty() {
            return Ok(false);
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                out.consume(i + 1);
                return Ok(true);
            }
            None => {
                let n = buf.len();
                out.consume(n);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_planner_reads_and_proposes_and_edits_nothing() {
        assert_eq!(decide("mcp__swarm__propose_plan", false), Verdict::Allow);
        assert_eq!(decide("Read", false), Verdict::Allow);
        assert_eq!(decide("Bash", true), Verdict::Allow);
        assert!(matches!(decide("Bash", false), Verdict::Deny(_)));
        assert!(matches!(decide("Edit", true), Verdict::Deny(_)));
        assert!(matches!(decide("mcp__other__write", true), Verdict::Deny(_)));
        assert!(matches!(decide("mcp__swarmy__x", true), Verdict::Deny(_)));
    }

    #[test]
    fn an_oversized_line_is_skipped() {
        let mut big = vec![b'x'; MAX_LINE + 10];
        big.extend(b"\nnext\n");
        let mut r = std::io::Cursor::new(big);
        assert_eq!(next_line(&mut r).as_deref(), Some("next"));
        assert_eq!(next_line(&mut r), None);
    }
}

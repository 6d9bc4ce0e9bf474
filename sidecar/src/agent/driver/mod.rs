//! Runs an agent for one attempt: starts (or resumes) its session, feeds
//! it the task, decides its permission requests, relays questions and
//! answers, turns its events into Progress, keeps usage totals, and ends
//! with an [`End`] that the attempt maps to a result.
//!
//! Turns: when a turn ends, answers that arrived meanwhile are sent as the
//! next message; otherwise, if the agent's status file holds an open
//! question, the agent is kept (stdin open) until the operator answers;
//! otherwise the agent is let go (stdin closed) and its exit ends the run.
//! An agent whose follow-ups need a new process (Codex) is resumed once
//! the previous process has exited.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::time::Duration;

use swarm_core::Usage;
use swarm_proto::convert::AttemptRef;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::policy::Policy;
use super::process::{AgentProcess, Output};
use super::session::{self, SessionRecord};
use super::{Agent, AgentConfig, AgentEvent, FollowUp, RateLimit, TurnEnd, clip};
use crate::launch::Launch;
use crate::report::{Event, Report, Stop};
use crate::runner::{ExitInfo, SpawnSpec};
use crate::status::{StatusWatcher, WorkerStatus};
use crate::worker_mcp::ToolCall;

mod permissions;
mod report;
mod stop;
mod tools;
pub use permissions::describe;
pub use tools::{Ending, TOOL_ASK_PREFIX};

/// Marks an operator's message on the answers channel (question ids never
/// contain a colon).
pub const MESSAGE_PREFIX: &str = "message:";

const LOG_TAIL: usize = 20;
const PROGRESS_TAIL: usize = 5;
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
const TICK: Duration = Duration::from_millis(200);
/// At most one "unparseable line" Status per this interval.
const UNPARSEABLE_EVERY: Duration = Duration::from_secs(60);
/// How long an agent whose turn hit a usage limit may take to exit by itself.
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// What the driver needs from the attempt.
pub struct Setup<'a> {
    pub cfg: &'a AgentConfig,
    pub owned_globs: &'a [String],
    pub worktree: &'a Path,
    pub launch: Launch,
    pub base_commit: &'a str,
    pub branch: &'a str,
    pub task_text: &'a str,
    pub attempt: AttemptRef,
    pub idle: Option<Duration>,
    pub stop_grace: Duration,
    pub status_file: PathBuf,
    /// The session's calls to the controller, for the `context` tool.
    pub link: crate::link::ControllerLink,
    /// The attempt's sub-swarm, for the `spawn` and `wait_children` tools.
    pub children: Option<crate::children::Children>,
}

/// The attempt's inputs and outputs while the agent runs.
pub struct Channels<'a> {
    pub stop: &'a mut watch::Receiver<Option<Stop>>,
    /// Operator answers for this attempt: (question id, text).
    pub answers: &'a mut mpsc::UnboundedReceiver<(String, String)>,
    pub tx: &'a mpsc::UnboundedSender<Report>,
    pub log: &'a mut tokio::fs::File,
    /// The agent's calls to swarm's tools, when they are served.
    pub tools: Option<&'a mut mpsc::Receiver<ToolCall>>,
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// The last turn ended and the agent exited.
    Finished(TurnEnd),
    RateLimited(RateLimit),
    /// The agent exited in the middle of a turn.
    Crashed(ExitInfo),
    Stopped(Stop),
    /// No output for this long while not waiting on the operator.
    Idle(Duration),
    /// It could not be started (or its policy could not be built).
    Failed(String),
    /// The agent ended the attempt through a tool (checkpoint, escalate).
    ByTool(Ending),
}

#[derive(Debug, Clone)]
pub struct Ran {
    pub end: End,
    /// The last process's exit, when one exited.
    pub exit: Option<ExitInfo>,
    pub session_id: String,
    pub usage: Usage,
    pub tail: Vec<String>,
    pub files: Vec<String>,
    pub processes: u32,
}

struct Perm {
    question_id: String,
    request_id: String,
    tool: String,
    input: serde_json::Value,
    /// An ask-the-user request's questions (empty for a permission),
    /// asked one at a time, and the answers so far.
    asked: Vec<super::AskedQuestion>,
    answers: Vec<(String, String)>,
}

struct Driver<'s, 'c> {
    s: &'s Setup<'s>,
    /// The attempt's agent settings with swarm's note to the agent added.
    cfg: AgentConfig,
    /// The note, for an agent that takes no system prompt: it opens the
    /// first message of a new session instead.
    preamble: Option<String>,
    ch: Channels<'c>,
    agent: Box<dyn Agent>,
    policy: Policy,
    proc: Option<AgentProcess>,
    out_open: bool,
    processes: u32,
    last_exit: Option<ExitInfo>,
    session: Option<String>,
    usage_done: Usage,
    usage_proc: Usage,
    perm_count: u32,
    asking: Option<Perm>,
    perm_queue: VecDeque<Perm>,
    /// Answers that came while a turn ran, for its end.
    held_answers: Vec<String>,
    /// The message for the next process (a resume).
    resume_with: Option<String>,
    turn_open: bool,
    waiting: bool,
    last_turn: Option<TurnEnd>,
    seen_rate_limit: Option<RateLimit>,
    watcher: StatusWatcher,
    answered: HashSet<String>,
    tail: VecDeque<String>,
    step: String,
    percent: u32,
    files: BTreeSet<String>,
    progress_dirty: bool,
    progress_sent: Instant,
    last_activity: Instant,
    unparseable: (Option<Instant>, u32),
    /// `ask` calls waiting on the operator.
    tool_asks: Vec<tools::PendingAsk>,
    tool_asks_made: u32,
    /// Set by `checkpoint` or `escalate`, with when.
    ending: Option<(Ending, Instant)>,
}

enum Wake {
    Out(Option<Output>),
    Exit(ExitInfo),
    Stop(Option<Stop>),
    Answer(Option<(String, String)>),
    Tool(Option<ToolCall>),
    Tick,
}

/// Runs the agent to its end.
pub async fn run(s: &Setup<'_>, ch: Channels<'_>) -> Ran {
    let policy = match Policy::new(s.cfg, s.owned_globs, s.worktree) {
        Ok(p) => p,
        Err(e) => return Ran::failed(e.to_string()),
    };
    let codex = match s.cfg.kind {
        swarm_core::plan::AgentKind::Codex => super::codex::transport(&s.cfg.program).await,
        _ => super::codex::Transport::Exec,
    };
    let host = super::Host {
        worktree: s.worktree,
        owned_globs: s.owned_globs,
        confined: s.launch.confinement.is_some(),
        codex,
    };
    let agent = match super::for_kind(s.cfg, host) {
        Ok(a) => a,
        Err(e) => return Ran::failed(e.to_string()),
    };
    let mut cfg = s.cfg.clone();
    let note = super::instructions::note(&cfg, s.owned_globs);
    let preamble = if agent.takes_system_prompt() {
        cfg.append_system_prompt = match (note, cfg.append_system_prompt.take()) {
            (Some(n), Some(own)) => Some(format!("{n}\n\n{own}")),
            (n, own) => n.or(own),
        };
        None
    } else {
        note
    };
    let mut d = Driver {
        s,
        cfg,
        preamble,
        ch,
        agent,
        policy,
        proc: None,
        out_open: false,
        processes: 0,
        last_exit: None,
        session: None,
        usage_done: Usage::default(),
        usage_proc: Usage::default(),
        perm_count: 0,
        asking: None,
        perm_queue: VecDeque::new(),
        held_answers: Vec::new(),
        resume_with: None,
        turn_open: false,
        waiting: false,
        last_turn: None,
        seen_rate_limit: None,
        watcher: StatusWatcher::new(&s.status_file),
        answered: HashSet::new(),
        tail: VecDeque::new(),
        step: String::new(),
        percent: 0,
        files: BTreeSet::new(),
        progress_dirty: false,
        progress_sent: Instant::now() - PROGRESS_EVERY,
        last_activity: Instant::now(),
        unparseable: (None, 0),
        tool_asks: Vec::new(),
        tool_asks_made: 0,
        ending: None,
    };
    if codex == super::codex::Transport::Exec
        && d.cfg.kind == swarm_core::plan::AgentKind::Codex
        && !(d.cfg.allow.is_empty() && d.cfg.deny.is_empty())
    {
        d.log("this Codex is older than its app-server protocol: codex exec asks nothing, so the task's permission rules are not consulted (its sandbox still is)").await;
    }
    let end = d.drive().await;
    d.into_ran(end)
}

impl Ran {
    fn failed(e: String) -> Ran {
        Ran {
            end: End::Failed(e),
            exit: None,
            session_id: String::new(),
            usage: Usage::default(),
            tail: Vec::new(),
            files: Vec::new(),
            processes: 0,
        }
    }
}

impl Driver<'_, '_> {
    async fn drive(&mut self) -> End {
        let (resume, prompt) = self.first_message().await;
        if let Err(e) = self.start(resume, prompt).await {
            return End::Failed(e);
        }
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if let Some(ending) = self.tool_end_due() {
                self.let_go().await;
                return End::ByTool(ending);
            }
            if let Some(end) = self.between_processes().await {
                return end;
            }
            let wake = self.next_wake(&mut tick).await;
            match wake {
                Wake::Out(Some(o)) => self.on_output(o).await,
                Wake::Out(None) => self.out_open = false,
                Wake::Exit(exit) => self.on_exit(exit).await,
                Wake::Stop(Some(stop)) => {
                    self.stop_agent(self.grace(stop)).await;
                    return End::Stopped(stop);
                }
                Wake::Stop(None) => {}
                Wake::Answer(Some((id, text))) => self.on_answer(id, text).await,
                Wake::Answer(None) => {}
                Wake::Tool(Some(call)) => self.on_tool(call).await,
                // The server is gone; the agent carries on without it.
                Wake::Tool(None) => self.ch.tools = None,
                Wake::Tick => {
                    if let Some(end) = self.on_tick().await {
                        return end;
                    }
                }
            }
            if let Some(r) = self.last_turn.as_ref().and_then(|t| t.rate_limit.clone()) {
                self.let_go().await;
                return End::RateLimited(r);
            }
        }
    }

    async fn next_wake(&mut self, tick: &mut tokio::time::Interval) -> Wake {
        use futures::future::Either;
        let (exit, out) = match self.proc.as_mut() {
            Some(p) => (
                Either::Left(p.group.wait()),
                if self.out_open {
                    Either::Left(p.output.recv())
                } else {
                    Either::Right(std::future::pending())
                },
            ),
            None => (Either::Right(std::future::pending()), Either::Right(std::future::pending())),
        };
        let stop = &mut *self.ch.stop;
        let tool = match self.ch.tools.as_deref_mut() {
            Some(rx) => Either::Left(rx.recv()),
            None => Either::Right(std::future::pending()),
        };
        tokio::select! {
            biased;
            o = out => Wake::Out(o),
            e = exit => Wake::Exit(e),
            c = stop.changed() => Wake::Stop(if c.is_ok() { *stop.borrow_and_update() } else { Some(Stop::Shutdown) }),
            a = self.ch.answers.recv() => Wake::Answer(a),
            t = tool => Wake::Tool(t),
            _ = tick.tick() => Wake::Tick,
        }
    }

    /// With no process running: start the resume, keep waiting for an
    /// answer, or end.
    async fn between_processes(&mut self) -> Option<End> {
        if self.proc.is_some() {
            return None;
        }
        let exit = self.last_exit.unwrap_or(ExitInfo { code: None, signal: None });
        if self.turn_open {
            return Some(match self.seen_rate_limit.take() {
                Some(r) => End::RateLimited(r),
                None => End::Crashed(exit),
            });
        }
        if let Some(text) = self.resume_with.take() {
            let Some(session) = self.session.clone() else {
                return Some(End::Failed("cannot continue: the agent never named its session".into()));
            };
            if let Err(e) = self.start(Some(session), text).await {
                return Some(End::Failed(e));
            }
            return None;
        }
        if self.waiting {
            return None;
        }
        Some(End::Finished(self.last_turn.clone().unwrap_or_default()))
    }

    async fn first_message(&mut self) -> (Option<String>, String) {
        let task = match &self.preamble {
            Some(p) => format!("{p}\n\n{}", self.s.task_text),
            None => self.s.task_text.to_string(),
        };
        let Some(wanted) = self.s.cfg.resume_session.clone() else { return (None, task) };
        let worktree = self.s.worktree;
        let descends = |base: &str, commit: &str| holds_commit(worktree, base, commit);
        match session::can_resume(worktree, self.s.cfg.kind.as_str(), &wanted, self.s.base_commit, descends) {
            Ok(how) => {
                self.log(&format!("resuming agent session {wanted}")).await;
                self.session = Some(wanted.clone());
                let note = match how {
                    session::Resume::Same => format!(
                        "Continue the task. You were stopped before finishing; your work so far is in this \
                         worktree. The task follows, with any answers given since.\n\n{task}"
                    ),
                    session::Resume::Merged => format!(
                        "Your work on this task was merged and is under review in a pull request; this \
                         worktree now holds it together with the other tasks' merged work. The pull \
                         request's CI or reviewers asked for changes: they are in the task below, under \
                         \"Feedback on the pull request\" (the latest last). Make those changes.\n\n{task}"
                    ),
                };
                (Some(wanted), note)
            }
            Err(why) => {
                self.log(&format!("starting a new agent session instead of resuming {wanted}: {why}")).await;
                (None, task)
            }
        }
    }

    async fn start(&mut self, resume: Option<String>, prompt: String) -> Result<(), String> {
        let argv = self.agent.argv(&self.cfg, resume.as_deref());
        let spec = SpawnSpec {
            argv: argv.clone(),
            cwd: self.s.worktree.to_path_buf(),
            env: self.s.launch.env.clone(),
            confinement: self.s.launch.confinement.clone(),
        };
        let mut p = AgentProcess::spawn(&spec).map_err(|e| e.to_string())?;
        let restarts = self.processes;
        self.processes += 1;
        self.log(&format!("started {} (pid {}): {}", self.s.cfg.kind, p.pid(), clip(&argv.join(" "), 2000)))
            .await;
        let _ = self.ch.tx.send(Report::Pid { pid: p.pid(), restarts });
        self.journal(Event::Started {
            attempt: self.s.attempt.clone(),
            pid: p.pid(),
            restarts,
            sandbox: self.s.launch.report.clone(),
        });
        let opening = self.agent.opening(&prompt, resume.as_deref());
        if let Err(e) = p.write(&opening.input).await {
            self.log(&format!("{e}")).await;
        }
        if opening.close {
            p.close_stdin();
        }
        self.proc = Some(p);
        self.out_open = true;
        self.turn_open = true;
        self.waiting = false;
        self.last_activity = Instant::now();
        Ok(())
    }

    async fn on_exit(&mut self, exit: ExitInfo) {
        if let Some(mut p) = self.proc.take() {
            for o in p.drain(Duration::from_millis(500)).await {
                self.on_output(o).await;
            }
        }
        self.log(&format!("agent exited: code {:?}, signal {:?}", exit.code, exit.signal)).await;
        self.last_exit = Some(exit);
        self.usage_done.add(&self.usage_proc);
        self.usage_proc = Usage::default();
        self.agent.new_process();
        self.progress_dirty = true;
        // Requests of a process that is gone cannot be answered any more.
        self.perm_queue.clear();
        self.tool_asks.clear();
        if let Some(p) = self.asking.take() {
            self.log(&format!("permission question {} dropped: the agent exited", p.question_id)).await;
        }
    }

    async fn on_output(&mut self, o: Output) {
        self.last_activity = Instant::now();
        match o {
            Output::Stderr(line) => {
                self.raw_log(&format!("[stderr] {line}")).await;
                self.push_tail(format!("stderr: {}", clip(&line, 300)));
            }
            Output::Oversized(n) => {
                self.unparseable(&format!("a line of {n} bytes (limit {})", super::MAX_AGENT_LINE)).await
            }
            Output::Stdout(line) => {
                self.raw_log(&line).await;
                for ev in self.agent.parse_line(&line) {
                    self.on_event(ev, &line).await;
                }
            }
        }
    }

    async fn on_event(&mut self, ev: AgentEvent, line: &str) {
        match ev {
            AgentEvent::SessionStarted(id) => self.on_session(id).await,
            AgentEvent::Step(s) => {
                self.push_tail(s.clone());
                self.step = s;
                self.progress_dirty = true;
            }
            AgentEvent::FilesChanged(paths) => self.on_files(paths).await,
            AgentEvent::Todo { done, total } => {
                if total > 0 {
                    self.percent = (u64::from(done.min(total)) * 100 / u64::from(total)) as u32;
                    self.progress_dirty = true;
                }
            }
            AgentEvent::Usage(u) => {
                let changed = u != self.usage_proc;
                self.usage_proc = u;
                self.progress_dirty = true;
                // Budgets are enforced by the controller from these
                // reports: each API call's spending goes out at once, so
                // the call that reaches a cap stops the agent before it
                // makes many more.
                if changed {
                    self.send_progress();
                }
            }
            AgentEvent::Note(n) => {
                self.push_tail(n);
                self.progress_dirty = true;
            }
            AgentEvent::PermissionRequest { request_id, tool, input } => {
                self.on_permission(request_id, tool, input).await
            }
            AgentEvent::ToolHook { request_id, tool, input } => {
                self.on_tool_hook(request_id, tool, input).await
            }
            AgentEvent::UserQuestion { request_id, input, questions } => {
                self.on_user_question(request_id, input, questions).await
            }
            AgentEvent::Denied { tool, why } => {
                self.audit(&format!("permission denied by the agent: {tool} ({why})")).await
            }
            AgentEvent::UnsupportedControl { request_id, subtype } => {
                self.log(&format!("refused control request {request_id} ({})", clip(&subtype, 64))).await;
                if let Some(reply) = self.agent.refuse_control(&request_id) {
                    self.write(&reply).await;
                }
            }
            AgentEvent::ControlCancelled { request_id } => self.on_cancelled(&request_id).await,
            AgentEvent::RateLimited(r) => {
                self.log(&format!("agent reports a usage limit ({}, reset {})", r.kind, r.reset_unix_ms))
                    .await;
                self.seen_rate_limit = Some(r);
            }
            AgentEvent::Error(e) => self.push_tail(format!("error: {}", clip(&e, 300))),
            AgentEvent::Send(text) => self.write(&text).await,
            AgentEvent::TurnEnded(t) => self.on_turn_end(t).await,
            AgentEvent::ToolsUnavailable(status) => {
                self.audit(&format!(
                    "the agent could not start swarm's tools (server {}: {status}); it can still report \
                     through .swarm/status.json",
                    crate::worker_mcp::SERVER_NAME
                ))
                .await
            }
            AgentEvent::Unparseable(why) => {
                self.unparseable(&format!("{why}: {}", clip(line, 200))).await;
            }
        }
    }

    async fn on_session(&mut self, id: String) {
        self.session = Some(id.clone());
        let record = SessionRecord {
            kind: self.s.cfg.kind.to_string(),
            session_id: id,
            commit: self.s.base_commit.into(),
        };
        if let Err(e) = session::write(self.s.worktree, &record) {
            self.log(&format!("cannot write {}: {e}", session::path(self.s.worktree).display())).await;
        }
        // Sent at once: a lost attempt's session must be resumable.
        self.send_progress();
    }

    async fn on_files(&mut self, paths: Vec<String>) {
        for p in paths {
            match self.policy.relative(&p) {
                Ok(rel) => {
                    self.files.insert(rel);
                    self.progress_dirty = true;
                }
                Err(e) => self.log(&format!("not reporting a changed file: {e}")).await,
            }
        }
    }

    async fn on_turn_end(&mut self, t: TurnEnd) {
        self.turn_open = false;
        self.log(&format!("turn ended (ok: {}): {}", t.ok, clip(&t.text, 500))).await;
        let limited = t.rate_limit.is_some();
        self.last_turn = Some(t);
        if limited {
            return;
        }
        self.seen_rate_limit = None;
        // The agent ended the attempt through a tool: this was its last turn.
        if self.ending.is_some() {
            return;
        }
        if !self.held_answers.is_empty() {
            let text = std::mem::take(&mut self.held_answers).join("\n\n");
            self.continue_with(text).await;
            return;
        }
        self.poll_status().await;
        if let Some(q) = self.open_question() {
            self.log(&format!("waiting for the operator's answer to {q}")).await;
            self.waiting = true;
            return;
        }
        if let Some(p) = self.proc.as_mut() {
            p.close_stdin();
        }
    }

    fn open_question(&self) -> Option<String> {
        let s = self.watcher.current()?;
        let q = s.question.as_ref()?;
        (s.status == WorkerStatus::Question && !self.answered.contains(&q.id)).then(|| q.id.clone())
    }

    async fn continue_with(&mut self, text: String) {
        self.waiting = false;
        self.last_activity = Instant::now();
        match (self.agent.follow_up(), self.proc.as_mut()) {
            (FollowUp::Stdin, Some(p)) if p.stdin_open() => {
                let msg = self.agent.user_message(&text);
                match p.write(&msg).await {
                    Ok(()) => self.turn_open = true,
                    Err(e) => {
                        self.log(&format!("{e}; resuming the session instead")).await;
                        self.resume_with = Some(text);
                    }
                }
            }
            // Started once the current process (if any) has exited.
            _ => self.resume_with = Some(text),
        }
    }

    async fn on_answer(&mut self, id: String, text: String) {
        if let Some(message_id) = id.strip_prefix(MESSAGE_PREFIX) {
            let message = format!("A message from the operator ({message_id}):\n\n{}", text.trim());
            self.log(&format!("operator message {message_id} for the agent")).await;
            // Between turns it goes now (resuming the session if the agent
            // already let go of its stdin); during a turn, after it.
            if self.waiting || !self.turn_open {
                self.continue_with(message).await;
            } else {
                self.held_answers.push(message);
            }
            return;
        }
        if self.answer_tool_ask(&id, &text) {
            self.log(&format!("operator answered {id}; returned to the agent's ask")).await;
            return;
        }
        if self.asking.as_ref().is_some_and(|p| p.question_id == id) {
            self.resolve_permission(&text).await;
            return;
        }
        if permissions::is_agent_request(&id) {
            self.log(&format!("answer to {id}, which is no longer pending; ignored")).await;
            return;
        }
        self.answered.insert(id.clone());
        let message = format!("The operator answered your question {id}:\n\n{}", text.trim());
        if self.waiting {
            self.continue_with(message).await;
        } else {
            self.held_answers.push(message);
        }
    }

    async fn on_tick(&mut self) -> Option<End> {
        self.poll_status().await;
        self.stop_lingering().await;
        if self.progress_dirty && self.progress_sent.elapsed() >= PROGRESS_EVERY {
            self.send_progress();
        }
        // Waiting on spawned children is not idling either: they may take hours.
        let children = self.s.children.as_ref().is_some_and(|c| c.waiting());
        let on_operator = self.waiting || self.asking.is_some() || !self.tool_asks.is_empty() || children;
        if on_operator {
            self.last_activity = Instant::now();
        }
        let idle = self.s.idle?;
        if self.proc.is_some() && self.last_activity.elapsed() >= idle {
            self.log(&format!("no output for {} s; stopping the agent", idle.as_secs())).await;
            self.stop_process(self.s.stop_grace).await;
            return Some(End::Idle(idle));
        }
        None
    }

    /// Ends the current process after a usage limit: it may exit by itself
    /// once its stdin closes; otherwise it is stopped.
    async fn let_go(&mut self) {
        let Some(p) = self.proc.as_mut() else { return };
        p.close_stdin();
        if let Ok(exit) = tokio::time::timeout(EXIT_WAIT, p.wait()).await {
            self.on_exit(exit).await;
        } else {
            self.stop_process(self.s.stop_grace).await;
        }
    }

    async fn stop_process(&mut self, grace: Duration) {
        if let Some(p) = self.proc.as_mut() {
            let exit = p.group.stop(grace).await;
            self.on_exit(exit).await;
        }
    }

    fn grace(&self, stop: Stop) -> Duration {
        match stop {
            Stop::Cancel { grace } | Stop::Checkpoint { grace } => grace,
            _ => self.s.stop_grace,
        }
    }

    async fn write(&mut self, line: &str) {
        let r = match self.proc.as_mut() {
            Some(p) => p.write(line).await,
            None => return,
        };
        if let Err(e) = r {
            self.log(&e.to_string()).await;
        }
    }

    fn into_ran(mut self, end: End) -> Ran {
        self.usage_done.add(&self.usage_proc);
        Ran {
            end,
            exit: self.last_exit,
            session_id: self.session.unwrap_or_default(),
            usage: self.usage_done,
            tail: self.tail.into_iter().collect(),
            files: self.files.into_iter().collect(),
            processes: self.processes,
        }
    }
}

/// Whether `base` has `commit` in its history, read from the worktree's
/// repository; anything unreadable is "no" (a fresh session then starts).
fn holds_commit(worktree: &std::path::Path, base: &str, commit: &str) -> bool {
    let (Ok(base), Ok(commit)) = (git2::Oid::from_str(base), git2::Oid::from_str(commit)) else {
        return false;
    };
    let Ok(repo) = git2::Repository::open(worktree) else { return false };
    repo.graph_descendant_of(base, commit).unwrap_or(false)
}

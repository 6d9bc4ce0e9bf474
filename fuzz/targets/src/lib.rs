//! One input to each parser whose input comes from a file, a peer or an
//! agent: the plan, a sidecar's messages through the controller's own
//! validation, the worker's `status.json`, the Claude Code and Codex
//! output parsers, the tokens file, the sidecar's journal, an agent's
//! `spawn` (the tasks it sends, composed into its swarm's plan), a
//! reviewer's `review.json`, an ACP agent's JSON-RPC lines and the
//! arguments of every MCP tool (the controller's and the worker's) and
//! every Operator API request through the controller's checks. Each target
//! must return for any bytes, without a panic, in bounded time.
//!
//! The cargo-fuzz targets in `fuzz/libfuzzer/fuzz_targets/` call these, and
//! `tests/replay.rs` calls them on every input in `fuzz/regressions/`, so
//! what the fuzzer once found stays fixed in the ordinary test suite.

use prost::Message as _;
use swarm_proto::v1;
use swarm_sidecar::agent::Agent as _;

/// What a target does with one input.
pub type Target = fn(&[u8]);

/// Every target by name, as the regression directories are named.
pub const TARGETS: &[(&str, Target)] = &[
    ("plan", plan),
    ("sidecar_message", sidecar_message),
    ("status", status),
    ("claude_lines", claude_lines),
    ("codex_lines", codex_lines),
    ("tokens", tokens),
    ("journal", journal),
    ("spawn", spawn),
    ("review", review),
    ("acp_lines", acp_lines),
    ("mcp_arguments", mcp_arguments),
    ("operator_request", operator_request),
];

/// A plan file, as `swarmctl` and `CreateSwarm` read it.
pub fn plan(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = swarm_core::plan::Plan::parse(text);
    }
}

/// A sidecar's message on the wire, through the controller's checks.
pub fn sidecar_message(data: &[u8]) {
    let Ok(message) = v1::SidecarMessage::decode(data) else { return };
    match &message.body {
        Some(v1::sidecar_message::Body::Hello(hello)) => {
            let _ = swarm_controller::api::convert::hello(hello);
        }
        Some(body) => {
            let _ = swarm_controller::api::convert::report(message.seq, body);
        }
        None => {}
    }
}

/// The worker's `.swarm/status.json`.
pub fn status(data: &[u8]) {
    let _ = swarm_sidecar::status::parse(data);
}

/// Claude Code's stream-json output, line by line through one parser (it
/// keeps state between lines: the session, pending tool uses, usage).
pub fn claude_lines(data: &[u8]) {
    let mut claude = swarm_sidecar::agent::claude::Claude::default();
    for line in String::from_utf8_lossy(data).lines() {
        let _ = claude.parse_line(line);
    }
}

/// Codex's output, line by line: through the `exec --json` parser, and
/// through an app-server client that has sent its `initialize` (the
/// client touches no file, so one worktree path serves every input).
pub fn codex_lines(data: &[u8]) {
    use swarm_sidecar::agent::Agent as _;
    let mut exec = swarm_sidecar::agent::codex::Exec::default();
    let cfg = swarm_sidecar::agent::AgentConfig::of_kind(swarm_core::plan::AgentKind::Codex);
    let owned = ["src/**".to_string()];
    let pricing = swarm_sidecar::agent::cost::Pricing::default();
    let app = swarm_sidecar::agent::codex::AppServer::new(
        &cfg,
        std::path::Path::new("/nonexistent"),
        &owned,
        pricing,
        true,
    );
    let Ok(mut app) = app else { return };
    let _ = app.opening("task", None);
    for line in String::from_utf8_lossy(data).lines() {
        let _ = exec.parse_line(line);
        let _ = app.parse_line(line);
    }
}

/// The controller's tokens file.
pub fn tokens(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = swarm_auth::tokens::parse(text);
    }
}

/// A journal file as a restarted sidecar finds it (torn, corrupt, or
/// written by another version).
pub fn journal(data: &[u8]) {
    let Ok(dir) = scratch_dir() else { return };
    let path = dir.path().join("journal");
    if std::fs::write(&path, data).is_ok() {
        let _ = swarm_sidecar::journal::Journal::open(&path);
    }
}

/// A directory of its own for one input: in memory where the machine has
/// a tmpfs (each input's files are written, synced and removed, which on
/// a disk costs more than the parsing fuzzed).
fn scratch_dir() -> std::io::Result<tempfile::TempDir> {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).or_else(|_| tempfile::tempdir())
    } else {
        tempfile::tempdir()
    }
}

/// The stored plan an agent's `spawn` is composed into: a task at the root
/// and one inside a declared sub-plan, each a worker that may spawn.
const SPAWN_STORED: &str = r#"
name = "app"
[defaults]
agent = "claude"
[[tasks]]
id = "auth"
files = ["auth/**"]
model = "opus"
[[tasks]]
id = "docs"
files = ["docs/"]
deps = ["auth"]
[[tasks.subtasks]]
id = "guide"
files = ["docs/guide/**"]
"#;

/// The tasks an agent sends with `spawn`, composed into its swarm's plan
/// and checked as the controller does, for a root task and a nested one.
pub fn spawn(data: &[u8]) {
    let Ok(fragment) = std::str::from_utf8(data) else { return };
    for (swarm, task) in [("app", "auth"), ("app/docs", "guide")] {
        let (Ok(swarm), Ok(task)) =
            (swarm_core::SwarmId::new(swarm), swarm_core::TaskId::new(task.to_string()))
        else {
            return;
        };
        let _ = swarm_core::plan::spawn::spawned(SPAWN_STORED, &swarm, &task, fragment);
    }
}

/// A reviewer's `.swarm/review.json`.
pub fn review(data: &[u8]) {
    let _ = swarm_sidecar::review::decision_of(&String::from_utf8_lossy(data));
}

/// An ACP agent's stdout, line by line through one client, from the
/// `initialize` it answers (id 0) on: responses, `session/update`
/// notifications, permission requests and `fs/*` requests, which read and
/// write inside a worktree of its own. The client is set up once and
/// cloned for each input (compiling its policy's globs costs more than
/// most inputs), and the worktree is put back whenever an input changed it.
pub fn acp_lines(data: &[u8]) {
    ACP.with(|fixture| {
        let Some(fixture) = fixture else { return };
        if !fixture.is_pristine() && fixture.reset().is_err() {
            return;
        }
        let mut acp = fixture.client.clone();
        for line in String::from_utf8_lossy(data).lines() {
            let _ = acp.parse_line(line);
        }
    });
}

thread_local! {
    static ACP: Option<AcpFixture> = AcpFixture::new();
}

/// A worktree holding `src/a.rs` and an ACP client that owns `src/**`,
/// denies reading `.env` and has sent its `initialize`.
struct AcpFixture {
    worktree: tempfile::TempDir,
    client: swarm_sidecar::agent::acp::Acp,
}

const ACP_FILE: &str = "fn a() {}\n";

impl AcpFixture {
    fn new() -> Option<AcpFixture> {
        use swarm_core::plan::{AgentKind, PermissionRule};
        use swarm_sidecar::agent::AgentConfig;
        let worktree = scratch_dir().ok()?;
        let cfg = AgentConfig {
            program: "agent".into(),
            deny: PermissionRule::parse("Read(.env)").into_iter().collect(),
            ..AgentConfig::of_kind(AgentKind::Acp)
        };
        let mut client =
            swarm_sidecar::agent::acp::Acp::new(&cfg, worktree.path(), &["src/**".into()]).ok()?;
        let _ = client.opening("Write src/a.rs", None);
        let fixture = AcpFixture { worktree, client };
        fixture.reset().ok()?;
        Some(fixture)
    }

    /// Only `src/a.rs`, as written: what a write, a new file or directory
    /// would have changed (writes are confined to `src/`, which the client
    /// checks and the fuzzer tries to get around).
    fn is_pristine(&self) -> bool {
        let names = |dir: &std::path::Path| -> Option<Vec<std::ffi::OsString>> {
            std::fs::read_dir(dir).ok()?.map(|e| e.ok().map(|e| e.file_name())).collect()
        };
        let root = self.worktree.path();
        names(root).is_some_and(|n| n == ["src"])
            && names(&root.join("src")).is_some_and(|n| n == ["a.rs"])
            && std::fs::read(root.join("src/a.rs")).is_ok_and(|text| text == ACP_FILE.as_bytes())
    }

    fn reset(&self) -> std::io::Result<()> {
        let root = self.worktree.path();
        for entry in std::fs::read_dir(root)? {
            let path = entry?.path();
            if path.is_dir() && !path.is_symlink() {
                std::fs::remove_dir_all(&path)?;
            } else {
                std::fs::remove_file(&path)?;
            }
        }
        std::fs::create_dir(root.join("src"))?;
        std::fs::write(root.join("src/a.rs"), ACP_FILE)
    }
}

/// A tool call's arguments, as an orchestrating agent sends them to the
/// controller's MCP server or a worker's agent to its sidecar's: the first
/// byte picks the tool (of both servers' tools), the rest is the JSON of
/// its arguments, read and checked as the tool does before it sends
/// anything.
pub fn mcp_arguments(data: &[u8]) {
    let Some((&pick, json)) = data.split_first() else { return };
    let Ok(arguments) = serde_json::from_slice::<serde_json::Value>(json) else { return };
    let (orchestrator, worker) = (swarm_mcp::TOOL_NAMES, swarm_sidecar::worker_mcp::TOOL_NAMES);
    let pick = usize::from(pick) % (orchestrator.len() + worker.len());
    match orchestrator.get(pick) {
        Some(tool) => drop(swarm_mcp::check_arguments(tool, arguments)),
        None => drop(swarm_sidecar::worker_mcp::request_for(worker[pick - orchestrator.len()], arguments)),
    }
}

/// An Operator API request on the wire: the first byte picks the call,
/// the rest is its request message, decoded and checked as the
/// controller's handler checks it before anything reaches the scheduler.
pub fn operator_request(data: &[u8]) {
    use swarm_controller::api::{convert, requests};
    use swarm_controller::scheduler::Page;
    fn decoded<M: prost::Message + Default>(bytes: &[u8]) -> Option<M> {
        M::decode(bytes).ok()
    }
    let Some((&pick, bytes)) = data.split_first() else { return };
    let _ = match pick % 19 {
        0 => decoded::<v1::CreateSwarmRequest>(bytes).map(|r| {
            // Both checks run on every input: the handler checks the origin
            // first, the plan after it.
            let origin = swarm_controller::api::origin::from_wire(r.origin.as_ref()).is_ok();
            swarm_core::plan::Plan::parse(&r.plan_toml).map(drop).is_ok() && origin
        }),
        1 => {
            decoded::<v1::GetSwarmRequest>(bytes).map(|r| requests::swarm_id("swarm_id", &r.swarm_id).is_ok())
        }
        2 => decoded::<v1::ListSwarmsRequest>(bytes).map(|r| Page::new(r.page_size, r.page_token).is_ok()),
        3 => decoded::<v1::ListTasksRequest>(bytes).map(|r| requests::list_tasks(r).is_ok()),
        4 => decoded::<v1::GetTaskRequest>(bytes).map(|r| convert::task_key("task_id", &r.task_id).is_ok()),
        5 => decoded::<v1::ListWorkersRequest>(bytes).map(|r| Page::new(r.page_size, r.page_token).is_ok()),
        6 => decoded::<v1::WatchRequest>(bytes).map(|r| requests::watch(&r).is_ok()),
        7 => decoded::<v1::CancelTaskRequest>(bytes).map(|r| requests::cancel_task(r).is_ok()),
        8 => decoded::<v1::CancelSwarmRequest>(bytes).map(|r| requests::cancel_swarm(r).is_ok()),
        9 => decoded::<v1::RetryTaskRequest>(bytes).map(|r| convert::task_key("task_id", &r.task_id).is_ok()),
        10 => decoded::<v1::ReviewTaskRequest>(bytes).map(|r| requests::review_task(r).is_ok()),
        11 => decoded::<v1::AnswerRequest>(bytes).map(|r| requests::answer(r).is_ok()),
        12 => decoded::<v1::SendMessageRequest>(bytes).map(|r| requests::send_message(r).is_ok()),
        13 => decoded::<v1::SetBudgetRequest>(bytes).map(|r| requests::set_budget(&r).is_ok()),
        14 => decoded::<v1::PauseSwarmRequest>(bytes).map(|r| requests::pause(r).is_ok()),
        15 => decoded::<v1::ResumeSwarmRequest>(bytes).map(|r| requests::swarm(&r.swarm_id).is_ok()),
        16 => decoded::<v1::DrainWorkerRequest>(bytes)
            .map(|r| swarm_proto::convert::required_id("worker_id", &r.worker_id).is_ok()),
        17 => decoded::<v1::LandRequest>(bytes).map(|r| requests::land(r).is_ok()),
        _ => decoded::<v1::ReadAttemptLogRequest>(bytes).map(|r| requests::read_attempt_log(&r).is_ok()),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_acp_worktree_an_input_wrote_to_is_put_back_before_the_next_input() {
        let writes_b = br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}
{"jsonrpc":"2.0","id":9,"method":"fs/write_text_file","params":{"sessionId":"s1","path":"src/b.rs","content":"fn b() {}\n"}}"#;
        let pristine =
            || ACP.with(|fixture| fixture.as_ref().expect("the ACP fixture is set up").is_pristine());
        assert!(pristine());
        acp_lines(writes_b);
        assert!(!pristine(), "the write landed in the fixture's worktree");
        acp_lines(b"");
        assert!(pristine());
    }
}

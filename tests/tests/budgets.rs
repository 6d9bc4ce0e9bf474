//! Budgets, the burn-rate breaker and pausing, with the real controller,
//! sidecars and `tests/fake-agents/fake-claude` (whose `usage` directive
//! sets what its `result` lines report spending, and whose `question`
//! directive ends a turn and waits, so an attempt spends and then lives on).
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use swarm_proto::v1::{self, AttemptState, TaskState};
use swarm_tests::{
    Cluster, Gate, PlanBuilder, TaskBuilder, TempDir, TempRepo, WAIT, attempts, create_swarm, operator, poll,
    stderr, stdout, swarmctl, task, tasks, try_operator, try_poll, wait_task_state, worker_script,
};

/// The fake agent's state directory (`FAKE_AGENT_STATE`).
struct Fake {
    dir: TempDir,
}

impl Fake {
    fn new() -> Fake {
        Fake { dir: tempfile::Builder::new().prefix("fake-agent-state-").tempdir().unwrap() }
    }

    /// One record per agent process started for `task`, in order.
    fn runs(&self, task: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.path().join("runs.jsonl")).unwrap_or_default();
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["task"] == task)
            .collect()
    }
}

fn fake_claude() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fake-agents").join("fake-claude")
}

fn claude_plan(name: &str, fake: &Fake) -> PlanBuilder {
    PlanBuilder::new(name)
        .remove_default("command")
        .default("agent", r#""claude""#)
        .default("agent_path", &format!("{:?}", fake_claude().to_str().unwrap()))
        .default("env", &format!("{{ FAKE_AGENT_STATE = {:?} }}", fake.dir.path().to_str().unwrap()))
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "deny" }"#)
        .sandbox(&[], &[fake.dir.path()])
}

/// An agent task owning `src/<id>/`, acting out `lines`.
fn agent_task(id: &str, lines: &[&str]) -> TaskBuilder {
    let prompt = format!("'''\nThe fake agent acts this out.\n\n{}\n'''", lines.join("\n"));
    task(id).files(&[&format!("src/{id}/")]).set("prompt", &prompt)
}

async fn wait_swarm_state(url: &str, id: &str, state: v1::SwarmState) -> v1::Swarm {
    poll(&format!("swarm {id} {state:?}"), WAIT, || async {
        let mut op = try_operator(url).await?;
        let s = op.get_swarm(v1::GetSwarmRequest { swarm_id: id.into() }).await.ok()?.into_inner();
        (s.state == state as i32).then_some(s)
    })
    .await
}

/// Waits until `swarm/id` is BLOCKED; returns it.
async fn wait_blocked(url: &str, swarm: &str, id: &str) -> v1::Task {
    wait_task_state(url, swarm, id, TaskState::Blocked).await
}

async fn task_events(url: &str, task_id: &str) -> Vec<v1::Event> {
    let mut op = operator(url).await;
    op.get_task(v1::GetTaskRequest { task_id: task_id.into() }).await.unwrap().into_inner().events
}

fn ok(out: std::process::Output, what: &str) -> String {
    assert_eq!(out.status.code(), Some(0), "{what}: {}{}", stdout(&out), stderr(&out));
    stdout(&out)
}

/// A task whose agent spends past its budget in one turn and then waits is
/// stopped with a checkpoint, BLOCKED with reason budget; `swarmctl budget
/// --set` raises it and the next attempt resumes the same agent session,
/// whose work merges with what the first attempt did.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_stopped_at_its_budget_resumes_its_session_when_raised() {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("tb", &fake)
        .task(
            agent_task(
                "a",
                &[
                    "FAKE: usage 1000 100 0 0 1.2",
                    "FAKE: write src/a/one.txt one",
                    "FAKE: question q1 \"Go on?\"",
                    "FAKE: usage 10 10 0 0 0.5",
                    "FAKE: write src/a/two.txt two",
                ],
            )
            .set("budget_usd", "1.0"),
        )
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let blocked = wait_blocked(&url, "tb", "a").await;
    assert!(blocked.reason.starts_with("budget: task spent $1.20 of budget_usd $1.00"), "{}", blocked.reason);
    let first = attempts(&url, "tb/a").await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].state, AttemptState::Checkpointed as i32, "stopped with its work kept: {first:?}");
    assert!(!first[0].result_commit.is_empty(), "a WIP commit");
    let events = task_events(&url, "tb/a").await;
    let blocked_event = events.iter().find(|e| e.kind == "task.blocked").expect("task.blocked");
    assert!(blocked_event.data.contains(r#""reason":"budget""#), "{blocked_event:?}");

    let out = ok(swarmctl(&url, &["budget", "tb/a", "--set", "25.00"]), "swarmctl budget");
    assert!(out.contains("tb"), "{out}");
    let done = wait_task_state(&url, "tb", "a", TaskState::Merged).await;
    assert_eq!(done.attempts, 2);
    assert_eq!(done.budget.unwrap().usd, 25.0);
    let runs = fake.runs("a");
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(
        runs[1]["resume"], runs[0]["session"],
        "the second process resumed the first's session: {runs:?}"
    );
    let tree = repo.tree("swarm/tb/integration");
    assert!(tree.contains_key("src/a/one.txt") && tree.contains_key("src/a/two.txt"), "{tree:?}");
    let events = task_events(&url, "tb/a").await;
    assert!(events.iter().any(|e| e.kind == "budget.set"), "{events:?}");
}

/// A swarm at its budget stops its running agent and starts no other; the
/// raise lets both go on.
#[tokio::test(flavor = "multi_thread")]
async fn a_swarm_at_its_budget_stops_its_agents_and_continues_when_raised() {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("sb", &fake)
        .task(agent_task("a", &["FAKE: usage 100 10 0 0 1.0", "FAKE: write src/a/a.txt a"]))
        .task(
            agent_task(
                "b",
                &["FAKE: usage 100 10 0 0 1.0", "FAKE: write src/b/b.txt b", "FAKE: question q1 \"More?\""],
            )
            .deps(&["a"]),
        )
        .task(agent_task("c", &["FAKE: write src/c/c.txt c"]).deps(&["b"]))
        .tables("[budget]\nusd = 1.5")
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    wait_task_state(&url, "sb", "a", TaskState::Merged).await;
    let b = wait_blocked(&url, "sb", "b").await;
    assert!(b.reason.starts_with("budget: swarm spent $2.00 of budget_usd $1.50"), "{}", b.reason);
    let s = wait_swarm_state(&url, "sb", v1::SwarmState::Stalled).await;
    assert_eq!(s.budget.unwrap().usd, 1.5);
    assert_eq!(attempts(&url, "sb/c").await.len(), 0);

    ok(swarmctl(&url, &["budget", "sb", "--set", "25"]), "swarmctl budget");
    wait_swarm_state(&url, "sb", v1::SwarmState::Completed).await;
    let runs = fake.runs("b");
    assert_eq!(runs[1]["resume"], runs[0]["session"], "{runs:?}");
    let describe = ok(swarmctl(&url, &["describe", "swarm", "sb"]), "describe");
    assert!(describe.contains("Budget:      $25.00"), "{describe}");
}

/// Spending faster than `max_usd_per_hour` pauses assignment and asks the
/// operator; answering `resume` lets the swarm go on.
#[tokio::test(flavor = "multi_thread")]
async fn the_breaker_pauses_assignment_and_asks_the_operator() {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("br", &fake)
        .task(agent_task("a", &["FAKE: usage 100 10 0 0 2.0", "FAKE: write src/a/a.txt a"]))
        .task(agent_task("b", &["FAKE: write src/b/b.txt b"]).deps(&["a"]))
        .tables("[budget]\nmax_usd_per_hour = 1.0")
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let s = wait_swarm_state(&url, "br", v1::SwarmState::Paused).await;
    assert!(s.paused_reason.contains("max_usd_per_hour $1.00"), "{}", s.paused_reason);
    let a = wait_task_state(&url, "br", "a", TaskState::Merged).await;
    assert!(a.pending_question.contains("resume"), "the breaker asks: {a:?}");
    wait_task_state(&url, "br", "b", TaskState::Ready).await;
    let started = try_poll(Duration::from_secs(2), || async {
        (!attempts(&url, "br/b").await.is_empty()).then_some(())
    })
    .await;
    assert!(started.is_none(), "paused: b must not start");
    let listed = ok(swarmctl(&url, &["get", "swarms"]), "get swarms");
    assert!(listed.contains("PAUSED"), "{listed}");

    ok(swarmctl(&url, &["answer", "br/a", "resume"]), "answer");
    wait_swarm_state(&url, "br", v1::SwarmState::Completed).await;
}

/// `pause --stop` checkpoints the running attempt and starts nothing; the
/// pause survives a controller kill -9; `resume` continues from the WIP
/// commit.
#[tokio::test(flavor = "multi_thread")]
async fn a_pause_survives_a_controller_kill9_and_resume_continues() {
    let gate = Gate::new();
    let hold = format!(
        "echo started > a.txt; {}; [ -e '{}' ] && echo done >> a.txt",
        gate.wait_sh(),
        gate.path.display()
    );
    let script = worker_script(&[("a", &hold)]);
    let repo = TempRepo::with_files(&[("worker.sh", &script)]);
    let plan = PlanBuilder::new("pz").task(task("a")).task(task("b").deps(&["a"])).build();
    let mut cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    wait_task_state(&url, "pz", "a", TaskState::Running).await;

    let out = ok(swarmctl(&url, &["pause", "pz", "--stop", "--reason", "lunch"]), "pause");
    assert!(out.contains("PAUSED"), "{out}");
    let a = wait_task_state(&url, "pz", "a", TaskState::Ready).await;
    let first = attempts(&url, "pz/a").await;
    assert_eq!(first[0].state, AttemptState::Checkpointed as i32, "{first:?} ({})", a.reason);

    cluster.controller.restart_after_kill9();
    let s = wait_swarm_state(&url, "pz", v1::SwarmState::Paused).await;
    assert!(s.paused_reason.contains("lunch"), "{}", s.paused_reason);
    // The sidecar is back and idle; still nothing starts.
    poll("the sidecar to reconnect", WAIT, || async {
        let mut op = try_operator(&url).await?;
        let w = op.list_workers(v1::ListWorkersRequest::default()).await.ok()?.into_inner().workers;
        w.iter().any(|w| w.connected).then_some(())
    })
    .await;
    let started =
        try_poll(Duration::from_secs(2), || async { (attempts(&url, "pz/a").await.len() > 1).then_some(()) })
            .await;
    assert!(started.is_none(), "paused across the restart: nothing starts");
    let describe = ok(swarmctl(&url, &["describe", "swarm", "pz"]), "describe");
    assert!(describe.contains("PAUSED") && describe.contains("Paused:      lunch"), "{describe}");

    gate.open();
    ok(swarmctl(&url, &["resume", "pz"]), "resume");
    wait_swarm_state(&url, "pz", v1::SwarmState::Completed).await;
    let second = attempts(&url, "pz/a").await;
    assert_eq!(second.len(), 2);
    assert_eq!(second[1].base_commit, first[0].result_commit, "resumed from its WIP commit");
    let tree = repo.tree("swarm/pz/integration");
    assert_eq!(tree.get("a.txt").map(String::as_str), Some("started\ndone\n"), "{tree:?}");
    let mut op = operator(&url).await;
    let t = tasks(&mut op, "pz").await;
    assert_eq!(t["b"].state, TaskState::Merged as i32);
}

//! The Operator API from tests: clients, polling waits, clusters.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use swarm_proto::v1;
use swarm_proto::v1::operator_service_client::OperatorServiceClient;
use tonic::transport::{Channel, Endpoint};

use crate::WAIT;
use crate::poll::{poll, try_poll};
use crate::procs::{ControllerProc, Proc, spawn_controller, spawn_sidecar_env};
use crate::repo::TempRepo;

pub type Operator = OperatorServiceClient<Channel>;

pub async fn operator(url: &str) -> Operator {
    let channel = Endpoint::from_shared(url.to_string()).unwrap().connect().await.expect("connect");
    OperatorServiceClient::new(channel)
}

/// A task's state and attempts, for failure messages.
pub async fn task_report(url: &str, task_id: &str) -> String {
    let Some(mut op) = try_operator(url).await else { return "controller unreachable".into() };
    match op.get_task(v1::GetTaskRequest { task_id: task_id.to_string() }).await {
        Ok(d) => {
            let d = d.into_inner();
            let mut s = String::new();
            if let Some(t) = &d.task {
                let _ = writeln!(s, "{task_id}: {:?} ({})", state_of(t), t.reason);
            }
            for a in &d.attempts {
                let _ = writeln!(
                    s,
                    "  #{} {:?} worker={} exit={} outcome={:?} error={:?} summary={:?}",
                    a.number,
                    v1::AttemptState::try_from(a.state).unwrap_or(v1::AttemptState::Unspecified),
                    a.worker_id,
                    a.exit_code,
                    outcome_of(a),
                    a.error,
                    a.summary
                );
            }
            s
        }
        Err(e) => format!("GetTask {task_id}: {e}"),
    }
}

/// The tasks of a swarm, by task id.
pub async fn tasks(op: &mut Operator, swarm: &str) -> BTreeMap<String, v1::Task> {
    let req = v1::ListTasksRequest { swarm_id: swarm.to_string(), page_size: 10_000, ..Default::default() };
    match op.list_tasks(req).await {
        Ok(resp) => resp.into_inner().tasks.into_iter().map(|t| (t.id.clone(), t)).collect(),
        Err(_) => BTreeMap::new(),
    }
}

pub fn state_of(t: &v1::Task) -> v1::TaskState {
    v1::TaskState::try_from(t.state).unwrap_or(v1::TaskState::Unspecified)
}

/// Whether process `pid` is alive (or a zombie not yet reaped).
pub fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

/// A file-based gate between a test and its worker scripts: workers wait
/// (bounded) for `open()`. Opened on drop, so no worker outlives a test
/// (its tiny directory is kept so a late worker still finds the gate).
pub struct Gate {
    pub path: PathBuf,
}

impl Gate {
    pub fn new() -> Gate {
        let dir = tempfile::Builder::new().prefix("swarm-gate-").tempdir().unwrap().keep();
        Gate { path: dir.join("gate") }
    }

    /// Shell code that waits up to 60 s for the gate.
    pub fn wait_sh(&self) -> String {
        format!(
            "i=0; while [ ! -e '{}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
            self.path.display()
        )
    }

    pub fn open(&self) {
        std::fs::write(&self.path, "open").unwrap();
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, "open");
    }
}

/// Waits until `task` of `swarm` is in `state`; returns the task. Reconnects
/// on every poll, so it survives a controller restart.
pub async fn wait_task_state(url: &str, swarm: &str, task: &str, state: v1::TaskState) -> v1::Task {
    use v1::TaskState::{Cancelled, Failed, Merged};
    let found = try_poll(WAIT, || async {
        let mut op = try_operator(url).await?;
        let all = tasks(&mut op, swarm).await;
        let t = all.get(task)?;
        let now = state_of(t);
        // A terminal state other than the one awaited will not change by itself.
        if now == state || matches!(now, Merged | Failed | Cancelled) { Some(t.clone()) } else { None }
    })
    .await
    .filter(|t| state_of(t) == state);
    match found {
        Some(t) => t,
        None => panic!(
            "{swarm}/{task} did not become {} (waited at most {WAIT:?}):\n{}",
            state.as_str_name(),
            task_report(url, &format!("{swarm}/{task}")).await
        ),
    }
}

/// Waits until every task of `swarm` is MERGED (failing fast on FAILED).
pub async fn wait_all_merged(url: &str, swarm: &str) -> BTreeMap<String, v1::Task> {
    poll(&format!("every task of {swarm} to be MERGED"), WAIT, || async {
        let mut op = try_operator(url).await?;
        let all = tasks(&mut op, swarm).await;
        for t in all.values() {
            assert!(
                !matches!(state_of(t), v1::TaskState::Failed | v1::TaskState::Cancelled),
                "task {} ended {:?}: {}",
                t.id,
                state_of(t),
                t.reason
            );
        }
        (!all.is_empty() && all.values().all(|t| state_of(t) == v1::TaskState::Merged)).then_some(all)
    })
    .await
}

pub async fn try_operator(url: &str) -> Option<Operator> {
    let channel = Endpoint::from_shared(url.to_string()).ok()?.connect().await.ok()?;
    Some(OperatorServiceClient::new(channel))
}

/// Submits a plan through the API.
pub async fn create_swarm(url: &str, plan: &str) -> v1::Swarm {
    let mut op = operator(url).await;
    let resp = op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan.to_string(), origin: None }).await;
    resp.expect("CreateSwarm").into_inner().swarm.expect("swarm")
}

/// Every event of a swarm stored so far (Watch replay, cut at the first
/// quiet moment after `min` events).
pub async fn events(url: &str, swarm: &str, after: u64, min: usize) -> Vec<v1::Event> {
    use tokio_stream::StreamExt as _;
    let mut op = operator(url).await;
    let req = v1::WatchRequest { after_event_id: after, swarm_id: swarm.to_string(), ..Default::default() };
    let mut stream = op.watch(req).await.expect("Watch").into_inner();
    let mut out = Vec::new();
    loop {
        let wait = if out.len() >= min { Duration::from_millis(300) } else { WAIT };
        match tokio::time::timeout(wait, stream.next()).await {
            Ok(Some(Ok(e))) => out.push(e),
            Ok(Some(Err(status))) => panic!("Watch failed: {status}"),
            Ok(None) | Err(_) => return out,
        }
    }
}

/// Controller timings short enough for tests that lose sidecars.
pub const FAST_LEASES: &[&str] =
    &["--heartbeat-interval-ms=200", "--lease-ttl-ms=1500", "--lost-grace-ms=100", "--cancel-grace-ms=500"];

/// A controller and `n` sidecars (`w1`..`wn`) on one repository.
pub struct Cluster {
    pub controller: ControllerProc,
    pub sidecars: Vec<Proc>,
}

impl Cluster {
    pub fn start(repo: &TempRepo, sidecars: usize, controller_args: &[&str]) -> Cluster {
        Cluster::start_env(repo, sidecars, controller_args, &[])
    }

    /// [`Cluster::start`] with extra environment for the sidecars (e.g. a
    /// private `HOME` for the agents they run).
    pub fn start_env(
        repo: &TempRepo,
        sidecars: usize,
        controller_args: &[&str],
        sidecar_env: &[(&str, &str)],
    ) -> Cluster {
        let controller = spawn_controller(repo.path(), controller_args);
        let url = controller.url();
        let sidecars = (1..=sidecars)
            .map(|n| spawn_sidecar_env(&url, repo.path(), &format!("w{n}"), &[], sidecar_env))
            .collect();
        Cluster { controller, sidecars }
    }

    pub fn url(&self) -> String {
        self.controller.url()
    }
}

/// The number of first-parent merges on `branch` made for `swarm/task`
/// (merge subjects name the attempt: `(swarm/task#N)`).
pub fn merges_of(repo: &TempRepo, branch: &str, swarm: &str, task: &str) -> usize {
    let tag = format!("({swarm}/{task}#");
    repo.subjects(branch).iter().filter(|s| s.contains(&tag)).count()
}

/// A task's attempts, through GetTask.
pub async fn attempts(url: &str, task_id: &str) -> Vec<v1::Attempt> {
    let mut op = operator(url).await;
    let req = v1::GetTaskRequest { task_id: task_id.to_string() };
    op.get_task(req).await.expect("GetTask").into_inner().attempts
}

pub fn outcome_of(a: &v1::Attempt) -> v1::Outcome {
    v1::Outcome::try_from(a.outcome).unwrap_or(v1::Outcome::Unspecified)
}

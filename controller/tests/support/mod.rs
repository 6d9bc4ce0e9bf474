//! A real controller on 127.0.0.1:0 over a temp git repository (the shared
//! [`TempRepo`]), and a tonic client that plays a sidecar.

#![allow(dead_code)]

use std::time::Duration;

use swarm_controller::{Config, Controller};
use swarm_proto::v1;
use swarm_proto::v1::operator_service_client::OperatorServiceClient;
use swarm_proto::v1::sidecar_service_client::SidecarServiceClient;
pub use swarm_tests::{TempRepo, try_poll};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

pub const WAIT: Duration = Duration::from_secs(10);

pub struct Harness {
    /// Scratch space beside the repository (extra worktrees and the like).
    pub dir: tempfile::TempDir,
    repo: TempRepo,
    pub controller: Option<Controller>,
    pub channel: Channel,
    pub config: Config,
}

impl Harness {
    pub async fn start() -> Harness {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = TempRepo::with_files(&[("README", "base\n")]);
        let mut config = Config::local(repo.path().to_path_buf());
        config.heartbeat_interval = Duration::from_millis(200);
        config.lease_ttl = Duration::from_millis(2_000);
        config.lost_grace = Duration::from_millis(0);
        config.cancel_grace = Duration::from_millis(100);
        tweak(&mut config);
        let controller = swarm_controller::start(config.clone()).await.expect("controller starts");
        let channel = channel(controller.local_addr()).await;
        Harness { dir, repo, controller: Some(controller), channel, config }
    }

    pub fn repo(&self) -> &TempRepo {
        &self.repo
    }

    pub fn operator(&self) -> OperatorServiceClient<Channel> {
        OperatorServiceClient::new(self.channel.clone())
    }

    pub async fn create(&self, plan: &str) -> v1::Swarm {
        self.operator()
            .create_swarm(v1::CreateSwarmRequest { plan_toml: plan.into(), origin: None })
            .await
            .expect("create swarm")
            .into_inner()
            .swarm
            .expect("swarm")
    }

    pub async fn task(&self, full: &str) -> v1::TaskDetail {
        self.operator()
            .get_task(v1::GetTaskRequest { task_id: full.into() })
            .await
            .expect("get task")
            .into_inner()
    }

    pub async fn state(&self, full: &str) -> v1::TaskState {
        let t = self.task(full).await.task.expect("task");
        v1::TaskState::try_from(t.state).expect("state")
    }

    /// Polls until the task reaches `state` or the deadline passes.
    pub async fn wait_state(&self, full: &str, state: v1::TaskState) -> v1::TaskDetail {
        let reached = try_poll(WAIT, || async {
            let d = self.task(full).await;
            (d.task.as_ref().expect("task").state == state as i32).then_some(d)
        })
        .await;
        match reached {
            Some(d) => d,
            None => {
                let t = self.task(full).await.task.expect("task");
                panic!(
                    "{full} never reached {state:?}; it is {:?} ({})",
                    v1::TaskState::try_from(t.state),
                    t.reason
                )
            }
        }
    }

    pub async fn events(&self) -> Vec<v1::Event> {
        let mut stream = self
            .operator()
            .watch(v1::WatchRequest { after_event_id: 0, swarm_id: String::new(), ..Default::default() })
            .await
            .expect("watch")
            .into_inner();
        let mut out = Vec::new();
        // Replay ends where live begins; a short quiet period marks it.
        while let Ok(Some(Ok(e))) =
            tokio::time::timeout(Duration::from_millis(300), futures::StreamExt::next(&mut stream)).await
        {
            out.push(e);
        }
        out
    }

    pub async fn sidecar(&self, worker: &str) -> Sim {
        Sim::connect(self.channel.clone(), worker, None, 0, "").await
    }

    pub async fn restart(&mut self) {
        if let Some(c) = self.controller.take() {
            c.shutdown().await.expect("shutdown");
        }
        let mut config = self.config.clone();
        let addr = self.channel_addr();
        config.listen = addr;
        let controller = swarm_controller::start(config).await.expect("restart");
        self.channel = channel(controller.local_addr()).await;
        self.controller = Some(controller);
    }

    fn channel_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], 0))
    }
}

pub async fn channel(addr: std::net::SocketAddr) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect")
}

/// A sidecar played by the test.
pub struct Sim {
    pub worker: String,
    pub tx: mpsc::Sender<v1::SidecarMessage>,
    pub rx: tonic::Streaming<v1::ControllerMessage>,
    pub seq: u64,
    pub welcome: v1::Welcome,
    /// Messages read while waiting for an ack, handed out by `next` first.
    pub pending: std::collections::VecDeque<v1::controller_message::Body>,
    heartbeats: tokio::task::JoinHandle<()>,
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.heartbeats.abort();
    }
}

pub fn attempt_ref(a: &v1::Assign) -> v1::AttemptRef {
    a.attempt.clone().expect("attempt ref")
}

impl Sim {
    pub async fn connect(
        channel: Channel,
        worker: &str,
        in_hand: Option<v1::AttemptRef>,
        last_acked: u64,
        secret: &str,
    ) -> Sim {
        match Sim::try_connect(channel, worker, in_hand, last_acked, secret).await {
            Ok(sim) => sim,
            Err(status) => panic!("{worker} refused: {status:?}"),
        }
    }

    /// Says Hello; the status is how the controller refused it.
    pub async fn try_connect(
        channel: Channel,
        worker: &str,
        in_hand: Option<v1::AttemptRef>,
        last_acked: u64,
        secret: &str,
    ) -> Result<Sim, tonic::Status> {
        let (tx, rx) = mpsc::channel(64);
        tx.send(v1::SidecarMessage {
            seq: 0,
            body: Some(v1::sidecar_message::Body::Hello(v1::Hello {
                worker_id: worker.into(),
                labels: Default::default(),
                host: "test".into(),
                capacity: 1,
                last_acked_seq: last_acked,
                attempt_in_hand: in_hand,
                shares_repository: true,
                version: "test".into(),
                resume_secret: secret.into(),
                // As a sidecar from before the field: revision 1.
                protocol: 0,
            })),
        })
        .await
        .expect("hello");
        let mut rx = SidecarServiceClient::new(channel)
            .connect(ReceiverStream::new(rx))
            .await
            .expect("connect")
            .into_inner();
        let first =
            tokio::time::timeout(WAIT, rx.message()).await.expect("welcome in time")?.expect("a message");
        let Some(v1::controller_message::Body::Welcome(welcome)) = first.body else {
            panic!("expected welcome, got {first:?}")
        };
        let heartbeat = || v1::SidecarMessage {
            seq: 0,
            body: Some(v1::sidecar_message::Body::Heartbeat(v1::Heartbeat { sent_at_unix_ms: 0 })),
        };
        // The first beat before this returns, as a sidecar sends one at once
        // when it has its Welcome: only then is it given work, and a test
        // that connects two sidecars expects both to be eligible before it
        // goes on (else the first may finish and take the second's task).
        tx.send(heartbeat()).await.expect("first heartbeat");
        let beat = tx.clone();
        let heartbeats = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if beat.send(heartbeat()).await.is_err() {
                    return;
                }
            }
        });
        Ok(Sim {
            worker: worker.into(),
            tx,
            rx,
            seq: welcome.last_applied_seq,
            welcome,
            pending: Default::default(),
            heartbeats,
        })
    }

    /// The resume secret this session was given.
    pub fn secret(&self) -> String {
        self.welcome.resume_secret.clone()
    }

    /// Reads until the controller ends the stream, and returns its status.
    pub async fn closed(&mut self) -> tonic::Status {
        loop {
            match tokio::time::timeout(WAIT, self.rx.message()).await.expect("stream ends in time") {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("stream ended without a status"),
                Err(status) => return status,
            }
        }
    }

    /// Stops heartbeats: the sidecar goes silent (as if hung or cut off).
    pub fn silence(&self) {
        self.heartbeats.abort();
    }

    pub async fn next(&mut self) -> v1::controller_message::Body {
        if let Some(b) = self.pending.pop_front() {
            return b;
        }
        self.read().await
    }

    async fn read(&mut self) -> v1::controller_message::Body {
        let m = tokio::time::timeout(WAIT, self.rx.message())
            .await
            .expect("message in time")
            .expect("stream ok")
            .expect("a message");
        m.body.expect("body")
    }

    /// The next message that is not an Ack.
    pub async fn next_non_ack(&mut self) -> v1::controller_message::Body {
        loop {
            match self.next().await {
                v1::controller_message::Body::Ack(_) => continue,
                other => return other,
            }
        }
    }

    pub async fn assign(&mut self) -> v1::Assign {
        match self.next_non_ack().await {
            v1::controller_message::Body::Assign(a) => a,
            other => panic!("expected assign, got {other:?}"),
        }
    }

    pub async fn send(&mut self, body: v1::sidecar_message::Body) -> u64 {
        self.seq += 1;
        let seq = self.seq;
        self.tx.send(v1::SidecarMessage { seq, body: Some(body) }).await.expect("send");
        seq
    }

    pub async fn send_raw(&mut self, seq: u64, body: v1::sidecar_message::Body) {
        self.tx.send(v1::SidecarMessage { seq, body: Some(body) }).await.expect("send");
    }

    /// Waits for the ack of `seq`, skipping other acks.
    pub async fn acked(&mut self, seq: u64) {
        loop {
            match self.read().await {
                v1::controller_message::Body::Ack(a) if a.seq == seq => return,
                v1::controller_message::Body::Ack(_) => {}
                other => self.pending.push_back(other),
            }
        }
    }

    pub async fn started(&mut self, a: &v1::Assign) {
        let seq = self
            .send(v1::sidecar_message::Body::Started(v1::AttemptStarted {
                attempt: Some(attempt_ref(a)),
                pid: 1,
                restarts: 0,
                sandbox: None,
            }))
            .await;
        self.acked(seq).await;
    }

    pub async fn result(
        &mut self,
        a: &v1::Assign,
        outcome: v1::Outcome,
        exit_code: i32,
        commit: &str,
    ) -> u64 {
        let seq = self
            .send(v1::sidecar_message::Body::Result(v1::AttemptResult {
                attempt: Some(attempt_ref(a)),
                outcome: outcome as i32,
                exit_code,
                commit: commit.into(),
                summary: format!("{outcome:?}"),
                ..Default::default()
            }))
            .await;
        self.acked(seq).await;
        seq
    }
}

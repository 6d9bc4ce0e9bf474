//! The merger: the thread that owns the merge service
//! (`swarm_git::merge::MergeService`, which is `Send` but not `Sync`) and
//! serializes every request to it, so the scheduler's thread and the async
//! runtime never wait on git. It holds no merge logic: it takes requests off
//! its channel, hands them to the service and passes the service's reports
//! to the sink it was given, which is how it reports to the scheduler
//! without depending on it.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use swarm_git::merge::{MergeJob, MergeService, QueueRequest, RecordedRef, Report};
use tokio::sync::oneshot;

use crate::error::{ControllerError, SchedError};

/// Where the merger sends the service's reports; false once nobody listens
/// (the thread then ends).
pub type ReportSink = Box<dyn Fn(Report) -> bool + Send>;

/// What Land did to its target.
#[derive(Debug, Clone)]
pub struct Landed {
    pub target: String,
    pub old: String,
    pub new: String,
}

enum Request {
    Merge(MergeJob),
    Queue(QueueRequest),
    RestoreRefs(Vec<RecordedRef>),
    EnsureBranch { branch: String, from: BranchStart, reply: oneshot::Sender<Result<String, SchedError>> },
    FastForward { target: String, new_head: String, reply: oneshot::Sender<Result<Landed, SchedError>> },
}

/// Where a branch that does not exist yet is created.
enum BranchStart {
    /// At another branch's head.
    Branch(String),
    /// At a commit.
    Commit(String),
}

#[derive(Clone)]
pub struct MergerHandle {
    tx: mpsc::Sender<Request>,
    repo: PathBuf,
}

impl MergerHandle {
    pub fn repo(&self) -> &Path {
        &self.repo
    }

    pub fn submit(&self, job: MergeJob) {
        if self.tx.send(Request::Merge(job)).is_err() {
            tracing::error!("merger thread is gone; merge dropped (it is resubmitted on restart)");
        }
    }

    /// A merge queue's request; its report comes back through the sink.
    pub fn queue(&self, request: QueueRequest) {
        if self.tx.send(Request::Queue(request)).is_err() {
            tracing::error!(
                "merger thread is gone; merge queue request dropped (the queue is rebuilt on restart)"
            );
        }
    }

    /// At start, makes `refs` movable again (stale locks, refs a power loss
    /// put back); see `MergeService::restore_refs`.
    pub fn restore_refs(&self, refs: Vec<RecordedRef>) {
        if !refs.is_empty() && self.tx.send(Request::RestoreRefs(refs)).is_err() {
            tracing::error!("merger thread is gone; integration refs not restored");
        }
    }

    /// Creates `branch` at the head of `from` unless it exists; returns
    /// the branch's head.
    pub async fn ensure_branch(&self, branch: &str, from: &str) -> Result<String, SchedError> {
        let (reply, rx) = oneshot::channel();
        self.call(Request::EnsureBranch {
            branch: branch.into(),
            from: BranchStart::Branch(from.into()),
            reply,
        })?;
        rx.await.map_err(|_| gone())?
    }

    /// Creates `branch` at `commit` unless it exists; returns its head.
    pub async fn ensure_branch_at(&self, branch: &str, commit: &str) -> Result<String, SchedError> {
        let (reply, rx) = oneshot::channel();
        let from = BranchStart::Commit(commit.into());
        self.call(Request::EnsureBranch { branch: branch.into(), from, reply })?;
        rx.await.map_err(|_| gone())?
    }

    /// `ensure_branch` for the scheduler thread, which must not wait: it
    /// polls the returned receiver.
    pub fn ensure_branch_later(
        &self,
        branch: &str,
        from: &str,
    ) -> Result<oneshot::Receiver<Result<String, SchedError>>, SchedError> {
        let (reply, rx) = oneshot::channel();
        self.call(Request::EnsureBranch {
            branch: branch.into(),
            from: BranchStart::Branch(from.into()),
            reply,
        })?;
        Ok(rx)
    }

    /// Moves `target` to `new_head` only as a fast-forward.
    pub async fn fast_forward(&self, target: &str, new_head: &str) -> Result<Landed, SchedError> {
        let (reply, rx) = oneshot::channel();
        self.call(Request::FastForward { target: target.into(), new_head: new_head.into(), reply })?;
        rx.await.map_err(|_| gone())?
    }

    fn call(&self, r: Request) -> Result<(), SchedError> {
        self.tx.send(r).map_err(|_| gone())
    }
}

fn gone() -> SchedError {
    SchedError::Unavailable("merger stopped".into())
}

/// Starts the merger thread. The service's reports go to `reports`; the
/// thread ends when every handle is dropped or `reports` returns false.
pub fn spawn(repo: &Path, reports: ReportSink) -> Result<(MergerHandle, JoinHandle<()>), ControllerError> {
    let (tx, rx) = mpsc::channel();
    // The thread opens the repository itself and reports whether it could,
    // so that nothing of gix's has to cross threads.
    let (opened_tx, opened_rx) = mpsc::sync_channel(1);
    let path = repo.to_path_buf();
    let handle = std::thread::Builder::new()
        .name("merger".into())
        .spawn(move || match MergeService::open(&path) {
            Ok(service) => {
                let _ = opened_tx.send(Ok(()));
                serve(service.with_trace_parent(swarm_telemetry::join_swarm_trace), rx, reports);
            }
            Err(e) => {
                let _ = opened_tx.send(Err(e.to_string()));
            }
        })
        .map_err(|e| ControllerError::Thread(e.to_string()))?;
    let opened = opened_rx.recv().map_err(|_| ControllerError::Thread("merger thread died".into()))?;
    opened.map_err(|reason| ControllerError::Repository { path: repo.display().to_string(), reason })?;
    Ok((MergerHandle { tx, repo: repo.to_path_buf() }, handle))
}

/// The most requests taken off the queue at once; merges among them for the
/// same integration branch land together.
const MAX_DRAIN: usize = 256;

fn serve(service: MergeService, rx: mpsc::Receiver<Request>, reports: ReportSink) {
    let mut queue: Vec<Request> = Vec::new();
    while let Ok(first) = rx.recv() {
        queue.push(first);
        // Whatever queued up behind it (a backlog of merges while the last
        // one landed) is handled in this round, in order.
        while queue.len() < MAX_DRAIN {
            match rx.try_recv() {
                Ok(r) => queue.push(r),
                Err(_) => break,
            }
        }
        let mut requests = std::mem::take(&mut queue).into_iter().peekable();
        while let Some(request) = requests.next() {
            let keep_going = match request {
                Request::Merge(job) => {
                    // A run of consecutive merges is one backlog; other
                    // requests keep their place.
                    let mut jobs = vec![job];
                    while let Some(Request::Merge(_)) = requests.peek() {
                        if let Some(Request::Merge(job)) = requests.next() {
                            jobs.push(job);
                        }
                    }
                    service.merge(jobs, &reports)
                }
                Request::Queue(r) => reports(Report::Queue(service.queue(r))),
                Request::RestoreRefs(refs) => service.restore_refs(&refs, &reports),
                Request::EnsureBranch { branch, from, reply } => {
                    let r = match &from {
                        BranchStart::Branch(from) => service.ensure_branch(&branch, from),
                        BranchStart::Commit(at) => service.ensure_branch_at(&branch, at),
                    };
                    let r = r.map_err(|e| SchedError::FailedPrecondition(e.to_string()));
                    let _ = reply.send(r);
                    true
                }
                Request::FastForward { target, new_head, reply } => {
                    let r = service
                        .fast_forward(&target, &new_head)
                        .map(|ff| Landed { target: target.clone(), old: ff.old, new: ff.new })
                        .map_err(|e| SchedError::FailedPrecondition(e.to_string()));
                    let _ = reply.send(r);
                    true
                }
            };
            if !keep_going {
                return; // the scheduler stopped
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use swarm_core::TaskKey;
    use swarm_core::plan::{MergeStrategy, OwnershipPolicy};
    use swarm_git::merge::{MergeResult, Verdict};
    use swarm_tests::TempRepo;

    use super::*;

    const BRANCH: &str = "swarm/s/integration";

    fn job(repo: &TempRepo, base: &str, name: &str) -> MergeJob {
        let path = format!("{name}.txt");
        let commit = repo.commit(Some(base), &[(path.as_str(), "x\n")], name);
        MergeJob {
            task: TaskKey::parse(&format!("s/{name}")).expect("key"),
            attempt: 1,
            attempt_label: format!("s/{name}#1"),
            integration_branch: BRANCH.into(),
            task_commit: commit,
            base_commit: base.into(),
            strategy: MergeStrategy::Merge,
            ownership: OwnershipPolicy::Enforce,
            owned_globs: vec!["**".into()],
            title: name.into(),
            summary: String::new(),
            recovering: false,
        }
    }

    #[test]
    fn merges_queued_behind_each_other_land_as_one_backlog_in_order() {
        let repo = TempRepo::with_files(&[]);
        let base = repo.head("main");
        repo.set_branch(BRANCH, &base);
        let jobs: Vec<MergeJob> = (0..5).map(|i| job(&repo, &base, &format!("t{i}"))).collect();
        let (tx, rx) = mpsc::channel();
        for j in &jobs {
            tx.send(Request::Merge(j.clone())).expect("send");
        }
        drop(tx);
        let out: Arc<Mutex<Vec<MergeResult>>> = Arc::default();
        let sink = out.clone();
        let before = repo.git2().reflog(&format!("refs/heads/{BRANCH}")).expect("reflog").len();
        serve(
            MergeService::open(repo.path()).expect("open"),
            rx,
            Box::new(move |r| {
                if let Report::Merged(m) = r {
                    sink.lock().expect("lock").push(m);
                }
                true
            }),
        );
        let results = std::mem::take(&mut *out.lock().expect("lock"));
        let tasks: Vec<&TaskKey> = results.iter().map(|r| &r.task).collect();
        assert_eq!(tasks, jobs.iter().map(|j| &j.task).collect::<Vec<_>>());
        assert!(results.iter().all(|r| matches!(r.verdict, Verdict::Merged { .. })), "{results:?}");
        let after = repo.git2().reflog(&format!("refs/heads/{BRANCH}")).expect("reflog").len();
        assert_eq!(after, before + 1, "one compare-and-swap for the backlog");
    }
}

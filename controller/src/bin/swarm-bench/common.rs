//! What the benchmarks share: processes, repositories, /proc, percentiles.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tonic::transport::Channel;

pub fn git(repo: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(repo)
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@example.com")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@example.com")
        .output()?;
    if !out.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A repository under `root/name` with `files` small files (in directories
/// of 100) besides a README, all in one commit on `main`.
pub fn temp_repo(root: &Path, name: &str, files: usize) -> anyhow::Result<PathBuf> {
    let repo = root.join(name);
    std::fs::create_dir_all(&repo)?;
    git(&repo, &["init", "-q", "-b", "main"])?;
    std::fs::write(repo.join("README"), "bench\n")?;
    for i in 0..files {
        let dir = repo.join("src").join(format!("d{}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        std::fs::write(dir.join(format!("f{i}.txt")), format!("file {i}\n"))?;
    }
    git(&repo, &["add", "-A"])?;
    git(&repo, &["commit", "-q", "-m", "base"])?;
    Ok(repo)
}

/// A binary next to this one (the workspace's release or debug dir).
pub fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?.with_file_name(name);
    if !exe.exists() {
        bail!(
            "{} not found: build it first (cargo build --release -p swarm-controller -p swarm-sidecar -p swarmctl)",
            exe.display()
        );
    }
    Ok(exe)
}

/// A child process killed (and reaped) when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            // SIGTERM first: a sidecar stops its worker and exits.
            let _ =
                Command::new("kill").args(["-TERM", &self.0.id().to_string()]).stderr(Stdio::null()).status();
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.0.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub struct ControllerProcess {
    pub proc: Proc,
    pub addr: String,
}

impl ControllerProcess {
    pub fn pid(&self) -> u32 {
        self.proc.0.id()
    }
}

/// Starts `swarm-controller` on an ephemeral loopback port; its stderr goes
/// to `log` when given.
pub fn start_controller(
    repo: &Path,
    extra: &[&str],
    log: Option<&Path>,
) -> anyhow::Result<ControllerProcess> {
    start_controller_env(repo, extra, log, &[])
}

/// As [`start_controller`], with `env` set for the controller.
pub fn start_controller_env(
    repo: &Path,
    extra: &[&str],
    log: Option<&Path>,
    env: &[(&str, &str)],
) -> anyhow::Result<ControllerProcess> {
    let exe = sibling("swarm-controller")?;
    let stderr = match log {
        Some(p) => Stdio::from(std::fs::File::create(p)?),
        None => Stdio::null(),
    };
    let mut child = Command::new(exe)
        .args(["--listen", "127.0.0.1:0", "--repo"])
        .arg(repo)
        .args(extra)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let proc = Proc(child);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)?;
    let addr = line.trim().strip_prefix("listening on ").context("no listening line")?.to_string();
    Ok(ControllerProcess { proc, addr })
}

/// Starts a real `swarm-sidecar` as `worker` on `repo` with `labels`
/// (`key=value`), its output in `log`.
pub fn start_sidecar(
    exe: &Path,
    controller: &str,
    worker: &str,
    repo: &Path,
    labels: &[String],
    log: &Path,
) -> anyhow::Result<Proc> {
    let log = std::fs::File::create(log)?;
    let child = Command::new(exe)
        .args(["--controller", &format!("http://{controller}"), "--worker-id", worker])
        .args(labels.iter().flat_map(|l| ["--label", l.as_str()]))
        .arg("--repo")
        .arg(repo)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting swarm-sidecar")?;
    Ok(Proc(child))
}

/// A simulated sidecar's heartbeat: after its Welcome the controller gives
/// work only to a sidecar it has heard from.
pub fn heartbeat() -> swarm_proto::v1::SidecarMessage {
    use swarm_proto::v1;
    v1::SidecarMessage {
        seq: 0,
        body: Some(v1::sidecar_message::Body::Heartbeat(v1::Heartbeat { sent_at_unix_ms: 0 })),
    }
}

/// A simulated sidecar's no-op success for `a`: the base commit as its
/// result, with sequence number `seq`.
pub fn success(seq: u64, a: swarm_proto::v1::Assign) -> swarm_proto::v1::SidecarMessage {
    use swarm_proto::v1;
    let result = v1::AttemptResult {
        attempt: a.attempt,
        outcome: v1::Outcome::Success as i32,
        commit: a.base_commit,
        ..Default::default()
    };
    v1::SidecarMessage { seq, body: Some(v1::sidecar_message::Body::Result(result)) }
}

/// CPU and memory of a process, from /proc.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// User + system CPU seconds.
    pub cpu_s: f64,
    pub rss: u64,
    /// Peak RSS.
    pub hwm: u64,
}

pub fn usage(pid: u32) -> anyhow::Result<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').context("stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = |key: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok(Usage { cpu_s: ticks / 100.0, rss: kb("VmRSS:") * 1024, hwm: kb("VmHWM:") * 1024 })
}

pub async fn channels(addr: &str, n: usize) -> anyhow::Result<Vec<Channel>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?.connect().await?);
    }
    Ok(out)
}

/// Nearest-rank percentiles of a sample, in its unit.
pub struct Dist {
    sorted: Vec<f64>,
}

impl Dist {
    pub fn new(mut v: Vec<f64>) -> Dist {
        v.sort_by(|a, b| a.total_cmp(b));
        Dist { sorted: v }
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn pct(&self, p: f64) -> f64 {
        if self.sorted.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * self.sorted.len() as f64).ceil() as usize;
        self.sorted[rank.clamp(1, self.sorted.len()) - 1]
    }

    pub fn max(&self) -> f64 {
        self.sorted.last().copied().unwrap_or(f64::NAN)
    }

    /// `p50 1.2 / p90 3.4 / p99 5.6 / max 7.8 ms (n=100)`.
    pub fn line(&self) -> String {
        format!(
            "p50 {:7.1} / p90 {:7.1} / p99 {:7.1} / max {:7.1} ms (n={})",
            self.pct(50.0),
            self.pct(90.0),
            self.pct(99.0),
            self.max(),
            self.len()
        )
    }
}

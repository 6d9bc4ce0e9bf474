//! Docker for the deployment tests: whether an engine answers, and the
//! project's images, built by the scripts in `deploy/docker/` once per test
//! process. The base image is cached by the engine (the script skips
//! debootstrap when it exists) and the layers above it by the build cache,
//! so a repeated run only copies the binaries in.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::{binary, is_root, wait_output};

/// The swarm image the tests build from the binaries under test.
pub const TEST_IMAGE: &str = "swarm:test";
/// The PostgreSQL image of the compose swarm.
pub const POSTGRES_IMAGE: &str = "swarm-postgres:15";
const BASE_IMAGE: &str = "swarm-base:bookworm";
/// A first build runs debootstrap and apt-get: minutes on 2 cores.
const BUILD_LIMIT: Duration = Duration::from_secs(900);

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Why Docker cannot be used here, or None when an engine answers.
pub fn docker_unavailable() -> Option<String> {
    let out = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let out = match out {
        Ok(child) => wait_output(child, Duration::from_secs(30)),
        Err(e) => return Some(format!("no docker command: {e}")),
    };
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Some(format!("no Docker Engine answers: {}", err.trim()));
    }
    let base_exists = docker(&["image", "inspect", BASE_IMAGE], Duration::from_secs(30)).status.success();
    if !base_exists && !is_root() {
        return Some(format!("no {BASE_IMAGE} image, and building it (debootstrap) needs root"));
    }
    None
}

/// `docker ARGS`, bounded by `limit`.
pub fn docker(args: &[&str], limit: Duration) -> Output {
    let child = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting docker");
    wait_output(child, limit)
}

fn run_script(script: &str, args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    // One build at a time across test processes: they share the base
    // image's debootstrap directory and the image tags.
    let lock = repo_root().join("target/docker-build.lock");
    let _lock = crate::install_lock(&lock, BUILD_LIMIT)?;
    let child = Command::new(repo_root().join("deploy/docker").join(script))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{script}: {e}"))?;
    let out = wait_output(child, BUILD_LIMIT);
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{script} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// [`TEST_IMAGE`], built from the workspace binaries next to the test
/// executable (the same build the other tests run, debug info stripped):
/// building release binaries only for it would double CI's build time.
pub fn swarm_image() -> Result<&'static str, String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = binary("swarm-controller").parent().map(PathBuf::from).unwrap_or_default();
            let dir = dir.to_str().ok_or("target directory is not UTF-8")?.to_string();
            run_script("build-image.sh", &["--bin-dir", &dir], &[("SWARM_IMAGE", TEST_IMAGE)])
        })
        .clone()
        .map(|()| TEST_IMAGE)
}

/// [`POSTGRES_IMAGE`], built once per engine (cached by the build cache).
pub fn postgres_image() -> Result<&'static str, String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| run_script("build-postgres.sh", &[], &[("SWARM_POSTGRES_IMAGE", POSTGRES_IMAGE)]))
        .clone()
        .map(|()| POSTGRES_IMAGE)
}

//! The Kubernetes manifests in deploy/kubernetes/: each overlay renders
//! with kustomize, every object validates against the schemas of a pinned
//! Kubernetes version, and the names that must point at each other do
//! (deploy/kubernetes/validate.py). Needs `kubectl` (or `kustomize`) and
//! Python with pip (the validator goes into a venv under target/); prints
//! why it skipped otherwise (see `swarm_tests::skip_for`).
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use swarm_tests::docker::repo_root;
use swarm_tests::{Needs, skip_for, wait_output};

/// The validator's version, pinned so a new release cannot change verdicts.
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";
const OVERLAYS: &[&str] = &["sqlite", "postgres-ha"];

fn run(cmd: &mut Command, limit: Duration) -> std::io::Result<Output> {
    let child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    Ok(wait_output(child, limit))
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `kubectl kustomize DIR` or `kustomize build DIR`, whichever is here.
fn render(dir: &Path) -> Result<String, String> {
    let tries: [(&str, &[&str]); 2] = [("kubectl", &["kustomize"]), ("kustomize", &["build"])];
    for (bin, args) in tries {
        match run(Command::new(bin).args(args).arg(dir), Duration::from_secs(120)) {
            Ok(out) if out.status.success() => return Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
            Ok(out) => panic!("{bin} {args:?} {}: {}", dir.display(), text(&out)),
            Err(_) => continue,
        }
    }
    Err("neither kubectl nor kustomize is installed".into())
}

/// The venv's python with kubernetes-validate, made once under target/.
fn validator() -> Result<PathBuf, String> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    VENV.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        // target/<profile>/deps/<test> → target/
        let target = exe.ancestors().nth(3).unwrap().to_path_buf();
        let venv = target.join("kubernetes-validate-venv");
        let python = venv.join("bin/python");
        let marker = venv.join(KUBERNETES_VALIDATE);
        if marker.exists() {
            return Ok(python);
        }
        let _lock =
            swarm_tests::install_lock(&target.join("kubernetes-validate.lock"), Duration::from_secs(900))?;
        if marker.exists() {
            return Ok(python);
        }
        // Holding the lock, an unmarked venv is a killed install's leftover.
        let _ = std::fs::remove_dir_all(&venv);
        let made = run(Command::new("python3").args(["-m", "venv"]).arg(&venv), Duration::from_secs(120))
            .map_err(|e| format!("no python3: {e}"))?;
        if !made.status.success() {
            return Err(format!("python3 -m venv failed: {}", text(&made)));
        }
        let pip = run(
            Command::new(&python).args(["-m", "pip", "install", "--quiet", KUBERNETES_VALIDATE]),
            Duration::from_secs(600),
        )
        .map_err(|e| format!("pip: {e}"))?;
        if !pip.status.success() {
            return Err(format!("pip install {KUBERNETES_VALIDATE} failed: {}", text(&pip)));
        }
        std::fs::write(&marker, "").unwrap();
        Ok(python)
    })
    .clone()
}

/// Renders and validates; the validator's output and whether it passed.
fn validate(rendered: &str) -> (bool, String) {
    let python = validator().unwrap();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), rendered).unwrap();
    let script = repo_root().join("deploy/kubernetes/validate.py");
    let out = run(Command::new(python).arg(script).arg(file.path()), Duration::from_secs(120)).unwrap();
    (out.status.success(), text(&out))
}

fn skip_reason() -> Option<(Needs, String)> {
    if let Err(e) = render(&repo_root().join("deploy/kubernetes/overlays/sqlite")) {
        return Some((Needs::Program("kubectl"), e));
    }
    validator().err().map(|e| (Needs::PyPi, e))
}

#[test]
fn every_overlay_renders_to_valid_consistent_objects() {
    if let Some((needs, why)) = skip_reason() {
        return skip_for("every_overlay_renders_to_valid_consistent_objects", needs, &why);
    }
    for overlay in OVERLAYS {
        let rendered = render(&repo_root().join("deploy/kubernetes/overlays").join(overlay)).unwrap();
        let (ok, report) = validate(&rendered);
        assert!(ok, "overlay {overlay}:\n{report}");
        for kind in ["StatefulSet", "Service", "NetworkPolicy", "PodDisruptionBudget", "Secret"] {
            assert!(rendered.contains(&format!("kind: {kind}\n")), "overlay {overlay} has a {kind}");
        }
    }
}

#[test]
fn postgres_ha_runs_two_controllers_on_the_store_secret() {
    if let Some((needs, why)) = skip_reason() {
        return skip_for("postgres_ha_runs_two_controllers_on_the_store_secret", needs, &why);
    }
    let rendered = render(&repo_root().join("deploy/kubernetes/overlays/postgres-ha")).unwrap();
    assert!(rendered.contains("replicas: 2"), "two controllers");
    assert!(rendered.contains("name: SWARM_STORE"), "the store URL from the Secret");
    assert!(
        rendered.contains("swarm-controller-0.swarm-controller-headless"),
        "sidecars know every controller"
    );
    let sqlite = render(&repo_root().join("deploy/kubernetes/overlays/sqlite")).unwrap();
    assert!(!sqlite.contains("SWARM_STORE"), "the sqlite overlay keeps its store in the repository");
}

#[test]
fn validator_catches_a_dangling_secret_and_a_wrong_probe_port() {
    if let Some((needs, why)) = skip_reason() {
        return skip_for("validator_catches_a_dangling_secret_and_a_wrong_probe_port", needs, &why);
    }
    let rendered = render(&repo_root().join("deploy/kubernetes/overlays/sqlite")).unwrap();
    let broken = rendered
        .replace("secretName: swarm-sidecar-tls", "secretName: swarm-sidecar-missing")
        .replace("port: 7422\n            service:", "port: 7423\n            service:");
    assert_ne!(broken, rendered, "the test edits the rendering");
    let (ok, report) = validate(&broken);
    assert!(!ok, "broken references are refused:\n{report}");
    assert!(report.contains("Secret 'swarm-sidecar-missing' does not exist"), "{report}");
    assert!(report.contains("readinessProbe port 7423"), "{report}");
    let (ok, report) = validate(&rendered.replace("kind: PodDisruptionBudget", "kind: PodDisruptionBudge"));
    assert!(!ok, "an unknown kind fails the schema check:\n{report}");
}

//! The swarm image, built for real from the scripts in deploy/docker/ (a
//! debootstrap base imported into Docker, the binaries copied in): each
//! binary and git run inside it, as an unprivileged user. Needs a Docker
//! Engine (and root for the first base build); prints why it skipped
//! otherwise.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::time::Duration;

use swarm_tests::docker::{docker, docker_unavailable, swarm_image};
use swarm_tests::{Needs, skip_for};

fn run_in(image: &str, argv: &[&str]) -> String {
    let mut args = vec!["run", "--rm", "--network", "none", image];
    args.extend_from_slice(argv);
    let out = docker(&args, Duration::from_secs(120));
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "{argv:?} in {image}: {}", String::from_utf8_lossy(&out.stderr));
    text
}

#[test]
fn image_runs_every_binary_and_git_as_a_non_root_user() {
    if let Some(why) = docker_unavailable() {
        return skip_for("image_runs_every_binary_and_git_as_a_non_root_user", Needs::Docker, &why);
    }
    let image = swarm_image().unwrap_or_else(|e| panic!("building the image: {e}"));
    let version = env!("CARGO_PKG_VERSION");
    for bin in ["swarm-controller", "swarm-sidecar", "swarmctl"] {
        assert_eq!(run_in(image, &[bin, "--version"]), format!("{bin} {version}"));
    }
    assert!(run_in(image, &["git", "--version"]).starts_with("git version "));
    let uid = run_in(image, &["id", "-u"]);
    assert_ne!(uid, "0", "the image's user is not root");
    assert_eq!(run_in(image, &["id", "-un"]), "swarm");
    // A sidecar's work needs a writable home and git that trusts clones
    // owned by another uid (a mounted volume).
    let out = run_in(image, &["sh", "-c", "cd && git init -q r && git -C r status --short && echo ok"]);
    assert!(out.ends_with("ok"), "{out}");
}

//! A swarm across machines, simulated with network namespaces: the
//! controller in one, two remote-mode sidecars (each with its own clone) in
//! two others, all over mTLS on private 10.x addresses, and a stranger in a
//! fourth namespace that is refused every RPC. Needs root and `ip`.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use swarm_tests::{
    Killed, Net, PlanBuilder, TempRepo, WAIT, binary, in_ns, netns_unavailable, poll, stderr, task,
    wait_output, worker_script,
};

const CONTROLLER_IP: &str = "10.213.0.1";

fn log_file(dir: &Path, name: &str) -> (std::fs::File, PathBuf) {
    let p = dir.join(format!("{name}.log"));
    (std::fs::File::create(&p).unwrap(), p)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_swarm_across_namespaces_over_mtls_merges_and_a_stranger_is_refused() {
    if let Some(why) = netns_unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let net = match Net::create(&["ctl", "s1", "s2", "x"]) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("skipped: cannot set up network namespaces: {e}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("pki");
    let out = wait_output(
        Command::new(binary("swarmctl"))
            .args(["certs", "init"])
            .arg(&certs)
            .args(["--san", CONTROLLER_IP])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        WAIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let pki = |f: &str| certs.join(f).to_str().unwrap().to_string();

    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[])), ("README.md", "netns\n")]);
    let (log, log_path) = log_file(dir.path(), "controller");
    let mut controller = Killed(
        in_ns(&net.ns("ctl"), &binary("swarm-controller"))
            .args(["--listen", &format!("{CONTROLLER_IP}:7420"), "--repo"])
            .arg(repo.path())
            .args(["--tls-cert", &pki("controller.pem"), "--tls-key", &pki("controller.key")])
            .args(["--client-ca", &pki("ca.pem")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(controller.0.stdout.take().unwrap()).lines();
    let ready = lines.next();
    std::thread::spawn(move || for _ in lines {});
    assert!(
        matches!(&ready, Some(Ok(l)) if l.starts_with("listening on")),
        "controller not ready ({ready:?}):\n{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    let url = format!("https://{CONTROLLER_IP}:7420");

    let mut sidecars = Vec::new();
    for (node, id) in [("s1", "r1"), ("s2", "r2")] {
        let clone = dir.path().join(format!("clone-{id}"));
        let st = Command::new("git").args(["clone", "-q"]).arg(repo.path()).arg(&clone).status().unwrap();
        assert!(st.success(), "git clone for {id}");
        let (log, _) = log_file(dir.path(), id);
        sidecars.push(Killed(
            in_ns(&net.ns(node), &binary("swarm-sidecar"))
                .args(["--controller", &url, "--remote", "--worker-id", id, "--repo"])
                .arg(&clone)
                .args(["--ca", &pki("ca.pem"), "--cert", &pki("sidecar.pem"), "--key", &pki("sidecar.key")])
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap(),
        ));
    }

    // The operator talks from inside the controller's namespace (through
    // swarmctl, so the test process itself stays in the host's network).
    let swarmctl = |ns: &str, auth: &[&str], args: &[&str]| {
        let child = in_ns(ns, &binary("swarmctl"))
            .args(["--controller", &url])
            .args(auth)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_output(child, WAIT)
    };
    let admin = [
        "--ca".to_string(),
        pki("ca.pem"),
        "--cert".to_string(),
        pki("admin.pem"),
        "--key".to_string(),
        pki("admin.key"),
    ];
    let admin: Vec<&str> = admin.iter().map(String::as_str).collect();
    let plan = PlanBuilder::new("net")
        .task(task("a"))
        .task(task("b").deps(&["a"]))
        .task(task("c").deps(&["a"]))
        .task(task("d").deps(&["b", "c"]))
        .build();
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let out = swarmctl(&net.ns("x"), &admin, &["create", plan_path.to_str().unwrap()]);
    assert!(out.status.success(), "create from another machine: {}", stderr(&out));

    poll("every task of net to be MERGED across namespaces", WAIT, || {
        let out = swarmctl(&net.ns("x"), &admin, &["get", "tasks", "--swarm", "net", "-o", "json"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(!text.contains("\"FAILED\""), "a task failed: {text}");
        async move { (text.matches("\"MERGED\"").count() == 4).then_some(()) }
    })
    .await;
    assert_eq!(repo.tree("swarm/net/integration").get("d.txt").map(String::as_str), Some("d\n"));

    // A stranger in the fourth namespace: no certificate, then plain HTTP.
    let ca_only = ["--ca", &pki("ca.pem")];
    for args in [&["get", "swarms"][..], &["get", "workers"], &["land", "net"], &["drain", "r1"]] {
        let out = swarmctl(&net.ns("x"), &ca_only, args);
        assert!(!out.status.success(), "{args:?} without a client certificate succeeded");
    }
    let plain = in_ns(&net.ns("x"), &binary("swarmctl"))
        .args(["--controller", &format!("http://{CONTROLLER_IP}:7420"), "get", "swarms"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(!wait_output(plain, WAIT).status.success(), "plain HTTP got in");
    drop(sidecars);
    drop(controller);
}

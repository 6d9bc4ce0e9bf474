//! A swarm across machines, simulated with network namespaces: the
//! controller in one, two remote-mode sidecars (each with its own clone) in
//! two others, all over mTLS on private 10.x addresses, and a stranger in a
//! fourth namespace that is refused every RPC. Needs root and `ip`.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::process::Stdio;

use swarm_tests::{
    CONTROLLER_IP, Killed, Needs, Net, Pki, PlanBuilder, TempRepo, WAIT, binary, in_ns, netns_unavailable,
    poll, skip_for, spawn_controller_in, spawn_remote_sidecar_in, stderr, swarmctl_in, task, wait_output,
    worker_script,
};

#[tokio::test(flavor = "multi_thread")]
async fn a_swarm_across_namespaces_over_mtls_merges_and_a_stranger_is_refused() {
    if let Some(why) = netns_unavailable() {
        return skip_for(
            "a_swarm_across_namespaces_over_mtls_merges_and_a_stranger_is_refused",
            Needs::Root,
            why,
        );
    }
    let net = match Net::create(&["ctl", "s1", "s2", "x"]) {
        Ok(n) => n,
        Err(e) => {
            return skip_for(
                "a_swarm_across_namespaces_over_mtls_merges_and_a_stranger_is_refused",
                Needs::Root,
                &format!("cannot set up network namespaces: {e}"),
            );
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::init(&dir.path().join("pki"));
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[])), ("README.md", "netns\n")]);
    let (controller, url) = spawn_controller_in(&net.ns("ctl"), repo.path(), &pki, &[], dir.path());
    let sidecars: Vec<Killed> = [("s1", "r1"), ("s2", "r2")]
        .iter()
        .map(|(node, id)| spawn_remote_sidecar_in(&net.ns(node), id, repo.path(), &url, &pki, dir.path()))
        .collect();

    // The operator talks from another namespace (through swarmctl, so the
    // test process itself stays in the host's network).
    let swarmctl = |ns: &str, auth: &[String], args: &[&str]| swarmctl_in(ns, &url, auth, args);
    let admin = pki.client_args("admin");
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
    let ca_only = ["--ca".to_string(), pki.file("ca.pem")];
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

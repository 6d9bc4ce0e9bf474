//! Authentication and authorization at the controller's edge, against the
//! real binaries: bearer tokens with roles, mTLS, and the refusal to serve
//! a non-loopback address without TLS and credentials.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use swarm_proto::client::{AuthChannel, ClientAuth};
use swarm_proto::v1;
use swarm_proto::v1::operator_service_client::OperatorServiceClient;
use swarm_proto::v1::sidecar_service_client::SidecarServiceClient;
use swarm_tests::{
    ControllerProc, PlanBuilder, TempRepo, WAIT, binary, poll, sha256_hex, spawn_controller, spawn_sidecar,
    stderr, swarmctl, task, wait_output, worker_script,
};
use tonic::Code;

type Op = OperatorServiceClient<AuthChannel>;

const SIDE: &str = "side-secret";
const OPER: &str = "oper-secret";
const ADMIN: &str = "admin-secret";

fn tokens_file(dir: &Path) -> std::path::PathBuf {
    let text = format!(
        "[[tokens]]\nname = \"ci\"\nrole = \"sidecar\"\nworkers = \"build-*\"\nsha256 = \"{}\"\n\n\
         [[tokens]]\nname = \"alice\"\nrole = \"operator\"\nsha256 = \"{}\"\n\n\
         [[tokens]]\nname = \"root\"\nrole = \"admin\"\nsha256 = \"{}\"\n",
        sha256_hex(SIDE),
        sha256_hex(OPER),
        sha256_hex(ADMIN)
    );
    let path = dir.join("tokens.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn token(t: &str) -> ClientAuth {
    ClientAuth { token: Some(t.to_string()), ..ClientAuth::default() }
}

async fn channel(url: &str, auth: &ClientAuth) -> Result<AuthChannel, String> {
    let endpoint = auth.endpoint(url).map_err(|e| e.to_string())?.connect_timeout(Duration::from_secs(5));
    let ch = endpoint.connect().await.map_err(|e| format!("connect: {e:?}"))?;
    auth.wrap(ch).map_err(|e| e.to_string())
}

async fn op(url: &str, auth: &ClientAuth) -> Op {
    OperatorServiceClient::new(channel(url, auth).await.unwrap())
}

/// Calls every Operator RPC once; returns each RPC's result code.
async fn every_operator_rpc(c: &mut Op) -> Vec<(&'static str, Code)> {
    fn code<T>(r: Result<tonic::Response<T>, tonic::Status>) -> Code {
        r.map(|_| Code::Ok).unwrap_or_else(|s| s.code())
    }
    vec![
        ("CreateSwarm", code(c.create_swarm(v1::CreateSwarmRequest::default()).await)),
        ("GetSwarm", code(c.get_swarm(v1::GetSwarmRequest::default()).await)),
        ("ListSwarms", code(c.list_swarms(v1::ListSwarmsRequest::default()).await)),
        ("ListTasks", code(c.list_tasks(v1::ListTasksRequest::default()).await)),
        ("GetTask", code(c.get_task(v1::GetTaskRequest::default()).await)),
        ("ListWorkers", code(c.list_workers(v1::ListWorkersRequest::default()).await)),
        ("Watch", code(c.watch(v1::WatchRequest::default()).await)),
        ("CancelTask", code(c.cancel_task(v1::CancelTaskRequest::default()).await)),
        ("CancelSwarm", code(c.cancel_swarm(v1::CancelSwarmRequest::default()).await)),
        ("RetryTask", code(c.retry_task(v1::RetryTaskRequest::default()).await)),
        ("Answer", code(c.answer(v1::AnswerRequest::default()).await)),
        ("DrainWorker", code(c.drain_worker(v1::DrainWorkerRequest::default()).await)),
        ("Land", code(c.land(v1::LandRequest::default()).await)),
    ]
}

/// Opens Connect, says Hello as `worker`, and returns the first reply's
/// outcome: Ok on a Welcome, the status code otherwise.
async fn hello_as(url: &str, auth: &ClientAuth, worker: &str) -> Result<(), Code> {
    let ch = channel(url, auth).await.map_err(|_| Code::Unavailable)?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(v1::SidecarMessage {
        seq: 0,
        body: Some(v1::sidecar_message::Body::Hello(v1::Hello {
            worker_id: worker.into(),
            host: "test".into(),
            capacity: 1,
            shares_repository: true,
            version: "test".into(),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut inbound = SidecarServiceClient::new(ch)
        .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .map_err(|s| s.code())?
        .into_inner();
    let first = tokio::time::timeout(WAIT, inbound.message()).await.expect("a reply to hello");
    drop(tx);
    match first {
        Ok(Some(v1::ControllerMessage { body: Some(v1::controller_message::Body::Welcome(_)) })) => Ok(()),
        Ok(other) => panic!("unexpected first reply {other:?}"),
        Err(s) => Err(s.code()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_grant_exactly_their_role() {
    let repo = TempRepo::with_files(&[("README.md", "auth\n")]);
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens_file(dir.path());
    // A free port for the metrics endpoint (the controller binds it right away).
    let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let controller = spawn_controller(
        repo.path(),
        &["--tokens", tokens.to_str().unwrap(), "--metrics-listen", &metrics_addr],
    );
    let url = controller.url();

    let mut anon = op(&url, &ClientAuth::default()).await;
    for (rpc, code) in every_operator_rpc(&mut anon).await {
        assert_eq!(code, Code::Unauthenticated, "{rpc} without a credential");
    }
    let mut unknown = op(&url, &token("guess")).await;
    for (rpc, code) in every_operator_rpc(&mut unknown).await {
        assert_eq!(code, Code::Unauthenticated, "{rpc} with an unknown token");
    }
    assert_eq!(hello_as(&url, &ClientAuth::default(), "build-1").await, Err(Code::Unauthenticated));

    let mut side = op(&url, &token(SIDE)).await;
    for (rpc, code) in every_operator_rpc(&mut side).await {
        assert_eq!(code, Code::PermissionDenied, "{rpc} with a sidecar token");
    }
    assert_eq!(hello_as(&url, &token(SIDE), "other-1").await, Err(Code::PermissionDenied));
    assert_eq!(hello_as(&url, &token(OPER), "build-1").await, Err(Code::PermissionDenied));
    assert_eq!(hello_as(&url, &token(SIDE), "build-1").await, Ok(()));

    let mut oper = op(&url, &token(OPER)).await;
    for (rpc, code) in every_operator_rpc(&mut oper).await {
        let denied = code == Code::PermissionDenied;
        assert_eq!(denied, rpc == "DrainWorker" || rpc == "Land", "{rpc} with an operator token: {code:?}");
        assert_ne!(code, Code::Unauthenticated, "{rpc}");
    }
    let mut admin = op(&url, &token(ADMIN)).await;
    for (rpc, code) in every_operator_rpc(&mut admin).await {
        assert!(
            !matches!(code, Code::PermissionDenied | Code::Unauthenticated),
            "{rpc} with an admin token: {code:?}"
        );
    }
    // A denial changes nothing: the operator's refused drain left the worker alone.
    let workers = admin.list_workers(v1::ListWorkersRequest::default()).await.unwrap().into_inner().workers;
    assert!(workers.iter().all(|w| !w.draining), "{workers:?}");

    // Denials are counted by code, and logged.
    let body = http_get(&metrics_addr, "/metrics");
    assert!(body.contains("swarm_auth_denied_total{code=\"unauthenticated\"}"), "{body}");
    assert!(body.contains("swarm_auth_denied_total{code=\"permission_denied\"}"), "{body}");
    let log = controller.proc.log();
    assert!(log.contains("request denied"), "denials are logged at warn:\n{log}");
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    s
}

fn certs_init(dir: &Path, extra: &[&str]) {
    let child = Command::new(binary("swarmctl"))
        .args(["certs", "init"])
        .arg(dir)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, WAIT);
    assert!(out.status.success(), "certs init: {}", stderr(&out));
    use std::os::unix::fs::PermissionsExt as _;
    for key in ["ca", "controller", "sidecar", "operator", "admin"] {
        let mode = std::fs::metadata(dir.join(format!("{key}.key"))).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{key}.key mode");
    }
}

fn mtls(dir: &Path, who: &str) -> ClientAuth {
    ClientAuth {
        ca: Some(dir.join("ca.pem")),
        cert: Some(dir.join(format!("{who}.pem"))),
        key: Some(dir.join(format!("{who}.key"))),
        ..ClientAuth::default()
    }
}

async fn list_swarms(url: &str, auth: &ClientAuth) -> Result<(), String> {
    let mut c = OperatorServiceClient::new(channel(url, auth).await?);
    c.list_swarms(v1::ListSwarmsRequest::default()).await.map(|_| ()).map_err(|s| format!("{s:?}"))
}

/// A controller that requires client certificates, with `certs init`'s
/// certificates for it and those of another CA.
fn mtls_controller(repo: &Path, dir: &Path) -> (PathBuf, PathBuf, ControllerProc) {
    let certs = dir.join("certs");
    let other = dir.join("other");
    certs_init(&certs, &[]);
    certs_init(&other, &[]);
    let p = |f: &str| certs.join(f).to_str().unwrap().to_string();
    let controller = spawn_controller(
        repo,
        &["--tls-cert", &p("controller.pem"), "--tls-key", &p("controller.key"), "--client-ca", &p("ca.pem")],
    );
    (certs, other, controller)
}

#[tokio::test(flavor = "multi_thread")]
async fn mtls_certs_from_certs_init_run_a_plan_and_strangers_are_refused() {
    let script = worker_script(&[]);
    let repo = TempRepo::with_files(&[("worker.sh", &script), ("README.md", "mtls\n")]);
    let dir = tempfile::tempdir().unwrap();
    let (certs, other, controller) = mtls_controller(repo.path(), dir.path());
    let p = |f: &str| certs.join(f).to_str().unwrap().to_string();
    let url = format!("https://{}", controller.addr);

    // No client certificate, a certificate from another CA, plain HTTP: refused.
    let no_cert = ClientAuth { ca: Some(certs.join("ca.pem")), ..ClientAuth::default() };
    assert!(list_swarms(&url, &no_cert).await.is_err(), "a client without a certificate got in");
    let stranger = ClientAuth { ca: Some(certs.join("ca.pem")), ..mtls(&other, "admin") };
    assert!(list_swarms(&url, &stranger).await.is_err(), "a certificate of another CA got in");
    assert!(list_swarms(&controller.url(), &ClientAuth::default()).await.is_err(), "plain HTTP got in");

    // The operator certificate reads but may not land; the admin one may.
    assert_eq!(list_swarms(&url, &mtls(&certs, "operator")).await, Ok(()));
    let mut oper = op(&url, &mtls(&certs, "operator")).await;
    let land = oper.land(v1::LandRequest { swarm_id: "nope".into(), ..Default::default() }).await;
    assert_eq!(land.unwrap_err().code(), Code::PermissionDenied);
    let mut admin = op(&url, &mtls(&certs, "admin")).await;
    let land = admin.land(v1::LandRequest { swarm_id: "nope".into(), ..Default::default() }).await;
    assert_eq!(land.unwrap_err().code(), Code::NotFound);
    // The sidecar certificate is not an operator.
    let mut side = op(&url, &mtls(&certs, "sidecar")).await;
    let denied = side.list_swarms(v1::ListSwarmsRequest::default()).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");

    // A real sidecar over mTLS runs a small DAG to MERGED.
    let tls_args = ["--ca", &p("ca.pem"), "--cert", &p("sidecar.pem"), "--key", &p("sidecar.key")];
    let _sidecar = spawn_sidecar(&url, repo.path(), "m1", &tls_args);
    let plan = PlanBuilder::new("mtls").task(task("a")).task(task("b").deps(&["a"])).build();
    admin.create_swarm(v1::CreateSwarmRequest { plan_toml: plan, origin: None }).await.unwrap();
    let merged = poll("every task of mtls to be MERGED over mTLS", WAIT, || {
        let mut admin = admin.clone();
        async move {
            let req = v1::ListTasksRequest { swarm_id: "mtls".into(), ..Default::default() };
            let tasks = admin.list_tasks(req).await.ok()?.into_inner().tasks;
            let states: BTreeMap<String, i32> = tasks.iter().map(|t| (t.id.clone(), t.state)).collect();
            for t in &tasks {
                assert_ne!(t.state, v1::TaskState::Failed as i32, "task {} failed: {}", t.id, t.reason);
            }
            (tasks.len() == 2 && tasks.iter().all(|t| t.state == v1::TaskState::Merged as i32))
                .then_some(states)
        }
    })
    .await;
    assert_eq!(merged.len(), 2);
    assert_eq!(repo.tree("swarm/mtls/integration").get("b.txt").map(String::as_str), Some("b\n"));
}

/// A newcomer's mistakes against a controller that requires client
/// certificates: swarmctl says what the controller wanted and which flag
/// gives it, not just "transport error".
#[test]
fn swarmctl_says_which_credential_an_mtls_controller_wants() {
    let repo = TempRepo::with_files(&[("README.md", "mtls\n")]);
    let dir = tempfile::tempdir().unwrap();
    let (certs, other, controller) = mtls_controller(repo.path(), dir.path());
    let p = |f: &str| certs.join(f).to_str().unwrap().to_string();
    let https = format!("https://{}", controller.addr);
    let fails = |url: &str, args: &[&str]| {
        let mut argv = args.to_vec();
        argv.extend(["get", "workers"]);
        let out = swarmctl(url, &argv);
        assert_eq!(out.status.code(), Some(69), "{args:?}: {}", stderr(&out));
        stderr(&out)
    };

    let no_cert = fails(&https, &["--ca", &p("ca.pem")]);
    assert!(
        no_cert.contains("requires client certificates") && no_cert.contains("--cert and --key"),
        "{no_cert}"
    );
    let token_only = fails(&https, &["--ca", &p("ca.pem"), "--token", "not-a-certificate"]);
    assert!(token_only.contains("--cert and --key"), "{token_only}");
    let wrong_ca = fails(&https, &["--ca", other.join("ca.pem").to_str().unwrap()]);
    assert!(wrong_ca.contains("not signed by the CA given with --ca"), "{wrong_ca}");
    let plain = fails(&controller.url(), &[]);
    assert!(plain.contains("use an https:// URL"), "{plain}");
    let stranger = fails(
        &https,
        &[
            "--ca",
            &p("ca.pem"),
            "--cert",
            other.join("operator.pem").to_str().unwrap(),
            "--key",
            other.join("operator.key").to_str().unwrap(),
        ],
    );
    assert!(stranger.contains("did not accept the client certificate"), "{stranger}");
    for text in [&no_cert, &token_only, &wrong_ca, &plain, &stranger] {
        assert!(!text.trim_end().ends_with("error: transport error"), "{text}");
    }

    let ok = swarmctl(
        &https,
        &["--ca", &p("ca.pem"), "--cert", &p("operator.pem"), "--key", &p("operator.key"), "get", "workers"],
    );
    assert!(ok.status.success(), "{}", stderr(&ok));
}

fn controller_exit(repo: &Path, args: &[&str]) -> (bool, String) {
    let child = Command::new(binary("swarm-controller"))
        .arg("--repo")
        .arg(repo)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, WAIT);
    (out.status.success(), stderr(&out))
}

#[tokio::test(flavor = "multi_thread")]
async fn non_loopback_without_tls_refuses_to_start_unless_insecure() {
    let repo = TempRepo::with_files(&[("README.md", "x\n")]);
    let (ok, err) = controller_exit(repo.path(), &["--listen", "0.0.0.0:0"]);
    assert!(!ok);
    for flag in ["not a loopback address", "--tls-cert", "--tls-key", "--tokens", "--client-ca", "--insecure"]
    {
        assert!(err.contains(flag), "the refusal names {flag}: {err}");
    }
    // Tokens alone (no TLS) are not enough off loopback: they would travel in the clear.
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens_file(dir.path());
    let (ok, err) =
        controller_exit(repo.path(), &["--listen", "0.0.0.0:0", "--tokens", tokens.to_str().unwrap()]);
    assert!(!ok && err.contains("--tls-cert"), "{err}");

    let controller = spawn_controller(repo.path(), &["--listen=0.0.0.0:0", "--insecure"]);
    let port = controller.addr.rsplit(':').next().unwrap().to_string();
    let url = format!("http://127.0.0.1:{port}");
    assert_eq!(list_swarms(&url, &ClientAuth::default()).await, Ok(()));
    assert!(controller.proc.log().contains("--insecure"), "a warning at start:\n{}", controller.proc.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_tokens_file_names_the_field() {
    let repo = TempRepo::with_files(&[("README.md", "x\n")]);
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("tokens.toml");
    let good = format!("[[tokens]]\nname = \"a\"\nrole = \"admin\"\nsha256 = \"{}\"\n", sha256_hex("a"));
    std::fs::write(
        &bad,
        format!("{good}\n[[tokens]]\nname = \"b\"\nrole = \"superuser\"\nsha256 = \"{}\"\n", sha256_hex("b")),
    )
    .unwrap();
    let (ok, err) = controller_exit(repo.path(), &["--tokens", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("tokens[1].role") && err.contains("superuser"), "{err}");
    std::fs::write(&bad, format!("{good}\n[[tokens]]\nname = \"b\"\nrole = \n")).unwrap();
    let (ok, err) = controller_exit(repo.path(), &["--tokens", bad.to_str().unwrap()]);
    assert!(!ok && err.contains("line 8"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn local_run_needs_no_setup_and_leaves_its_admin_token_private() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[])), ("README.md", "local\n")]);
    let runtime = tempfile::tempdir().unwrap();
    let plan_path = repo.path().join(".git").join("plan.toml");
    std::fs::write(&plan_path, PlanBuilder::new("local").task(task("a")).build()).unwrap();
    let child = Command::new(binary("swarmctl"))
        .args(["run", "--plain", "--workers", "1", "--repo"])
        .arg(repo.path())
        .arg(&plan_path)
        // A token meant for some other controller must not leak into the run.
        .env("SWARM_TOKEN", "unrelated")
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env("XDG_STATE_HOME", runtime.path().join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, WAIT);
    assert!(out.status.success(), "swarmctl run: {}", stderr(&out));
    use std::os::unix::fs::PermissionsExt as _;
    // Out of the repository, where workers' sandboxes reach less, in a
    // directory only this user can enter; the run says where.
    assert!(!repo.path().join(".git/swarm/operator.token").exists());
    let runs: Vec<_> =
        std::fs::read_dir(runtime.path().join("swarm")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(std::fs::metadata(&runs[0]).unwrap().permissions().mode() & 0o777, 0o700);
    let token_file = runs[0].join("operator.token");
    assert!(stderr(&out).contains(&token_file.display().to_string()), "{}", stderr(&out));
    let meta = std::fs::metadata(&token_file).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert!(token.starts_with("swarm_") && token.trim().len() == 70, "{token:?}");
}

#[test]
fn a_forge_webhook_listener_off_loopback_without_tls_refuses_to_start_and_changes_nothing() {
    let repo = TempRepo::with_files(&[("README.md", "x\n")]);
    let (ok, err) = controller_exit(repo.path(), &["--forge-webhook-listen", "0.0.0.0:0"]);
    assert!(!ok, "started: {err}");
    for words in ["refusing --forge-webhook-listen", "--tls-cert", "--insecure"] {
        assert!(err.contains(words), "the refusal names {words}: {err}");
    }
    assert!(!err.contains("scheduler thread"), "refused before anything started: {err}");
    assert!(!repo.path().join(".git/swarm/swarm.db").exists(), "no store was made");
}

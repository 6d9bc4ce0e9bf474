//! The forge loop's inbound half, end to end: the real `swarm-controller`
//! receives the scripted GitHub's signed webhook deliveries on
//! `--forge-webhook-listen`, and a failed check reaches the task its log
//! names at once, though the controller would not poll for ten minutes.
//! Whatever else arrives (a bad signature, malformed JSON, a body too
//! large, a redelivery) is refused or dropped, counted, and changes nothing.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use swarm_tests::github::{GitHub, signature_256};
use swarm_tests::{
    PlanBuilder, TempRepo, WAIT, spawn_controller_env, spawn_sidecar, stderr, stdout, swarmctl, task,
    worker_script,
};

const TOKEN: &str = "ghs_swarmtesttoken0123456789";
const TOKEN_VAR: &str = "FORGE_WEBHOOK_TEST_GITHUB_TOKEN";
const SECRET: &str = "whsec-forge-webhook-test-s3cret";
const SECRET_VAR: &str = "FORGE_WEBHOOK_TEST_SECRET";

/// The scripted GitHub with `acme/app`, its `main` pushed from `repo`, and
/// `repo`'s `origin` pointing at it.
fn forge_for(repo: &TempRepo) -> GitHub {
    let gh = GitHub::start();
    gh.add_token(TOKEN, "swarm-bot");
    gh.create_repo("acme", "app", "main");
    gh.add_collaborator("acme", "app", "swarm-bot", "write");
    git(repo.path(), &["remote", "add", "origin", &gh.remote_url("acme", "app")]);
    git(repo.path(), &["push", "-q", &gh.authed_remote_url("acme", "app", TOKEN), "main"]);
    gh
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Polls `check` until it gives a value, failing after `limit` with `what`.
fn until<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn free_addr() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().to_string()
}

/// The sum of a metric's samples whose line starts with `prefix`.
fn metric(addr: &str, prefix: &str) -> f64 {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: swarm\r\n\r\n").unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

fn webhooks(metrics: &str, outcome: &str) -> f64 {
    metric(metrics, &format!("swarm_forge_webhooks_total{{outcome=\"{outcome}\"}}"))
}

/// A response: its status and body.
struct Answer {
    status: u16,
    body: String,
}

/// POSTs `body` to `http://addr/github` with `headers` over a plain TCP
/// connection, by hand: the body may be refused before it is all sent
/// (a write that fails then is not an error), and the answer is read
/// whatever happened to the rest. With `chunked`, no `Content-Length`.
fn post(addr: &str, headers: &[(&str, &str)], body: &[u8], chunked: bool) -> Answer {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    conn.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut head = format!("POST /github HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if chunked {
        head.push_str("Transfer-Encoding: chunked\r\n");
    } else {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    conn.write_all(head.as_bytes()).unwrap();
    let sent = if chunked {
        conn.write_all(format!("{:x}\r\n", body.len()).as_bytes())
            .and_then(|()| conn.write_all(body))
            .and_then(|()| conn.write_all(b"\r\n0\r\n\r\n"))
    } else {
        conn.write_all(body)
    };
    let _ = sent; // a refusal may close the connection under a large body
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if raw.is_empty() => panic!("no answer from {addr}: {e}"),
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Answer { status, body }
}

/// The three GitHub headers of a delivery signed with `secret`.
fn signed(event: &'static str, guid: &'static str, secret: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        ("X-GitHub-Event", event.to_string()),
        ("X-GitHub-Delivery", guid.to_string()),
        ("X-Hub-Signature-256", signature_256(secret, body)),
    ]
}

fn post_signed(addr: &str, headers: &[(&'static str, String)], body: &[u8], chunked: bool) -> Answer {
    let refs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    post(addr, &refs, body, chunked)
}

fn attempts(controller: &str, task: &str) -> u64 {
    let d = stdout(&swarmctl(controller, &["describe", "task", task, "-o", "json"]));
    let v: Value = serde_json::from_str(&d).unwrap();
    v["task"]["attempts"].as_u64().unwrap()
}

/// The delivery `guid`'s latest attempt, once it is over.
fn delivered(gh: &GitHub, guid: &str, redelivery: bool) -> Option<u16> {
    let d = gh.deliveries().into_iter().rev().find(|d| d.guid == guid && d.redelivery == redelivery)?;
    assert!(d.error.is_none() || !d.done, "delivery {guid} failed: {:?}", d.error);
    d.done.then_some(d.status).flatten()
}

#[test]
fn a_signed_check_run_webhook_reopens_the_task_at_once_and_hostile_deliveries_change_nothing() {
    // Task b writes FIXED once its task text carries the check's words.
    let fix =
        "if grep -q 'want FIXED' \"$SWARM_TASK_FILE\"; then echo FIXED > b.txt; else echo b > b.txt; fi";
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("b", fix)]))]);
    let gh = forge_for(&repo);
    let env = [(TOKEN_VAR, TOKEN), (SECRET_VAR, SECRET)];
    let metrics = free_addr();
    let controller = spawn_controller_env(
        repo.path(),
        &[
            "--forge-secret",
            &format!("env:{TOKEN_VAR},env:{SECRET_VAR}"),
            // Polling alone would not see the check within this test.
            "--forge-poll-ms",
            "600000",
            "--forge-webhook-listen",
            "127.0.0.1:0",
            &format!("--metrics-listen={metrics}"),
        ],
        &env,
    );
    let hooks = until(WAIT, "the webhook listener's address is logged", || {
        let log = controller.proc.log();
        let at = log.find("forge webhooks listening on ")?;
        let rest = &log[at + "forge webhooks listening on ".len()..];
        Some(rest.split_whitespace().next()?.to_string())
    });
    let url = controller.url();
    let _w1 = spawn_sidecar(&url, repo.path(), "w1", &[]);
    let _w2 = spawn_sidecar(&url, repo.path(), "w2", &[]);
    let forge = format!(
        "[forge]\nprovider = \"github\"\nremote = \"origin\"\napi_url = \"{}\"\ntoken = {{ env = \"{TOKEN_VAR}\" }}\n\
         webhook_secret = {{ env = \"{SECRET_VAR}\" }}\nci_retries = 1\n",
        gh.api_url()
    );
    let plan =
        PlanBuilder::new("hook").task(task("a")).task(task("b").deps(&["a"])).task(task("c")).tables(&forge);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.toml");
    std::fs::write(&path, plan.build()).unwrap();
    let created = swarmctl(&url, &["create", path.to_str().unwrap()]);
    assert!(created.status.success(), "{}", stderr(&created));

    // The pull request opens, and the sync that opened it has read its
    // checks (none yet) and is recorded: from now on only a webhook makes
    // the controller look again.
    until(WAIT, "the pull request is opened and recorded", || {
        let d = stdout(&swarmctl(&url, &["describe", "swarm", "hook", "-o", "json"]));
        let v: Value = serde_json::from_str(&d).ok()?;
        v["swarm"]["forge"]["pull_number"].as_u64().filter(|n| *n > 0)
    });
    let first = gh.pulls("acme", "app")[0].head_sha.clone();
    gh.add_webhook("acme", "app", &format!("http://{hooks}/github"), SECRET);

    // A ping is answered; it wakes nothing.
    let ping = gh.deliver("ping", json!({"zen": "Keep it logically awesome.", "hook_id": 1}));
    assert_eq!(ping.len(), 1);
    assert_eq!(until(WAIT, "the ping is answered", || delivered(&gh, &ping[0], false)), 200);

    // Hostile deliveries: refused, counted, nothing changed.
    let payload = json!({
        "action": "completed",
        "check_run": {"id": 9, "name": "forged", "head_sha": first, "status": "completed", "conclusion": "failure"},
        "repository": {"full_name": "acme/app"},
        "marker": "FORGED-BODY-MARKER",
    })
    .to_string();
    let forged =
        signed("check_run", "0b3e8c55-0000-4000-8000-00000000f0f0", "not-the-secret", payload.as_bytes());
    let answer = post_signed(&hooks, &forged, payload.as_bytes(), false);
    assert_eq!(answer.status, 401, "a bad signature: {}", answer.body);
    let mut tampered = signed("check_run", "0b3e8c55-0000-4000-8000-00000000f0f1", SECRET, b"{}");
    let answer = post_signed(&hooks, &tampered, payload.as_bytes(), false);
    assert_eq!(answer.status, 401, "a signature of another body: {}", answer.body);
    tampered.retain(|(k, _)| *k != "X-GitHub-Event");
    let answer = post_signed(&hooks, &tampered, payload.as_bytes(), false);
    assert_eq!(answer.status, 400);
    assert!(answer.body.contains("X-GitHub-Event"), "names the header: {}", answer.body);

    let broken = b"{\"action\": \"completed\", \"check_run\": {";
    let headers = signed("check_run", "0b3e8c55-0000-4000-8000-00000000f0f2", SECRET, broken);
    let answer = post_signed(&hooks, &headers, broken, false);
    assert_eq!(answer.status, 400, "malformed JSON, signed: {}", answer.body);

    let huge = vec![b' '; 2 << 20];
    let headers = signed("check_run", "0b3e8c55-0000-4000-8000-00000000f0f3", SECRET, &huge);
    assert_eq!(post_signed(&hooks, &headers, &huge, false).status, 413, "2 MiB, declared");
    let headers = signed("check_run", "0b3e8c55-0000-4000-8000-00000000f0f4", SECRET, &huge);
    assert_eq!(post_signed(&hooks, &headers, &huge, true).status, 413, "2 MiB, chunked");

    assert_eq!(webhooks(&metrics, "bad_signature"), 2.0);
    assert_eq!(webhooks(&metrics, "malformed"), 2.0);
    assert_eq!(webhooks(&metrics, "too_large"), 2.0);
    assert_eq!(webhooks(&metrics, "ignored"), 1.0, "the ping");
    assert_eq!(webhooks(&metrics, "accepted"), 0.0);
    let log = controller.proc.log();
    assert!(log.contains("0b3e8c55-0000-4000-8000-00000000f0f0"), "the refusal names the delivery:\n{log}");
    assert!(!log.contains("FORGED-BODY-MARKER"), "an unverified body was logged:\n{log}");
    for t in ["hook/a", "hook/b", "hook/c"] {
        assert_eq!(attempts(&url, t), 1, "{t} untouched");
    }

    // CI fails; GitHub sends check_run (and check_suite) completed, and the
    // controller reads the check and reopens b well before its next poll.
    let log = format!("running 3 tests\ntest b ... FAILED\n  --> b.txt:1: want FIXED, got b\n{TOKEN}\n");
    gh.add_check_run("acme", "app", &first, "ci", "completed", Some("failure"), Some("1 failed"), Some(log));
    let check_run = until(WAIT, "the check_run delivery is answered", || {
        let d = gh.deliveries().into_iter().find(|d| d.event == "check_run")?;
        d.done.then(|| (d.guid.clone(), d.status))
    });
    assert_eq!(check_run.1, Some(202), "accepted");
    until(WAIT, "the fix is pushed to the same pull request", || {
        gh.pulls("acme", "app").iter().any(|p| p.head_sha != first && p.open).then_some(())
    });
    let pulls = gh.pulls("acme", "app");
    assert_eq!(pulls.len(), 1, "the same pull request: {pulls:?}");
    let bare = gh.repo_path("acme", "app");
    assert_eq!(git(&bare, &["show", &format!("{}:b.txt", pulls[0].head_sha)]), "FIXED");
    let described = stdout(&swarmctl(&url, &["describe", "task", "hook/b", "-o", "json"]));
    assert!(described.contains("task.reopened") && described.contains("CI check `ci` failed"), "{described}");
    assert!(!described.contains(TOKEN), "the token reached the task: {described}");
    assert_eq!(attempts(&url, "hook/b"), 2);
    for t in ["hook/a", "hook/c"] {
        assert_eq!(attempts(&url, t), 1, "{t} was not reopened");
    }
    assert!(webhooks(&metrics, "accepted") >= 1.0);

    // A redelivery of the same GUID is answered 200, not 202: it wakes nothing.
    assert!(gh.redeliver(&check_run.0));
    assert_eq!(until(WAIT, "the redelivery is answered", || delivered(&gh, &check_run.0, true)), 200);
    assert_eq!(webhooks(&metrics, "duplicate"), 1.0);
    assert_eq!(attempts(&url, "hook/b"), 2, "not reopened again");

    // The forge's own calls are counted, and the open pull request is a pending poll.
    assert!(metric(&metrics, "swarm_forge_syncs_total{outcome=\"ok\"}") >= 2.0, "the opening and the fix");
    assert_eq!(metric(&metrics, "swarm_forge_syncs_total{outcome=\"refused\"}"), 0.0);
    assert_eq!(metric(&metrics, "swarm_forge_pending "), 1.0, "the open pull request's next poll");
}

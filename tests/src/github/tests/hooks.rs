//! Webhooks as a receiver sees them.

use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::*;
use crate::{WAIT, poll};

/// A webhook receiver on 127.0.0.1: what it got, headers and body.
async fn receiver() -> (String, Arc<Mutex<Vec<(HeaderMap, String)>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let keep = got.clone();
    let app = axum::Router::new().fallback(move |headers: HeaderMap, body: String| {
        let keep = keep.clone();
        async move {
            keep.lock().unwrap().push((headers, body));
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_signed_and_a_redelivery_keeps_its_guid() {
    let gh = server();
    gh.seed(OWNER, "app", "main", &[("a.txt", "a\n")], "base");
    gh.seed(OWNER, "app", "topic", &[("a.txt", "b\n")], "topic");
    let (url, got) = receiver().await;
    let secret = "It's a Secret to Everybody";
    gh.add_webhook(OWNER, "app", &url, secret);
    let pr =
        send(&gh, "POST", "/repos/octo/app/pulls", json!({"title": "T", "head": "topic", "base": "main"}))
            .await;
    assert_eq!(pr.status, 201);

    let first =
        poll("the pull_request delivery", WAIT, || async { got.lock().unwrap().first().cloned() }).await;
    let (headers, body) = first;
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    assert_eq!(header("x-github-event"), "pull_request");
    assert!(header("user-agent").starts_with("GitHub-Hookshot/"));
    assert_eq!(header("content-type"), "application/json");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let expected = webhooks::hex(ring::hmac::sign(&key, body.as_bytes()).as_ref());
    assert_eq!(header("x-hub-signature-256"), format!("sha256={expected}"));
    assert_eq!(header("x-hub-signature-256"), signature_256(secret, body.as_bytes()));
    let payload: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(payload["action"], "opened");
    assert_eq!(payload["pull_request"]["number"], 1);
    assert_eq!(payload["repository"]["full_name"], "octo/app");
    assert_eq!(payload["sender"]["login"], OWNER);
    let guid = header("x-github-delivery");
    assert_eq!(guid.len(), 36);

    assert!(gh.redeliver(&guid));
    let again = poll("the redelivery", WAIT, || async { got.lock().unwrap().get(1).cloned() }).await;
    assert_eq!(again.0.get("x-github-delivery").unwrap().to_str().unwrap(), guid);
    assert_eq!(again.1, body, "the same body");
    let run = gh.add_check_run(
        OWNER,
        "app",
        pr.json()["head"]["sha"].as_str().unwrap(),
        "ci",
        "completed",
        Some("failure"),
        Some("boom"),
        None,
    );
    let kinds = poll("check_run and check_suite", WAIT, || async {
        let g = got.lock().unwrap();
        let kinds: Vec<String> =
            g.iter().map(|(h, _)| h["x-github-event"].to_str().unwrap().to_string()).collect();
        (kinds.len() >= 5).then_some(kinds)
    })
    .await;
    assert_eq!(kinds[2..], ["check_run", "check_run", "check_suite"]);
    let completed: Value = serde_json::from_str(&got.lock().unwrap()[3].1).unwrap();
    assert_eq!(
        (completed["action"].clone(), completed["check_run"]["id"].clone()),
        (json!("completed"), json!(run))
    );
    assert_eq!(completed["check_run"]["pull_requests"][0]["number"], 1);
    let deliveries = poll("the recorded outcomes", WAIT, || async {
        let d = gh.deliveries();
        d.iter().all(|d| d.done).then_some(d)
    })
    .await;
    assert!(deliveries.iter().all(|d| d.status == Some(200)), "{deliveries:?}");
    assert!(deliveries[1].redelivery && deliveries[1].guid == guid);

    // A push to the head branch over smart HTTP: `synchronize`.
    let work = crate::TempRepo::new();
    let remote = gh.authed_remote_url(OWNER, "app", TOKEN);
    assert_eq!(git(work.path(), &["fetch", "-q", &remote, "topic:topic"]).0, 0);
    work.git(&["checkout", "-q", "topic"]);
    work.commit_worktree("more", &[("c.txt", "c\n")]);
    let (code, _, err) = git(work.path(), &["push", "-q", &remote, "topic"]);
    assert_eq!(code, 0, "{err}");
    let sync = poll("the synchronize delivery", WAIT, || async { got.lock().unwrap().get(5).cloned() }).await;
    let sync: Value = serde_json::from_str(&sync.1).unwrap();
    assert_eq!(sync["action"], "synchronize");
    assert_eq!(sync["after"], json!(work.head("topic")));
    assert_eq!(sync["pull_request"]["head"]["sha"], json!(work.head("topic")));
}

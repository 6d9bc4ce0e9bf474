//! Operator webhooks (`--notify`) against an HTTP receiver on loopback:
//! a worker's question and the swarm's completion arrive signed, a 500 is
//! retried, and a receiver that is down holds no swarm back and is counted.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde_json::Value;
use swarm_proto::v1::TaskState;
use swarm_tests::{
    Cluster, PlanBuilder, TempRepo, WAIT, create_swarm, poll, stderr, swarmctl, task, wait_all_merged,
    wait_task_state, worker_script,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const SECRET: &str = "notify-test-s3cret";

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Delivery {
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
    /// The status the receiver answered it with.
    status: u16,
}

impl Delivery {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A tiny HTTP/1.1 receiver on 127.0.0.1: it answers each request with the
/// next status of `script` (200 once the script is used up) and closes.
struct Receiver {
    addr: String,
    got: Arc<Mutex<Vec<Delivery>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start(script: &[u16]) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let got = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(script.to_vec()));
        let sink = got.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else { return };
                let (sink, script) = (sink.clone(), script.clone());
                tokio::spawn(async move {
                    let Some((headers, body)) = read_request(&mut conn).await else { return };
                    let status = {
                        let mut s = script.lock().unwrap();
                        if s.is_empty() { 200 } else { s.remove(0) }
                    };
                    sink.lock().unwrap().push(Delivery { headers, body, status });
                    let reply =
                        format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                    let _ = conn.write_all(reply.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Receiver { addr, got, task }
    }

    fn url(&self) -> String {
        format!("http://{}/hooks/T0K3N", self.addr)
    }

    fn deliveries(&self) -> Vec<Delivery> {
        self.got.lock().unwrap().clone()
    }

    /// Waits for a delivery whose JSON satisfies `pred`.
    async fn wait_for(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Delivery {
        poll(what, WAIT, || async {
            self.deliveries().into_iter().find(|d| d.status == 200 && pred(&d.json()))
        })
        .await
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn read_request(conn: &mut tokio::net::TcpStream) -> Option<(BTreeMap<String, String>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let headers: BTreeMap<String, String> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((headers, body))
}

/// Checks the signature as a receiver would, with `openssl` rather than
/// the implementation under test.
fn assert_signed(d: &Delivery) {
    let ts = d.headers.get("x-swarm-timestamp").expect("a timestamp header");
    let sig = d.headers.get("x-swarm-signature").expect("a signature header");
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    let sent: u64 = ts.parse().unwrap();
    assert!(now.abs_diff(sent) < 300, "the timestamp is fresh: {sent} vs {now}");
    let mut child = Command::new("openssl")
        .args(["dgst", "-sha256", "-hmac", SECRET])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("openssl");
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(format!("{ts}.").as_bytes()).unwrap();
        stdin.write_all(&d.body).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let hex = String::from_utf8_lossy(&out.stdout).split_whitespace().last().unwrap().to_string();
    assert_eq!(sig, &format!("sha256={hex}"), "the HMAC covers the timestamp and the exact body");
}

/// The sum of a metric's samples whose line starts with `prefix`.
async fn metric(addr: &str, prefix: &str) -> f64 {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: swarm\r\n\r\n").await.unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

fn free_addr() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signed_question_and_the_completed_swarm_reach_the_webhook_and_a_500_is_retried() {
    let receiver = Receiver::start(&[500]).await;
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), format!("{SECRET}\n")).unwrap();
    let script = worker_script(&[(
        "ask",
        r#"if [ "$SWARM_ATTEMPT" = 1 ]; then
  printf '{"status":"question","message":"which?","question":{"id":"q1","text":"Which DB?","category":"design"}}' > "$SWARM_STATUS_FILE"
  exit 4
fi
echo answered > ask.txt"#,
    )]);
    let repo = TempRepo::with_files(&[("worker.sh", &script)]);
    let plan = PlanBuilder::new("hooks").task(task("ask")).task(task("other")).build();
    let metrics = free_addr();
    let cluster = Cluster::start(
        &repo,
        1,
        &[
            &format!("--notify={}", receiver.url()),
            "--notify-events=task.question,swarm.completed",
            &format!("--notify-secret-file={}", secret.path().display()),
            &format!("--metrics-listen={metrics}"),
        ],
    );
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let question = receiver
        .wait_for("the task.question notification", |j| {
            j["notification"] == "task.question" && j["event"]["task"] == "ask"
        })
        .await;
    assert_signed(&question);
    let j = question.json();
    let text = j["text"].as_str().unwrap();
    assert!(text.starts_with("hooks/ask ") && text.contains("`swarmctl answer hooks/ask"), "{text}");
    assert_eq!(j["content"], j["text"], "Discord reads content, Slack text");
    assert_eq!(j["event"]["swarm"], "hooks");
    assert_eq!(question.headers.get("x-swarm-event").map(String::as_str), Some("task.question"));
    assert_eq!(question.headers.get("content-type").map(String::as_str), Some("application/json"));

    // The first request got a 500: the same notification came again.
    let all = receiver.deliveries();
    let first = &all[0];
    assert_eq!(first.status, 500);
    let again =
        all[1..].iter().find(|d| d.headers.get("x-swarm-delivery") == first.headers.get("x-swarm-delivery"));
    let again = again.unwrap_or_else(|| panic!("the 500 was retried: {all:?}"));
    assert_eq!(again.json()["event"], first.json()["event"]);
    assert_signed(again);
    assert!(metric(&metrics, "swarm_notify_attempts_failed_total").await >= 1.0);

    wait_task_state(&url, "hooks", "ask", TaskState::Escalated).await;
    let out = swarmctl(&url, &["answer", "hooks/ask", "postgres", "--question", "q1"]);
    assert_eq!(out.status.code(), Some(0), "answer: {}", stderr(&out));
    wait_all_merged(&url, "hooks").await;

    let done = receiver
        .wait_for("the swarm.completed notification", |j| j["notification"] == "swarm.completed")
        .await;
    assert_signed(&done);
    assert_eq!(done.json()["event"]["data"]["state"], "COMPLETED");
    assert!(done.json()["text"].as_str().unwrap().contains("swarmctl land hooks"));
    for d in receiver.deliveries() {
        let n = d.json()["notification"].as_str().unwrap().to_string();
        assert!(n == "task.question" || n == "swarm.completed", "only the events asked for: {n}");
    }
    assert!(metric(&metrics, "swarm_notify_delivered_total").await >= 2.0);
    assert_eq!(metric(&metrics, "swarm_notify_failed_total").await, 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_that_is_down_holds_no_swarm_back_and_its_failures_are_counted() {
    // Nothing listens there: every attempt fails to connect.
    let down = free_addr();
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let plan = PlanBuilder::new("deaf").task(task("a")).task(task("b").deps(&["a"])).task(task("c")).build();
    let metrics = free_addr();
    let cluster = Cluster::start(
        &repo,
        2,
        &[&format!("--notify=http://{down}/hook"), &format!("--metrics-listen={metrics}")],
    );
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    wait_all_merged(&url, "deaf").await;
    let label = format!("swarm_notify_failed_total{{endpoint=\"{down}\"}}");
    // Five attempts with back-off: the give-up comes seconds after the swarm ended.
    poll("the failed delivery to be counted", WAIT, || async {
        (metric(&metrics, &label).await >= 1.0).then_some(())
    })
    .await;
    assert!(metric(&metrics, "swarm_notify_attempts_failed_total").await >= 5.0);
    assert_eq!(metric(&metrics, "swarm_notify_delivered_total").await, 0.0);
}

//! Where a swarm's time went, drawn: a real controller and sidecars run a
//! swarm with a retry (`flaky` fails once), a merge queue car (every task
//! goes through integration verify on the verifier `v1`) and an operator
//! wait (`ask` escalates a question answered seconds later), which sets
//! the critical path of `after`, which needs both. Then the
//! self-contained page of `swarmctl report --html` and the dashboard's
//! swarm page are loaded in a real Chromium, their DOM checked for bars of
//! every kind, and screenshots kept under target/test-artifacts/.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

#[path = "dashboard/cdp.rs"]
mod cdp;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use swarm_proto::v1::TaskState;
use swarm_tests::{
    Needs, PlanBuilder, TempRepo, WAIT, create_swarm, skip_for, spawn_controller, spawn_sidecar, stderr,
    stdout, swarmctl, task, wait_all_merged, wait_task_state, worker_script,
};

const SWARM: &str = "tl";
const KINDS: [&str; 6] = ["setup", "work", "verify", "queue", "operator-wait", "merge-car"];

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Where the other Chromium tests keep their screenshots.
fn artifacts() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> → target/test-artifacts
    exe.ancestors().nth(3).unwrap().join("test-artifacts")
}

fn script() -> String {
    worker_script(&[
        (
            "flaky",
            r#"sleep 0.3; if [ "$SWARM_ATTEMPT" = 1 ]; then echo flaky >&2; exit 1; fi; echo ok > flaky.txt"#,
        ),
        (
            "ask",
            r#"if [ "$SWARM_ATTEMPT" = 1 ]; then
  printf '{"status":"question","message":"which?","question":{"id":"q1","text":"Which colour?","category":"design"}}' > "$SWARM_STATUS_FILE"
  exit 4
fi
grep -o blue "$SWARM_TASK_FILE" | head -n 1 > ask.txt"#,
        ),
        ("after", "sleep 0.3; echo after > after.txt"),
    ])
}

/// Chromium's DOM of `url` once its scripts ran (a file needs none).
fn dump_dom(chromium: &Path, url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium --dump-dom: {}", stderr(&out));
    stdout(&out)
}

/// How many bars of each kind the DOM text has.
fn bars_by_kind(dom: &str) -> Vec<(&'static str, usize)> {
    KINDS.iter().map(|k| (*k, dom.matches(&format!("class=\"bar\" data-kind=\"{k}\"")).count())).collect()
}

fn assert_every_kind(what: &str, counts: &[(&str, usize)]) {
    for (kind, n) in counts {
        assert!(*n > 0, "{what}: no {kind} bar in {counts:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_timeline_shows_a_retry_a_queue_car_and_an_operator_wait_in_chromium() {
    let test = "the_timeline_shows_a_retry_a_queue_car_and_an_operator_wait_in_chromium";
    let chromium = match cdp::find_or_install() {
        Ok(p) => p,
        Err(why) => return skip_for(test, Needs::Chromium, &why),
    };
    let repo = TempRepo::with_files(&[("worker.sh", &script()), ("README.md", "timeline\n")]);
    let own_verify = r#"[{ name = "own", command = "sleep 0.2" }]"#;
    let plan = PlanBuilder::new(SWARM)
        .default("labels", r#"{ role = "work" }"#)
        .default("retries", "2")
        .task(task("flaky").set("verify", own_verify))
        .task(task("ask").set("verify", own_verify))
        .task(task("after").deps(&["flaky", "ask"]).set("verify", own_verify))
        .tables(
            "[[integration_verify]]\nname = \"integration\"\ncommand = 'sleep 0.5'\n\n\
             [merge_queue]\nmax_batch = 4\nlabels = { role = \"verify\" }\n",
        )
        .build();
    let port = free_port();
    let controller = spawn_controller(repo.path(), &[&format!("--ui-listen=127.0.0.1:{port}")]);
    let url = controller.url();
    let _sidecars: Vec<_> = [("w1", "role=work"), ("w2", "role=work"), ("v1", "role=verify")]
        .iter()
        .map(|(w, label)| spawn_sidecar(&url, repo.path(), w, &["--label", label]))
        .collect();
    create_swarm(&url, &plan).await;

    // The operator takes a while to answer: the wait the timeline must show.
    wait_task_state(&url, SWARM, "ask", TaskState::Escalated).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let out = swarmctl(&url, &["answer", &format!("{SWARM}/ask"), "blue", "--question", "q1"]);
    assert!(out.status.success(), "answer: {}", stderr(&out));
    let merged = wait_all_merged(&url, SWARM).await;
    assert_eq!(merged["flaky"].attempts, 2, "flaky was retried");

    // The report's page: one file, nothing fetched.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.html");
    let out = swarmctl(&url, &["report", SWARM, "--html", file.to_str().unwrap()]);
    assert!(out.status.success(), "report --html: {}{}", stdout(&out), stderr(&out));
    let html = std::fs::read_to_string(&file).unwrap();
    for external in ["<script", "<link", "src=", "href=", "url("] {
        assert!(!html.contains(external), "{external} in the self-contained page");
    }
    let out = swarmctl(&url, &["report", SWARM, "--html"]);
    assert!(
        stdout(&out).starts_with("<!doctype html>"),
        "--html without FILE writes to stdout: {}",
        stderr(&out)
    );
    let file_url = format!("file://{}", file.display());
    let dom = dump_dom(&chromium, &file_url);
    let counts = bars_by_kind(&dom);
    assert_every_kind("report --html", &counts);
    // `after` waits for both; `ask`, held by the operator, is the one it waited on.
    assert!(dom.contains("critical path ask → after"), "the critical path is named:\n{dom:.3000}");
    assert!(dom.contains("data-row=\"v1\" data-row-kind=\"verifier\""), "the verifier's row");
    // The retry: flaky's two attempts, each a work bar.
    for n in [1, 2] {
        assert!(
            dom.contains(&format!("data-kind=\"work\" data-task=\"flaky\" data-attempt=\"{n}\"")),
            "flaky#{n}"
        );
    }
    let mut browser = cdp::Browser::launch(&chromium, &dir.path().join("chromium.log"));
    browser.navigate(&file_url);
    browser.wait_for("the report's timeline", "!!document.querySelector('svg#timeline .bar')", WAIT);
    browser.screenshot(&artifacts().join("timeline-report.png"));

    // The dashboard's swarm page draws the same timeline.
    browser.navigate(&format!("http://127.0.0.1:{port}/#/swarm/{SWARM}"));
    browser.wait_for(
        "the dashboard's timeline",
        "!!document.querySelector('#timeline-section svg .bar')",
        WAIT,
    );
    let kinds: Vec<String> = KINDS
        .iter()
        .map(|k| {
            format!(
                "{k}={}",
                browser.eval(&format!(
                    "document.querySelectorAll('#timeline-section .bar[data-kind=\"{k}\"]').length"
                ))
            )
        })
        .collect();
    assert!(kinds.iter().all(|k| !k.ends_with("=0")), "the dashboard draws every kind: {kinds:?}");
    let summary = browser.eval("document.getElementById('timeline-summary').textContent");
    assert!(summary.as_str().unwrap().contains("waiting for the operator"), "{summary}");
    let hover = browser.eval(
        "document.querySelector('#timeline-section .bar[data-kind=\"operator-wait\"] title').textContent",
    );
    assert!(hover.as_str().unwrap().contains("Which colour?"), "the hover names the question: {hover}");
    browser.screenshot(&artifacts().join("timeline-dashboard.png"));
}

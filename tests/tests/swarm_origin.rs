//! A planned swarm's origin (the goal, the planner's session and cost)
//! against the real controller: kept through a kill -9 and restart, shown
//! by `describe swarm` (text and `-o json`), `report` and the dashboard in
//! Chromium, kept apart from the swarm's own cost; the same plan created
//! again keeps the first origin; a bad origin is refused naming its field
//! and nothing is created. The origin also survives a restart on a
//! PostgreSQL store (skipped, by name, where none can be started).
#![allow(clippy::unwrap_used)] // tests: a panic is the report

#[path = "dashboard/cdp.rs"]
#[allow(dead_code)] // the dashboard test's driver; screenshots are not taken here
mod cdp;

use serde_json::Value;
use swarm_proto::v1;
use swarm_tests::{
    Needs, PlanBuilder, TempRepo, WAIT, operator, poll, skip_for, spawn_controller, stderr, stdout, swarmctl,
    task, try_operator, worker_script,
};

const GOAL: &str = "Add a --json flag to the report\nand document it in the README";

fn origin(goal: &str, session: &str, cost_usd: f64) -> v1::SwarmOrigin {
    v1::SwarmOrigin {
        goal: goal.into(),
        planner_agent: "claude".into(),
        planner_session: session.into(),
        planner_usage: Some(v1::Usage {
            input_tokens: 1200,
            output_tokens: 340,
            cache_read_tokens: 5000,
            cache_creation_tokens: 0,
            cost_usd,
        }),
        issue_url: "https://github.com/o/r/issues/46".into(),
    }
}

fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(out.status.success(), "{what}: {}{}", stdout(out), stderr(out));
    stdout(out)
}

async fn wait_serving(url: &str) {
    poll(&format!("{url} to serve again"), WAIT, || async {
        let mut op = try_operator(url).await?;
        op.list_swarms(v1::ListSwarmsRequest::default()).await.ok().map(|_| ())
    })
    .await
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_planned_swarms_origin_survives_a_restart_and_shows_in_describe_report_and_dashboard() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[])), ("README.md", "o\n")]);
    let port = free_port();
    let mut controller = spawn_controller(repo.path(), &[&format!("--ui-listen=127.0.0.1:{port}")]);
    let url = controller.url();
    let plan = PlanBuilder::new("orig").task(task("a")).task(task("b").deps(&["a"])).build();
    let mut op = operator(&url).await;
    let request = |o: v1::SwarmOrigin| v1::CreateSwarmRequest { plan_toml: plan.clone(), origin: Some(o) };
    let first = op.create_swarm(request(origin(GOAL, "sess-42", 0.1234))).await.unwrap().into_inner();
    assert!(first.created);
    assert_eq!(first.swarm.unwrap().origin.unwrap().planner_session, "sess-42");
    // The same plan again (a resumed run) is the same swarm, made as before.
    let again = op.create_swarm(request(origin("another goal", "sess-99", 9.0))).await.unwrap().into_inner();
    assert!(!again.created);
    assert_eq!(again.swarm.unwrap().origin.unwrap().goal, GOAL);
    // A plan written by hand has none.
    let by_hand = PlanBuilder::new("hand").task(task("a")).build();
    let dir = tempfile::tempdir().unwrap();
    let by_hand_path = dir.path().join("hand.toml");
    std::fs::write(&by_hand_path, by_hand).unwrap();
    ok(&swarmctl(&url, &["create", by_hand_path.to_str().unwrap()]), "create hand");

    controller.restart_after_kill9();
    wait_serving(&url).await;

    let text = ok(&swarmctl(&url, &["describe", "swarm", "orig"]), "describe");
    assert!(
        text.contains(
            "Goal:        Add a --json flag to the report\n             and document it in the README\n"
        ),
        "{text}"
    );
    assert!(text.contains("Planned by:  claude session sess-42 cost $0.1234 (1200 in, 340 out,"), "{text}");
    assert!(text.contains("Issue:       https://github.com/o/r/issues/46"), "{text}");
    let json: Value = serde_json::from_str(&ok(
        &swarmctl(&url, &["describe", "swarm", "orig", "-o", "json"]),
        "describe -o json",
    ))
    .unwrap();
    let o = &json["swarm"]["origin"];
    assert_eq!(o["goal"], GOAL, "{json}");
    assert_eq!(o["planner_agent"], "claude", "{json}");
    assert_eq!(o["planner_session"], "sess-42", "{json}");
    assert_eq!(o["planner_usage"]["cost_usd"], 0.1234, "{json}");
    // Planning is not the swarm's own spending.
    assert_eq!(json["swarm"]["usage"]["cost_usd"], 0.0, "{json}");
    let report = ok(&swarmctl(&url, &["report", "orig"]), "report");
    assert!(report.contains("- Goal: Add a --json flag to the report\n  and document it"), "{report}");
    assert!(report.contains("- Planned by: claude session sess-42 cost $0.1234"), "{report}");
    let hand = ok(&swarmctl(&url, &["describe", "swarm", "hand"]), "describe hand");
    assert!(!hand.contains("Goal:") && !hand.contains("Planned by"), "{hand}");
    let hand: Value =
        serde_json::from_str(&ok(&swarmctl(&url, &["describe", "swarm", "hand", "-o", "json"]), "json"))
            .unwrap();
    assert!(hand["swarm"].get("origin").is_none(), "{hand}");

    let test = "a_planned_swarms_origin_survives_a_restart_and_shows_in_describe_report_and_dashboard";
    let chromium = match cdp::find_or_install() {
        Ok(p) => p,
        Err(why) => return skip_for(test, Needs::Chromium, &why),
    };
    let mut browser = cdp::Browser::launch(&chromium, &dir.path().join("chromium.log"));
    browser.navigate(&format!("http://127.0.0.1:{port}/#/swarm/orig"));
    browser.wait_for(
        "the swarm's two tasks listed",
        "document.querySelectorAll('#tasks tbody tr').length === 2",
        WAIT,
    );
    assert_eq!(browser.eval("document.getElementById('goal').textContent"), GOAL);
    let by = browser.eval("document.getElementById('planned-by').textContent");
    assert_eq!(by, "claude session sess-42 cost $0.1234");
    let cost = browser.eval("[...document.querySelectorAll('.kv dt')].some(d => d.textContent === 'cost' && d.nextSibling.textContent.includes('planning is shown apart'))");
    assert_eq!(cost, true);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_origin_is_refused_naming_its_field_and_creates_nothing() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let controller = spawn_controller(repo.path(), &[]);
    let url = controller.url();
    let mut op = operator(&url).await;
    let plan = PlanBuilder::new("bad").task(task("a")).build();
    let cases = [
        (origin(&"g".repeat(64 * 1024 + 1), "s", 0.0), "origin.goal: must be at most 65536 bytes"),
        (origin("red\u{1b}[31m", "s", 0.0), "origin.goal: must not contain control characters"),
        (origin(GOAL, "s; rm -rf /", 0.0), "origin.planner_session: "),
        (origin(GOAL, "s", -1.0), "origin.planner_usage: "),
        (
            v1::SwarmOrigin { issue_url: "javascript:alert(1)".into(), ..origin(GOAL, "s", 0.0) },
            "origin.issue_url: ",
        ),
    ];
    for (o, want) in cases {
        let err = op
            .create_swarm(v1::CreateSwarmRequest { plan_toml: plan.clone(), origin: Some(o) })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(want), "{:?} does not name {want:?}", err.message());
    }
    let missing = op.get_swarm(v1::GetSwarmRequest { swarm_id: "bad".into() }).await.unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");
    assert!(!repo.has("swarm/bad/integration"), "no branch was made");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_planned_swarms_origin_survives_a_restart_on_a_postgres_store() {
    let test = "a_planned_swarms_origin_survives_a_restart_on_a_postgres_store";
    let Some(db) = swarm_tests::postgres::database(test) else { return };
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    // A short lease: the restarted controller takes over from the killed one.
    let mut controller =
        spawn_controller(repo.path(), &[&format!("--store={}", db.url), "--leader-lease-ms=1500"]);
    let url = controller.url();
    wait_serving(&url).await;
    let plan = PlanBuilder::new("pg").task(task("a")).build();
    let mut op = operator(&url).await;
    let request = v1::CreateSwarmRequest { plan_toml: plan, origin: Some(origin(GOAL, "sess-pg", 0.5)) };
    assert!(op.create_swarm(request).await.unwrap().into_inner().created);

    controller.restart_after_kill9();
    wait_serving(&url).await;
    let text = ok(&swarmctl(&url, &["describe", "swarm", "pg"]), "describe");
    assert!(text.contains("Goal:        Add a --json flag to the report\n"), "{text}");
    assert!(text.contains("Planned by:  claude session sess-pg cost $0.5000"), "{text}");
}

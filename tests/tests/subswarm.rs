//! Recursive sub-swarms through the real binaries: a task that carries its
//! own plan runs it as a child swarm on the same fleet, and the child's
//! result goes through the parent's merge path.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::collections::BTreeMap;

use swarm_proto::v1;
use swarm_tests::{
    Cluster, Gate, PlanBuilder, TempRepo, create_swarm, events, merges_of, operator, poll, swarmctl, task,
    tasks, wait_all_merged, wait_task_state, worker_script,
};

/// `PlanBuilder`'s defaults, then these tasks written by hand: sub-plan
/// tables nest under the `[[tasks]]` entry they follow.
fn plan(name: &str, tasks_toml: &str) -> String {
    let mut text = PlanBuilder::new(name).task(task("placeholder")).build();
    let cut = text.find("\n[[tasks]]").unwrap();
    text.truncate(cut);
    text.push_str(tasks_toml);
    text
}

const TWO_LEVELS: &str = r#"
[[tasks]]
id = "schema"
files = ["schema.txt"]

[[tasks]]
id = "auth"
deps = ["schema"]
files = ["auth/**"]

  [[tasks.subtasks]]
  id = "login"
  files = ["auth/login/**"]

    [[tasks.subtasks.subtasks]]
    id = "form"
    files = ["auth/login/form.txt"]

    [[tasks.subtasks.subtasks]]
    id = "check"
    deps = ["form"]
    files = ["auth/login/check.txt"]

  [[tasks.subtasks]]
  id = "logout"
  deps = ["login"]
  files = ["auth/logout.txt"]

[[tasks]]
id = "api"
deps = ["auth"]
files = ["api.txt"]
"#;

fn strings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_two_level_sub_swarm_merges_into_its_parent_with_the_expected_tree() {
    // Each worker reads what its dependencies merged, so the tree shows
    // that every level started from its parent's head and landed there.
    let script = worker_script(&[
        ("form", "mkdir -p auth/login && echo form > auth/login/form.txt"),
        ("check", "cat auth/login/form.txt schema.txt > auth/login/check.txt"),
        ("logout", "cat auth/login/form.txt auth/login/check.txt > auth/logout.txt"),
        ("api", "cat schema.txt auth/logout.txt > api.txt"),
    ]);
    let repo = TempRepo::with_files(&[("worker.sh", &script), ("README.md", "app\n")]);
    let cluster = Cluster::start(&repo, 2, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan("app", TWO_LEVELS)).await;

    let root = wait_all_merged(&url, "app").await;
    assert_eq!(root.keys().collect::<Vec<_>>(), ["api", "auth", "schema"]);
    let child = wait_all_merged(&url, "app/auth").await;
    assert_eq!(child.keys().collect::<Vec<_>>(), ["login", "logout"]);
    let grandchild = wait_all_merged(&url, "app/auth/login").await;
    assert_eq!(grandchild.keys().collect::<Vec<_>>(), ["check", "form"]);

    let expected = strings(&[
        ("README.md", "app\n"),
        ("worker.sh", &script),
        ("schema.txt", "schema\n"),
        ("auth/login/form.txt", "form\n"),
        ("auth/login/check.txt", "form\nschema\n"),
        ("auth/logout.txt", "form\nform\nschema\n"),
        ("api.txt", "schema\nform\nform\nschema\n"),
    ]);
    assert_eq!(repo.tree("swarm/app/integration"), expected);
    // Each child's integration branch is its parent task's branch, holding
    // exactly what the child merged on top of the parent's head.
    let mut child_tree = expected.clone();
    child_tree.remove("api.txt");
    assert_eq!(repo.tree("swarm/app/auth"), child_tree);
    let mut grandchild_tree = child_tree.clone();
    grandchild_tree.remove("auth/logout.txt");
    assert_eq!(repo.tree("swarm/app/auth.sub/login"), grandchild_tree);

    // One merge per task at every level, named by the nested attempt ids.
    assert_eq!(merges_of(&repo, "swarm/app/integration", "app", "auth"), 1);
    assert_eq!(merges_of(&repo, "swarm/app/auth", "app/auth", "login"), 1);
    assert_eq!(merges_of(&repo, "swarm/app/auth", "app/auth", "logout"), 1);
    assert_eq!(merges_of(&repo, "swarm/app/auth.sub/login", "app/auth/login", "form"), 1);
    let subjects = repo.subjects("swarm/app/auth.sub/login").join("\n");
    assert!(subjects.contains("(app/auth/login/form#1)"), "{subjects}");

    // The hierarchy is listed: every swarm, children named under their parent.
    let mut op = operator(&url).await;
    let swarms = op.list_swarms(v1::ListSwarmsRequest::default()).await.unwrap().into_inner().swarms;
    let mut ids: Vec<(String, String)> =
        swarms.iter().map(|s| (s.id.clone(), s.integration_branch.clone())).collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            ("app".to_string(), "swarm/app/integration".to_string()),
            ("app/auth".to_string(), "swarm/app/auth".to_string()),
            ("app/auth/login".to_string(), "swarm/app/auth.sub/login".to_string()),
        ]
    );
    // Watching the parent shows its descendants' events, and only theirs.
    let watched = events(&url, "app", 0, 1).await;
    assert!(watched.iter().any(|e| e.swarm_id == "app/auth/login" && e.kind == "task.merged"));
    assert!(watched.iter().any(|e| e.swarm_id == "app/auth" && e.kind == "task.merged"));
    assert!(watched.iter().all(|e| e.swarm_id == "app" || e.swarm_id.starts_with("app/")));
    let child_only = events(&url, "app/auth", 0, 1).await;
    assert!(child_only.iter().all(|e| e.swarm_id.starts_with("app/auth")));
    assert!(child_only.iter().any(|e| e.swarm_id == "app/auth/login"));
    // `swarmctl report` nests each child swarm's report under its parent.
    let out = swarmctl(&url, &["report", "app", "-o", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["swarm"], "app");
    assert_eq!(report["children"][0]["swarm"], "app/auth");
    assert_eq!(report["children"][0]["done"], 2);
    assert_eq!(report["children"][0]["children"][0]["swarm"], "app/auth/login");
    let form = &report["children"][0]["children"][0]["branches"][0];
    assert_eq!(
        (&form["task"], &form["branch"]),
        (&"form".into(), &"swarm/app/auth.sub/login.sub/form".into())
    );
    // The parent task's merge is its child's integration head merged.
    let auth = &root["auth"];
    let merge_parents = repo.parents(&auth.merge_commit);
    assert_eq!(merge_parents[1], repo.head("swarm/app/auth"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_child_task_fails_its_parent_task_and_a_retry_resumes_the_child() {
    // `bad` fails its first attempt with no retries left; its second passes.
    let script = worker_script(&[(
        "bad",
        r#"if [ "$SWARM_ATTEMPT" = 1 ]; then echo "bad input" >&2; exit 1; fi; echo fixed > auth/bad.txt"#,
    )]);
    let repo = TempRepo::with_files(&[("worker.sh", &script)]);
    let text = plan(
        "fail",
        r#"
[[tasks]]
id = "auth"
files = ["auth/**"]

  [[tasks.subtasks]]
  id = "good"
  files = ["auth/good.txt"]
  command = ["sh", "-c", "mkdir -p auth && echo good > auth/good.txt"]

  [[tasks.subtasks]]
  id = "bad"
  retries = 0
  files = ["auth/bad.txt"]
  command = ["sh", "-c", "mkdir -p auth && sh worker.sh"]

[[tasks]]
id = "after"
deps = ["auth"]
"#,
    )
    .replace("id = \"after\"\ndeps", "id = \"after\"\nfiles = [\"after.txt\"]\ndeps");
    let cluster = Cluster::start(&repo, 2, &[]);
    let url = cluster.url();
    create_swarm(&url, &text).await;

    let auth = wait_task_state(&url, "fail", "auth", v1::TaskState::Failed).await;
    assert!(auth.reason.contains("sub-swarm fail/auth failed: fail/auth/bad FAILED"), "{}", auth.reason);
    let mut op = operator(&url).await;
    let child = tasks(&mut op, "fail/auth").await;
    assert_eq!(child["good"].state(), v1::TaskState::Merged);
    assert_eq!(child["bad"].state(), v1::TaskState::Failed);
    assert_eq!(tasks(&mut op, "fail").await["after"].state(), v1::TaskState::Pending);

    // Retrying the parent task retries the child's failed task.
    op.retry_task(v1::RetryTaskRequest { task_id: "fail/auth".into() }).await.unwrap();
    let root = wait_all_merged(&url, "fail").await;
    assert_eq!(root["auth"].attempts, 2);
    let tree = repo.tree("swarm/fail/integration");
    assert_eq!(tree["auth/good.txt"], "good\n");
    assert_eq!(tree["auth/bad.txt"], "fixed\n");
    assert_eq!(tree["after.txt"], "after\n");
}

/// The swarm once it is STALLED.
async fn stalled(url: &str, id: &str) -> v1::Swarm {
    let op = operator(url).await;
    poll("the swarm to be STALLED", std::time::Duration::from_secs(30), || {
        let mut op = op.clone();
        let id = id.to_string();
        async move {
            let s = op.get_swarm(v1::GetSwarmRequest { swarm_id: id }).await.ok()?.into_inner();
            (s.state == v1::SwarmState::Stalled as i32).then_some(s)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_swarm_waiting_on_the_operator_stalls_its_parent_until_the_operator_acts() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let text = plan(
        "wait",
        r#"
[[tasks]]
id = "auth"
files = ["auth/**"]

  [[tasks.subtasks]]
  id = "login"
  files = ["auth/login.txt"]
  review = "operator"
  command = ["sh", "-c", "mkdir -p auth && echo login > auth/login.txt"]
"#,
    );
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &text).await;
    wait_task_state(&url, "wait/auth", "login", v1::TaskState::Review).await;

    let mut op = operator(&url).await;
    let child = stalled(&url, "wait/auth").await;
    assert_eq!(child.stalled_tasks, vec!["login"], "{child:?}");
    let parent = stalled(&url, "wait").await;
    assert_eq!(parent.stalled_tasks, vec!["auth"], "{parent:?}");
    assert!(parent.stalled_reason.contains("1 sub-swarm STALLED"), "{parent:?}");
    assert_eq!(tasks(&mut op, "wait").await["auth"].state(), v1::TaskState::Running);

    // The operator's decision in the child moves both again.
    op.review_task(v1::ReviewTaskRequest {
        task_id: "wait/auth/login".into(),
        decision: "approve".into(),
        message: String::new(),
    })
    .await
    .unwrap();
    wait_all_merged(&url, "wait").await;
    let parent = op.get_swarm(v1::GetSwarmRequest { swarm_id: "wait".into() }).await.unwrap().into_inner();
    assert_eq!(parent.state, v1::SwarmState::Completed as i32, "{parent:?}");
    assert_eq!(repo.tree("swarm/wait/integration")["auth/login.txt"], "login\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_the_parent_swarm_cancels_its_child_swarm() {
    let gate = Gate::new();
    let script = worker_script(&[("slow", &format!("{}; echo slow > auth/slow.txt", gate.wait_sh()))]);
    let repo = TempRepo::with_files(&[("worker.sh", &script)]);
    let text = plan(
        "stop",
        r#"
[[tasks]]
id = "auth"
files = ["auth/**"]

  [[tasks.subtasks]]
  id = "slow"
  files = ["auth/slow.txt"]

  [[tasks.subtasks]]
  id = "later"
  deps = ["slow"]
  files = ["auth/later.txt"]
"#,
    );
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &text).await;
    wait_task_state(&url, "stop/auth", "slow", v1::TaskState::Running).await;
    let mut op = operator(&url).await;
    // The parent task is RUNNING with its child's progress as its step.
    let auth = poll("auth to show its child's progress", std::time::Duration::from_secs(30), || async {
        let mut op = operator(&url).await;
        let auth = tasks(&mut op, "stop").await.remove("auth")?;
        auth.step.starts_with("sub-swarm stop/auth: 0/2 merged").then_some(auth)
    })
    .await;
    assert_eq!(auth.state(), v1::TaskState::Running);
    assert_eq!(auth.attempts, 1);

    op.cancel_swarm(v1::CancelSwarmRequest { swarm_id: "stop".into(), reason: "enough".into() })
        .await
        .unwrap();
    wait_task_state(&url, "stop/auth", "slow", v1::TaskState::Cancelled).await;
    wait_task_state(&url, "stop", "auth", v1::TaskState::Cancelled).await;
    let child = tasks(&mut op, "stop/auth").await;
    assert_eq!(child["later"].state(), v1::TaskState::Cancelled);
    let swarm = poll("the child swarm to be CANCELLED", std::time::Duration::from_secs(30), || async {
        let mut op = operator(&url).await;
        let s = op.get_swarm(v1::GetSwarmRequest { swarm_id: "stop/auth".into() }).await.ok()?.into_inner();
        (s.state() == v1::SwarmState::Cancelled).then_some(s)
    })
    .await;
    assert_eq!(swarm.id, "stop/auth");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_controller_restart_keeps_the_hierarchy_and_merges_each_level_once() {
    let gate = Gate::new();
    let script = worker_script(&[
        ("slow", &format!("{}; mkdir -p auth && echo slow > auth/slow.txt", gate.wait_sh())),
        ("later", "cat auth/slow.txt > auth/later.txt"),
    ]);
    let repo = TempRepo::with_files(&[("worker.sh", &script)]);
    let text = plan(
        "keep",
        r#"
[[tasks]]
id = "auth"
files = ["auth/**"]

  [[tasks.subtasks]]
  id = "slow"
  files = ["auth/slow.txt"]

  [[tasks.subtasks]]
  id = "later"
  deps = ["slow"]
  files = ["auth/later.txt"]

[[tasks]]
id = "api"
deps = ["auth"]
files = ["api.txt"]
"#,
    );
    let mut cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &text).await;
    // RUNNING comes with the assignment; wait for the worker itself, so the
    // kill lands while it runs and not before the sidecar has its Welcome
    // (without the resume secret it carries, the restarted controller keeps
    // the sidecar out until the attempt's lease expires).
    poll("the child task's worker to start", std::time::Duration::from_secs(30), || {
        let url = url.clone();
        async move { events(&url, "keep/auth", 0, 1).await.into_iter().find(|e| e.kind == "attempt.started") }
    })
    .await;

    cluster.controller.restart_after_kill9();
    gate.open();

    let root = wait_all_merged(&url, "keep").await;
    wait_all_merged(&url, "keep/auth").await;
    // The child kept running across the restart: one attempt of the parent.
    assert_eq!(root["auth"].attempts, 1);
    let tree = repo.tree("swarm/keep/integration");
    assert_eq!(tree["auth/slow.txt"], "slow\n");
    assert_eq!(tree["auth/later.txt"], "slow\n");
    assert_eq!(tree["api.txt"], "api\n");
    assert_eq!(merges_of(&repo, "swarm/keep/integration", "keep", "auth"), 1);
    assert_eq!(merges_of(&repo, "swarm/keep/auth", "keep/auth", "slow"), 1);
    assert_eq!(merges_of(&repo, "swarm/keep/auth", "keep/auth", "later"), 1);
}

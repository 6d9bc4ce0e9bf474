use super::*;

const STORED: &str = r#"
name = "app"
[defaults]
agent = "claude"
[[tasks]]
id = "db"
files = ["db/**"]
[[tasks]]
id = "auth"
title = "Authentication"
files = ["auth/**"]
deps = ["db"]
model = "opus"
prompt = "Build auth."
[[tasks]]
id = "docs"
files = ["docs/"]
deps = ["auth"]
[[tasks.subtasks]]
id = "guide"
files = ["docs/guide.md"]
"#;

fn ids(s: &str) -> (SwarmId, TaskId) {
    let (swarm, task) = s.rsplit_once('/').expect("swarm/task");
    (SwarmId::new(swarm).expect("swarm"), TaskId::new(task.to_string()).expect("task"))
}

fn spawn(at: &str, fragment: &str) -> Result<Spawned, PlanError> {
    let (swarm, task) = ids(at);
    spawned(STORED, &swarm, &task, fragment)
}

fn error_of(at: &str, fragment: &str) -> String {
    let e = spawn(at, fragment).expect_err("refused");
    format!("{}: {}", e.path, e.rule)
}

const TWO: &str = r#"
[[tasks]]
id = "login"
files = ["auth/login.rs"]
prompt = "The login form."
[[tasks]]
id = "session"
files = ["auth/session/**"]
deps = ["login"]
command = "true"
"#;

#[test]
fn a_spawned_child_is_the_callers_sub_plan_and_takes_how_the_caller_ran() {
    let s = spawn("app/auth", TWO).expect("spawned");
    assert_eq!(s.plan.swarm.as_str(), "app/auth");
    assert_eq!(s.plan.integration_branch, "swarm/app/auth.spawned", "beside the caller's task branch");
    let login = &s.plan.tasks[0];
    assert_eq!(login.id.as_str(), "login");
    let agent = login.agent.as_ref().expect("the child runs the caller's agent");
    assert_eq!(agent.model.as_deref(), Some("opus"), "the caller's model");
    assert_eq!(s.plan.tasks[1].deps[0].as_str(), "login");
    assert!(s.plan.tasks[1].agent.is_none(), "a child choosing its own command takes no agent");
    // The stored text finds the child again, and the parent task keeps what describes it.
    let root = Arc::new(Plan::parse(&s.text).expect("the stored text parses"));
    let auth = root.tasks.iter().find(|t| t.id.as_str() == "auth").expect("auth");
    assert_eq!(auth.title, "Authentication");
    assert_eq!(auth.deps[0].as_str(), "db");
    assert!(auth.subplan.is_some() && auth.agent.is_none(), "the caller's entry is now a sub-plan task");
    assert!(root.descendant(&SwarmId::new("app/auth").expect("id")).is_some());
}

#[test]
fn a_task_of_a_sub_plan_spawns_below_it() {
    let fragment = "[[tasks]]\nid = \"intro\"\nfiles = [\"docs/guide.md\"]\n";
    let s = spawn("app/docs/guide", fragment).expect("spawned");
    assert_eq!(s.plan.swarm.as_str(), "app/docs/guide");
    assert_eq!(s.plan.integration_branch, "swarm/app/docs.sub/guide.spawned");
}

#[test]
fn a_bad_fragment_is_refused_naming_its_own_field() {
    let cases = [
        (
            "app/auth",
            "[[tasks]]\nid = \"x\"\nfiles = [\"src/x.rs\"]\n",
            "tasks[0].files[0]: \"src/x.rs\" is not inside",
        ),
        (
            "app/auth",
            "[[tasks]]\nid = \"x\"\nfiles = [\"auth/x\"]\ndeps = [\"nope\"]\n",
            "tasks[0].deps[0]: unknown task",
        ),
        ("app/auth", "[[tasks]]\nid = \"x\"\n", "tasks[0].files: a task must own at least one file glob"),
        (
            "app/auth",
            "name = \"x\"\n[[tasks]]\nid = \"x\"\nfiles = [\"auth/x\"]\n",
            "name: only tasks may be given",
        ),
        ("app/auth", "tasks = []\n", "tasks: give at least one task"),
        ("app/auth", "tasks = [1]\n", "tasks[0]: must be a table"),
        ("app/auth", "[[tasks]\n", "plan_toml: "),
        ("app/docs", "[[tasks]]\nid = \"x\"\nfiles = [\"docs/x\"]\n", "task: task \"docs\" runs a sub-plan"),
        ("app/nope", "[[tasks]]\nid = \"x\"\nfiles = [\"x\"]\n", "task: task \"nope\" is not in swarm app's"),
    ];
    for (at, fragment, expected) in cases {
        let got = error_of(at, fragment);
        assert!(got.starts_with(expected), "{fragment:?}: got {got:?}, expected {expected:?}");
    }
    let many: String = (0..=MAX_SPAWNED_TASKS)
        .map(|i| format!("[[tasks]]\nid = \"t{i}\"\nfiles = [\"auth/{i}\"]\n"))
        .collect();
    assert!(error_of("app/auth", &many).starts_with("tasks: at most 100 tasks"));
}

#[test]
fn spawning_past_the_depth_limit_is_refused() {
    let stored = STORED.replace("name = \"app\"", "name = \"app\"\nmax_depth = 1");
    let (swarm, task) = ids("app/docs/guide");
    let e = spawned(&stored, &swarm, &task, "[[tasks]]\nid = \"x\"\nfiles = [\"docs/guide.md\"]\n")
        .expect_err("too deep");
    assert!(e.path == "tasks" && e.rule.contains("nest at most 1 deep"), "{e:?}");
}

#[test]
fn spawned_is_swarms_mark_and_needs_subtasks() {
    let marked = STORED.replace("prompt = \"Build auth.\"", "prompt = \"Build auth.\"\nspawned = true");
    let e = Plan::parse(&marked).expect_err("a worker task marked spawned");
    assert_eq!(
        e.to_string(),
        "tasks[1].spawned: set by swarm on a task whose agent spawned subtasks; it has none"
    );
}

use super::*;

const GOOD: &str = r#"
name = "auth"
base_branch = "main"

[defaults]
command = "sh worker.sh"
retries = 2
verify = [{ name = "fast", command = "true" }]

[[tasks]]
id = "db"
files = ["db/**"]

[[tasks]]
id = "api"
title = "HTTP API"
deps = ["db"]
files = ["src/api/**", "src/lib.rs"]
labels = { os = "linux" }
strategy = "squash"
"#;

#[test]
fn a_good_plan_parses_with_defaults_applied() {
    let plan = Plan::parse(GOOD).expect("valid plan");
    assert_eq!(plan.swarm.as_str(), "auth");
    assert_eq!(plan.integration_branch, "swarm/auth/integration");
    assert_eq!(plan.target_branch, "main");
    let api = &plan.tasks[1];
    assert_eq!(api.deps, vec![TaskId::new("db").expect("id")]);
    assert_eq!(api.command.to_vec(), vec!["sh", "-c", "sh worker.sh"]);
    assert_eq!(api.retry.max_retries, 2);
    assert_eq!(api.strategy, MergeStrategy::Squash);
    assert_eq!(api.on_conflict, ConflictPolicy::Return);
    assert_eq!(api.ownership, OwnershipPolicy::Enforce);
    assert_eq!(api.verify.len(), 1);
    assert_eq!(api.max_restarts, 2);
    assert_eq!(plan.tasks[0].title, "db");
    assert_eq!(api.setup_on, SetupOn::Create);
}

#[test]
fn setup_can_run_before_every_attempt() {
    let plan = Plan::parse(&task_block("setup = [\"npm ci\"]\nsetup_on = \"attempt\"")).expect("valid");
    assert_eq!(plan.tasks[0].setup, vec!["npm ci"]);
    assert_eq!(plan.tasks[0].setup_on, SetupOn::Attempt);
    let e = Plan::parse(&task_block("setup_on = \"always\"")).expect_err("bad value");
    assert_eq!(e.path, "tasks[0].setup_on");
}

fn task_block(extra: &str) -> String {
    format!(
        "name = \"s\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a/**\"]\n{extra}"
    )
}

/// (plan text, expected path, a fragment of the rule)
fn bad_plans() -> Vec<(String, &'static str, &'static str)> {
    let two = |deps_b: &str| {
        format!(
            "name = \"s\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n\
             [[tasks]]\nid = \"b\"\nfiles = [\"b\"]\ndeps = {deps_b}\n"
        )
    };
    vec![
        (two("[\"db\"]"), "tasks[1].deps[0]", "unknown task \"db\""),
        (two("[\"b\"]"), "tasks[1].deps[0]", "itself"),
        (two("[\"a\", \"a\"]"), "tasks[1].deps[1]", "duplicate dependency"),
        (
            "name = \"s\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\ndeps = [\"c\"]\n\
             [[tasks]]\nid = \"b\"\nfiles = [\"b\"]\ndeps = [\"a\"]\n[[tasks]]\nid = \"c\"\nfiles = [\"c\"]\ndeps = [\"b\"]\n"
                .into(),
            "tasks[0].deps",
            "dependency cycle: a -> c -> b -> a",
        ),
        (
            "name = \"s\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n[[tasks]]\nid = \"a\"\nfiles = [\"b\"]\n".into(),
            "tasks[1].id",
            "duplicate task id",
        ),
        (task_block("").replace("id = \"a\"", "id = \"Bad Id\""), "tasks[0].id", "must match"),
        (task_block("").replace("name = \"s\"", "name = \"a/b\""), "name", "must match"),
        (format!("base_branch = \"a..b\"\n{}", task_block("")), "base_branch", "'..'"),
        (format!("integration_branch = \"x.lock\"\n{}", task_block("")), "integration_branch", ".lock"),
        (format!("integration_branch = \"main\"\n{}", task_block("")), "integration_branch", "differ"),
        (task_block("").replace("[\"a/**\"]", "[\"/etc/*\"]"), "tasks[0].files[0]", "absolute"),
        (task_block("").replace("[\"a/**\"]", "[\"../x\"]"), "tasks[0].files[0]", "'..'"),
        (task_block("").replace("[\"a/**\"]", "[\"\"]"), "tasks[0].files[0]", "empty"),
        (task_block("").replace("[\"a/**\"]", "[]"), "tasks[0].files", "at least one"),
        (task_block("colour = \"red\""), "tasks[0].colour", "unknown field `colour`"),
        (task_block("").replace("[defaults]", "[defaults]\nretires = 3"), "defaults.retires", "unknown field `retires`"),
        (task_block("strategy = \"octopus\""), "tasks[0].strategy", "unknown variant `octopus`"),
        (task_block("env = { SWARM_TASK_ID = \"x\" }"), "tasks[0].env.SWARM_TASK_ID", "set by the sidecar"),
        (task_block("verify = [{ name = \"t\", command = \"\" }]"), "tasks[0].verify[0].command", "empty"),
        (task_block("retries = 1000"), "tasks[0].retries", "at most 100"),
        ("name = \"s\"\n".into(), "tasks", "at least one task"),
        (task_block("").replace("id = \"a\"", "id = \"integration\""), "tasks[0].id", "collides with integration_branch"),
        // A branch under a task's branch, and a task's branch under another.
        (format!("integration_branch = \"swarm/s/a/int\"\n{}", task_block("")), "tasks[0].id", "collides with integration_branch"),
        (format!("target_branch = \"swarm/s\"\n{}", task_block("")), "tasks[0].id", "collides with target_branch"),
        (task_block("").replace("command = \"true\"", ""), "tasks[0].command", "no worker command"),
        (task_block("labels = { \"bad key\" = \"x\" }"), "tasks[0].labels.bad key", "label key"),
        ("name = \n".into(), "", "TOML"),
    ]
}

#[test]
fn bad_plans_name_the_field_and_the_rule() {
    for (text, path, rule) in bad_plans() {
        let e = Plan::parse(&text).expect_err(&text);
        assert_eq!(e.path, path, "path for {text}\n got: {e}");
        assert!(
            e.rule.contains(rule) || (rule == "TOML" && !e.rule.is_empty()),
            "rule for {text}\n got: {e}"
        );
    }
}

#[test]
fn an_oversized_plan_is_refused_before_parsing() {
    let text = format!("name = \"s\"\n# {}\n", "x".repeat(MAX_PLAN_BYTES));
    let e = Plan::parse(&text).expect_err("too big");
    assert!(e.rule.contains("at most"));
}

#[test]
fn backoff_grows_and_is_capped() {
    let p = RetryPolicy::default();
    assert_eq!(p.backoff_ms(1), 1_000);
    assert_eq!(p.backoff_ms(2), 2_000);
    assert_eq!(p.backoff_ms(3), 4_000);
    assert_eq!(p.backoff_ms(40), 60_000);
}

proptest::proptest! {
    #[test]
    fn arbitrary_text_never_panics_the_parser(text in ".{0,400}") {
        let _ = Plan::parse(&text);
    }
}

#[test]
fn an_agent_task_needs_no_command_and_keeps_its_settings() {
    let text = r#"
name = "s"
[defaults]
agent = "claude"
model = "sonnet"
max_turns = 30
permissions = { allow = ["Edit(src/**)", "Bash(cargo test:*)"], deny = ["Bash(rm:*)"], otherwise = "deny" }
[[tasks]]
id = "a"
files = ["src/**"]
max_budget_usd = 2.5
[[tasks]]
id = "b"
files = ["b/**"]
command = "true"
"#;
    let plan = Plan::parse(text).expect("valid plan");
    let a = &plan.tasks[0];
    assert!(a.command.is_empty());
    let agent = a.agent.as_ref().expect("an agent");
    assert_eq!(agent.kind, AgentKind::Claude);
    assert_eq!(agent.model.as_deref(), Some("sonnet"));
    assert_eq!(agent.max_turns, Some(30));
    assert_eq!(agent.max_budget_usd, Some(2.5));
    assert_eq!(agent.permissions.allow[1].to_string(), "Bash(cargo test:*)");
    assert_eq!(agent.permissions.deny[0].tool, "Bash");
    assert_eq!(agent.permissions.otherwise, Otherwise::Deny);
    // A task's own command beats the defaults' agent.
    assert!(plan.tasks[1].agent.is_none());
    assert_eq!(plan.tasks[1].command.to_vec(), vec!["sh", "-c", "true"]);
}

#[test]
fn bad_agent_settings_name_the_field_and_the_rule() {
    let cases = [
        ("agent = \"gemini\"", "tasks[0].agent", "unknown variant"),
        ("agent = \"claude\"\ncommand = \"x\"", "tasks[0].agent", "not both"),
        ("model = \"opus\"", "tasks[0].model", "needs an agent"),
        ("agent = \"claude\"\nmax_turns = 0", "tasks[0].max_turns", "at least 1"),
        ("agent = \"claude\"\nmax_budget_usd = -1.0", "tasks[0].max_budget_usd", "more than 0"),
        ("agent = \"claude\"\npermission_mode = \"yolo\"", "tasks[0].permission_mode", "one of"),
        ("agent = \"codex\"\npermission_mode = \"plan\"", "tasks[0].permission_mode", "claude"),
        ("agent = \"codex\"\npermissions = { allow = [\"Edit(\"] }", "tasks[0].permissions.allow[0]", "')'"),
        ("agent = \"claude\"\npermissions = { allow = [\"Edit(\"] }", "tasks[0].permissions.allow[0]", "')'"),
        (
            "agent = \"claude\"\npermissions = { otherwise = \"maybe\" }",
            "tasks[0].permissions.otherwise",
            "unknown variant",
        ),
        ("agent = \"claude\"\nallowed_tools = [\"Bad Tool\"]", "tasks[0].allowed_tools[0]", "tool name"),
    ];
    for (extra, path, rule) in cases {
        let text = format!("name = \"s\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a/**\"]\n{extra}");
        let e = Plan::parse(&text).expect_err(extra);
        assert_eq!(e.path, path, "{extra}: {e}");
        assert!(e.rule.contains(rule), "{extra}: {e}");
    }
}

#[test]
fn an_acp_agent_is_its_command_line() {
    let text = r#"
name = "s"
[defaults]
agent = "acp"
agent_command = ["gemini", "--experimental-acp"]
permissions = { allow = ["Read"], otherwise = "ask" }
[[tasks]]
id = "a"
files = ["src/**"]
extra_args = ["--debug"]
"#;
    let plan = Plan::parse(text).expect("valid plan");
    let agent = plan.tasks[0].agent.as_ref().expect("an agent");
    assert_eq!(agent.kind, AgentKind::Acp);
    assert_eq!(agent.path.as_deref(), Some("gemini"));
    assert_eq!(agent.extra_args, ["--experimental-acp", "--debug"], "the command's arguments come first");
    assert_eq!(agent.permissions.allow[0].to_string(), "Read");
}

#[test]
fn acp_settings_name_the_field_and_the_rule() {
    let cases = [
        ("agent = \"acp\"", "tasks[0].agent_command", "needs agent_command"),
        ("agent = \"acp\"\nagent_command = []", "tasks[0].agent_command", "non-empty"),
        ("agent = \"acp\"\nagent_command = [\" \"]", "tasks[0].agent_command[0]", "must not be empty"),
        ("agent = \"acp\"\nagent_command = [\"x\", \"a\\u0000\"]", "tasks[0].agent_command[1]", "NUL"),
        ("agent = \"acp\"\nagent_command = \"gemini\"", "tasks[0].agent_command", "sequence"),
        ("agent = \"acp\"\nagent_command = [\"x\"]\nmodel = \"opus\"", "tasks[0].model", "agent_command"),
        (
            "agent = \"acp\"\nagent_command = [\"x\"]\nagent_path = \"/x\"",
            "tasks[0].agent_path",
            "agent_command",
        ),
        ("agent = \"acp\"\nagent_command = [\"x\"]\nmax_turns = 3", "tasks[0].max_turns", "no max_turns"),
        ("agent = \"claude\"\nagent_command = [\"x\"]", "tasks[0].agent_command", "is for agent = \"acp\""),
        ("agent_command = [\"x\"]", "tasks[0].agent_command", "needs an agent"),
        (
            "review = { agent = \"acp\", prompt = \"p\" }\ncommand = \"true\"",
            "tasks[0].review.agent",
            "claude",
        ),
    ];
    for (extra, path, rule) in cases {
        let text = format!("name = \"s\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a/**\"]\n{extra}");
        let e = Plan::parse(&text).expect_err(extra);
        assert_eq!(e.path, path, "{extra}: {e}");
        assert!(e.rule.contains(rule), "{extra}: {e}");
    }
}

#[test]
fn on_empty_fails_agents_and_merges_commands_unless_set() {
    let plan = Plan::parse(
        "name = \"s\"\n[defaults]\ncommand = \"true\"\n\
         [[tasks]]\nid = \"cmd\"\nfiles = [\"a\"]\n\
         [[tasks]]\nid = \"agent\"\nagent = \"claude\"\nfiles = [\"b\"]\n\
         [[tasks]]\nid = \"lenient\"\nagent = \"claude\"\nfiles = [\"c\"]\non_empty = \"merge\"\n",
    )
    .expect("plan");
    let on_empty: Vec<OnEmpty> = plan.tasks.iter().map(|t| t.on_empty).collect();
    assert_eq!(on_empty, [OnEmpty::Merge, OnEmpty::Fail, OnEmpty::Merge]);
    let strict = Plan::parse(
        "name = \"s\"\n[defaults]\ncommand = \"true\"\non_empty = \"fail\"\n\
         [[tasks]]\nid = \"cmd\"\nfiles = [\"a\"]\n",
    )
    .expect("plan");
    assert_eq!(strict.tasks[0].on_empty, OnEmpty::Fail);
}

#[test]
fn a_bad_on_empty_names_its_field() {
    for (doc, path) in [
        (task_block("on_empty = \"skip\"\n"), "tasks[0].on_empty"),
        (
            "name = \"s\"\n[defaults]\ncommand = \"true\"\non_empty = \"ok\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n"
                .to_string(),
            "defaults.on_empty",
        ),
    ] {
        let e = Plan::parse(&doc).expect_err(path);
        assert_eq!(e.path, path, "{e}");
        assert!(e.to_string().contains("fail"), "the rule names the choices: {e}");
    }
}

//! The forge loop with the real Claude Code CLI (against the scripted
//! Messages API) and the scripted GitHub: a three-task swarm opens one pull
//! request with its report, and a failed check's log reaches the agent of
//! the task whose file it names, whose fix is pushed to the same pull
//! request.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use serde_json::json;
use swarm_tests::github::{GitHub, Pull};
use swarm_tests::messages_api::{Script, Step};
use swarm_tests::{
    ControllerProc, Proc, RealClaude, TaskBuilder, TempRepo, WAIT, claude_task, git_cli,
    spawn_controller_env, spawn_sidecar_env, stdout, swarmctl, wait_until,
};

const TOKEN: &str = "ghs_realclaudeforgetoken0123456789";
const TOKEN_VAR: &str = "FORGE_REAL_CLAUDE_TOKEN";

/// An agent that writes `path` with `content`, or with `fixed` once its
/// conversation carries `feedback` (the check's log the forge handed
/// back); a resumed conversation goes on at its third step.
fn writer(
    name: &str,
    path: &'static str,
    content: &'static str,
    fixed: Option<(&'static str, &'static str)>,
) -> Script {
    let write = move || {
        Step::dynamic(move |r| {
            let text = match fixed {
                Some((feedback, fixed)) if r.user_text().contains(feedback) => fixed,
                _ => content,
            };
            Step::tool("Write", json!({"file_path": r.abs(path), "content": text}))
        })
    };
    Script::new(name, vec![write(), Step::text("Written."), write(), Step::text("Fixed.")])
}

/// The repository the swarm works on, its scripted GitHub, a controller
/// allowed the token and polling the forge every 200 ms, and `sidecars`
/// sidecars whose agents read `claude`'s home.
struct Rig {
    _repo: TempRepo,
    gh: GitHub,
    controller: ControllerProc,
    _sidecars: Vec<Proc>,
}

impl Rig {
    fn start(claude: &RealClaude, sidecars: usize) -> Rig {
        let repo = TempRepo::with_files(&[("src/keep.txt", "keep\n"), ("docs/keep.txt", "keep\n")]);
        let gh = GitHub::for_checkout(repo.path(), "acme", "app", TOKEN, "swarm-bot");
        let allow = format!("env:{TOKEN_VAR}");
        let controller = spawn_controller_env(
            repo.path(),
            &["--forge-secret", &allow, "--forge-poll-ms", "200"],
            &[(TOKEN_VAR, TOKEN)],
        );
        let home = claude.home().to_str().unwrap().to_string();
        let sidecars = (1..=sidecars)
            .map(|n| {
                spawn_sidecar_env(&controller.url(), repo.path(), &format!("w{n}"), &[], &[("HOME", &home)])
            })
            .collect();
        Rig { _repo: repo, gh, controller, _sidecars: sidecars }
    }

    /// Creates swarm `name` of `tasks` (agents may write under src/ and
    /// docs/) with the scripted GitHub as its forge; its pull request
    /// once opened.
    fn create(&self, claude: &RealClaude, name: &str, tasks: Vec<TaskBuilder>) -> Pull {
        let forge = format!(
            "[forge]\nprovider = \"github\"\nremote = \"origin\"\napi_url = \"{}\"\ntoken = {{ env = \"{TOKEN_VAR}\" }}\n",
            self.gh.api_url()
        );
        let mut plan = claude
            .plan(name)
            .default("permissions", r#"{ allow = ["Write(src/**)", "Write(docs/**)"], otherwise = "deny" }"#);
        for task in tasks {
            plan = plan.task(task);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.toml");
        std::fs::write(&path, plan.tables(&forge).build()).unwrap();
        assert!(swarmctl(&self.controller.url(), &["create", path.to_str().unwrap()]).status.success());
        wait_until("the pull request opens", WAIT * 2, || {
            self.gh.pulls("acme", "app").into_iter().find(|p| p.open && !p.draft)
        })
    }
}

#[test]
fn the_real_cli_s_work_opens_a_pull_request_and_a_failed_check_reaches_its_agent() {
    let test = "the_real_cli_s_work_opens_a_pull_request_and_a_failed_check_reaches_its_agent";
    let scripts = vec![
        writer("wa", "src/a.txt", "a\n", None),
        writer("wb", "src/b.txt", "b\n", Some(("want FIXED", "FIXED\n"))),
        writer("wc", "docs/c.txt", "c\n", None),
    ];
    let Some(claude) = RealClaude::start(test, scripts) else { return };
    let rig = Rig::start(&claude, 2);
    let tasks = vec![
        claude_task("a", &["src/a.txt"], "wa", "Write a."),
        claude_task("b", &["src/b.txt"], "wb", "Write b.").deps(&["a"]),
        claude_task("c", &["docs/**"], "wc", "Write c."),
    ];
    let pr = rig.create(&claude, "rc", tasks);
    let (gh, controller) = (&rig.gh, &rig.controller);
    let body = pr.body.clone().unwrap_or_default();
    assert!(body.contains("3/3 merged") && body.contains("| b |"), "the report:\n{body}");
    let bare = gh.repo_path("acme", "app");
    assert_eq!(git_cli(&bare, &["show", &format!("{}:src/b.txt", pr.head_sha)]), "b");

    let log = "running tests\n---- b ----\nassertion failed at src/b.txt:1: want FIXED\n".to_string();
    gh.add_check_run(
        "acme",
        "app",
        &pr.head_sha,
        "ci",
        "completed",
        Some("failure"),
        Some("1 failed"),
        Some(log),
    );
    let fixed = wait_until("the agent's fix is pushed to the same pull request", WAIT * 2, || {
        gh.pulls("acme", "app").into_iter().find(|p| p.head_sha != pr.head_sha)
    });
    assert_eq!(fixed.number, pr.number);
    assert_eq!(gh.pulls("acme", "app").len(), 1);
    assert_eq!(git_cli(&bare, &["show", &format!("{}:src/b.txt", fixed.head_sha)]), "FIXED");

    // b's second attempt resumed the session that wrote b, with the log.
    let described = stdout(&swarmctl(&controller.url(), &["describe", "task", "rc/b", "-o", "json"]));
    let v: serde_json::Value = serde_json::from_str(&described).unwrap();
    assert_eq!(v["task"]["attempts"], 2, "{described}");
    let sessions: Vec<&str> = v["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["session_id"].as_str().unwrap_or_default())
        .collect();
    assert!(!sessions[0].is_empty() && sessions[0] == sessions[1], "the same session: {sessions:?}");
    let requests = claude.api.requests_of("wb");
    let steps: Vec<usize> = requests.iter().filter_map(|r| r.step).collect();
    assert_eq!(steps, [0, 1, 2, 3], "the resumed conversation went on:\n{}", claude.api.summary());
    let resumed = &requests[2];
    assert_eq!(resumed.headers.get("x-claude-code-session-id").map(String::as_str), Some(sessions[0]));
    let said = resumed.user_text();
    assert!(said.contains("merged and is under review") && said.contains("want FIXED"), "{said}");
    for other in ["rc/a", "rc/c"] {
        let d = stdout(&swarmctl(&controller.url(), &["describe", "task", other, "-o", "json"]));
        let v: serde_json::Value = serde_json::from_str(&d).unwrap();
        assert_eq!(v["task"]["attempts"], 1, "{other} was left alone: {d}");
    }
}

/// The thread a task's feedback hands its agent (`thread `review-comment:N``).
fn handed_thread(text: &str) -> Option<String> {
    let at = text.find("thread `review-comment:")? + "thread `".len();
    let end = text[at..].find('`')?;
    Some(text[at..at + end].to_string())
}

#[test]
fn the_real_cli_answers_its_reviewer_on_the_thread_it_was_given() {
    let test = "the_real_cli_answers_its_reviewer_on_the_thread_it_was_given";
    // c's agent writes its file; resumed with the review, it first tries a
    // thread it was not given, then answers its own and makes the change.
    let reply = |thread: Option<String>, text: &str| {
        Step::tool("mcp__swarm__reply", json!({"thread": thread.unwrap_or_default(), "text": text}))
    };
    let c = Script::new(
        "wc",
        vec![
            Step::dynamic(|r| {
                Step::tool("Write", json!({"file_path": r.abs("docs/c.txt"), "content": "c\n"}))
            }),
            Step::text("Written."),
            Step::dynamic(move |_| reply(Some("review-comment:987654".into()), "Not mine to answer.")),
            Step::dynamic(move |r| reply(handed_thread(&r.user_text()), "Renamed it, as you asked.")),
            Step::dynamic(|r| {
                Step::tool("Write", json!({"file_path": r.abs("docs/c.txt"), "content": "renamed\n"}))
            }),
            Step::text("Renamed."),
        ],
    );
    let a = Script::new(
        "wa",
        vec![
            Step::dynamic(|r| {
                Step::tool("Write", json!({"file_path": r.abs("src/a.txt"), "content": "a\n"}))
            }),
            Step::text("Written."),
        ],
    );
    let Some(claude) = RealClaude::start(test, vec![a, c]) else { return };
    let rig = Rig::start(&claude, 1);
    rig.gh.add_collaborator("acme", "app", "alice", "write");
    let tasks = vec![
        claude_task("a", &["src/a.txt"], "wa", "Write a."),
        claude_task("c", &["docs/**"], "wc", "Write c."),
    ];
    let pr = rig.create(&claude, "rp", tasks);
    let (gh, controller) = (&rig.gh, &rig.controller);
    let state = |name: &str| {
        let d = stdout(&swarmctl(&controller.url(), &["describe", "swarm", name, "-o", "json"]));
        serde_json::from_str::<serde_json::Value>(&d).unwrap_or_default()["swarm"]["state"].clone()
    };
    // Every task merged, the pull request open: waiting on people, not done.
    wait_until("the swarm is LANDING", WAIT, || (state("rp") == "LANDING").then_some(()));

    let comment =
        gh.add_review_comment("acme", "app", pr.number, "alice", "docs/c.txt", 1, "please rename it");
    let replies_path = format!("/api/v3/repos/acme/app/pulls/{}/comments/{comment}/replies", pr.number);
    let answer = wait_until("c's agent answers alice on her thread", WAIT * 2, || {
        gh.requests()
            .into_iter()
            .find(|r| r.method == "POST" && r.path == replies_path && r.status == 201)
            .map(|r| r.body["body"].as_str().unwrap_or_default().to_string())
    });
    assert!(answer.starts_with("Renamed it, as you asked."), "{answer}");
    assert!(answer.contains("the agent of task `c`"), "signed: {answer}");
    let head = gh.pulls("acme", "app")[0].head_sha.clone();
    assert_ne!(head, pr.head_sha, "the answer came with the change pushed");
    let bare = gh.repo_path("acme", "app");
    assert_eq!(git_cli(&bare, &["show", &format!("{head}:docs/c.txt")]), "renamed");

    // The thread c was not given got nothing; the refusal is on record.
    let posts = gh.requests().into_iter().filter(|r| r.method == "POST" && r.path.contains("987654")).count();
    assert_eq!(posts, 0, "{}", gh.summary());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let events = rt.block_on(swarm_tests::events(&controller.url(), "rp", 0, 1));
    let refused = events.iter().find(|e| e.kind == "task.reply_refused").expect("task.reply_refused");
    assert!(refused.message.contains("was not handed to this task"), "{refused:?}");
    // Answered once, whatever the polls since.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let answered = gh.requests().into_iter().filter(|r| r.method == "POST" && r.path == replies_path).count();
    assert_eq!(answered, 1, "{}", gh.summary());
    assert_eq!(state("rp"), "LANDING", "the pull request has not merged");
}

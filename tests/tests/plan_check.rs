//! `swarmctl check PLAN`: the real binary checks hand-written plans against
//! a real git repository, offline (no controller is started).
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::process::Output;

use swarm_tests::{TempRepo, stderr, stdout, swarmctl};

/// Nothing listens here: `check` must not need a controller.
const NOWHERE: &str = "http://127.0.0.1:9";

/// A Rust-looking repository: it has tests (Cargo.toml), a lockfile and a
/// module registry.
fn repo() -> TempRepo {
    TempRepo::with_files(&[
        ("Cargo.toml", "[package]\nname = \"x\"\n"),
        ("Cargo.lock", "# lock\n"),
        ("src/lib.rs", "pub mod a;\n"),
        ("src/a.rs", "\n"),
        ("docs/guide.md", "# guide\n"),
    ])
}

/// Writes `tasks` (TOML) under a header that verifies every task, and runs
/// `swarmctl check` on it with `extra` arguments.
fn check(repo: &TempRepo, tasks: &str, extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    let text = format!(
        "name = \"p\"\n[defaults]\ncommand = \"true\"\nverify = [{{ name = \"test\", command = \"cargo test\" }}]\n{tasks}"
    );
    std::fs::write(&plan, text).unwrap();
    let mut args = vec!["check", plan.to_str().unwrap(), "--repo", repo.path().to_str().unwrap()];
    args.extend_from_slice(extra);
    swarmctl(NOWHERE, &args)
}

#[test]
fn a_valid_plan_exits_0_with_a_summary() {
    let repo = repo();
    let out = check(
        &repo,
        "[[tasks]]\nid = \"a\"\nfiles = [\"src/a.rs\"]\n\
         [[tasks]]\nid = \"docs\"\nfiles = [\"docs/\", \"docs/new/*.md\"]\n",
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "stdout: {}\nstderr: {}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains(": ok: 0 errors, 0 warnings against 5 files"), "{}", stdout(&out));
}

#[test]
fn an_overlapping_plan_names_both_tasks_and_a_file() {
    let repo = repo();
    let out = check(
        &repo,
        "[[tasks]]\nid = \"api\"\nfiles = [\"src/*.rs\"]\n\
         [[tasks]]\nid = \"core\"\nfiles = [\"src/a.rs\", \"docs/\"]\n",
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "stdout: {}\nstderr: {}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("error: tasks[0].files[0]: "), "{text}");
    assert!(text.contains(r#"tasks "api" and "core" may run at once"#), "{text}");
    assert!(text.contains(r#""src/a.rs""#), "{text}");
    assert!(text.contains("invalid: 1 error"), "{text}");
}

#[test]
fn a_glob_under_a_missing_directory_is_refused_naming_it() {
    let repo = repo();
    let out = check(&repo, "[[tasks]]\nid = \"a\"\nfiles = [\"src/a.rs\", \"nothere/x.rs\"]\n", &[]);
    assert_eq!(out.status.code(), Some(1), "stdout: {}\nstderr: {}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("error: tasks[0].files[1]: "), "{text}");
    assert!(
        text.contains(r#""nothere/x.rs""#) && text.contains(r#"directory "nothere" does not exist"#),
        "{text}"
    );
}

#[test]
fn a_warning_only_plan_exits_0_and_prints_the_warning() {
    let repo = repo();
    let out = check(
        &repo,
        "[[tasks]]\nid = \"a\"\nfiles = [\"src/a.rs\", \"Cargo.lock\"]\n\
         [[tasks]]\nid = \"b\"\nfiles = [\"docs/\", \"Cargo.lock\"]\n",
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "stdout: {}\nstderr: {}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(r#"warning: tasks[0].files[1]: "Cargo.lock""#), "{text}");
    assert!(text.contains("0 errors, 1 warning"), "{text}");
}

#[test]
fn json_output_says_whether_the_plan_is_valid_and_lists_findings() {
    let repo = repo();
    let out = check(&repo, "[[tasks]]\nid = \"a\"\nfiles = [\"src/a.rs\"]\n", &["--planned", "-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "stdout: {}\nstderr: {}", stdout(&out), stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["valid"], false, "{v}");
    assert_eq!(v["findings"][0]["path"], "tasks[0].estimate", "{v}");
    assert_eq!(v["findings"][0]["severity"], "error", "{v}");

    let out = check(&repo, "[[tasks]]\nid = \"a\"\nfiles = [\"src/a.rs\"]\n", &["-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!((v["valid"].clone(), v["findings"].clone()), (serde_json::json!(true), serde_json::json!([])));
}

#[test]
fn a_plan_that_does_not_parse_names_the_file_field_and_rule() {
    let repo = repo();
    let out = check(&repo, "[[tasks]]\nid = \"a\"\nfiles = [\"src/a.rs\"]\ndeps = [\"db\"]\n", &[]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.starts_with("error: ") && text.contains(r#"plan.toml: tasks[0].deps[0]: unknown task "db""#),
        "{text}"
    );
}

#[test]
fn a_directory_that_is_no_repository_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    std::fs::write(
        &plan,
        "name = \"p\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n",
    )
    .unwrap();
    let out = swarmctl(NOWHERE, &["check", plan.to_str().unwrap(), "--repo", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("not a git repository"), "{}", stderr(&out));
}

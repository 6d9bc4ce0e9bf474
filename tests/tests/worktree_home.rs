//! Where local mode's worktrees live: in swarm's own state directory
//! (`$XDG_STATE_HOME/swarm/<repo hash>/workspaces/`), not under the user's
//! checkout, which workers may not read. What that buys: cargo finds no
//! unreadable workspace manifest above a package, Claude Code edits under
//! `acceptEdits` without asking (it asks for any file under a `.git/`),
//! and worktrees an older swarmctl left in `.git/workspaces/` are moved,
//! their uncommitted work with them.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use swarm_proto::v1::{self, TaskState};
use swarm_tests::messages_api::{Request, Script, Step};
use swarm_tests::{
    Cluster, Needs, PlanBuilder, RealClaude, TempRepo, binary, claude_task, create_swarm, operator, skip_for,
    stderr, stdout, task, wait_output, wait_task_state, worker_script,
};

/// `swarmctl run --plain` of `plan` on `repo` with `XDG_STATE_HOME=state`.
fn run(repo: &Path, plan: &str, workers: u32, state: &Path) -> std::process::Output {
    run_with(repo, plan, workers, state, &[])
}

/// As [`run`], with `extra` flags for `swarmctl run`.
fn run_with(repo: &Path, plan: &str, workers: u32, state: &Path, extra: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let child = Command::new(binary("swarmctl"))
        .args(["run", "--plain", "--workers", &workers.to_string()])
        .args(extra)
        .arg("--repo")
        .arg(repo)
        .arg(&plan_path)
        .env("XDG_STATE_HOME", state)
        .env("XDG_RUNTIME_DIR", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, Duration::from_secs(300))
}

/// The one repository directory under `<state>/swarm/`, which names its checkout.
fn state_dir(state: &Path, repo: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> =
        std::fs::read_dir(state.join("swarm")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(dirs.len(), 1, "one directory per repository: {dirs:?}");
    let named = std::fs::read_to_string(dirs[0].join("repo")).unwrap();
    assert_eq!(Path::new(named.trim()), repo.canonicalize().unwrap());
    dirs[0].clone()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn local_worktrees_live_in_the_state_directory_not_in_the_checkout() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let state = tempfile::tempdir().unwrap();
    let plan = PlanBuilder::new("home").task(task("a")).task(task("b")).build();
    let out = run(repo.path(), &plan, 2, state.path());
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    assert!(!repo.path().join(".git/workspaces").exists(), "nothing of the worktrees in the checkout");
    let dir = state_dir(state.path(), repo.path());
    assert_eq!(mode(&dir), 0o700, "{} is private", dir.display());
    let ws = dir.join("workspaces").canonicalize().unwrap();
    let list = git(repo.path(), &["worktree", "list", "--porcelain"]);
    for id in ["local-1", "local-2"] {
        let wt = ws.join(id);
        assert!(wt.join(".git").is_file() && ws.join(format!("{id}.journal")).is_file(), "{id}");
        assert!(list.contains(&format!("worktree {}\n", wt.display())), "git knows {id} there:\n{list}");
    }
    assert_eq!(repo.file("swarm/home/integration", "a.txt").as_deref(), Some("a\n"));
}

/// cargo walks up from a package looking for the workspace it belongs to;
/// above a worktree in the checkout's `.git/` it met the checkout's own
/// `Cargo.toml`, which the sandbox does not let it read, and failed. The
/// worker's `PATH` names the toolchain's own `bin` (a PATH entry is
/// readable); nothing else is set for the sandbox.
#[test]
fn cargo_reads_a_package_that_is_not_its_own_workspace_root_with_no_sandbox_settings() {
    const TEST: &str = "cargo_reads_a_package_that_is_not_its_own_workspace_root_with_no_sandbox_settings";
    if !swarm_sidecar::sandbox::probe().is_full() {
        return skip_for(TEST, Needs::Kernel, "the kernel does not enforce the whole sandbox");
    }
    let sysroot =
        Command::new("rustc").args(["--print", "sysroot"]).output().ok().filter(|o| o.status.success());
    let Some(bin) = sysroot.map(|o| Path::new(String::from_utf8_lossy(&o.stdout).trim()).join("bin")) else {
        return skip_for(TEST, Needs::Program("cargo"), "no rustc on PATH");
    };
    if !bin.join("cargo").is_file() {
        return skip_for(TEST, Needs::Program("cargo"), &format!("no cargo in {}", bin.display()));
    }
    let meta = "cargo metadata --offline --no-deps --format-version 1 > metadata.json";
    let repo = TempRepo::with_files(&[
        ("worker.sh", &worker_script(&[("meta", meta)])),
        // No [workspace]: cargo looks for one above it.
        ("Cargo.toml", "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
        ("src/main.rs", "fn main() {}\n"),
    ]);
    let env = format!("{{ PATH = \"{}:/usr/bin:/bin\" }}", bin.display());
    let plan =
        PlanBuilder::new("rs").default("env", &env).task(task("meta").files(&["metadata.json"])).build();
    let state = tempfile::tempdir().unwrap();
    let out = run(repo.path(), &plan, 1, state.path());
    let logs = state_dir(state.path(), repo.path()).join("workspaces/local-1/.swarm/logs");
    let worker_log: String = std::fs::read_dir(&logs)
        .map(|dir| dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok()).collect())
        .unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nworker:\n{worker_log}", stdout(&out));
    let text = stdout(&out);
    let sandbox = text.lines().find(|l| l.contains("attempt.sandbox")).unwrap_or_default();
    assert!(sandbox.contains("enforced filesystem"), "the worker was confined: {sandbox}");
    let metadata = repo.file("swarm/rs/integration", "metadata.json").unwrap_or_default();
    let parsed: serde_json::Value = serde_json::from_str(&metadata).unwrap();
    assert_eq!(parsed["packages"][0]["name"], "tiny", "{metadata}");
}

/// Worktrees an older swarmctl kept in the checkout's `.git/workspaces/`
/// move to the state directory on the first run of this one, registered
/// with git there; a worktree no sidecar of this run uses keeps its
/// uncommitted file, and the old directory is gone.
#[test]
fn an_older_runs_worktrees_move_out_of_the_checkout_with_their_uncommitted_work() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let old = repo.path().join(".git/workspaces");
    for id in ["local-1", "local-2"] {
        let wt = old.join(id);
        git(repo.path(), &["worktree", "add", "-q", "--detach", wt.to_str().unwrap(), "HEAD"]);
        std::fs::write(old.join(format!("{id}.journal")), "").unwrap();
    }
    std::fs::write(old.join("local-2/wip.txt"), "uncommitted\n").unwrap();
    let state = tempfile::tempdir().unwrap();
    let plan = PlanBuilder::new("mv").task(task("a")).build();
    let out = run(repo.path(), &plan, 1, state.path());
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("worktree local-2: moved"), "{}", stderr(&out));
    assert!(!old.exists(), "the old directory is gone");
    let ws = state_dir(state.path(), repo.path()).join("workspaces").canonicalize().unwrap();
    assert_eq!(std::fs::read_to_string(ws.join("local-2/wip.txt")).unwrap(), "uncommitted\n");
    assert_eq!(git(&ws.join("local-2"), &["status", "--porcelain"]), "?? wip.txt\n");
    let list = git(repo.path(), &["worktree", "list", "--porcelain"]);
    for id in ["local-1", "local-2"] {
        assert!(list.contains(&format!("worktree {}\n", ws.join(id).display())), "{id}:\n{list}");
    }
    assert!(!list.contains(".git/workspaces"), "{list}");
    assert_eq!(repo.file("swarm/mv/integration", "a.txt").as_deref(), Some("a\n"), "local-1 worked there");
}

/// Claude Code asks before editing any file under a `.git/` directory,
/// whatever its permission mode: with the worktree in `.git/workspaces/`
/// every edit under `acceptEdits` came to the sidecar as a permission
/// request. In a workspaces directory of its own the edit is made without
/// one. (The same task on a sidecar with the old place is the control.)
#[tokio::test(flavor = "multi_thread")]
async fn claude_code_under_accept_edits_edits_an_owned_file_without_a_permission_request() {
    let steps = |path: &'static str| {
        vec![Step::file("Write", path, json!({"content": "written\n"})), Step::text("Done.")]
    };
    let scripts = vec![Script::new("outside", steps("src/a.txt")), Script::new("inside", steps("src/b.txt"))];
    let test = "claude_code_under_accept_edits_edits_an_owned_file_without_a_permission_request";
    let Some(claude) = RealClaude::start(test, scripts) else { return };
    let state = tempfile::tempdir().unwrap();
    let home = claude.home().to_str().unwrap().to_string();
    let places = [("outside", Some(state.path().join("workspaces"))), ("inside", None)];
    for (script, workspaces) in places {
        let repo = TempRepo::with_files(&[("README.md", "r\n")]);
        let mut env = vec![("HOME", home.clone())];
        if let Some(ws) = &workspaces {
            env.push(("SWARM_WORKSPACES", ws.to_str().unwrap().to_string()));
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let cluster = Cluster::start_env(&repo, 1, &[], &env);
        let url = cluster.url();
        let file = if script == "outside" { "src/a.txt" } else { "src/b.txt" };
        let plan = claude
            .plan(script)
            .default("permissions", r#"{ allow = ["Edit(src/**)", "Write(src/**)"], otherwise = "deny" }"#)
            .task(
                claude_task("t", &["src/**"], script, &format!("Write {file}."))
                    .set("permission_mode", "\"acceptEdits\""),
            )
            .build();
        create_swarm(&url, &plan).await;
        wait_task_state(&url, script, "t", TaskState::Merged).await;
        let results = claude.api.requests_of(script).last().map(Request::tool_results).unwrap_or_default();
        assert!(results.len() == 1 && !results[0].is_error, "{script}: written: {results:?}");
        let tree = repo.tree(&format!("swarm/{script}/integration"));
        assert_eq!(tree.get(file).map(String::as_str), Some("written\n"), "{script}: {tree:?}");
        let asked = permission_events(&url, &format!("{script}/t")).await;
        match workspaces {
            Some(ws) => {
                assert!(asked.is_empty(), "no permission request reached the sidecar: {asked:#?}");
                assert!(ws.join("w1").is_dir(), "it worked in {}", ws.display());
            }
            None => assert!(!asked.is_empty(), "control: the CLI asks under .git/"),
        }
    }
}

/// The task's events that record a permission request the sidecar
/// decided (`note: permission allowed: …`, or denied).
async fn permission_events(url: &str, task_id: &str) -> Vec<String> {
    let mut op = operator(url).await;
    let req = v1::GetTaskRequest { task_id: task_id.to_string() };
    let events = op.get_task(req).await.expect("GetTask").into_inner().events;
    let decided = |m: &String| m.contains("permission allowed: ") || m.contains("permission denied: ");
    events.into_iter().map(|e| e.message).filter(decided).collect()
}

/// As root with `--worker-user`, the state directory lets the worker
/// user's group search it (mode 0710), so its workers reach their
/// worktrees; a state home the user cannot pass stops the run before any
/// sidecar starts, naming `XDG_STATE_HOME`.
#[test]
fn a_worker_user_reaches_its_worktrees_in_the_state_directory() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let test = "a_worker_user_reaches_its_worktrees_in_the_state_directory";
    if !swarm_tests::is_root() {
        return skip_for(test, Needs::Root, "only root may run its workers as another user");
    }
    let gid = Command::new("id").args(["-g", "nobody"]).output().ok().filter(|o| o.status.success());
    let Some(gid) = gid.and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<u32>().ok()) else {
        return skip_for(test, Needs::Program("id"), "no user nobody");
    };
    let open = |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    open(repo.path());
    let plan = PlanBuilder::new("wu").task(task("a")).build();
    let run_as = |state: &Path| run_with(repo.path(), &plan, 1, state, &["--worker-user", "nobody"]);
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = run_as(private.path());
    assert_ne!(out.status.code(), Some(0), "stdout:\n{}", stdout(&out));
    assert!(stderr(&out).contains("set XDG_STATE_HOME"), "{}", stderr(&out));

    let state = tempfile::tempdir().unwrap();
    open(state.path());
    let out = run_as(state.path());
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    let dir = state_dir(state.path(), repo.path());
    for d in [dir.clone(), dir.join("workspaces")] {
        let meta = std::fs::metadata(&d).unwrap();
        assert_eq!((meta.mode() & 0o777, meta.gid()), (0o710, gid), "{}", d.display());
    }
    assert_eq!(repo.file("swarm/wu/integration", "a.txt").as_deref(), Some("a\n"));
}

//! A confined worker finds the user's toolchains without a setting, and a
//! denial is explained: cargo builds a crate through rustup's proxies and
//! a venv made from a pyenv interpreter runs, both with no `sandbox`
//! settings in the plan; a worker that fails reading a path outside the
//! sandbox is told the path and the setting that allows it, and `swarmctl
//! sandbox check` names what a plan's verify command was denied.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use swarm_tests::{
    Needs, PlanBuilder, TempRepo, binary, skip_for, stderr, stdout, task, wait_output, worker_script,
};

/// Why the sandbox tests cannot run here, if they cannot.
fn landlock_missing() -> Option<String> {
    let cap = swarm_sidecar::sandbox::probe();
    (!cap.is_full())
        .then(|| format!("the kernel enforces Landlock ABI {} of the 6 the sandbox needs", cap.abi))
}

/// `swarmctl run --plain` of `plan` on `repo` with one local sidecar, with
/// `path` as its `PATH` when given; bounded.
fn run_local(repo: &Path, plan: &str, path: Option<&str>) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let mut cmd = Command::new(binary("swarmctl"));
    cmd.args(["run", "--plain", "--workers", "1", "--repo"])
        .arg(repo)
        .arg(&plan_path)
        .env("XDG_RUNTIME_DIR", dir.path())
        .env("XDG_STATE_HOME", swarm_tests::state_home())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    wait_output(cmd.spawn().unwrap(), Duration::from_secs(300))
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file())
}

/// The `attempt.sandbox` line of `task`'s first attempt.
fn sandbox_line<'a>(out: &'a str, task: &str) -> &'a str {
    let line = out.lines().find(|l| l.contains(&format!("/{task}#1")) && l.contains("attempt.sandbox"));
    line.unwrap_or_else(|| panic!("an attempt.sandbox event for {task}:\n{out}"))
}

#[test]
fn cargo_builds_a_crate_confined_with_no_sandbox_settings() {
    let name = "cargo_builds_a_crate_confined_with_no_sandbox_settings";
    if let Some(why) = landlock_missing() {
        return skip_for(name, Needs::Kernel, &why);
    }
    if on_path("cargo").is_none() {
        return skip_for(name, Needs::Program("cargo"), "no cargo on PATH");
    }
    let build = "cargo build --offline -q\nls target/debug > built.txt";
    let repo = TempRepo::with_files(&[
        ("worker.sh", &worker_script(&[("build", build)])),
        // Its own workspace root, so that cargo does not look for one in
        // the directories above the worktree, wherever worktrees live.
        (
            "Cargo.toml",
            "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
        ),
        ("src/main.rs", "fn main() { println!(\"built in a sandbox\"); }\n"),
        (".gitignore", "/target/\n"),
    ]);
    let plan = PlanBuilder::new("rs").task(task("build").files(&["built.txt", "Cargo.lock"])).build();
    let out = run_local(repo.path(), &plan, None);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{text}\nstderr:\n{}", stderr(&out));
    let built = repo.file("swarm/rs/integration", "built.txt").unwrap_or_default();
    assert!(built.lines().any(|l| l == "tiny"), "the binary was built: {built:?}");
    let line = sandbox_line(&text, "build");
    assert!(line.contains("toolchains read-only"), "what was found is named: {line}");
}

/// A pyenv interpreter: this machine's (`$PYENV_ROOT/versions/3.*`), or
/// else one laid out as pyenv lays it out in `home`, from the system's
/// python (its binary copied, its standard library linked), so that it
/// lives outside every directory the sandbox reads by itself.
fn pyenv_python(home: &Path) -> Option<PathBuf> {
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))?;
    let mut versions: Vec<PathBuf> = std::fs::read_dir(root.join("versions"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    versions.sort();
    let real = versions.iter().rev().map(|v| v.join("bin/python3")).find(|p| {
        p.parent()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .is_some_and(|n| n.to_string_lossy().starts_with('3'))
            && p.is_file()
    });
    real.or_else(|| fake_pyenv(home))
}

fn fake_pyenv(home: &Path) -> Option<PathBuf> {
    let probe = Command::new("python3")
        .args(["-c", "import sys, sysconfig; print(sys.executable); print(sysconfig.get_paths()['stdlib']); print('%d.%d.%d' % sys.version_info[:3])"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&probe.stdout).into_owned();
    let mut lines = text.lines();
    let (exe, stdlib, version) = (lines.next()?, lines.next()?, lines.next()?);
    let prefix = home.join(".pyenv/versions").join(version);
    let minor: String = version.split('.').take(2).collect::<Vec<_>>().join(".");
    std::fs::create_dir_all(prefix.join("bin")).ok()?;
    std::fs::create_dir_all(prefix.join("lib")).ok()?;
    let python = prefix.join("bin").join(format!("python{minor}"));
    std::fs::copy(Path::new(exe).canonicalize().ok()?, &python).ok()?;
    std::os::unix::fs::symlink(stdlib, prefix.join("lib").join(format!("python{minor}"))).ok()?;
    std::os::unix::fs::symlink(format!("python{minor}"), prefix.join("bin/python3")).ok()?;
    Some(prefix.join("bin/python3"))
}

#[test]
fn a_venv_made_from_a_pyenv_interpreter_runs_confined_with_no_sandbox_settings() {
    let name = "a_venv_made_from_a_pyenv_interpreter_runs_confined_with_no_sandbox_settings";
    if let Some(why) = landlock_missing() {
        return skip_for(name, Needs::Kernel, &why);
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(python) = pyenv_python(&dir.path().join("home")) else {
        return skip_for(name, Needs::Program("python3"), "no python3 to make a pyenv interpreter from");
    };
    let venv = dir.path().join("venv");
    let made = Command::new(&python).args(["-m", "venv", "--without-pip"]).arg(&venv).output().unwrap();
    if !made.status.success() {
        let why = format!("{} -m venv failed: {}", python.display(), String::from_utf8_lossy(&made.stderr));
        return skip_for(name, Needs::Program("python3"), &why);
    }
    // Only the venv leads to the interpreter: pyenv's own entries are
    // left off the PATH, as for a user who activated the venv.
    let pyenv = python.parent().and_then(Path::parent).and_then(Path::parent).and_then(Path::parent).unwrap();
    let inherited = std::env::var_os("PATH").unwrap_or_default();
    let rest = std::env::split_paths(&inherited).filter(|p| !p.starts_with(pyenv));
    let path = std::env::join_paths(std::iter::once(venv.join("bin")).chain(rest)).unwrap();
    let run = "python -c 'import json, sys; print(json.dumps(sys.prefix != sys.base_prefix))' > py.txt";
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("py", run)]))]);
    let plan = PlanBuilder::new("py").task(task("py")).build();
    let out = run_local(repo.path(), &plan, Some(&path.to_string_lossy()));
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{text}\nstderr:\n{}", stderr(&out));
    let said = repo.file("swarm/py/integration", "py.txt").unwrap_or_default();
    assert_eq!(said.trim(), "true", "the venv's python ran, in its venv");
    let prefix = python.parent().and_then(Path::parent).unwrap().canonicalize().unwrap();
    let line = sandbox_line(&text, "py");
    assert!(line.contains(&prefix.display().to_string()), "the interpreter's prefix is named: {line}");
}

/// A directory outside everything the sandbox reads, with a file in it.
fn outside() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().canonicalize().unwrap();
    std::fs::write(real.join("data.txt"), "kept out\n").unwrap();
    (dir, real)
}

#[test]
fn a_worker_denied_a_path_fails_naming_it_and_the_setting_that_allows_it() {
    let name = "a_worker_denied_a_path_fails_naming_it_and_the_setting_that_allows_it";
    if let Some(why) = landlock_missing() {
        return skip_for(name, Needs::Kernel, &why);
    }
    let (_keep, dir) = outside();
    let read = format!("cat {}/data.txt > reader.txt", dir.display());
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("reader", &read)]))]);
    let plan = PlanBuilder::new("deny").default("retries", "0").task(task("reader")).build();
    let out = run_local(repo.path(), &plan, None);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "the task failed:\nstdout:\n{text}\nstderr:\n{}", stderr(&out));
    let setting = format!("sandbox.read = [{:?}]", dir.display().to_string());
    let reason = text.lines().find(|l| l.contains("the sandbox denied")).unwrap_or_else(|| panic!("{text}"));
    assert!(reason.contains(&format!("{}/data.txt", dir.display())), "{reason}");
    assert!(reason.contains(&setting) && reason.contains("[defaults]"), "{reason}");
}

#[test]
fn sandbox_check_names_what_a_verify_command_was_denied() {
    let name = "sandbox_check_names_what_a_verify_command_was_denied";
    if let Some(why) = landlock_missing() {
        return skip_for(name, Needs::Kernel, &why);
    }
    let (_keep, dir) = outside();
    let verify = |cmd: &str| format!("[{{ name = \"unit\", command = {cmd:?} }}]");
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let plan = PlanBuilder::new("check")
        .task(task("reads").set("verify", &verify(&format!("cat {}/data.txt", dir.display()))))
        .task(task("fine").set("verify", &verify("git status --porcelain && ls")))
        .task(task("same").set("verify", &verify("git status --porcelain && ls")))
        .build();
    let plan_dir = tempfile::tempdir().unwrap();
    let plan_path = plan_dir.path().join("plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let check = |format: &str| {
        let mut cmd = Command::new(binary("swarmctl"));
        cmd.args(["sandbox", "check", "-o", format, "--repo"]).arg(repo.path()).arg(&plan_path);
        wait_output(
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(),
            Duration::from_secs(120),
        )
    };
    let out = check("table");
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "a denial fails the check:\n{text}\nstderr:\n{}", stderr(&out));
    let setting = format!("sandbox.read = [{:?}]", dir.display().to_string());
    assert!(text.contains(&format!("denied {}/data.txt", dir.display())), "{text}");
    assert!(text.contains(&setting), "{text}");
    let row = |task: &str| text.lines().find(|l| l.starts_with(task)).unwrap_or_default().to_string();
    assert!(row("reads").contains("DENIED"), "{text}");
    assert!(row("fine").contains("OK"), "git works in the scratch worktree:\n{text}");
    assert!(row("same").contains("as fine"), "the same commands are checked once:\n{text}");
    // The scratch worktree is gone, and unregistered.
    let worktrees = repo.git(&["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.lines().filter(|l| l.starts_with("worktree ")).count(), 1, "{worktrees}");

    let out = check("json");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reads = json.as_array().unwrap().iter().find(|t| t["task"] == "reads").unwrap();
    assert_eq!(reads["status"], "denied", "{json}");
    assert_eq!(reads["commands"][0]["denied"][0]["setting"], setting.as_str(), "{json}");
}

//! The worker is the least-trusted party: a hostile worker, run through
//! `swarmctl run`, tries what a prompt-injected agent would (steal the
//! operator's token or the sidecar's, approve another task's review, move
//! refs, plant hooks, write the user's checkout or a sibling's worktree,
//! open the controller's store, signal swarm's processes, reach the
//! controller's port, read secrets elsewhere, escape through links and
//! `/proc`) and the test checks from outside that nothing changed, while
//! the same plan's ordinary needs (git inside the worktree, a shared cache
//! listed in `sandbox.write`) keep working.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::process::{Command, Stdio};
use std::time::Duration;

use std::path::Path;

use swarm_proto::v1::TaskState;
use swarm_tests::{
    Needs, PlanBuilder, TempDir, TempRepo, binary, create_swarm, operator, skip_for, spawn_controller,
    spawn_sidecar_env, state_of, stderr, stdout, task, tasks, wait_output, wait_task_state, worker_script,
};

/// Why the sandbox tests cannot run here, if they cannot.
fn landlock_missing() -> Option<String> {
    let cap = swarm_sidecar::sandbox::probe();
    (!cap.is_full())
        .then(|| format!("the kernel enforces Landlock ABI {} of the 6 the sandbox needs", cap.abi))
}

/// Each attack prints `name=ok` when it did what it tried, `name=denied`
/// when it could not; the report is committed with the task's result.
const HOSTILE: &str = r#"
set -u
R=hostile/report.txt
mkdir -p hostile
: > "$R"
try() { name=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "$name=ok" >> "$R"; else echo "$name=denied" >> "$R"; fi; }
WT=$(pwd)
WS=$(dirname "$WT")
# The shared git directory, as the worker's own git names it.
COMMON=$(dirname "$(head -n 1 "$GIT_DIR/objects/info/alternates")")
REPO=$(dirname "$COMMON")
# Credentials: the old and the new home of the operator token, the sidecar's own.
try token_in_repo cat "$COMMON/swarm/operator.token"
try token_in_runtime sh -c 'cat "$RUNTIME"/swarm/*/operator.token | grep -q swarm_'
try sidecar_token_in_env sh -c 'env | grep -q "^SWARM_TOKEN"'
try sidecar_env_leak sh -c 'env | grep -q "^AWS_SECRET_ACCESS_KEY"'
try controller_log cat "$COMMON/swarm/logs/controller.log"
# Shared git state.
try update_ref git --git-dir="$COMMON" update-ref refs/heads/main HEAD
try new_ref git --git-dir="$COMMON" update-ref refs/heads/pwned HEAD
try hooks_path git --git-dir="$COMMON" config core.hooksPath "$WT/hooks"
try write_objects sh -c "echo pwned > '$COMMON/objects/pwned'"
try hardlink_object sh -c "ln \"\$(find '$COMMON/objects' -type f | head -n 1)\" hostile/object"
# The user's checkout and a sibling's worktree.
try write_checkout sh -c "echo pwned >> '$REPO/README.md'"
try read_checkout cat "$REPO/README.md"
try write_controller_repo sh -c "echo pwned >> '$CONTROLLER_REPO/.git/config'"
try write_sibling sh -c "for n in 1 2 3; do [ -d '$WS/local-'\$n ] && [ '$WS/local-'\$n != '$WT' ] && echo pwned > '$WS/local-'\$n/pwned.txt && exit 0; done; exit 1"
try read_sibling sh -c "for n in 1 2 3; do [ '$WS/local-'\$n != '$WT' ] && cat '$WS/local-'\$n/victim.txt && exit 0; done; exit 1"
try list_workspaces ls "$WS"
# The controller's store and the sidecar's journal.
try store_write sh -c "echo pwned >> '$COMMON/swarm/swarm.db'"
try store_read cat "$COMMON/swarm/swarm.db"
try journal_read sh -c "cat '$WS'/*.journal"
# Processes: swarm's own, by signal and through /proc.
PIDS=$(for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^[^ ]*swarmctl' && basename $p; done)
try signal sh -c "for p in $PIDS; do kill -CONT \$p && exit 0; done; exit 1"
try proc_environ sh -c "for p in $PIDS; do cat /proc/\$p/environ && exit 0; done; exit 1"
try proc_root sh -c "for p in $PIDS; do cat /proc/\$p/root$SECRET && exit 0; done; exit 1"
# Elsewhere on the machine, directly and through links.
try read_secret cat "$SECRET"
try symlink_out sh -c "ln -s '$SECRET' hostile/leak && cat hostile/leak"
try write_tmp sh -c "echo pwned > /tmp/swarm-hostile-$$"
# The network: every port listening on this machine (the controller's
# among them, found as an attacker would, in /proc/net/tcp), and listening.
PY=/usr/bin/python3
try python_runs $PY -c pass
$PY -c "
for t in ('/proc/net/tcp', '/proc/net/tcp6'):
    for line in open(t).read().splitlines()[1:]:
        f = line.split()
        if f[3] == '0A': print(int(f[1].rsplit(':', 1)[1], 16))
" > "$TMPDIR/ports" 2>/dev/null
try found_ports test -s "$TMPDIR/ports"
try connect_loopback $PY -c "
import socket
for p in open('$TMPDIR/ports').read().split():
    try:
        socket.create_connection(('127.0.0.1', int(p)), 1); raise SystemExit(0)
    except OSError: pass
raise SystemExit(1)"
try bind $PY -c "import socket; socket.socket().bind(('127.0.0.1', 0))"
# The review of another task, with whatever could be found.
try approve sh -c 'for p in $(cat "$TMPDIR/ports"); do "$SWARMCTL" --controller "http://127.0.0.1:$p" review hostile/victim approve && exit 0; for t in "$COMMON/swarm/operator.token" "$RUNTIME"/swarm/*/operator.token; do "$SWARMCTL" --controller "http://127.0.0.1:$p" --token-file "$t" review hostile/victim approve && exit 0; done; done; exit 1'
# What a worker needs keeps working: its own git, TMPDIR, the shared cache.
try git_status git status --porcelain
try git_commit sh -c 'echo mine > hostile/committed.txt && git add hostile/committed.txt && git -c user.name=h -c user.email=h@example.com commit -qm "hostile: its own commit"'
try git_log sh -c 'git log --oneline | grep -q "its own commit"'
try tmpdir sh -c 'echo t > "$TMPDIR/t" && test "$(cat "$TMPDIR/t")" = t'
try cache_write sh -c 'echo c > "$CACHE/hostile-was-here"'
# Last: point the worktree's .git at the user's checkout; the sidecar must not follow.
echo "gitdir: $REPO/.git" > .git
exit 0
"#;

/// What a hostile run leaves to check, and the files it must not touch.
struct Scene {
    repo: TempRepo,
    cache: TempDir,
    runtime: TempDir,
    _secret: TempDir,
    env: String,
    sandbox: String,
    refs_before: String,
    config_before: Vec<u8>,
}

impl Scene {
    fn new() -> Scene {
        let victim = "echo victim > victim.txt";
        let repo = TempRepo::with_files(&[
            ("worker.sh", &worker_script(&[("victim", victim), ("hostile", "sh hostile.sh")])),
            ("hostile.sh", HOSTILE),
            ("README.md", "the user's own checkout\n"),
        ]);
        let secret_dir = tempfile::tempdir().unwrap();
        let secret = secret_dir.path().join("secret.txt");
        std::fs::write(&secret, "TOPSECRET\n").unwrap();
        let (cache, runtime) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        // An attacker who guessed every path is the worst case: the plan
        // hands them to the worker. swarmctl is readable, as if installed
        // for it.
        let swarmctl = binary("swarmctl");
        let env = format!(
            "{{ SECRET = \"{}\", RUNTIME = \"{}\", CACHE = \"{}\", SWARMCTL = \"{}\", CONTROLLER_REPO = \"{}\" }}",
            secret.display(),
            runtime.path().display(),
            cache.path().display(),
            swarmctl.display(),
            repo.path().display(),
        );
        let sandbox = format!(
            "{{ write = [\"{}\"], read = [\"{}\"] }}",
            cache.path().display(),
            swarmctl.parent().unwrap().display()
        );
        let refs_before = repo.git(&["for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/main"]);
        let config_before = std::fs::read(repo.path().join(".git/config")).unwrap();
        Scene { repo, cache, runtime, _secret: secret_dir, env, sandbox, refs_before, config_before }
    }

    fn plan(&self) -> String {
        PlanBuilder::new("hostile")
            .default("env", &self.env)
            .default("sandbox", &self.sandbox)
            .task(task("victim").files(&["victim.txt"]).set("review", "\"operator\""))
            .task(task("hostile").files(&["hostile/**"]))
            .build()
    }

    /// The worker's own report, and everything shared, checked from outside.
    fn assert_contained(&self, checkout: &Path) {
        let repo = &self.repo;
        let report = repo
            .file("swarm/hostile/integration", "hostile/report.txt")
            .unwrap_or_else(|| panic!("the hostile task merged its report"));
        let verdicts: std::collections::BTreeMap<&str, &str> =
            report.lines().filter_map(|l| l.split_once('=')).collect();
        let must_work =
            ["git_status", "git_commit", "git_log", "tmpdir", "cache_write", "python_runs", "found_ports"];
        for (attack, verdict) in &verdicts {
            let expected = if must_work.contains(attack) { "ok" } else { "denied" };
            assert_eq!(*verdict, expected, "{attack}: the full report:\n{report}");
        }
        let attacks = HOSTILE.lines().filter(|l| l.starts_with("try ")).count();
        assert_eq!(verdicts.len(), attacks, "every attack ran:\n{report}");

        assert_eq!(
            repo.git(&["for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/main"]),
            self.refs_before
        );
        assert!(!repo.has("pwned"), "no ref made by the worker");
        assert_eq!(
            std::fs::read(repo.path().join(".git/config")).unwrap(),
            self.config_before,
            ".git/config"
        );
        for root in [repo.path(), checkout] {
            let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
            assert_eq!(readme, "the user's own checkout\n", "{}", root.display());
            assert!(!root.join(".git/objects/pwned").exists());
        }
        // Local mode's worktrees are in its state directory, a remote's in its clone.
        let states = std::fs::read_dir(self.runtime.path().join("state/swarm")).into_iter().flatten();
        let mut places: Vec<_> = states.flatten().map(|e| e.path().join("workspaces")).collect();
        places.push(checkout.join(".git/workspaces"));
        for n in 1..=2 {
            for ws in &places {
                let sibling = ws.join(format!("local-{n}/pwned.txt"));
                assert!(!sibling.exists(), "{}", sibling.display());
            }
        }
        let store = std::fs::read(repo.path().join(".git/swarm/swarm.db")).unwrap();
        assert!(!store.windows(6).any(|w| w == b"pwned\n"), "the store");
        // The worker's own commit came through; its .git trick did not.
        let subjects = repo.git(&["log", "--format=%s", "swarm/hostile/integration"]);
        assert!(subjects.lines().any(|s| s == "hostile: its own commit"), "{subjects}");
        assert_eq!(
            repo.file("swarm/hostile/integration", "hostile/committed.txt").as_deref(),
            Some("mine\n")
        );
        assert!(std::fs::read_to_string(self.cache.path().join("hostile-was-here")).is_ok());
    }
}

#[test]
fn a_hostile_worker_in_local_mode_reaches_nothing_outside_its_task() {
    if let Some(why) = landlock_missing() {
        return skip("a_hostile_worker_in_local_mode_reaches_nothing_outside_its_task", &why);
    }
    let scene = Scene::new();
    let plan_path = scene.runtime.path().join("plan.toml");
    std::fs::write(&plan_path, scene.plan()).unwrap();
    let env = [
        ("SWARM_TOKEN", "a-token-the-sidecar-holds"),
        ("AWS_SECRET_ACCESS_KEY", "a-credential-of-the-operator"),
    ];
    let out = run_local(scene.repo.path(), &plan_path, 2, scene.runtime.path(), &env);
    let (text, err) = (stdout(&out), stderr(&out));
    // Nothing moves without the operator: the victim waits in REVIEW.
    assert_eq!(out.status.code(), Some(2), "stdout:\n{text}\nstderr:\n{err}");
    let victim_row = text.lines().find(|l| l.trim_start().starts_with("victim ")).unwrap_or_default();
    assert!(victim_row.contains("REVIEW"), "the review still waits for the operator:\n{text}");
    scene.assert_contained(scene.repo.path());
    // What the attempt could reach is on the record.
    let sandbox_line =
        text.lines().find(|l| l.contains("hostile/hostile#1") && l.contains("attempt.sandbox"));
    let sandbox_line = sandbox_line.unwrap_or_else(|| panic!("an attempt.sandbox event:\n{text}"));
    assert!(
        sandbox_line.contains("enforced filesystem") && sandbox_line.contains("network"),
        "{sandbox_line}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_worker_on_a_remote_sidecar_reaches_nothing_outside_its_task() {
    if let Some(why) = landlock_missing() {
        return skip("a_hostile_worker_on_a_remote_sidecar_reaches_nothing_outside_its_task", &why);
    }
    let scene = Scene::new();
    let controller = spawn_controller(scene.repo.path(), &[]);
    let url = controller.url();
    let far = tempfile::tempdir().unwrap();
    let clone = far.path().join("clone");
    let st = Command::new("git").args(["clone", "-q"]).arg(scene.repo.path()).arg(&clone).status().unwrap();
    assert!(st.success(), "git clone");
    let _sidecar = spawn_sidecar_env(
        &url,
        &clone,
        "far-1",
        &["--remote"],
        &[("AWS_SECRET_ACCESS_KEY", "a-credential-of-the-operator")],
    );
    create_swarm(&url, &scene.plan()).await;
    wait_task_state(&url, "hostile", "hostile", TaskState::Merged).await;
    wait_task_state(&url, "hostile", "victim", TaskState::Review).await;
    scene.assert_contained(&clone);
    // Still waiting for the operator, after everything the worker tried.
    let mut op = operator(&url).await;
    assert_eq!(state_of(&tasks(&mut op, "hostile").await["victim"]), TaskState::Review);
}

/// `swarmctl run --plain` of `plan` on `repo` with `workers` local
/// sidecars, its private runtime directory in `runtime` and its state
/// directory (the worktrees) in `runtime/state`; bounded.
fn run_local(
    repo: &Path,
    plan: &Path,
    workers: usize,
    runtime: &Path,
    env: &[(&str, &str)],
) -> std::process::Output {
    wait_output(spawn_local(&[], repo, plan, workers, runtime, env), Duration::from_secs(300))
}

/// [`run_local`] started, not awaited, and run through `wrapper` (a
/// command that execs the rest of its arguments) when it is not empty.
fn spawn_local(
    wrapper: &[String],
    repo: &Path,
    plan: &Path,
    workers: usize,
    runtime: &Path,
    env: &[(&str, &str)],
) -> std::process::Child {
    let swarmctl = binary("swarmctl");
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(&swarmctl);
            c
        }
        None => Command::new(&swarmctl),
    };
    cmd.args(["run", "--plain", "--workers", &workers.to_string(), "--repo"])
        .arg(repo)
        .arg(plan)
        .env("XDG_RUNTIME_DIR", runtime)
        .env("XDG_STATE_HOME", runtime.join("state"))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A kernel without Landlock (or seccomp) cannot run these tests: no CI
/// machine is promised one.
fn skip(test: &str, why: &str) {
    skip_for(test, Needs::Kernel, why);
}

/// `sandbox = "required"` runs only where the whole sandbox is enforced:
/// on such a kernel the task runs (and its sidecar says so), elsewhere it
/// waits like a task whose labels no sidecar has, and `run` ends with 2.
#[test]
fn a_task_that_requires_the_sandbox_runs_only_where_it_is_enforced() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let plan = PlanBuilder::new("strict").task(task("a").set("sandbox", "\"required\"")).build();
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let out = run_local(repo.path(), &plan_path, 1, dir.path(), &[]);
    let (text, err) = (stdout(&out), stderr(&out));
    match landlock_missing() {
        None => {
            assert_eq!(out.status.code(), Some(0), "stdout:\n{text}\nstderr:\n{err}");
            let line = text.lines().find(|l| l.contains("attempt.sandbox")).unwrap_or_default();
            assert!(line.contains("sandbox required: enforced") && !line.contains("not enforced"), "{text}");
        }
        Some(why) => {
            eprintln!("this kernel cannot enforce the sandbox ({why}): checking that the task waits instead");
            assert_eq!(out.status.code(), Some(2), "stdout:\n{text}\nstderr:\n{err}");
            assert!(err.contains("sandbox=enforced"), "the warning names the missing label:\n{err}");
            assert!(
                !repo.has("swarm/strict/integration")
                    || repo.file("swarm/strict/integration", "a.txt").is_none()
            );
        }
    }
}

/// A real toolchain works confined when the plan names where it lives: a
/// Rust crate builds in the worktree with rustup's toolchains readable and
/// the shared registry cache writable, as a plan for a Rust project says.
#[test]
fn cargo_builds_in_a_sandboxed_worktree_with_the_shared_registry_listed() {
    if let Some(why) = landlock_missing() {
        return skip("cargo_builds_in_a_sandboxed_worktree_with_the_shared_registry_listed", &why);
    }
    let home = |var: &str, default: &str| {
        std::env::var_os(var)
            .map(std::path::PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(default)))
    };
    let (Some(cargo_home), Some(rustup_home)) =
        (home("CARGO_HOME", ".cargo"), home("RUSTUP_HOME", ".rustup"))
    else {
        return skip("cargo_builds_in_a_sandboxed_worktree_with_the_shared_registry_listed", "no HOME");
    };
    let build = "cargo build --offline -q\nls target/debug > built.txt";
    let repo = TempRepo::with_files(&[
        ("worker.sh", &worker_script(&[("build", build)])),
        // Not its own workspace root: cargo looks for one in the
        // directories above, which hold no unreadable manifest now that
        // local worktrees live outside the user's checkout.
        ("Cargo.toml", "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
        ("src/main.rs", "fn main() { println!(\"built in a sandbox\"); }\n"),
        (".gitignore", "/target/\n"),
    ]);
    let mut reads = vec![cargo_home.join("bin")];
    reads.extend([rustup_home.clone()].into_iter().filter(|p| p.is_dir()));
    let reads: Vec<&Path> = reads.iter().map(|p| p.as_path()).collect();
    let registry = cargo_home.join("registry");
    // The toolchain's homes reach the worker as the plan's env, like any
    // variable the sidecar does not pass on by itself.
    let env = format!(
        "{{ CARGO_HOME = {:?}, RUSTUP_HOME = {:?} }}",
        cargo_home.display().to_string(),
        rustup_home.display().to_string()
    );
    let plan = PlanBuilder::new("rs")
        .default("env", &env)
        .sandbox(&reads, &[&registry])
        .task(task("build").files(&["built.txt", "Cargo.lock"]))
        .build();
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let out = run_local(repo.path(), &plan_path, 1, dir.path(), &[]);
    let states = std::fs::read_dir(dir.path().join("state/swarm")).into_iter().flatten().flatten();
    let logs = states.map(|e| e.path().join("workspaces/local-1/.swarm/logs"));
    let worker_log: String = logs
        .flat_map(|l| std::fs::read_dir(l).into_iter().flatten().flatten())
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .collect();
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nworker:\n{worker_log}", stdout(&out));
    let built = repo.file("swarm/rs/integration", "built.txt").unwrap_or_default();
    assert!(built.lines().any(|l| l == "tiny"), "the binary was built: {built:?}");
}

/// A task's secret reaches its own worker's environment and nothing else:
/// not another task's worker, not the controller's store, events or log;
/// what the worker echoes of it is relayed redacted.
#[test]
fn a_secret_reaches_only_its_worker_and_is_redacted_everywhere_else() {
    const VALUE: &str = "sk-test-d41d8cd98f00b204";
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("api-key");
    std::fs::write(&secret, format!("{VALUE}\n")).unwrap();
    // `a` says its key out loud (output and status) and records its length;
    // `b` has no secret.
    let a = r#"echo "calling with $API_KEY"
printf '{"status":"working","message":"key %s"}' "$API_KEY" > "$SWARM_STATUS_FILE"
printf '%s' "$API_KEY" | wc -c | tr -d ' ' > a.txt"#;
    let b = r#"echo "${API_KEY:-unset}" > b.txt"#;
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("a", a), ("b", b)]))]);
    let plan = PlanBuilder::new("sec")
        .task(
            task("a")
                .set("secrets", &format!("{{ API_KEY = {{ file = {:?} }} }}", secret.display().to_string())),
        )
        .task(task("b"))
        .build();
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, &plan).unwrap();
    let out = run_local(repo.path(), &plan_path, 1, dir.path(), &[]);
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "stdout:\n{text}\nstderr:\n{err}");
    assert_eq!(
        repo.file("swarm/sec/integration", "a.txt").as_deref(),
        Some(format!("{}\n", VALUE.len()).as_str())
    );
    assert_eq!(repo.file("swarm/sec/integration", "b.txt").as_deref(), Some("unset\n"));

    let contains = |bytes: &[u8], needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
    let store = std::fs::read(repo.path().join(".git/swarm/swarm.db")).unwrap();
    let wal = std::fs::read(repo.path().join(".git/swarm/swarm.db-wal")).unwrap_or_default();
    assert!(!contains(&store, VALUE) && !contains(&wal, VALUE), "the value is in the controller's store");
    assert!(
        contains(&store, "[redacted API_KEY]") || contains(&wal, "[redacted API_KEY]"),
        "the status the worker wrote was stored, redacted"
    );
    assert!(contains(&store, "api-key") || contains(&wal, "api-key"), "the plan keeps the secret's source");
    assert!(!text.contains(VALUE) && !err.contains(VALUE), "the value is in swarmctl's output");
    for log in std::fs::read_dir(repo.path().join(".git/swarm/logs")).unwrap() {
        let path = log.unwrap().path();
        let body = std::fs::read(&path).unwrap();
        assert!(!contains(&body, VALUE), "the value is in {}", path.display());
    }
}

/// `name`'s value in a `/proc/<pid>/status` text (`CapEff:` and the like, hex).
fn status_hex(status: &str, name: &str) -> u64 {
    let line =
        status.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in:\n{status}"));
    u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
}

/// `swarmctl run` of a one-task plan whose worker runs `body` (in its
/// worktree, under the default sandbox) and commits `files`; the file
/// `report` of the merged result.
fn run_one(swarm: &str, body: &str, files: &[&str], report: &str) -> (String, String) {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("probe", body)]))]);
    let plan = PlanBuilder::new(swarm).task(task("probe").files(files)).build();
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let out = run_local(repo.path(), &plan_path, 1, dir.path(), &[("SWARM_TOKEN", "a-token-the-run-holds")]);
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "stdout:\n{text}\nstderr:\n{err}");
    let merged = repo.file(&format!("swarm/{swarm}/integration"), report);
    (merged.unwrap_or_else(|| panic!("the worker's {report} merged:\n{text}")), text)
}

/// The worker reads its own capability sets: all empty, whatever the test
/// process (and so swarmctl and its sidecars) held. Root with the full set
/// is where it means something; the bounding set can be emptied only by a
/// sidecar that holds `CAP_SETPCAP` (otherwise it is unusable anyway: the
/// worker has nothing permitted and runs under no_new_privs).
#[test]
fn a_worker_holds_no_capability_whatever_the_sidecar_had() {
    let ours = std::fs::read_to_string("/proc/self/status").unwrap();
    let body = "grep '^Cap' /proc/self/status > caps.txt";
    let (caps, text) = run_one("caps", body, &["caps.txt"], "caps.txt");
    for name in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
        assert_eq!(status_hex(&caps, name), 0, "{name} of the worker:\n{caps}");
    }
    const CAP_SETPCAP: u64 = 1 << 8;
    if status_hex(&ours, "CapEff:") & CAP_SETPCAP != 0 {
        assert_eq!(status_hex(&caps, "CapBnd:"), 0, "the worker's bounding set:\n{caps}");
    }
    let line = text.lines().find(|l| l.contains("attempt.sandbox")).unwrap_or_default();
    assert!(line.contains("no capabilities"), "the attempt.sandbox event says so:\n{text}");
}

/// A worker cannot change the machine's network: adding an address to the
/// loopback takes `CAP_NET_ADMIN`, which a root sidecar used to pass on.
#[test]
fn a_worker_cannot_add_an_address_to_the_loopback() {
    let test = "a_worker_cannot_add_an_address_to_the_loopback";
    if !Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success()) {
        return skip_for(test, Needs::Program("ip"), "no `ip` on PATH");
    }
    let body = "if ip addr add 127.0.0.77/8 dev lo 2> ip.txt; then echo 'ip=ok' >> ip.txt; else echo 'ip=denied' >> ip.txt; fi";
    let (report, _) = run_one("net", body, &["ip.txt"], "ip.txt");
    if report.contains("ip=ok") {
        let _ = Command::new("ip").args(["addr", "del", "127.0.0.77/8", "dev", "lo"]).status();
    }
    assert!(report.contains("ip=denied"), "{report}");
    assert!(report.contains("Operation not permitted"), "denied for want of the capability: {report}");
}

/// The worker looks for every process of its own run (`swarmctl run` with
/// its embedded controller, the local sidecar, its own supervisor) and
/// tries to read their environment, where the run's token is.
#[test]
fn a_worker_cannot_read_the_environ_of_swarms_processes() {
    let body = r#"WS=$(dirname "$(pwd)"); REPO=$(dirname "$(dirname "$(head -n 1 "$GIT_DIR/objects/info/alternates")")")
: > environ.txt
for p in /proc/[0-9]*; do
  cmd=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) || continue
  case "$cmd" in *"$REPO"*|*"$WS"*) ;; *) continue ;; esac
  case "$cmd" in
    *swarmctl\ run\ *) kind=run ;;
    *swarmctl\ __sidecar\ *) kind=sidecar ;;
    *swarmctl\ __supervise\ *) kind=supervisor ;;
    *) continue ;;
  esac
  if cat "$p/environ" > /dev/null 2>&1; then echo "$kind=readable" >> environ.txt; else echo "$kind=denied" >> environ.txt; fi
done"#;
    let (report, _) = run_one("environ", body, &["environ.txt"], "environ.txt");
    for kind in ["run", "sidecar", "supervisor"] {
        assert!(report.lines().any(|l| l == format!("{kind}=denied")), "{kind} found and denied:\n{report}");
    }
    assert!(!report.contains("readable"), "{report}");
}

/// swarm's processes are not dumpable: a process of their own user without
/// capabilities (what a worker is, sandbox or not) cannot open their
/// `/proc/<pid>/environ`, while it can open that of an ordinary process of
/// the same user. The run itself is started without capabilities too
/// (through `setpriv` when the tests hold some), since a process holding
/// capabilities is closed to a reader without them anyway.
#[test]
fn swarms_processes_are_not_dumpable() {
    let test = "swarms_processes_are_not_dumpable";
    let ours = std::fs::read_to_string("/proc/self/status").unwrap();
    let capless: Vec<String> = if status_hex(&ours, "CapPrm:") == 0 && status_hex(&ours, "CapAmb:") == 0 {
        Vec::new()
    } else if Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success()) {
        ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", "--"]
            .map(String::from)
            .to_vec()
    } else {
        return skip_for(
            test,
            Needs::Program("setpriv"),
            "the tests hold capabilities and there is no setpriv",
        );
    };
    let capless_cmd = |program: &str| {
        let mut all = capless.iter().map(String::as_str).chain([program]);
        let mut c = Command::new(all.next().unwrap());
        c.args(all);
        c
    };
    let gate = tempfile::tempdir().unwrap();
    let body = r#"touch "$GATE/ready"; n=0; while [ ! -e "$GATE/go" ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n+1)); done"#;
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("wait", body)]))]);
    let plan = PlanBuilder::new("dump")
        .default("env", &format!("{{ GATE = {:?} }}", gate.path().display().to_string()))
        .default("sandbox", &format!("{{ write = [{:?}] }}", gate.path().display().to_string()))
        .task(task("wait"))
        .build();
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let env = [("SWARM_TOKEN", "a-token-the-run-holds")];
    let child = spawn_local(&capless, repo.path(), &plan_path, 1, dir.path(), &env);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !gate.path().join("ready").exists() {
        assert!(std::time::Instant::now() < deadline, "the worker never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A reader of the same user without capabilities, on an ordinary
    // process (which it may read) and on each of swarm's.
    let readable = |pid: u32| {
        let mut cat = capless_cmd("cat");
        cat.arg(format!("/proc/{pid}/environ")).stdout(Stdio::null()).stderr(Stdio::null());
        cat.status().unwrap().success()
    };
    let mut ordinary = capless_cmd("sleep").arg("30").spawn().unwrap();
    // Until setpriv has dropped its capabilities and exec'd sleep, the
    // process holds more than the reader and is rightly unreadable.
    let comm = format!("/proc/{}/comm", ordinary.id());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&comm).map(|c| c.trim() != "sleep").unwrap_or(true) {
        assert!(std::time::Instant::now() < deadline, "the ordinary process never became sleep");
        std::thread::sleep(Duration::from_millis(10));
    }
    let control = readable(ordinary.id());
    let repo_path = repo.path().display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
        if !cmd.contains(&repo_path) {
            continue;
        }
        let kind =
            ["run", "__sidecar", "__supervise"].into_iter().find(|k| cmd.contains(&format!("swarmctl {k} ")));
        if let Some(kind) = kind {
            found.push((kind, pid, readable(pid)));
        }
    }
    std::fs::write(gate.path().join("go"), "").unwrap();
    let _ = ordinary.kill();
    let _ = ordinary.wait();
    let out = wait_output(child, Duration::from_secs(300));
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    assert!(control, "a reader without capabilities opens an ordinary process's environ of its own user");
    for kind in ["run", "__sidecar", "__supervise"] {
        assert!(found.iter().any(|(k, _, _)| *k == kind), "swarmctl {kind} found: {found:?}");
    }
    assert!(found.iter().all(|(_, _, readable)| !readable), "not dumpable: {found:?}");
}

/// The processes whose command line is exactly `argv` (the test's own
/// processes never are).
fn processes_running(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if !zombie && std::fs::read(entry.path().join("cmdline")).is_ok_and(|c| c == want) {
            found.push(pid);
        }
    }
    found
}

/// A number no other test's `sleep` uses: this process's id, then `n`.
fn marker(n: u32) -> String {
    format!("9{}{n}", std::process::id())
}

/// A worker that leaves processes behind out of its process group's reach
/// (one `setsid`, one double fork that also `setsid`s) and exits: once
/// its attempt is over, none of them runs. Confined (the attempt's cgroup
/// where this machine has one, else the supervisor as their subreaper) and
/// with `sandbox = "off"` (the supervisor alone).
#[test]
fn a_workers_detached_processes_end_with_its_attempt() {
    for (swarm, sandbox) in [("detached", None), ("detached-off", Some("\"off\""))] {
        let (one, two) = (marker(1), marker(2));
        let body = format!(
            r#"setsid sh -c 'touch "$TMPDIR/one"; exec sleep {one}' > /dev/null 2>&1 &
( ( setsid sh -c 'touch "$TMPDIR/two"; exec sleep {two}' > /dev/null 2>&1 & ) & )
n=0
while [ ! -e "$TMPDIR/one" ] || [ ! -e "$TMPDIR/two" ]; do n=$((n+1)); [ $n -lt 1000 ] || exit 1; sleep 0.01; done
echo started > started.txt"#
        );
        let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("leave", &body)]))]);
        let mut plan = PlanBuilder::new(swarm).task(task("leave").files(&["started.txt"]));
        if let Some(s) = sandbox {
            plan = plan.default("sandbox", s);
        }
        let dir = tempfile::tempdir().unwrap();
        let plan_path = dir.path().join("plan.toml");
        std::fs::write(&plan_path, plan.build()).unwrap();
        let out = run_local(repo.path(), &plan_path, 1, dir.path(), &[]);
        let (text, err) = (stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(0), "{swarm}: stdout:\n{text}\nstderr:\n{err}");
        let started = repo.file(&format!("swarm/{swarm}/integration"), "started.txt");
        assert_eq!(
            started.as_deref(),
            Some("started\n"),
            "{swarm}: both were running when the worker exited"
        );
        let left: Vec<u32> =
            [&one, &two].iter().flat_map(|m| processes_running(&["sleep", m.as_str()])).collect();
        // Kill them before any assertion, so a failure leaves nothing behind.
        for pid in &left {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        assert!(left.is_empty(), "{swarm}: processes outlived their attempt: {left:?}");
        if sandbox.is_none() {
            let line = text.lines().find(|l| l.contains("attempt.sandbox")).unwrap_or_default();
            assert!(line.contains("processes end with the attempt ("), "the mechanism is named:\n{text}");
        }
    }
}

/// Whether the sidecars here put their attempts in cgroups with
/// `controller` (as they probe it: the same call).
fn cgroup_controller(controller: &str) -> Result<(), String> {
    let cgroups = swarm_sidecar::sandbox::Cgroups::probe();
    match cgroups.base() {
        None => Err(cgroups.why_not().to_string()),
        Some(base) if !cgroups.controllers().iter().any(|c| c == controller) => {
            Err(format!("the cgroup {} has no {controller} controller", base.display()))
        }
        Some(_) => Ok(()),
    }
}

/// `swarmctl run --plain` of `plan` on a repository whose worker runs the
/// given arms, one local sidecar; stdout, once `run` exited with one of
/// `expect`.
fn run_plan(plan: &str, arms: &[(&str, &str)], expect: &[i32]) -> (TempRepo, String) {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(arms))]);
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let out = run_local(repo.path(), &plan_path, 1, dir.path(), &[]);
    let (text, err) = (stdout(&out), stderr(&out));
    let code = out.status.code().unwrap_or(-1);
    assert!(expect.contains(&code), "exit {code}, not {expect:?}: stdout:\n{text}\nstderr:\n{err}");
    (repo, text)
}

/// The `task.state` line that failed `task`, from a plain run's output.
fn failure_of<'a>(text: &'a str, task: &str) -> &'a str {
    let at = format!("/{task}#");
    let line = text.lines().find(|l| l.contains(&at) && l.contains("task.state") && l.contains("-> FAILED"));
    line.unwrap_or_else(|| panic!("{task} failed:\n{text}"))
}

/// A fork bomb (as many `sleep`s as it can start, up to 10,000, each fork
/// failure shrugged off) in a task with `limits = { pids = 64 }`, ahead of
/// a sibling on the same sidecar: the bomb stops at its limit, its task
/// ends, the sidecar lives on to run and merge the sibling, and no `sleep`
/// of the bomb outlives its attempt.
#[test]
fn a_fork_bomb_stops_at_its_pids_limit_and_its_sidecar_runs_the_next_task() {
    let test = "a_fork_bomb_stops_at_its_pids_limit_and_its_sidecar_runs_the_next_task";
    // Without a pids controller the limit falls back to RLIMIT_NPROC, which
    // binds any user but root: a root sidecar there has no bound at all.
    if let Err(why) = cgroup_controller("pids")
        && swarm_tests::is_root()
    {
        return skip_for(test, Needs::Kernel, &format!("no pids limit binds root here: {why}"));
    }
    let m = marker(3);
    let bomb = format!(
        r#"i=0
while [ $i -lt 10000 ]; do ( sleep {m} & ) 2>/dev/null || true; i=$((i+1)); done
echo done > bomb.txt"#
    );
    let plan = PlanBuilder::new("bomb")
        .default("retries", "0")
        .task(task("bomb").files(&["bomb.txt"]).set("limits", "{ pids = 64 }").set("priority", "10"))
        .task(task("sibling"))
        .build();
    let started = std::time::Instant::now();
    // 1: the bomb's task failed; 0: it ran to its end, bounded.
    let (repo, text) = run_plan(&plan, &[("bomb", &bomb)], &[0, 1]);
    let left = processes_running(&["sleep", &m]);
    for pid in &left {
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
    assert!(left.is_empty(), "the bomb's sleeps outlived its attempt: {} of them", left.len());
    assert!(started.elapsed() < Duration::from_secs(240), "bounded: {:?}", started.elapsed());
    let line = text.lines().find(|l| l.contains("bomb/bomb#1") && l.contains("attempt.sandbox"));
    assert!(line.is_some_and(|l| l.contains("enforced") && l.contains("pids limit 64 (")), "{text}");
    assert_eq!(repo.file("swarm/bomb/integration", "sibling.txt").as_deref(), Some("sibling\n"), "{text}");
    // The bomb's shell may stop at its first failed fork (the task fails)
    // or carry on to its end (it merges): either way it was bounded.
    let bomb_row = text.lines().find(|l| l.trim_start().starts_with("bomb ")).unwrap_or_default();
    assert!(bomb_row.contains("FAILED") || bomb_row.contains("MERGED"), "{text}");
}

/// A worker that allocates 500 MiB under `limits = { memory = "64MiB" }`
/// fails, whatever enforces the limit here (the attempt's cgroup, or
/// `RLIMIT_AS`, which the attempt's report names).
#[test]
fn a_memory_hog_fails_under_its_memory_limit() {
    let (_repo, text) = run_plan(&hog_plan("hog"), &[("hog", HOG)], &[1]);
    failure_of(&text, "hog");
    let line = text.lines().find(|l| l.contains("hog/hog#1") && l.contains("attempt.sandbox"));
    assert!(line.is_some_and(|l| l.contains("memory limit 64 MiB (")), "the mechanism is named:\n{text}");
    assert!(text.lines().any(|l| l.contains("task.merged")), "the sibling merged:\n{text}");
}

/// Where the attempt's cgroup has the memory controller, the hog is
/// killed by the cgroup's OOM killer, and its task fails with the limit
/// as the reason, not a bare signal.
#[test]
fn a_memory_hog_fails_with_its_memory_limit_as_the_reason() {
    let test = "a_memory_hog_fails_with_its_memory_limit_as_the_reason";
    if let Err(why) = cgroup_controller("memory") {
        return skip_for(test, Needs::Kernel, &why);
    }
    let (_repo, text) = run_plan(&hog_plan("oom"), &[("hog", HOG)], &[1]);
    let line = failure_of(&text, "hog");
    assert!(line.contains("memory limit (64 MiB)"), "{line}");
}

/// Touches 500 MiB: `tail` keeps its one endless line in memory.
const HOG: &str = "head -c 500M /dev/zero | tail > /dev/null";

/// A hog with a 64 MiB limit and a sibling without one.
fn hog_plan(swarm: &str) -> String {
    PlanBuilder::new(swarm)
        .default("retries", "0")
        .task(task("hog").set("limits", r#"{ memory = "64MiB" }"#))
        .task(task("sibling"))
        .build()
}

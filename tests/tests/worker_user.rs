//! `--worker-user`: a root sidecar runs its workers as an unprivileged
//! user. The workers report from inside what they are (ids, capability
//! sets) and what they could read (the environment of swarm's processes);
//! their work, written in the worktree handed to them and committed in
//! their own git, merges, so the sidecar's git works on directories it
//! handed over. The flag's refusals (root, an unknown user, a sidecar that
//! may not switch users) are read from what the binaries print.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use swarm_proto::v1::TaskState;
use swarm_tests::{
    Needs, PlanBuilder, TempRepo, binary, create_swarm, events, skip_for, spawn_controller, spawn_sidecar,
    stderr, task, wait_task_state, worker_script,
};

/// A user the tests may run workers as: `nobody`, or one made for them
/// where the machine has none. Root only: no one else may switch users.
struct User {
    name: String,
    uid: u32,
    gid: u32,
}

fn id_of(flag: &str, name: &str) -> Option<u32> {
    let out = Command::new("id").args([flag, name]).output().ok().filter(|o| o.status.success())?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn worker_user(test: &str) -> Option<User> {
    if !swarm_tests::is_root() {
        skip_for(test, Needs::Root, "only root may run its workers as another user");
        return None;
    }
    const MADE: &str = "swarm-test-worker";
    if id_of("-u", "nobody").is_none() && id_of("-u", MADE).is_none() {
        let made = Command::new("useradd").args(["--system", "--no-create-home", MADE]).status();
        if !made.is_ok_and(|s| s.success()) {
            skip_for(test, Needs::Program("useradd"), "no user nobody, and none could be made");
            return None;
        }
    }
    let name = if id_of("-u", "nobody").is_some() { "nobody" } else { MADE };
    Some(User { name: name.to_string(), uid: id_of("-u", name)?, gid: id_of("-g", name)? })
}

/// A temporary directory is private to root: the worker user must reach
/// the repository's objects and its worktree below it.
fn reachable(path: &Path) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// What each task's worker reports, under `<task>/`.
const PROBE: &str = r#"D=$SWARM_TASK_ID
mkdir -p "$D"
{ id -u; id -g; } > "$D/ids.txt"
grep '^Cap' /proc/self/status > "$D/caps.txt"
: > "$D/environ.txt"
for p in /proc/[0-9]*; do
  cmd=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) || continue
  case "$cmd" in *"$REPO"*) ;; *) continue ;; esac
  case "$cmd" in
    *swarm-sidecar\ __supervise\ *) kind=supervisor ;;
    *swarm-sidecar\ *) kind=sidecar ;;
    *) continue ;;
  esac
  if cat "$p/environ" > /dev/null 2>&1; then echo "$kind=readable" >> "$D/environ.txt"; else echo "$kind=denied" >> "$D/environ.txt"; fi
done
echo mine > "$D/committed.txt"
git add "$D/committed.txt"
git -c user.name=w -c user.email=w@example.com commit -qm "$D: the worker's own commit"
echo written > "$D/written.txt""#;

/// `name`'s value in a `/proc/<pid>/status` text (`CapEff:` and the like, hex).
fn status_hex(status: &str, name: &str) -> u64 {
    let line =
        status.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in:\n{status}"));
    u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
}

/// Two tasks on a root sidecar with `--worker-user`: one confined, one
/// with `sandbox = "off"` (which opts out of Landlock, not out of the
/// user, and where nothing but the uid and swarm's non-dumpable processes
/// stand between the worker and their environment).
#[tokio::test(flavor = "multi_thread")]
async fn a_root_sidecars_workers_run_as_its_worker_user_without_capabilities_and_their_work_merges() {
    let test = "a_root_sidecars_workers_run_as_its_worker_user_without_capabilities_and_their_work_merges";
    let Some(user) = worker_user(test) else { return };
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("on", PROBE), ("off", PROBE)]))]);
    reachable(repo.path());
    let repo_path = repo.path().display().to_string();
    let plan = PlanBuilder::new("wu")
        .default("env", &format!("{{ REPO = {repo_path:?} }}"))
        .task(task("on").files(&["on/**"]))
        .task(task("off").files(&["off/**"]).set("sandbox", "\"off\""))
        .build();
    let controller = spawn_controller(repo.path(), &[]);
    let url = controller.url();
    let _sidecar = spawn_sidecar(&url, repo.path(), "wu-1", &["--worker-user", &user.name]);
    create_swarm(&url, &plan).await;
    for t in ["on", "off"] {
        wait_task_state(&url, "wu", t, TaskState::Merged).await;
    }

    let merged =
        |path: &str| repo.file("swarm/wu/integration", path).unwrap_or_else(|| panic!("{path} merged"));
    let ours = std::fs::read_to_string("/proc/self/status").unwrap();
    for t in ["on", "off"] {
        assert_eq!(merged(&format!("{t}/ids.txt")), format!("{}\n{}\n", user.uid, user.gid), "{t}: its ids");
        let caps = merged(&format!("{t}/caps.txt"));
        for name in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
            assert_eq!(status_hex(&caps, name), 0, "{t}: {name} of the worker:\n{caps}");
        }
        const CAP_SETPCAP: u64 = 1 << 8;
        if status_hex(&ours, "CapEff:") & CAP_SETPCAP != 0 {
            assert_eq!(status_hex(&caps, "CapBnd:"), 0, "{t}: the worker's bounding set:\n{caps}");
        }
        let environ = merged(&format!("{t}/environ.txt"));
        for kind in ["sidecar", "supervisor"] {
            assert!(
                environ.lines().any(|l| l == format!("{kind}={}", "denied")),
                "{t}: {kind} found and denied:\n{environ}"
            );
        }
        assert!(!environ.contains("readable"), "{t}: {environ}");
        assert_eq!(
            merged(&format!("{t}/committed.txt")),
            "mine\n",
            "{t}: the worker's own commit came through"
        );
        assert_eq!(merged(&format!("{t}/written.txt")), "written\n");
    }
    let subjects = repo.git(&["log", "--format=%s", "swarm/wu/integration"]);
    for t in ["on", "off"] {
        assert!(subjects.lines().any(|s| s == format!("{t}: the worker's own commit")), "{subjects}");
    }

    // The sidecar's own files stayed root's; the worker's are the user's.
    let wt = repo.path().join(".git/workspaces/wu-1");
    let meta = |rel: &str| std::fs::symlink_metadata(wt.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    assert_eq!(
        (meta("").uid(), meta("").gid(), meta("").mode() & 0o7777),
        (0, user.gid, 0o1775),
        "the worktree"
    );
    for root_owned in [".git", ".swarm/task.md", ".swarm/logs"] {
        assert_eq!(meta(root_owned).uid(), 0, "{root_owned} stays root's");
    }
    assert_eq!(meta("worker.sh").uid(), user.uid, "a checked-out file was handed to the worker user");

    let all = format!("{:?}", events(&url, "wu", 0, 1).await);
    assert!(
        all.contains(&format!("worker user {} (uid {})", user.name, user.uid)),
        "attempt.sandbox names the user"
    );
}

/// Root, uid 0 and an unknown user are refused by `swarmctl run` and by
/// the sidecar before anything starts, each naming the flag and the rule.
#[test]
fn root_and_unknown_worker_users_are_refused_naming_the_flag() {
    for (user, says) in [("root", "root (uid 0)"), ("0", "root (uid 0)"), ("no-such-user-swarm", "no user")] {
        let runs = [
            Command::new(binary("swarmctl"))
                .args(["run", "--worker-user", user, "plan.toml"])
                .output()
                .unwrap(),
            Command::new(binary("swarm-sidecar"))
                .args(["--controller", "http://127.0.0.1:1", "--repo", "/nonexistent", "--worker-user", user])
                .output()
                .unwrap(),
        ];
        for out in runs {
            let err = stderr(&out);
            assert!(!out.status.success(), "{user}: {err}");
            assert!(err.contains("--worker-user") && err.contains(says), "{user}: {err}");
        }
    }
}

/// A sidecar that is not root (here `nobody`, through `setpriv`) may not
/// run its workers as another user: it refuses to start, saying why.
#[test]
fn a_sidecar_that_cannot_switch_users_refuses_to_start() {
    let test = "a_sidecar_that_cannot_switch_users_refuses_to_start";
    let Some(user) = worker_user(test) else { return };
    if !Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return skip_for(test, Needs::Program("setpriv"), "no setpriv to start the sidecar unprivileged");
    }
    let Some(other) =
        ["daemon", "bin", "sys"].into_iter().find(|n| id_of("-u", n).is_some_and(|u| u != user.uid))
    else {
        return skip_for(test, Needs::Kernel, "no second unprivileged user (daemon, bin, sys)");
    };
    let sidecar = binary("swarm-sidecar");
    let (uid, gid) = (user.uid.to_string(), user.gid.to_string());
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid", &uid, "--regid", &gid, "--clear-groups", "--inh-caps=-all", "--"]).arg(&sidecar);
    cmd.args(["--controller", "http://127.0.0.1:1", "--repo", "/nonexistent", "--worker-user", other]);
    let child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let out = swarm_tests::wait_output(child, Duration::from_secs(60));
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("--worker-user {other}: this sidecar runs as uid {}", user.uid))
            && err.contains("cannot run workers as uid"),
        "{err}"
    );
}

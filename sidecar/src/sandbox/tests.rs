use std::path::{Path, PathBuf};

use swarm_core::plan::{AgentKind, SandboxMode, SandboxSpec};

use super::*;

fn env(home: &str) -> Vec<(String, String)> {
    vec![
        ("HOME".into(), home.into()),
        ("PATH".into(), format!("/usr/bin:/bin:{home}/.cargo/bin:{home}:relative")),
        ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), "http://127.0.0.1:4317".into()),
    ]
}

fn place<'a>(wt: &'a Path, common: &'a Path, private: &'a [&'a Path]) -> Place<'a> {
    Place { worktree: wt, common_dir: common, private, agent: None, review: false }
}

#[test]
fn a_worker_writes_its_worktree_and_private_dirs_and_reads_only_the_shared_objects() {
    let (wt, common, tmp) =
        (Path::new("/r/.git/workspaces/w1"), Path::new("/r/.git"), Path::new("/r/.git/workspaces/w1.tmp"));
    let settings =
        Settings(SandboxSpec { write: vec!["~/.cargo/registry".into()], ..SandboxSpec::default() });
    let p = Policy::for_attempt(&settings, &place(wt, common, &[tmp]), &env("/home/u"));
    assert!(p.write.contains(&wt.to_path_buf()));
    assert!(p.write.contains(&tmp.to_path_buf()));
    assert!(p.write.contains(&PathBuf::from("/home/u/.cargo/registry")), "~ expands: {:?}", p.write);
    assert!(p.read.contains(&PathBuf::from("/r/.git/objects")));
    assert!(p.read.contains(&PathBuf::from("/home/u/.cargo/bin")), "PATH entries are readable");
    for (what, forbidden) in [("the repository", "/r"), ("its git dir", "/r/.git"), ("home", "/home/u")] {
        let p_forbidden = PathBuf::from(forbidden);
        assert!(
            !p.read.contains(&p_forbidden) && !p.write.contains(&p_forbidden),
            "{what} must not be opened wholesale: {p:?}"
        );
    }
    assert!(!p.read.iter().any(|r| r.is_relative()), "relative PATH entries are dropped: {:?}", p.read);
    assert_eq!(p.connect, vec![443, 4317], "the plan's ports and the OTLP collector's");
}

#[test]
fn a_reviewer_writes_only_its_swarm_dir_and_an_agent_its_own_state() {
    let (wt, common) = (Path::new("/r/.git/workspaces/w1"), Path::new("/r/.git"));
    let mut review = place(wt, common, &[]);
    review.review = true;
    review.agent = Some((AgentKind::Claude, "/usr/bin/claude-not-installed"));
    let p = Policy::for_attempt(&Settings(SandboxSpec::default()), &review, &env("/home/u"));
    assert!(!p.write.contains(&wt.to_path_buf()));
    assert!(p.read.contains(&wt.to_path_buf()));
    assert!(p.write.contains(&wt.join(".swarm")));
    assert!(p.write.contains(&PathBuf::from("/home/u/.claude")));
    assert!(p.write.contains(&PathBuf::from("/home/u/.claude.json")));
    assert!(!p.write.iter().any(|w| w.ends_with(".codex")));
}

#[test]
fn the_report_names_what_the_kernel_lacks_and_an_opt_out() {
    let on = Settings(SandboxSpec::default());
    let r = on.report(Capability { abi: 4 }, &Ending::Cgroup, &limits::Applied::default());
    assert_eq!(r.mode, "on");
    assert!(r.enforced.contains(&"network".to_string()), "{r:?}");
    assert!(r.missing.iter().any(|m| m.starts_with("signals") && m.contains("ABI 6")), "{r:?}");
    assert!(Capability { abi: 6 }.is_full() && !Capability { abi: 5 }.is_full());
    assert!(r.enforced.iter().any(|e| e.starts_with(NO_CAPABILITIES)), "{r:?}");
    assert!(r.enforced.contains(&format!("{PROCESSES_END} (cgroup)")), "{r:?}");
    // Without Landlock the trampoline still drops every capability, and a
    // command worker's supervisor ends its processes.
    let r = on.report(Capability::NONE, &Ending::Subreaper, &limits::Applied::default());
    assert_eq!(r.enforced.len(), 2, "{r:?}");
    assert!(r.enforced[0].starts_with(NO_CAPABILITIES), "{r:?}");
    assert_eq!(r.enforced[1], format!("{PROCESSES_END} (subreaper)"));
    assert!(r.missing.iter().all(|m| m.contains("no Landlock")), "{r:?}");
    // An agent without a cgroup: what leaves its group is named as missing.
    let r = on.report(
        Capability { abi: 6 },
        &Ending::GroupOnly { why: "read-only".into() },
        &limits::Applied::default(),
    );
    assert!(r.missing.iter().any(|m| m.starts_with(PROCESSES_END) && m.contains("read-only")), "{r:?}");
    let off = Settings(SandboxSpec { mode: SandboxMode::Off, ..SandboxSpec::default() });
    let r = off.report(Capability { abi: 7 }, &Ending::Subreaper, &limits::Applied::default());
    assert!(r.enforced.is_empty() && r.missing[0].contains("opted out"), "{r:?}");
}

#[test]
fn only_allowlisted_variables_of_the_sidecar_are_inherited() {
    // The test process's own environment: whatever it holds, nothing
    // outside the allowlist may pass.
    for (k, _) in inherited_env() {
        let allowed = matches!(k.as_str(), "PATH" | "HOME" | "LANG" | "TERM" | "TZ")
            || toolchains::LOCATORS.contains(&k.as_str())
            || k.starts_with("LC_")
            || k.starts_with("OTEL_EXPORTER_OTLP_");
        assert!(allowed, "{k} must not reach a worker");
    }
}

#[test]
fn a_confined_command_line_runs_the_trampoline_first() {
    let c = Confinement { exe: "/bin/swarm-sidecar".into(), policy: Arc::new(Policy::default()) };
    let argv = command_line(Some(&c), &["sh".into(), "-c".into(), "true".into()]);
    assert_eq!(argv[0], "/bin/swarm-sidecar");
    assert_eq!(argv[1], ARG);
    assert_eq!(argv[3], "--");
    assert_eq!(&argv[4..], &["sh", "-c", "true"]);
    let plain = command_line(None, &["true".into()]);
    assert_eq!(plain, vec![std::ffi::OsString::from("true")]);
}

#[test]
fn an_agents_state_directory_is_made_before_it_is_confined() {
    use std::os::unix::fs::PermissionsExt as _;
    let home = tempfile::tempdir().expect("home");
    make_agent_state(AgentKind::Claude, home.path(), None).expect("made");
    let meta = std::fs::metadata(home.path().join(".claude")).expect(".claude");
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert!(!home.path().join(".codex").exists(), "only the agent's own");
    make_agent_state(AgentKind::Claude, home.path(), None).expect("again: nothing to do");
}

/// The trampoline's drop, on a thread of its own (capabilities are per
/// thread): nothing is left in the thread's sets, whatever the test process
/// held; the bounding set is emptied too where it may be (`CAP_SETPCAP`).
#[test]
fn dropping_capabilities_leaves_none_whatever_was_held() {
    let status = || std::fs::read_to_string("/proc/thread-self/status").expect("status");
    let field = |status: &str, name: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}"));
        u64::from_str_radix(line.split_whitespace().nth(1).expect("value"), 16).expect("hex")
    };
    let (before, after, result) = std::thread::spawn(move || {
        let before = status();
        let result = privileges::drop_all(None);
        (before, status(), result)
    })
    .join()
    .expect("thread");
    result.expect("dropped");
    for name in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
        assert_eq!(field(&after, name), 0, "{name} after the drop:\n{after}");
    }
    const CAP_SETPCAP: u64 = 1 << 8;
    if field(&before, "CapEff:") & CAP_SETPCAP != 0 {
        assert_eq!(field(&after, "CapBnd:"), 0, "the bounding set:\n{after}");
    }
    // Unprivileged, it is a no-op that succeeds, again and again.
    std::thread::spawn(|| privileges::drop_all(None).and_then(|()| privileges::drop_all(None)))
        .join()
        .expect("thread")
        .expect("a second drop");
}

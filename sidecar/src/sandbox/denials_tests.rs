use std::path::PathBuf;

use super::*;

/// A policy reading `/usr` and a temp dir's `ro/`, writing its `rw/`; the
/// rest of the temp dir (`outside/`, `home/`) is not in it.
struct Scene {
    _dir: tempfile::TempDir,
    root: PathBuf,
    policy: Policy,
    env: Vec<(String, String)>,
}

impl Scene {
    fn new() -> Scene {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("real");
        for d in ["ro", "rw", "outside/lib/python3.11", "home/.ssh", "bin"] {
            std::fs::create_dir_all(root.join(d)).expect("dir");
        }
        std::fs::write(root.join("outside/lib/python3.11/os.py"), "").expect("file");
        std::fs::write(root.join("bin/python"), "").expect("file");
        let policy = Policy {
            read: vec!["/usr".into(), root.join("ro"), root.join("bin")],
            write: vec![root.join("rw")],
            ..Policy::default()
        };
        let env = vec![
            ("HOME".to_string(), root.join("home").display().to_string()),
            ("PATH".to_string(), format!("{}:/usr/bin", root.join("bin").display())),
        ];
        Scene { _dir: dir, root, policy, env }
    }

    fn find(&self, text: &str) -> Vec<Denial> {
        let text = text.replace("$T", &self.root.display().to_string());
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        find(&lines, &self.policy, &self.env)
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
}

#[test]
fn common_tools_messages_name_the_denied_path_and_the_read_setting() {
    let s = Scene::new();
    for text in [
        "cat: $T/outside/data.txt: Permission denied",
        "sh: 1: $T/outside/data.txt: Permission denied",
        "PermissionError: [Errno 13] Permission denied: '$T/outside/data.txt'",
        "Error: EACCES: permission denied, open '$T/outside/data.txt'",
        "fatal: could not open '$T/outside/data.txt' for reading: Permission denied",
        "error: failed to read `$T/outside/data.txt`\n\nCaused by:\n  Permission denied (os error 13)",
    ] {
        let found = s.find(text);
        assert_eq!(found.len(), 1, "{text}: {found:?}");
        assert_eq!(found[0].path, s.p("outside/data.txt"), "{text}");
        assert_eq!(found[0].setting, "sandbox.read", "{text}");
        assert_eq!(found[0].allow, s.p("outside"), "a file's directory: {text}");
    }
}

#[test]
fn a_write_to_a_readable_path_asks_for_the_write_setting() {
    let s = Scene::new();
    let found = s.find("touch: cannot touch '$T/ro/new.txt': Permission denied");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].setting, "sandbox.write");
    assert_eq!(found[0].setting_text(), format!("sandbox.write = [{:?}]", s.p("ro").display().to_string()));
    let found = s.find("mkdir: cannot create directory '$T/outside/cache': Operation not permitted");
    assert_eq!(found[0].setting, "sandbox.write", "{found:?}");
}

#[test]
fn what_the_policy_allows_is_not_the_sandboxs_doing() {
    let s = Scene::new();
    let text =
        "cat: $T/rw/x: Permission denied\ncat: $T/ro/y: Permission denied\ncat: /usr/z: Permission denied";
    assert_eq!(s.find(text), Vec::new());
    assert_eq!(s.find("compiling /outside/foo ... ok"), Vec::new(), "no marker, no denial");
}

#[test]
fn a_program_a_shell_could_not_run_is_looked_up_on_path_and_resolved() {
    let s = Scene::new();
    std::os::unix::fs::symlink(s.p("outside/lib/python3.11/os.py"), s.p("ro/py")).expect("link");
    let mut env_path = s.env.clone();
    env_path[1].1 = format!("{}:/usr/bin", s.p("ro").display());
    let lines = vec!["sh: 1: py: Permission denied".to_string()];
    let found = find(&lines, &s.policy, &env_path);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].path,
        s.p("outside/lib/python3.11/os.py"),
        "the link's target is what Landlock checks"
    );
    assert_eq!(found[0].allow, s.p("outside/lib/python3.11"));
}

#[test]
fn python_without_its_encodings_names_its_prefix() {
    let s = Scene::new();
    let text = "Python path configuration:
  PYTHONHOME = (not set)
  sys.base_prefix = '$T/outside'
  sys.prefix = '$T/rw/venv'
  sys.path = [
    '$T/outside/lib/python311.zip',
  ]
Fatal Python error: init_fs_encoding: failed to get the Python codec of the filesystem encoding
Python runtime state: core initialized
ModuleNotFoundError: No module named 'encodings'";
    let found = s.find(text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].path, s.p("outside"));
    assert_eq!(found[0].allow, s.p("outside"), "a directory is allowed as itself");
    let r = reason(&found);
    assert!(
        r.starts_with("; the sandbox denied ") && r.contains("sandbox.read = [") && r.contains("[defaults]"),
        "{r}"
    );
}

#[test]
fn a_credential_store_is_named_as_one_and_home_is_never_suggested() {
    let s = Scene::new();
    let found =
        s.find("cat: $T/home/.ssh/id_ed25519: Permission denied\ncat: $T/home/.bashrc: Permission denied");
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].credential, "{found:?}");
    assert!(found[0].to_string().contains("a credential store"), "{}", found[0]);
    assert!(!found[1].credential);
    assert_eq!(found[1].allow, s.p("home/.bashrc"), "never $HOME itself");
}

#[test]
fn the_reason_names_a_few_and_counts_the_rest() {
    let s = Scene::new();
    let text: String = (0..5).map(|n| format!("cat: $T/outside/f{n}: Permission denied\n")).collect();
    let found = s.find(&text);
    assert_eq!(found.len(), 5);
    let r = reason(&found);
    assert!(r.contains("f2") && !r.contains("f3") && r.ends_with(" and 2 more"), "{r}");
    assert_eq!(reason(&[]), "");
}

#[test]
fn paths_are_cut_where_tools_end_them() {
    let got = absolute_paths("a: /x/y: b '/q r/s' \"/t\" `/u`, (/v) k=/w. //not http://h/p");
    let want: Vec<PathBuf> = ["/x/y", "/q r/s", "/t", "/u", "/v", "/w"].iter().map(PathBuf::from).collect();
    assert_eq!(got, want);
}

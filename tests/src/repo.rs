//! Git repositories in temporary directories, worker scripts and plan text.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Output};

use tempfile::TempDir;

/// A git repository in a temporary directory, on branch `main` with one commit.
pub struct TempRepo {
    dir: TempDir,
}

impl TempRepo {
    /// A repository whose first commit holds `files` (path, content).
    pub fn with_files(files: &[(&str, &str)]) -> TempRepo {
        let dir = tempfile::Builder::new().prefix("swarm-e2e-").tempdir().expect("tempdir");
        let repo = TempRepo { dir };
        repo.git(&["init", "--quiet", "--initial-branch=main"]);
        repo.git(&["config", "user.name", "swarm tests"]);
        repo.git(&["config", "user.email", "tests@swarm.invalid"]);
        repo.git(&["config", "commit.gpgsign", "false"]);
        let mut files: Vec<(&str, &str)> = files.to_vec();
        if files.is_empty() {
            files.push(("README.md", "# test repo\n"));
        }
        repo.commit("initial commit", &files);
        repo
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes files and commits them on the current branch; returns the commit id.
    pub fn commit(&self, message: &str, files: &[(&str, &str)]) -> String {
        for (path, content) in files {
            self.write(path, content);
        }
        self.git(&["add", "-A"]);
        self.git(&["commit", "--quiet", "--allow-empty", "-m", message]);
        self.git(&["rev-parse", "HEAD"]).trim().to_string()
    }

    pub fn write(&self, path: &str, content: &str) {
        let full = self.path().join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(full, content).unwrap();
    }

    /// Runs git in the repository; panics with its stderr on failure.
    pub fn git(&self, args: &[&str]) -> String {
        let out = self.try_git(args);
        assert!(out.status.success(), "git {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn try_git(&self, args: &[&str]) -> Output {
        Command::new("git").arg("-C").arg(self.path()).args(args).output().expect("running git")
    }

    /// Every file of `rev`'s tree with its content.
    pub fn tree(&self, rev: &str) -> BTreeMap<String, String> {
        let names = self.git(&["ls-tree", "-r", "--name-only", rev]);
        names.lines().map(|name| (name.to_string(), self.git(&["show", &format!("{rev}:{name}")]))).collect()
    }

    /// Whether `rev` names a commit.
    pub fn has(&self, rev: &str) -> bool {
        self.try_git(&["rev-parse", "--verify", "--quiet", &format!("{rev}^{{commit}}")]).status.success()
    }

    /// First-parent subjects of `rev`, newest first.
    pub fn subjects(&self, rev: &str) -> Vec<String> {
        self.git(&["log", "--first-parent", "--format=%s", rev]).lines().map(str::to_string).collect()
    }
}

/// A worker script: `sh` code run for each task, chosen by `$SWARM_TASK_ID`.
/// Each arm is shell code; the default arm writes `<task>.txt` and exits 0.
pub fn worker_script(arms: &[(&str, &str)]) -> String {
    let mut s = String::from(
        "#!/bin/sh\n# test worker: behaviour by $SWARM_TASK_ID and $SWARM_ATTEMPT\nset -eu\n\
         mkdir -p \"$(dirname \"$SWARM_STATUS_FILE\")\"\ncase \"$SWARM_TASK_ID\" in\n",
    );
    for (task, body) in arms {
        let _ = writeln!(s, "{task})\n{body}\n;;");
    }
    s.push_str("*)\necho \"$SWARM_TASK_ID\" > \"$SWARM_TASK_ID.txt\"\n;;\nesac\nexit 0\n");
    s
}

/// Builds plan TOML text. Defaults: worker `sh worker.sh`, short backoffs.
pub struct PlanBuilder {
    name: String,
    defaults: Vec<String>,
    tasks: Vec<TaskBuilder>,
}

pub struct TaskBuilder {
    id: String,
    lines: Vec<String>,
}

impl PlanBuilder {
    pub fn new(name: &str) -> PlanBuilder {
        PlanBuilder {
            name: name.to_string(),
            defaults: vec![
                r#"command = ["sh", "worker.sh"]"#.into(),
                "retries = 2".into(),
                "backoff_initial_ms = 50".into(),
                "backoff_max_ms = 200".into(),
                "idle_timeout_secs = 60".into(),
            ],
            tasks: Vec::new(),
        }
    }

    /// Adds (or replaces) a `[defaults]` line, e.g. `("retries", "0")`.
    pub fn default(mut self, key: &str, value: &str) -> PlanBuilder {
        self.defaults.retain(|l| !l.starts_with(&format!("{key} ")));
        self.defaults.push(format!("{key} = {value}"));
        self
    }

    pub fn task(mut self, task: TaskBuilder) -> PlanBuilder {
        self.tasks.push(task);
        self
    }

    pub fn build(&self) -> String {
        let mut s = format!("name = \"{}\"\n\n[defaults]\n", self.name);
        for l in &self.defaults {
            let _ = writeln!(s, "{l}");
        }
        for t in &self.tasks {
            let _ = write!(s, "\n[[tasks]]\nid = \"{}\"\n", t.id);
            for l in &t.lines {
                let _ = writeln!(s, "{l}");
            }
        }
        s
    }
}

/// A task owning `<id>.txt` unless told otherwise.
pub fn task(id: &str) -> TaskBuilder {
    TaskBuilder { id: id.to_string(), lines: vec![format!("files = [\"{id}.txt\"]")] }
}

impl TaskBuilder {
    pub fn deps(self, deps: &[&str]) -> TaskBuilder {
        let list: Vec<String> = deps.iter().map(|d| format!("\"{d}\"")).collect();
        self.set("deps", &format!("[{}]", list.join(", ")))
    }

    pub fn files(self, globs: &[&str]) -> TaskBuilder {
        let list: Vec<String> = globs.iter().map(|d| format!("\"{d}\"")).collect();
        self.set("files", &format!("[{}]", list.join(", ")))
    }

    /// Sets any task field to a TOML value.
    pub fn set(mut self, key: &str, value: &str) -> TaskBuilder {
        self.lines.retain(|l| !l.starts_with(&format!("{key} ")));
        self.lines.push(format!("{key} = {value}"));
        self
    }
}

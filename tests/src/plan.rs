//! Worker scripts and plan text for tests.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Writes an executable `sh` script `name` into `dir` and returns its path.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// Where this machine's `python3` lives when it is not a system package
/// (pyenv keeps its shims, its own scripts and its versions in one root):
/// the fake agents start through `#!/usr/bin/env python3`.
fn interpreters() -> Vec<PathBuf> {
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")));
    root.filter(|r| r.is_dir()).into_iter().collect()
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
    /// Top-level tables after the tasks (`[[integration_verify]]`, ...).
    tables: Vec<String>,
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
            tables: Vec::new(),
        }
    }

    /// Appends top-level TOML tables (written after the tasks).
    pub fn tables(mut self, toml: &str) -> PlanBuilder {
        self.tables.push(toml.to_string());
        self
    }

    /// Adds (or replaces) a `[defaults]` line, e.g. `("retries", "0")`.
    pub fn default(mut self, key: &str, value: &str) -> PlanBuilder {
        self.defaults.retain(|l| !l.starts_with(&format!("{key} ")));
        self.defaults.push(format!("{key} = {value}"));
        self
    }

    /// Lets workers read `read` and write `write` beyond their worktree
    /// (`[defaults] sandbox`), as a plan whose tools live elsewhere must;
    /// the interpreters the test fakes run with are added to `read`.
    pub fn sandbox(self, read: &[&Path], write: &[&Path]) -> PlanBuilder {
        self.sandbox_with(read, write, &[443])
    }

    /// [`PlanBuilder::sandbox`] with the TCP ports workers may connect to.
    pub fn sandbox_with(self, read: &[&Path], write: &[&Path], connect: &[u16]) -> PlanBuilder {
        let list = |paths: Vec<PathBuf>| {
            let quoted: Vec<String> =
                paths.iter().map(|p| format!("{:?}", p.display().to_string())).collect();
            format!("[{}]", quoted.join(", "))
        };
        let mut reads: Vec<PathBuf> = read.iter().map(|p| p.to_path_buf()).collect();
        reads.extend(interpreters());
        let writes = write.iter().map(|p| p.to_path_buf()).collect();
        let ports: Vec<String> = connect.iter().map(u16::to_string).collect();
        let sandbox = format!(
            "{{ read = {}, write = {}, connect = [{}] }}",
            list(reads),
            list(writes),
            ports.join(", ")
        );
        self.default("sandbox", &sandbox)
    }

    /// Drops a `[defaults]` line, e.g. `command` for a plan whose tasks
    /// run an agent instead.
    pub fn remove_default(mut self, key: &str) -> PlanBuilder {
        self.defaults.retain(|l| !l.starts_with(&format!("{key} ")));
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
        for t in &self.tables {
            let _ = write!(s, "\n{t}\n");
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

//! Which task a failed check or a comment belongs to: the paths it names,
//! read against each task's owned globs, the same ownership the scheduler
//! runs tasks under.

use swarm_core::globs::OwnedGlobs;
use swarm_core::plan::Plan;

/// Longest token taken for a path; a log's long lines are not paths.
const MAX_PATH: usize = 512;
/// Most candidate paths looked at in one text.
const MAX_CANDIDATES: usize = 4096;

/// Where some feedback goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The one task whose files the text names most.
    Task(String),
    /// Several tasks' files are named equally often: the operator chooses.
    Ambiguous(Vec<String>),
    /// No task's file is named.
    Nobody,
}

/// The task owning the files `text` names (a test log's `src/a.rs:12:5`,
/// a compiler's `--> src/a.rs`, a Python traceback's `File "app/x.py"`).
pub fn owner(plan: &Plan, text: &str) -> Route {
    let candidates = candidates(text);
    let mut best: (usize, Vec<String>) = (0, Vec::new());
    for task in &plan.tasks {
        let Ok(globs) = OwnedGlobs::new(&task.files) else { continue };
        let hits = candidates.iter().filter(|p| globs.matches(p)).count();
        if hits == 0 || hits < best.0 {
            continue;
        }
        if hits > best.0 {
            best = (hits, Vec::new());
        }
        best.1.push(task.id.to_string());
    }
    match best.1.len() {
        0 => Route::Nobody,
        1 => Route::Task(best.1.remove(0)),
        _ => Route::Ambiguous(best.1),
    }
}

/// Tokens of `text` that may be repository paths, normalised
/// (`./a/b.rs:12:5` → `a/b.rs`).
fn candidates(text: &str) -> Vec<String> {
    let separators = |c: char| c.is_whitespace() || "\"'`(),;<>[]{}=|".contains(c);
    let mut out = Vec::new();
    for token in text.split(separators) {
        if out.len() >= MAX_CANDIDATES {
            break;
        }
        let path = token.split(':').next().unwrap_or_default();
        let path = path.trim_start_matches("./").trim_end_matches(['.', ',']);
        let plausible = !path.is_empty()
            && path.len() <= MAX_PATH
            && (path.contains('/') || path.contains('.'))
            && !path.starts_with('/')
            && !path.split('/').any(|part| part == "..")
            && path.chars().all(|c| c.is_alphanumeric() || "-_./+@".contains(c));
        if plausible {
            out.push(path.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn plan() -> Plan {
        Plan::parse(
            "name = \"app\"\n[defaults]\ncommand = [\"true\"]\n\
             [[tasks]]\nid = \"api\"\nfiles = [\"src/api/**\"]\n\
             [[tasks]]\nid = \"ui\"\nfiles = [\"web/**\", \"README.md\"]\n\
             [[tasks]]\nid = \"db\"\nfiles = [\"src/db.rs\"]\n",
        )
        .unwrap()
    }

    #[test]
    fn a_log_goes_to_the_task_whose_files_it_names_most() {
        let log = "running 3 tests\nerror[E0308]: mismatched types\n --> src/api/handlers.rs:12:5\n\
                   note: in ./src/api/mod.rs:3\nwarning: unused import in src/db.rs:1\n";
        assert_eq!(owner(&plan(), log), Route::Task("api".into()));
        let traceback = "Traceback (most recent call last):\n  File \"web/app.js\", line 3\nFAILED";
        assert_eq!(owner(&plan(), traceback), Route::Task("ui".into()));
    }

    #[test]
    fn a_tie_is_the_operators_and_nothing_named_is_nobodys() {
        assert_eq!(
            owner(&plan(), "src/db.rs:4 and web/index.html:9"),
            Route::Ambiguous(vec!["ui".into(), "db".into()])
        );
        assert_eq!(owner(&plan(), "segfault at 0x0 in /usr/lib/libc.so.6"), Route::Nobody);
        assert_eq!(owner(&plan(), "../src/api/x.rs /src/api/y.rs"), Route::Nobody, "outside the tree");
        assert_eq!(owner(&plan(), "README.md"), Route::Task("ui".into()), "a review comment's path");
    }

    #[test]
    fn a_huge_hostile_text_is_bounded() {
        let text = "src/db.rs ".repeat(100_000) + &"x".repeat(1 << 20);
        assert_eq!(owner(&plan(), &text), Route::Task("db".into()));
        assert!(candidates(&text).len() <= MAX_CANDIDATES);
    }
}

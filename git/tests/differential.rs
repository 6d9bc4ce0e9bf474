//! Differential property test: `Integrator::integrate` (merge strategy) against
//! `git merge-tree --write-tree` on the same random histories.
//!
//! Cases default to 64; set `PROPTEST_CASES` for more.
//!
//! Generator restrictions, and why:
//! - Renames are exact (the renaming side never edits the renamed file, before or after), and content
//!   added under a new name shares no line with any other file. Rename *detection* of partially
//!   similar small files differs by design between git (hashed line chunks) and gix (diff-based
//!   similarity); on a few-line file a one-line edit lands near the 50 % threshold where the two
//!   legitimately disagree. Exact renames are what matters for the merge logic and are detected
//!   identically, so rename/modify, rename/delete and rename/rename cases stay covered.
//! - Every directory holds an anchor file (`dN/keep.txt`) that no op touches, so no side ever empties
//!   a directory. git infers *directory renames* when all files of a directory moved elsewhere and
//!   then relocates the other side's new files in it (reported as a conflict by default,
//!   `merge.directoryRenames=conflict`); gix's tree merge does not implement directory-rename
//!   detection. The integrator therefore never relocates files behind the task's back; that is the
//!   behaviour we want for tasks with owned paths, but it is a known difference from git.
//! - When both sides rename, the conflicting paths are only required to be a non-empty subset of
//!   git's: gix names just the shared destination of a rename/rename(2to1) collision where git also
//!   lists the sources. The clean/conflict verdict and clean trees must still match exactly.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use swarm_git::{Integrator, MergeError, MergeRequest, MergeStrategy};
use swarm_tests::TempRepo;

const BASE_FILES: usize = 6;
const LINES: usize = 6;
const ANCHOR: &str = "keep.txt";

#[derive(Debug, Clone)]
enum Op {
    /// Replace line `line` of the `file`-th existing file with variant `text` (small set → overlaps).
    Edit {
        file: usize,
        line: usize,
        text: u8,
    },
    /// Append a line to the `file`-th existing file.
    Append {
        file: usize,
        text: u8,
    },
    Delete {
        file: usize,
    },
    /// Add a new file `n{name}.txt` (possibly in a directory).
    Add {
        name: u8,
        dir: bool,
    },
    /// Rename the `file`-th existing file to `r{to}.txt` (possibly into another directory).
    Rename {
        file: usize,
        to: u8,
        dir: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..16usize, 0..LINES, 0..3u8).prop_map(|(file, line, text)| Op::Edit { file, line, text }),
        1 => (0..16usize, 0..2u8).prop_map(|(file, text)| Op::Append { file, text }),
        1 => (0..16usize).prop_map(|file| Op::Delete { file }),
        1 => (0..4u8, any::<bool>()).prop_map(|(name, dir)| Op::Add { name, dir }),
        1 => (0..16usize, 0..4u8, any::<bool>()).prop_map(|(file, to, dir)| Op::Rename { file, to, dir }),
    ]
}

/// A side's history: 1–3 commits of 1–3 ops each.
fn side() -> impl Strategy<Value = Vec<Vec<Op>>> {
    prop::collection::vec(prop::collection::vec(op(), 1..4), 1..4)
}

type Files = BTreeMap<String, Vec<String>>;

fn base_files() -> Files {
    (0..BASE_FILES)
        .map(|i| {
            let path = if i % 2 == 0 { format!("f{i}.txt") } else { format!("d{}/f{i}.txt", i % 3) };
            (path, (0..LINES).map(|j| format!("base {i} line {j}")).collect())
        })
        .chain((0..3).map(|d| (format!("d{d}/{ANCHOR}"), vec![format!("anchor {d}")])))
        .collect()
}

/// Applies ops, returning the per-commit change lists. `side` tags new content so the two sides'
/// additions never look alike; `renamed` tracks files this side must not touch again, `modified`
/// the files this side changed (in any of its commits), which it must not rename.
fn apply(
    files: &mut Files,
    ops: &[Op],
    side: &str,
    renamed: &mut BTreeSet<String>,
    modified: &mut BTreeSet<String>,
) -> Vec<(String, Option<String>)> {
    let mut changes: BTreeMap<String, Option<String>> = BTreeMap::new();
    for op in ops {
        let names: Vec<String> =
            files.keys().filter(|k| !renamed.contains(*k) && !k.ends_with(ANCHOR)).cloned().collect();
        let pick = |i: usize| names.get(i % names.len().max(1)).cloned();
        match op {
            Op::Edit { file, line, text } => {
                let Some(name) = pick(*file) else { continue };
                let content = files.get_mut(&name).expect("picked");
                if let Some(l) = content.get_mut(line % LINES.max(1)) {
                    *l = format!("edit {text}");
                }
                modified.insert(name.clone());
                changes.insert(name.clone(), Some(content.join("\n") + "\n"));
            }
            Op::Append { file, text } => {
                let Some(name) = pick(*file) else { continue };
                let content = files.get_mut(&name).expect("picked");
                content.push(format!("appended {text}"));
                modified.insert(name.clone());
                changes.insert(name.clone(), Some(content.join("\n") + "\n"));
            }
            Op::Delete { file } => {
                let Some(name) = pick(*file) else { continue };
                files.remove(&name);
                changes.insert(name, None);
            }
            Op::Add { name, dir } => {
                let path = if *dir { format!("d1/n{name}.txt") } else { format!("n{name}.txt") };
                if files.contains_key(&path) {
                    continue;
                }
                let content: Vec<String> = (0..3).map(|j| format!("new {side} {path} {j}")).collect();
                changes.insert(path.clone(), Some(content.join("\n") + "\n"));
                files.insert(path.clone(), content);
                renamed.insert(path); // keep added content unique: no later edits that could look like renames
            }
            Op::Rename { file, to, dir } => {
                let Some(from) = pick(*file) else { continue };
                // Only rename files this side has not modified (exact renames, see module docs).
                if modified.contains(&from) {
                    continue;
                }
                let path = if *dir { format!("d2/r{to}.txt") } else { format!("r{to}.txt") };
                if files.contains_key(&path) {
                    continue;
                }
                let content = files.remove(&from).expect("picked");
                changes.insert(from, None);
                changes.insert(path.clone(), Some(content.join("\n") + "\n"));
                files.insert(path.clone(), content);
                renamed.insert(path);
            }
        }
    }
    changes.into_iter().collect()
}

fn build_side(repo: &TempRepo, base: &str, base_state: &Files, commits: &[Vec<Op>], tag: &str) -> String {
    let mut files = base_state.clone();
    let mut renamed = BTreeSet::new();
    let mut modified = BTreeSet::new();
    let mut tip = base.to_string();
    for (i, ops) in commits.iter().enumerate() {
        let changes = apply(&mut files, ops, tag, &mut renamed, &mut modified);
        let refs: Vec<(&str, Option<&str>)> =
            changes.iter().map(|(p, c)| (p.as_str(), c.as_deref())).collect();
        tip = repo.commit(Some(&tip), &refs, &format!("{tag} {i}"));
    }
    tip
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn integrate_agrees_with_git_merge_tree(ours in side(), theirs in side()) {
        let repo = TempRepo::new();
        let state = base_files();
        let base_changes: Vec<(String, Option<String>)> =
            state.iter().map(|(p, lines)| (p.clone(), Some(lines.join("\n") + "\n"))).collect();
        let refs: Vec<(&str, Option<&str>)> = base_changes.iter().map(|(p, c)| (p.as_str(), c.as_deref())).collect();
        let base = repo.commit(None, &refs, "base");
        let head = build_side(&repo, &base, &state, &ours, "ours");
        let task = build_side(&repo, &base, &state, &theirs, "theirs");
        repo.set_branch("integration", &head);
        repo.set_branch("task", &task);

        let (code, out) = repo.try_git(&["merge-tree", "--write-tree", "--name-only", "integration", "task"]);
        let mut lines = out.lines();
        let git_tree = lines.next().unwrap_or_default().to_string();
        let git_conflicts: Vec<String> =
            lines.take_while(|l| !l.is_empty()).map(str::to_string).collect::<BTreeSet<_>>().into_iter().collect();

        let integrator = Integrator::open(repo.path()).expect("open");
        let outcome = integrator.integrate(&MergeRequest {
            integration_branch: "integration".into(),
            expected_head: head.clone(),
            task_commit: task.clone(),
            strategy: MergeStrategy::Merge,
            attempt_label: "prop/t#1".into(),
            title: "t".into(),
            summary: String::new(),
        });
        match (code, outcome) {
            (0, Ok(report)) => prop_assert_eq!(repo.tree_id(&report.result), git_tree),
            (1, Err(MergeError::Conflict { paths, .. })) => {
                let ours_paths: Vec<String> = paths.into_iter().map(|p| p.path).collect();
                let renames = |side: &[Vec<Op>]| side.iter().flatten().any(|op| matches!(op, Op::Rename { .. }));
                if renames(&ours) && renames(&theirs) {
                    // Both sides renamed: for a rename/rename(2to1) collision gix reports only the
                    // shared destination, git also names the sources (found by this test in CI,
                    // e.g. two files renamed to d2/r3.txt). The verdict still agrees; the list is
                    // what the task text shows, so it must be non-empty and a subset of git's.
                    prop_assert!(!ours_paths.is_empty());
                    prop_assert!(
                        ours_paths.iter().all(|p| git_conflicts.contains(p)),
                        "{:?} not within git's {:?}", ours_paths, git_conflicts
                    );
                } else {
                    prop_assert_eq!(ours_paths, git_conflicts);
                }
            }
            (_, Err(MergeError::AlreadyContained { .. })) => {
                // The task side made no commit with changes git could see differently: only possible
                // if the task equals the base, which the generator never produces (≥ 1 commit).
                prop_assert!(false, "task commit unexpectedly contained in head");
            }
            (code, outcome) => prop_assert!(false, "git exit {code} (conflicts {git_conflicts:?}) vs {outcome:?}"),
        }
    }
}

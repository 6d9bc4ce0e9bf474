//! Random edits (writes, deletions, new directories, modes, links, files
//! turned into directories and back), each committed by the tracked path
//! and each base moved to by it, checked against git's own view: the
//! commit holds exactly what the worktree has, and a moved worktree holds
//! exactly the base's tree, `git status` clean.
//!
//! Two ways through: with a fresh repository handle for every step (the
//! index read from its file each time), and the way a sidecar runs, with
//! the tracker's repository whose index and tree ids stay in memory
//! between attempts and are brought up to date by the paths that changed.

use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use swarm_sidecar::{changes, index_file, worktree};

fn git(dir: &Path, args: &[&str], index: Option<&Path>) -> String {
    let mut cmd = std::process::Command::new("git");
    cmd.args(args).current_dir(dir);
    for (k, v) in [
        ("GIT_AUTHOR_NAME", "t"),
        ("GIT_AUTHOR_EMAIL", "t@example.com"),
        ("GIT_COMMITTER_NAME", "t"),
        ("GIT_COMMITTER_EMAIL", "t@example.com"),
    ] {
        cmd.env(k, v);
    }
    if let Some(i) = index {
        cmd.env("GIT_INDEX_FILE", i);
    }
    let out = cmd.output().expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository at `<root>/repo` whose one commit holds `files`; returns
/// its path and the commit.
fn repo_with(root: &Path, files: &[(String, String)]) -> (PathBuf, String) {
    let repo = root.join("repo");
    for (path, body) in files {
        let full = repo.join(path);
        std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
        std::fs::write(full, body).expect("write");
    }
    git(&repo, &["init", "-q", "-b", "main"], None);
    git(&repo, &["add", "-A"], None);
    git(&repo, &["commit", "-q", "-m", "base"], None);
    let base = git(&repo, &["rev-parse", "HEAD"], None);
    (repo, base)
}

fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(p, b)| (p.to_string(), b.to_string())).collect()
}

/// The tree of what is in the worktree, hashed from scratch by git (a
/// fresh index: nothing of ours is trusted).
fn scratch_tree(wt: &Path, tmp: &Path) -> String {
    let index = tmp.join("scratch-index");
    let _ = std::fs::remove_file(&index);
    git(wt, &["add", "-A"], Some(&index));
    git(wt, &["write-tree"], Some(&index))
}

/// One to five random edits of the worktree `wt`.
fn edit_at_random(rng: &mut rand::rngs::StdRng, wt: &Path, round: usize) {
    for _ in 0..rng.random_range(1..6) {
        // Not the ignore rules: a changed `.gitignore` makes the tracker
        // lost (`a_changed_gitignore_makes_the_tracker_walk`).
        let files: Vec<String> = git(wt, &["ls-files"], None)
            .lines()
            .map(str::to_string)
            .filter(|f| !f.is_empty() && f != ".gitignore")
            .collect();
        let pick = files[rng.random_range(0..files.len())].clone();
        let full = wt.join(&pick);
        if !std::fs::symlink_metadata(&full).is_ok_and(|m| !m.is_dir()) {
            continue; // an earlier edit of this round took it away
        }
        match rng.random_range(0..8) {
            0 => std::fs::write(&full, format!("changed {round}\n")).expect("modify"),
            1 => std::fs::remove_file(&full).expect("delete"),
            2 => {
                let n = wt.join(format!("n{round}/m{}/g.txt", rng.random_range(0..3)));
                std::fs::create_dir_all(n.parent().expect("parent")).expect("mkdir");
                std::fs::write(n, "new\n").expect("add");
            }
            3 => {
                use std::os::unix::fs::PermissionsExt as _;
                if std::fs::symlink_metadata(&full).expect("stat").file_type().is_file() {
                    let mode = if rng.random_bool(0.5) { 0o755 } else { 0o644 };
                    std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode)).expect("chmod");
                }
            }
            4 => {
                std::fs::remove_file(&full).expect("delete");
                std::os::unix::fs::symlink("../somewhere", &full).expect("link");
            }
            5 => {
                // A file becomes a directory.
                std::fs::remove_file(&full).expect("delete");
                std::fs::create_dir_all(&full).expect("mkdir");
                std::fs::write(full.join("inner.txt"), "inner\n").expect("write");
            }
            6 => std::fs::write(wt.join(format!("build{round}.log")), "ignored").expect("ignored"),
            _ => {
                // A whole directory goes (a directory that becomes a file, later).
                let top = wt.join(Path::new(&pick).components().next().expect("component"));
                if top.is_dir() && rng.random_bool(0.3) {
                    std::fs::remove_dir_all(&top).expect("rm -r");
                    std::fs::write(&top, "now a file\n").expect("write");
                }
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Handles {
    /// `commit_paths` / `move_clean`: a repository opened for each step.
    Fresh,
    /// `commit_paths_in` / `move_clean_in`: the tracker's, kept in memory.
    Tracker,
}

fn random_edits_match_git(handles: Handles, seed: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut list: Vec<(String, String)> =
        (0..40).map(|i| (format!("d{}/e{}/f{i}.txt", i % 4, i % 3), format!("{i}\n"))).collect();
    list.push((".gitignore".into(), "*.log\n".into()));
    let (repo, base) = repo_with(dir.path(), &list);
    let p = worktree::prepare(&ws(&repo), "w1", "swarm/s/r0", &base).expect("prepare");
    let wt = p.path.clone();
    let mut t = changes::Tracker::start(&wt).expect("tracker");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut commits = vec![base.clone()];
    let index_file = repo.join(".git/worktrees/w1/index");
    let sum = || index_file::checksum(&index_file).expect("the index's checksum");
    // `git status` refreshes the stat data of files written within the
    // index's second and then rewrites the index: a worker's git would too.
    let mut rewritten_by_git = 0;
    for round in 0..30 {
        edit_at_random(&mut rng, &wt, round);
        let changed = t.take().expect("tracked");
        let message = format!("round {round}");
        let (oid, _) = match handles {
            Handles::Fresh => changes::commit_paths(&wt, &message, &changed).expect("commit"),
            Handles::Tracker => {
                let (r, memo) = t.repo_and_memo().expect("the tracker's repository");
                changes::commit_paths_in(r, memo, &message, &changed).expect("commit")
            }
        };
        let head_tree = git(&wt, &["rev-parse", &format!("{oid}^{{tree}}")], None);
        assert_eq!(head_tree, scratch_tree(&wt, dir.path()), "round {round}: the commit is the worktree");
        if handles == Handles::Fresh {
            // The tracker's commit leaves the index file to the next move.
            assert_eq!(git(&wt, &["status", "--porcelain"], None), "", "round {round}: status after commit");
        }
        let before = commits.last().expect("a commit").clone();
        let mut listed = worktree::files_changed(&wt, &before, oid).expect("files changed");
        listed.sort();
        let mut want: Vec<String> =
            git(&wt, &["diff", "--no-renames", "--name-only", &before, &oid.to_string()], None)
                .lines()
                .map(str::to_string)
                .filter(|l| !l.is_empty())
                .collect();
        want.sort();
        assert_eq!(listed, want, "round {round}: files changed");
        commits.push(oid.to_string());
        // Committing changes no file. A directory the round removed may
        // still report its own deletion: the kernel sends that once the
        // inode is freed, which can come after the parent's report.
        let late = t.take().expect("still tracked");
        assert!(late.iter().all(|p| !wt.join(p).is_dir()), "round {round}: committing changed {late:?}");
        // Move to an earlier commit (or stay) by the changed paths only.
        let target = commits[rng.random_range(0..commits.len())].clone();
        let branch = format!("swarm/s/r{}", round + 1);
        match handles {
            Handles::Fresh => changes::move_clean(&ws(&repo), "w1", &branch, &target).expect("move"),
            Handles::Tracker => {
                let (r, memo) = t.repo_and_memo().expect("the tracker's repository");
                changes::move_clean_in(r, memo, &ws(&repo), "w1", &branch, &target).expect("move")
            }
        };
        let target_tree = git(&wt, &["rev-parse", &format!("{target}^{{tree}}")], None);
        assert_eq!(scratch_tree(&wt, dir.path()), target_tree, "round {round}: moved to {target}");
        let ours = sum();
        assert_eq!(git(&wt, &["status", "--porcelain"], None), "", "round {round}: status after move");
        assert_eq!(git(&wt, &["rev-parse", "HEAD"], None), target);
        // The cache of tree ids we wrote is the one git makes itself.
        assert_eq!(
            git(&wt, &["write-tree"], None),
            target_tree,
            "round {round}: the index's cache of tree ids"
        );
        rewritten_by_git += u64::from(sum() != ours);
        assert!(t.take().is_some(), "round {round}: still tracked");
        commits.push(target);
    }
    if handles == Handles::Tracker {
        let (_, memo) = t.repo_and_memo().expect("the tracker's repository");
        // The first commit after the tracker started hashed the whole index,
        // and so did the commit after each rewrite by git; every other
        // commit and move hashed only the directories that changed.
        assert_eq!(
            memo.full_hashes(),
            1 + rewritten_by_git,
            "whole-index hashes over 30 commits and 30 moves"
        );
        assert!(rewritten_by_git < 15, "{rewritten_by_git} of 30 moves were followed by a rewrite by git");
    }
}

#[test]
fn tracked_paths_match_git_on_random_edits_with_a_fresh_repository_each_step() {
    for seed in [13, 14, 15] {
        random_edits_match_git(Handles::Fresh, seed);
    }
}

#[test]
fn tracked_paths_match_git_on_random_edits_with_the_trackers_index_in_memory() {
    for seed in [13, 14, 15] {
        random_edits_match_git(Handles::Tracker, seed);
    }
}

/// A worker's own `git add` rewrites the index file: the sidecar reads it
/// again and hashes the whole index, since it cannot know what changed.
#[test]
fn an_index_a_worker_rewrote_is_read_again_and_hashed_in_full() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (repo, base) = repo_with(dir.path(), &files(&[("src/a.txt", "a\n"), ("b.txt", "b\n")]));
    let p = worktree::prepare(&ws(&repo), "w1", "swarm/s/t0", &base).expect("prepare");
    let mut t = changes::Tracker::start(&p.path).expect("tracker");
    let (r, memo) = t.repo_and_memo().expect("repository");
    changes::move_clean_in(r, memo, &ws(&repo), "w1", "swarm/s/t1", &base).expect("move");
    let hashed = memo.full_hashes();

    std::fs::write(p.path.join("src/a.txt"), "a2\n").expect("modify");
    std::fs::write(p.path.join("src/new.txt"), "n\n").expect("add");
    git(&p.path, &["add", "src/new.txt"], None);
    let changed = t.take().expect("tracked");
    let (r, memo) = t.repo_and_memo().expect("repository");
    let (oid, made) = changes::commit_paths_in(r, memo, "t1", &changed).expect("commit");
    assert!(made);
    assert_eq!(memo.full_hashes(), hashed + 1, "the rewritten index is hashed in full");
    let tree = git(&p.path, &["rev-parse", &format!("{oid}^{{tree}}")], None);
    assert_eq!(tree, scratch_tree(&p.path, dir.path()));
}

#[test]
fn a_changed_gitignore_makes_the_tracker_walk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (repo, base) = repo_with(dir.path(), &files(&[(".gitignore", "*.log\n"), ("a.txt", "a\n")]));
    let p = worktree::prepare(&ws(&repo), "w1", "swarm/s/t0", &base).expect("prepare");
    std::fs::write(p.path.join("build.log"), "kept out\n").expect("ignored");
    let mut t = changes::Tracker::start(&p.path).expect("tracker");
    std::fs::write(p.path.join("a.txt"), "a2\n").expect("modify");
    assert_eq!(t.take().map(|s| s.len()), Some(1));
    // No longer ignored: a commit must take build.log, which did not change.
    std::fs::write(p.path.join(".gitignore"), "").expect("new rules");
    assert_eq!(t.take(), None, "the tracker cannot vouch for untouched files");
    let (oid, made) = worktree::commit_all(&p.path, "t1").expect("commit by a walk");
    assert!(made);
    assert_eq!(git(&p.path, &["show", &format!("{oid}:build.log")], None), "kept out");
}

/// The repository's own workspaces directory, `.git/workspaces/`.
fn ws(repo: &std::path::Path) -> worktree::Workspaces {
    worktree::Workspaces::in_repo(repo).expect("workspaces")
}

//! The index the sidecar writes itself after a move, at 10,000 files: read
//! as clean by git, libgit2 and gix, with a cache of tree ids that git
//! trusts, and still right after a file changed.

use std::path::{Path, PathBuf};
use std::process::Command;

use swarm_sidecar::{changes, index_file, worktree};

#[path = "support/fast_import.rs"]
mod fast_import;

const FILES: usize = 10_000;

fn git_env(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> String {
    let out =
        Command::new("git").args(args).envs(env.iter().copied()).current_dir(dir).output().expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn git(dir: &Path, args: &[&str]) -> String {
    git_env(dir, args, &[])
}

/// `c1` with [`FILES`] files (`README` and the rest in 100 directories)
/// and `c2` changing five of them, as loose objects (few: the files share their contents), so that a
/// test can take one tree object away.
fn build_repo(repo: &Path) -> (String, String) {
    git(repo, &["init", "-q", "-b", "main"]);
    let mut s = String::new();
    for (mark, n) in [(1usize, FILES), (2, 5)] {
        s.push_str(&format!(
            "commit refs/heads/main\nmark :{mark}\ncommitter t <t@example.com> 1700000000 +0000\ndata 2\nc\n"
        ));
        if mark == 2 {
            s.push_str("from :1\n");
        }
        if mark == 1 {
            s.push_str("M 100644 inline README\ndata 7\nreadme\n\n");
        }
        for i in 0..n - usize::from(mark == 1) {
            let body = if mark == 1 { format!("file {}\n", i % 7) } else { format!("changed {i}\n") };
            s.push_str(&format!("M 100644 inline src/d{}/f{i}.txt\ndata {}\n{body}\n", i % 100, body.len()));
        }
    }
    fast_import::import(repo, &s);
    fast_import::unpack_to_loose(repo);
    (git(repo, &["rev-parse", "main~1"]), git(repo, &["rev-parse", "main"]))
}

/// The test repository under `dir`, and worker w1's worktree at its first
/// commit with the sidecar's tracker started on it.
struct Setup {
    repo: PathBuf,
    c1: String,
    c2: String,
    worktree: worktree::Prepared,
    tracker: changes::Tracker,
}

fn setup(dir: &Path) -> Setup {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).expect("mkdir");
    let (c1, c2) = build_repo(&repo);
    let worktree = worktree::prepare(&ws(&repo), "w1", "swarm/s/t1", &c1).expect("prepare");
    let tracker = changes::Tracker::start(&worktree.path).expect("tracker");
    Setup { repo, c1, c2, worktree, tracker }
}

fn loose_object(repo: &Path, id: &str) -> PathBuf {
    repo.join(".git/objects").join(&id[..2]).join(&id[2..])
}

#[test]
fn the_index_written_after_a_move_is_clean_for_every_reader_with_a_cache_tree_git_trusts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let Setup { repo, c2, worktree: p, mut tracker, .. } = setup(tmp.path());
    assert_eq!(tracker.take(), Some(Default::default()));
    let (wt, memo) = tracker.repo_and_memo().expect("the tracker's repository");
    changes::move_clean_in(wt, memo, &ws(&repo), "w1", "swarm/s/t2", &c2).expect("move");
    let wt = &p.path;
    let index_path = PathBuf::from(git(wt, &["rev-parse", "--path-format=absolute", "--git-path", "index"]));

    // git: the files, the index and HEAD agree.
    assert_eq!(git(wt, &["rev-parse", "HEAD"]), c2);
    assert_eq!(git(wt, &["diff-index", "--cached", "HEAD"]), "", "the index is HEAD's tree");
    assert_eq!(git(wt, &["status", "--porcelain"]), "", "and the files are the index's");
    assert_eq!(git(wt, &["ls-files"]).lines().count(), FILES);

    // libgit2, from the file (not the tracker's copy in memory).
    let r = git2::Repository::open(wt).expect("libgit2 opens");
    let mut index = r.index().expect("libgit2 reads the index");
    assert_eq!(index.len(), FILES);
    assert!(r.statuses(None).expect("status").is_empty(), "libgit2 sees a clean worktree");
    let head_tree = r.head().expect("head").peel_to_tree().expect("tree").id();
    assert_eq!(index.write_tree().expect("write tree"), head_tree);

    // gix: checksum verified, entries in order, the cache of tree ids
    // complete against the object store and the tree of HEAD.
    let file = gix::index::File::at(&index_path, gix::hash::Kind::Sha1, false, Default::default())
        .expect("gix reads the index and its checksum");
    assert_eq!(file.entries().len(), FILES);
    file.verify_entries().expect("entries in order");
    let odb = gix::open(&repo).expect("gix opens the repository").objects;
    file.verify_extensions(true, &odb).expect("the cache of tree ids matches the objects");
    let tree = file.tree().expect("a cache of tree ids");
    assert_eq!(tree.id.to_string(), head_tree.to_string());
    assert_eq!(tree.num_entries, Some(FILES as u32));
    assert_eq!(tree.children.len(), 1, "src/ (README is a file)");
    assert_eq!(tree.children[0].children.len(), 100);
    assert_eq!(
        index_file::checksum(&index_path).expect("checksum").map(|s| s.to_vec()),
        file.checksum().map(|c| c.as_slice().to_vec())
    );

    // git trusts the cache: `write-tree` does not rebuild (and so rewrite)
    // a tree object taken out of the store.
    let d50 = git(wt, &["rev-parse", "HEAD:src/d50"]);
    let d50_file = loose_object(&repo, &d50);
    let d50_bytes = std::fs::read(&d50_file).expect("loose tree object");
    std::fs::remove_file(&d50_file).expect("take the tree out");
    assert_eq!(git(wt, &["write-tree"]), head_tree.to_string());
    assert!(!d50_file.exists(), "git used the cached id of src/d50");

    // After a file changed and was staged, git rebuilds only what it
    // touched (git checks the objects of the cached trees it visits, so
    // the change is outside src/), and the tree is the one a fresh index
    // makes.
    std::fs::write(wt.join("README"), "worker's\n").expect("modify");
    assert_eq!(git(wt, &["status", "--porcelain"]), "M README");
    git(wt, &["add", "README"]);
    let staged = git(wt, &["write-tree"]);
    assert!(!d50_file.exists(), "src/ and src/d50 still came from the cache");
    std::fs::write(&d50_file, d50_bytes).expect("put the tree back");
    let scratch = tmp.path().join("scratch-index");
    let env: [(&str, &Path); 1] = [("GIT_INDEX_FILE", &scratch)];
    git_env(wt, &["add", "-A"], &env);
    assert_eq!(staged, git_env(wt, &["write-tree"], &env));
    assert_eq!(git(wt, &["diff-index", "--cached", "--name-only", "HEAD"]), "README");
}

#[test]
fn moves_keep_the_cache_tree_right_and_a_rewritten_index_is_read_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let Setup { repo, c1, c2, worktree: p, mut tracker } = setup(tmp.path());
    let wt = p.path.clone();
    let index_path = PathBuf::from(git(&wt, &["rev-parse", "--path-format=absolute", "--git-path", "index"]));
    let odb = gix::open(&repo).expect("gix opens").objects;
    for (n, base) in [&c2, &c1, &c2].into_iter().enumerate() {
        assert_eq!(tracker.take(), Some(Default::default()), "clean before move {n}");
        let (r, memo) = tracker.repo_and_memo().expect("repository");
        changes::move_clean_in(r, memo, &ws(&repo), "w1", &format!("swarm/s/m{n}"), base).expect("move");
        assert!(tracker.take().is_some());
        assert_eq!(git(&wt, &["status", "--porcelain"]), "", "move {n}");
        let file = gix::index::File::at(&index_path, gix::hash::Kind::Sha1, false, Default::default())
            .expect("gix reads");
        file.verify_extensions(true, &odb).expect("cache tree");
        assert_eq!(file.tree().expect("tree").id.to_string(), git(&wt, &["rev-parse", "HEAD^{tree}"]));
    }
    // A worker stages a file with git: the tracker's libgit2 reads the
    // rewritten file, so its commit has what the worker staged and wrote.
    std::fs::write(wt.join("src/d1/f1.txt"), "staged\n").expect("modify");
    git(&wt, &["add", "src/d1/f1.txt"]);
    std::fs::write(wt.join("src/d2/new.txt"), "new\n").expect("add");
    let changed = tracker.take().expect("tracked");
    let (r, memo) = tracker.repo_and_memo().expect("repository");
    let (oid, made) = changes::commit_paths_in(r, memo, "worker", &changed).expect("commit");
    assert!(made);
    let files = git(&wt, &["diff-tree", "--no-commit-id", "--name-only", "-r", &oid.to_string(), "HEAD~1"]);
    assert_eq!(files, "src/d1/f1.txt\nsrc/d2/new.txt");
    let (r, memo) = tracker.repo_and_memo().expect("repository");
    changes::move_clean_in(r, memo, &ws(&repo), "w1", "swarm/s/next", &oid.to_string())
        .expect("move to the commit");
    assert_eq!(git(&wt, &["status", "--porcelain"]), "");
    assert_eq!(git(&wt, &["diff-index", "--cached", "HEAD"]), "");
}

/// The repository's own workspaces directory, `.git/workspaces/`.
fn ws(repo: &std::path::Path) -> worktree::Workspaces {
    worktree::Workspaces::in_repo(repo).expect("workspaces")
}

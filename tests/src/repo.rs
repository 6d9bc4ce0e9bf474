//! Git repositories in temporary directories: history built through the
//! git CLI in the work tree or with plumbing that moves no work tree, and
//! reads of files, trees, refs and commits.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use git2::{Oid, Repository};
use tempfile::TempDir;

/// The identity of every commit a [`TempRepo`] makes.
pub const AUTHOR: (&str, &str) = ("Test", "test@example.com");

/// One change to a file in a commit: `&str` writes that content, an
/// `Option<&str>` writes it when `Some` and deletes the file when `None`.
pub trait Change {
    fn content(&self) -> Option<&str>;
}

impl Change for &str {
    fn content(&self) -> Option<&str> {
        Some(self)
    }
}

impl Change for &String {
    fn content(&self) -> Option<&str> {
        Some(self)
    }
}

impl<S: AsRef<str>> Change for Option<S> {
    fn content(&self) -> Option<&str> {
        self.as_ref().map(AsRef::as_ref)
    }
}

/// A git repository in a temporary directory, its HEAD on `main`.
pub struct TempRepo {
    dir: TempDir,
}

impl TempRepo {
    /// An empty repository: HEAD on the unborn branch `main`.
    pub fn new() -> TempRepo {
        let dir = tempfile::Builder::new().prefix("swarm-test-").tempdir().expect("tempdir");
        // libgit2, not the CLI: property tests make hundreds of these.
        let repo = Repository::init_opts(dir.path(), git2::RepositoryInitOptions::new().initial_head("main"))
            .expect("init");
        let mut config = repo.config().expect("config");
        config.set_str("user.name", AUTHOR.0).expect("user.name");
        config.set_str("user.email", AUTHOR.1).expect("user.email");
        config.set_bool("commit.gpgsign", false).expect("commit.gpgsign");
        TempRepo { dir }
    }

    /// A repository with `main` checked out, its one commit holding `files`
    /// (path, content; a README when empty).
    pub fn with_files(files: &[(&str, &str)]) -> TempRepo {
        let repo = TempRepo::new();
        let mut files: Vec<(&str, &str)> = files.to_vec();
        if files.is_empty() {
            files.push(("README.md", "# test repo\n"));
        }
        repo.commit_worktree("initial commit", &files);
        repo
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A fresh libgit2 handle on the repository.
    pub fn git2(&self) -> Repository {
        Repository::open(self.path()).expect("open repository")
    }

    /// Writes files into the work tree and commits everything there on the
    /// checked-out branch; returns the commit id.
    pub fn commit_worktree(&self, message: &str, files: &[(&str, &str)]) -> String {
        for (path, content) in files {
            self.write(path, content);
        }
        self.git(&["add", "-A"]);
        self.git(&["commit", "--quiet", "--allow-empty", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// Writes a file into the work tree.
    pub fn write(&self, path: &str, content: &str) {
        let full = self.path().join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(full, content).unwrap();
    }

    /// A commit on top of `parent` (a root commit when `None`) applying
    /// `changes`; no ref or work tree moves. Returns the commit id.
    pub fn commit<C: Change>(&self, parent: Option<&str>, changes: &[(&str, C)], message: &str) -> String {
        self.commit_with_parents(&parent.into_iter().collect::<Vec<_>>(), changes, message)
    }

    /// Like [`Self::commit`], starting from the first parent's tree and
    /// recording all `parents`.
    pub fn commit_with_parents<C: Change>(
        &self,
        parents: &[&str],
        changes: &[(&str, C)],
        message: &str,
    ) -> String {
        let repo = self.git2();
        let parents: Vec<git2::Commit<'_>> = parents.iter().map(|p| find_commit(&repo, p)).collect();
        let mut index = git2::Index::new().expect("index");
        if let Some(first) = parents.first() {
            index.read_tree(&first.tree().expect("tree")).expect("read tree");
        }
        for (path, change) in changes {
            match change.content() {
                Some(content) => {
                    let entry = git2::IndexEntry {
                        ctime: git2::IndexTime::new(0, 0),
                        mtime: git2::IndexTime::new(0, 0),
                        dev: 0,
                        ino: 0,
                        mode: 0o100644,
                        uid: 0,
                        gid: 0,
                        file_size: content.len() as u32,
                        id: repo.blob(content.as_bytes()).expect("blob"),
                        flags: (path.len() as u16) & 0xfff,
                        flags_extended: 0,
                        path: path.as_bytes().to_vec(),
                    };
                    index.add(&entry).expect("index add");
                }
                None => index.remove_path(Path::new(path)).expect("index remove"),
            }
        }
        let tree = repo.find_tree(index.write_tree_to(&repo).expect("write tree")).expect("tree");
        let sig = git2::Signature::now(AUTHOR.0, AUTHOR.1).expect("signature");
        let parents: Vec<&git2::Commit<'_>> = parents.iter().collect();
        repo.commit(None, &sig, &sig, message, &tree, &parents).expect("commit").to_string()
    }

    /// A commit on top of `branch` (a root commit when it is unborn) that
    /// moves `branch` to it; the work tree stays. Returns the commit id.
    pub fn commit_on_branch<C: Change>(&self, branch: &str, changes: &[(&str, C)], message: &str) -> String {
        let tip = self.try_head(branch);
        let id = self.commit(tip.as_deref(), changes, message);
        self.set_branch(branch, &id);
        id
    }

    /// Points `branch` at `id`, creating or forcing it.
    pub fn set_branch(&self, branch: &str, id: &str) {
        let oid = Oid::from_str(id).expect("commit id");
        self.git2().reference(&format!("refs/heads/{branch}"), oid, true, "test").expect("set branch");
    }

    /// The commit `branch` points at.
    pub fn head(&self, branch: &str) -> String {
        self.try_head(branch).unwrap_or_else(|| panic!("no branch {branch}"))
    }

    fn try_head(&self, branch: &str) -> Option<String> {
        self.git2().refname_to_id(&format!("refs/heads/{branch}")).ok().map(|id| id.to_string())
    }

    /// Whether `rev` names a commit.
    pub fn has(&self, rev: &str) -> bool {
        self.try_git(&["rev-parse", "--verify", "--quiet", &format!("{rev}^{{commit}}")]).0 == 0
    }

    /// The parents of commit `rev`, in order.
    pub fn parents(&self, rev: &str) -> Vec<String> {
        find_commit(&self.git2(), rev).parent_ids().map(|p| p.to_string()).collect()
    }

    /// The full message of commit `rev`.
    pub fn message(&self, rev: &str) -> String {
        find_commit(&self.git2(), rev).message().expect("utf-8 message").to_string()
    }

    /// The tree id of commit `rev`.
    pub fn tree_id(&self, rev: &str) -> String {
        find_commit(&self.git2(), rev).tree_id().to_string()
    }

    /// Content of `path` in commit `rev`; `None` when absent.
    pub fn file(&self, rev: &str, path: &str) -> Option<String> {
        let repo = self.git2();
        let entry = find_commit(&repo, rev).tree().expect("tree").get_path(Path::new(path)).ok()?;
        let blob = repo.find_blob(entry.id()).expect("blob");
        Some(String::from_utf8_lossy(blob.content()).into_owned())
    }

    /// Every file of `rev`'s tree with its content.
    pub fn tree(&self, rev: &str) -> BTreeMap<String, String> {
        let names = self.git(&["ls-tree", "-r", "--name-only", rev]);
        names.lines().map(|name| (name.to_string(), self.file(rev, name).expect("listed file"))).collect()
    }

    /// First-parent subjects of `rev`, newest first.
    pub fn subjects(&self, rev: &str) -> Vec<String> {
        self.git(&["log", "--first-parent", "--format=%s", rev]).lines().map(str::to_string).collect()
    }

    /// Runs git in the repository; panics with its stderr on failure.
    /// Returns stdout without surrounding whitespace.
    pub fn git(&self, args: &[&str]) -> String {
        let out = self.run_git(args);
        assert!(out.status.success(), "git {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Runs git in the repository whatever its exit status; returns the
    /// exit code (-1 when killed) and stdout as is.
    pub fn try_git(&self, args: &[&str]) -> (i32, String) {
        let out = self.run_git(args);
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Only the repository's own config applies, so results do not depend
    /// on the machine's.
    fn run_git(&self, args: &[&str]) -> Output {
        Command::new("git")
            .arg("-C")
            .arg(self.path())
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("running git")
    }
}

impl Default for TempRepo {
    fn default() -> Self {
        TempRepo::new()
    }
}

fn find_commit<'r>(repo: &'r Repository, rev: &str) -> git2::Commit<'r> {
    let object = repo.revparse_single(rev).unwrap_or_else(|e| panic!("{rev}: {e}"));
    object.peel_to_commit().unwrap_or_else(|e| panic!("{rev} is no commit: {e}"))
}

/// `git -C dir ARGS` with the git CLI, as a person would run it; its
/// trimmed stdout, or a panic with its stderr.
pub fn git_cli(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().expect("running git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

//! Test support: real repositories in temp dirs, commits built without a work tree.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// A temporary repository (non-bare, nothing checked out is needed) with helpers to build history.
pub struct TempRepo {
    pub dir: tempfile::TempDir,
    pub repo: git2::Repository,
}

impl TempRepo {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = git2::Repository::init(dir.path()).expect("git init");
        {
            let mut config = repo.config().expect("config");
            config.set_str("user.name", "Test").expect("user.name");
            config.set_str("user.email", "test@example.com").expect("user.email");
        }
        TempRepo { dir, repo }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Makes a commit on top of `parent` (or a root commit) applying `changes`
    /// (`Some(content)` writes the file, `None` deletes it). Returns the commit id.
    pub fn commit(&self, parent: Option<&str>, changes: &[(&str, Option<&str>)], message: &str) -> String {
        self.commit_with_parents(&parent.into_iter().collect::<Vec<_>>(), changes, message)
    }

    /// Like [`Self::commit`], with the first parent's tree as the starting point and all `parents` recorded.
    pub fn commit_with_parents(
        &self,
        parents: &[&str],
        changes: &[(&str, Option<&str>)],
        message: &str,
    ) -> String {
        let repo = &self.repo;
        let mut index = git2::Index::new().expect("index");
        let parent_commits: Vec<git2::Commit<'_>> = parents
            .iter()
            .map(|p| repo.find_commit(git2::Oid::from_str(p).expect("oid")).expect("parent"))
            .collect();
        if let Some(first) = parent_commits.first() {
            index.read_tree(&first.tree().expect("tree")).expect("read tree");
        }
        for (path, content) in changes {
            match content {
                Some(content) => {
                    let blob = repo.blob(content.as_bytes()).expect("blob");
                    let entry = git2::IndexEntry {
                        ctime: git2::IndexTime::new(0, 0),
                        mtime: git2::IndexTime::new(0, 0),
                        dev: 0,
                        ino: 0,
                        mode: 0o100644,
                        uid: 0,
                        gid: 0,
                        file_size: content.len() as u32,
                        id: blob,
                        flags: (path.len() as u16) & 0xfff,
                        flags_extended: 0,
                        path: path.as_bytes().to_vec(),
                    };
                    index.add(&entry).expect("index add");
                }
                None => index.remove_path(Path::new(path)).expect("index remove"),
            }
        }
        let tree_id = index.write_tree_to(repo).expect("write tree");
        let tree = repo.find_tree(tree_id).expect("tree");
        let sig = git2::Signature::now("Test", "test@example.com").expect("sig");
        let refs: Vec<&git2::Commit<'_>> = parent_commits.iter().collect();
        repo.commit(None, &sig, &sig, message, &tree, &refs).expect("commit").to_string()
    }

    pub fn set_branch(&self, branch: &str, id: &str) {
        self.repo
            .reference(&format!("refs/heads/{branch}"), git2::Oid::from_str(id).expect("oid"), true, "test")
            .expect("set branch");
    }

    pub fn head(&self, branch: &str) -> String {
        self.repo
            .find_reference(&format!("refs/heads/{branch}"))
            .expect("branch")
            .target()
            .expect("direct ref")
            .to_string()
    }

    pub fn parents(&self, id: &str) -> Vec<String> {
        let commit = self.repo.find_commit(git2::Oid::from_str(id).expect("oid")).expect("commit");
        commit.parent_ids().map(|p| p.to_string()).collect()
    }

    pub fn message(&self, id: &str) -> String {
        let commit = self.repo.find_commit(git2::Oid::from_str(id).expect("oid")).expect("commit");
        commit.message().expect("utf8 message").to_string()
    }

    pub fn tree_id(&self, id: &str) -> String {
        let commit = self.repo.find_commit(git2::Oid::from_str(id).expect("oid")).expect("commit");
        commit.tree_id().to_string()
    }

    /// Content of `path` at commit `id`, None if absent.
    pub fn file(&self, id: &str, path: &str) -> Option<String> {
        let commit = self.repo.find_commit(git2::Oid::from_str(id).expect("oid")).expect("commit");
        let entry = commit.tree().expect("tree").get_path(Path::new(path)).ok()?;
        let blob = self.repo.find_blob(entry.id()).expect("blob");
        Some(String::from_utf8_lossy(blob.content()).into_owned())
    }

    /// Runs the git CLI in the repository; returns (exit code, stdout).
    pub fn git(&self, args: &[&str]) -> (i32, String) {
        let out = Command::new("git")
            .args(args)
            .current_dir(self.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("run git");
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

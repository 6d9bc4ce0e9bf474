//! Test helpers: temp repositories, shell-script workers, polling.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use git2::{Oid, Repository, Signature};

pub struct TempRepo {
    pub dir: tempfile::TempDir,
    pub repo: Repository,
}

impl TempRepo {
    pub fn new() -> TempRepo {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = Repository::init(dir.path()).expect("init");
        let mut cfg = repo.config().expect("config");
        cfg.set_str("user.name", "Test").expect("name");
        cfg.set_str("user.email", "test@example.com").expect("email");
        TempRepo { dir, repo }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Commits `files` (path, content; None deletes) on top of HEAD, on `refs/heads/main`.
    pub fn commit(&self, files: &[(&str, Option<&str>)], msg: &str) -> Oid {
        let parent = self.repo.find_reference("refs/heads/main").ok().and_then(|r| r.target());
        let mut builder = match parent {
            Some(p) => {
                let t = self.repo.find_commit(p).expect("parent").tree().expect("tree");
                TreeEdit::from(Some(t.id()))
            }
            None => TreeEdit::from(None),
        };
        for (path, content) in files {
            builder.files.push((path.to_string(), content.map(|c| c.to_string())));
        }
        let tree = builder.write(&self.repo);
        let sig = Signature::now("Test", "test@example.com").expect("sig");
        let tree = self.repo.find_tree(tree).expect("tree");
        let parents: Vec<git2::Commit> =
            parent.map(|p| self.repo.find_commit(p).expect("parent")).into_iter().collect();
        let refs: Vec<&git2::Commit> = parents.iter().collect();
        let oid = self.repo.commit(Some("refs/heads/main"), &sig, &sig, msg, &tree, &refs).expect("commit");
        self.repo.set_head("refs/heads/main").expect("head");
        oid
    }
}

struct TreeEdit {
    base: Option<Oid>,
    files: Vec<(String, Option<String>)>,
}

impl TreeEdit {
    fn from(base: Option<Oid>) -> Self {
        TreeEdit { base, files: Vec::new() }
    }

    fn write(&self, repo: &Repository) -> Oid {
        let mut index = git2::Index::new().expect("index");
        if let Some(b) = self.base {
            index.read_tree(&repo.find_tree(b).expect("tree")).expect("read tree");
        }
        for (path, content) in &self.files {
            match content {
                Some(c) => {
                    let blob = repo.blob(c.as_bytes()).expect("blob");
                    let entry = git2::IndexEntry {
                        ctime: git2::IndexTime::new(0, 0),
                        mtime: git2::IndexTime::new(0, 0),
                        dev: 0,
                        ino: 0,
                        mode: 0o100644,
                        uid: 0,
                        gid: 0,
                        file_size: c.len() as u32,
                        id: blob,
                        flags: 0,
                        flags_extended: 0,
                        path: path.as_bytes().to_vec(),
                    };
                    index.add(&entry).expect("add");
                }
                None => index.remove_path(Path::new(path)).expect("remove"),
            }
        }
        index.write_tree_to(repo).expect("write tree")
    }
}

/// Writes an executable shell script and returns its path.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// Polls `f` until it returns Some, or panics after `secs`.
pub async fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

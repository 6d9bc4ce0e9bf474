//! A new worktree made by hand: its registration (the files `git worktree
//! add` writes), the base's files written by a few threads at once, and an
//! index built from the stat of what they wrote.
//!
//! libgit2's `worktree add` writes one file at a time and builds the index
//! by reading every file back, which made a sidecar's first worktree of a
//! 10,000-file repository 1.4–1.75× slower than `git worktree add`. Only a
//! plain tree takes this path (files, executables and links, with nothing
//! that converts content: no attributes file anywhere git would read one,
//! no `core.autocrlf`, no submodule, no path git refuses to check out);
//! anything else returns `None` from [`plain_entries`] and goes to libgit2.
//! All functions here block; call them from a blocking thread.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;

use crate::worktree::error::WorktreeError;

/// Below this many files one thread writes them all.
const PARALLEL_FROM: usize = 512;
/// Most threads writing files: they spend their time in the kernel, and the
/// machine runs other work beside them.
const MAX_THREADS: usize = 4;

const BLOB: i32 = 0o100644;
const BLOB_EXECUTABLE: i32 = 0o100755;
const LINK: i32 = 0o120000;

/// One file of the tree: its path (relative, `/`-separated), blob and mode.
pub(crate) struct Entry {
    path: Vec<u8>,
    oid: Oid,
    mode: i32,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorktreeError + '_ {
    move |source| WorktreeError::Io { path: path.to_path_buf(), source }
}

/// The files of `tree` in index order, or `None` when the tree is not
/// plain (see the module) and libgit2 must check it out.
pub(crate) fn plain_entries(
    repo: &Repository,
    tree: &git2::Tree<'_>,
) -> Result<Option<Vec<Entry>>, WorktreeError> {
    let cfg = repo.config()?.snapshot()?;
    if let Ok(v) = cfg.get_str("core.autocrlf")
        && !matches!(v.to_ascii_lowercase().as_str(), "false" | "no" | "off" | "0" | "")
    {
        return Ok(None);
    }
    // Attribute files outside the tree apply to every path: any one present
    // could name a filter.
    if cfg.get_path("core.attributesFile").is_ok() || attributes_outside(repo.commondir()) {
        return Ok(None);
    }
    let links = cfg.get_bool("core.symlinks").unwrap_or(true);
    let mut entries = Vec::new();
    if !walk(repo, tree, &mut Vec::new(), links, &mut entries)? {
        return Ok(None);
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Some(entries))
}

/// Adds the files of `tree` (at `prefix`) to `out`; false when one is not
/// plain. By hand rather than `Tree::walk`, which hands its callback the
/// directory as UTF-8 and fails on any other name, where git takes bytes.
fn walk(
    repo: &Repository,
    tree: &git2::Tree<'_>,
    prefix: &mut Vec<u8>,
    links: bool,
    out: &mut Vec<Entry>,
) -> Result<bool, WorktreeError> {
    for e in tree.iter() {
        let name = e.name_bytes();
        if !safe_component(name) || name == b".gitattributes" {
            return Ok(false);
        }
        let mode = e.filemode();
        let len = prefix.len();
        prefix.extend_from_slice(name);
        if e.kind() == Some(git2::ObjectType::Tree) {
            prefix.push(b'/');
            let sub = repo.find_tree(e.id())?;
            let plain = walk(repo, &sub, prefix, links, out)?;
            prefix.truncate(len);
            if !plain {
                return Ok(false);
            }
            continue;
        }
        if !(mode == BLOB || mode == BLOB_EXECUTABLE || (mode == LINK && links)) {
            return Ok(false);
        }
        out.push(Entry { path: prefix.clone(), oid: e.id(), mode });
        prefix.truncate(len);
    }
    Ok(true)
}

/// A name git checks out: not empty, `.`, `..`, `.git` in any case, and no
/// separator or NUL (a tree is read from the object store as it is).
fn safe_component(name: &[u8]) -> bool {
    !(name.is_empty()
        || name == b"."
        || name == b".."
        || name.eq_ignore_ascii_case(b".git")
        || name.contains(&b'/')
        || name.contains(&0))
}

/// Whether an attributes file that applies to the whole repository exists:
/// `info/attributes`, the system's, or the user's default one.
fn attributes_outside(common: &Path) -> bool {
    let mut files = vec![common.join("info/attributes"), PathBuf::from("/etc/gitattributes")];
    match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(x) => files.push(Path::new(&x).join("git/attributes")),
        None => {
            if let Some(home) = std::env::var_os("HOME") {
                files.push(Path::new(&home).join(".config/git/attributes"));
            }
        }
    }
    files.iter().any(|f| f.exists())
}

/// Registers `path` as the worktree `worker_id`, detached at `oid`: the
/// admin dir `<common>/worktrees/<id>/` with `gitdir`, `commondir` and
/// `HEAD`, and the worktree's `.git` file. Returns the admin dir.
pub(crate) fn register(
    common: &Path,
    worker_id: &str,
    path: &Path,
    oid: Oid,
) -> Result<PathBuf, WorktreeError> {
    let admin = common.join("worktrees").join(worker_id);
    std::fs::create_dir_all(&admin).map_err(io(&admin))?;
    std::fs::create_dir_all(path).map_err(io(path))?;
    let write = |file: PathBuf, text: String| {
        std::fs::write(&file, text).map_err(|source| WorktreeError::Io { path: file, source })
    };
    write(admin.join("commondir"), "../..\n".to_string())?;
    write(admin.join("gitdir"), format!("{}\n", path.join(".git").display()))?;
    write(admin.join("HEAD"), format!("{oid}\n"))?;
    // Last: a worktree is only found through its `.git` file once the
    // admin dir it names is complete.
    write(path.join(".git"), format!("gitdir: {}\n", admin.display()))?;
    Ok(admin)
}

/// Writes `entries` under `root` (directories first, then the files by up
/// to [`MAX_THREADS`] threads) and the index `index_path` of exactly them.
pub(crate) fn write_tree(
    common: &Path,
    root: &Path,
    index_path: &Path,
    entries: &[Entry],
) -> Result<(), WorktreeError> {
    let mut last: Option<&[u8]> = None;
    for e in entries {
        let Some(slash) = e.path.iter().rposition(|&b| b == b'/') else { continue };
        let dir = &e.path[..slash];
        if last != Some(dir) {
            let full = root.join(OsStr::from_bytes(dir));
            std::fs::create_dir_all(&full).map_err(io(&full))?;
            last = Some(dir);
        }
    }
    let threads = if entries.len() < PARALLEL_FROM {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, MAX_THREADS)
    };
    let chunk = entries.len().div_ceil(threads).max(1);
    let written: Vec<Result<Vec<git2::IndexEntry>, WorktreeError>> = std::thread::scope(|s| {
        let handles: Vec<_> =
            entries.chunks(chunk).map(|part| s.spawn(move || write_files(common, root, part))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(WorktreeError::Io {
                        path: root.to_path_buf(),
                        source: std::io::Error::other("a checkout thread panicked"),
                    })
                })
            })
            .collect()
    });
    let mut index = git2::Index::open(index_path)?;
    for part in written {
        for entry in part? {
            index.add(&entry)?;
        }
    }
    index.write()?;
    Ok(())
}

/// The directory a share of the files is being written into, open so that
/// each file is created and stat'ed by its name alone: a path from the
/// root would be walked again by the kernel for every file (twice, with
/// the stat), which cost more CPU than writing the file.
struct Dir<'a> {
    path: &'a [u8],
    fd: OwnedFd,
}

impl Dir<'_> {
    fn open<'a>(root: &Path, path: &'a [u8]) -> Result<Dir<'a>, WorktreeError> {
        let full = root.join(OsStr::from_bytes(path));
        // `O_NOFOLLOW`: the directories were just made here; a link in
        // their place is not where the files belong.
        let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::openat(nix::fcntl::AT_FDCWD, &full, flags, Mode::empty())
            .map_err(|e| WorktreeError::Io { path: full, source: e.into() })?;
        Ok(Dir { path, fd })
    }
}

/// Writes one share of the files, each thread with its own handle on the
/// object store; returns their index entries.
fn write_files(common: &Path, root: &Path, part: &[Entry]) -> Result<Vec<git2::IndexEntry>, WorktreeError> {
    use std::io::Write as _;
    let repo = Repository::open(common)?;
    let odb = repo.odb()?;
    let mut out = Vec::with_capacity(part.len());
    let mut dir: Option<Dir<'_>> = None;
    for e in part {
        let (parent, name) = match e.path.iter().rposition(|&b| b == b'/') {
            Some(slash) => (&e.path[..slash], &e.path[slash + 1..]),
            None => (&e.path[..0], &e.path[..]),
        };
        let d = match dir.take() {
            Some(d) if d.path == parent => d,
            _ => Dir::open(root, parent)?,
        };
        let name = OsStr::from_bytes(name);
        let full = || root.join(OsStr::from_bytes(&e.path));
        let failed = |source: nix::Error| WorktreeError::Io { path: full(), source: source.into() };
        let blob = odb.read(e.oid)?;
        let stat = if e.mode == LINK {
            nix::unistd::symlinkat(OsStr::from_bytes(blob.data()), &d.fd, name).map_err(failed)?;
            Stat::from(nix::sys::stat::fstatat(&d.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(failed)?)
        } else {
            // `O_EXCL`: never through a link or over a file already there.
            let flags =
                OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let mode = Mode::from_bits_truncate(if e.mode == BLOB_EXECUTABLE { 0o777 } else { 0o666 });
            let mut f = std::fs::File::from(nix::fcntl::openat(&d.fd, name, flags, mode).map_err(failed)?);
            f.write_all(blob.data()).map_err(|source| WorktreeError::Io { path: full(), source })?;
            // The stat of the open file, as git takes it: no lookup by name.
            Stat::from(nix::sys::stat::fstat(&f).map_err(failed)?)
        };
        out.push(stat.entry(&e.path, e.oid, e.mode));
        dir = Some(d);
    }
    Ok(out)
}

/// The stat fields an index entry keeps.
struct Stat(nix::sys::stat::FileStat);

impl From<nix::sys::stat::FileStat> for Stat {
    fn from(s: nix::sys::stat::FileStat) -> Stat {
        Stat(s)
    }
}

impl Stat {
    fn entry(&self, path: &[u8], oid: Oid, mode: i32) -> git2::IndexEntry {
        let s = &self.0;
        // Index stat fields are 32 bits wide; git truncates them the same way.
        let time = |secs: i64, ns: i64| git2::IndexTime::new(secs as i32, ns as u32);
        git2::IndexEntry {
            ctime: time(s.st_ctime, s.st_ctime_nsec),
            mtime: time(s.st_mtime, s.st_mtime_nsec),
            dev: s.st_dev as u32,
            ino: s.st_ino as u32,
            mode: mode as u32,
            uid: s.st_uid,
            gid: s.st_gid,
            file_size: s.st_size as u32,
            id: oid,
            flags: 0,
            flags_extended: 0,
            path: path.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::worktree;

    fn ws(repo: &Path) -> worktree::Workspaces {
        worktree::Workspaces::in_repo(repo).expect("workspaces")
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Every file under `root` but `.git`: (path, mode, content or link target).
    fn listing(root: &Path) -> Vec<(Vec<u8>, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).expect("read_dir") {
                let e = e.expect("entry");
                let p = e.path();
                let rel = p.strip_prefix(root).expect("under root").as_os_str().as_bytes().to_vec();
                if rel == b".git" {
                    continue;
                }
                let m = std::fs::symlink_metadata(&p).expect("stat");
                if m.is_dir() {
                    stack.push(p);
                } else if m.file_type().is_symlink() {
                    out.push((
                        rel,
                        0o120000,
                        std::fs::read_link(&p).expect("link").into_os_string().into_vec(),
                    ));
                } else {
                    out.push((rel, m.permissions().mode() & 0o100, std::fs::read(&p).expect("read")));
                }
            }
        }
        out.sort();
        out
    }

    use std::os::unix::ffi::OsStringExt as _;

    fn repo_with(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path().join("repo");
        for (path, body) in files {
            let p = repo.join(path);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(&p, body).expect("write");
        }
        std::fs::create_dir_all(repo.join("bin")).expect("mkdir");
        std::fs::write(repo.join("bin/run.sh"), "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(repo.join("bin/run.sh"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        std::os::unix::fs::symlink("../a/b/c.txt", repo.join("bin/link")).expect("link");
        std::fs::write(repo.join("empty"), "").expect("write");
        // Names are bytes to git: a directory and a file whose names are
        // not UTF-8 come out byte for byte.
        let odd = repo.join(OsStr::from_bytes(b"caf\xe9"));
        std::fs::create_dir_all(&odd).expect("mkdir");
        std::fs::write(odd.join(OsStr::from_bytes(b"\xff.txt")), "odd\n").expect("write");
        std::os::unix::fs::symlink(OsStr::from_bytes(b"\xff.txt"), odd.join("link")).expect("link");
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "base"]);
        let base = git(&repo, &["rev-parse", "HEAD"]);
        (dir, repo, base)
    }

    /// The hand-made worktree holds what `git worktree add` checks out, and
    /// git and libgit2 both see a registered, clean worktree on the branch.
    #[test]
    fn a_new_worktree_is_what_git_worktree_add_makes() {
        let files: Vec<(String, String)> =
            (0..700).map(|i| (format!("d{}/e{}/f{i}.txt", i % 7, i % 3), format!("{i}\n"))).collect();
        let mut files: Vec<(&str, &str)> = files.iter().map(|(p, b)| (p.as_str(), b.as_str())).collect();
        files.push(("a/b/c.txt", "c\n"));
        files.push(("a-b", "dash\n"));
        files.push(("a0", "zero\n"));
        let (dir, repo, base) = repo_with(&files);
        let p = worktree::prepare(&ws(&repo), "w1", "swarm/s/t1", &base).expect("prepare");
        assert!(p.created);
        let cli = dir.path().join("cli");
        git(&repo, &["worktree", "add", "-q", "--detach", cli.to_str().expect("utf8"), &base]);
        assert_eq!(listing(&p.path), listing(&cli), "same files, modes and links");
        assert_eq!(git(&p.path, &["status", "--porcelain"]), "", "index and files agree with HEAD");
        assert_eq!(git(&p.path, &["rev-parse", "--abbrev-ref", "HEAD"]), "swarm/s/t1");
        assert_eq!(git(&p.path, &["ls-files", "--stage"]), git(&cli, &["ls-files", "--stage"]));
        let list = git(&repo, &["worktree", "list", "--porcelain"]);
        assert!(list.contains(&format!("worktree {}", p.path.display())), "{list}");
        git(&repo, &["worktree", "prune", "--dry-run"]);
        let r = Repository::open(&repo).expect("open");
        r.find_worktree("w1").expect("libgit2 finds it").validate().expect("valid");
        let wt = Repository::open(&p.path).expect("open worktree");
        assert!(wt.statuses(None).expect("status").is_empty());
        // A commit from it lands on the task branch, as from any worktree.
        std::fs::write(p.path.join("a/new.txt"), "n").expect("write");
        let (oid, made) = worktree::commit_all(&p.path, "t1").expect("commit");
        assert!(made);
        assert_eq!(git(&repo, &["rev-parse", "swarm/s/t1"]), oid.to_string());
        // And it is removed like any worktree.
        worktree::discard(&ws(&repo), "w1").expect("discard");
        assert!(!p.path.exists());
        assert!(!git(&repo, &["worktree", "list"]).contains("workspaces/w1"));
    }

    #[test]
    fn attributes_or_autocrlf_leave_the_checkout_to_libgit2() {
        let (_dir, repo, base) =
            repo_with(&[(".gitattributes", "*.txt text eol=crlf\n"), ("a/b/c.txt", "c\n")]);
        let r = Repository::open(&repo).expect("open");
        let tree = r.find_commit(Oid::from_str(&base).expect("oid")).expect("commit").tree().expect("tree");
        assert!(plain_entries(&r, &tree).expect("entries").is_none());
        let p = worktree::prepare(&ws(&repo), "w1", "swarm/s/t1", &base).expect("prepare");
        assert_eq!(std::fs::read_to_string(p.path.join("a/b/c.txt")).expect("read"), "c\r\n", "converted");

        let (_dir, repo, base) = repo_with(&[("a/b/c.txt", "c\n")]);
        let r = Repository::open(&repo).expect("open");
        let tree = r.find_commit(Oid::from_str(&base).expect("oid")).expect("commit").tree().expect("tree");
        assert!(plain_entries(&r, &tree).expect("entries").is_some());
        git(&repo, &["config", "core.autocrlf", "true"]);
        let r = Repository::open(&repo).expect("open");
        assert!(plain_entries(&r, &tree).expect("entries").is_none());
    }
}

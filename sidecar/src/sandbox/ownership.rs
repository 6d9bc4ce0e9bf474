//! The directories a worker writes, handed to its worker user (see
//! [`super::worker_user`]) before it starts, by the root sidecar that made
//! them.
//!
//! Two shapes, because the sidecar's own git keeps opening some of them:
//!
//! - **given**: the directory and everything below it belong to the user
//!   (the attempt's `TMPDIR`, a merge queue job's scratch tree).
//! - **shared**: the directory itself stays root's, with the user's group
//!   allowed to write in it and the sticky bit set; what is below it
//!   belongs to the user, except the entries named to keep. This is the
//!   worktree (keeping its `.git` file and `.swarm/`), the worker's private
//!   git directory and `.swarm/` (whose files the sidecar writes stay
//!   root's: the task text, answers, logs). git and libgit2 refuse, as
//!   root, a repository whose work tree, `.git` file or git directory is
//!   owned by another user (`safe.directory`), and they check exactly those
//!   paths; kept root's, every git operation of the sidecar on them works
//!   as before with no `safe.directory` setting anywhere, while the worker
//!   creates, changes and deletes its own entries. The sticky bit keeps it
//!   from deleting or renaming the root-owned ones (the `.git` file it
//!   cannot rewrite any more either).
//!
//! Handing over is a walk of file descriptors that never follows a link
//! (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`): a process a worker left behind
//! could swap a directory for a link to `/etc` mid-walk, and root must not
//! chown what that reaches. A file with several links that is not the
//! user's already is left alone: it may be a hard link to a file outside.
//! Entries already the user's cost one `fstatat`, so a worktree that only
//! moved by a few paths is walked, not rewritten, and only the paths the
//! sidecar wrote as root change owner.

use std::ffi::CString;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::Path;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::{Gid, Uid};

use super::worker_user::Ids;

/// Deeper than this a walk gives up (each level holds a descriptor).
const MAX_DEPTH: usize = 400;

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

fn with_path(path: &Path) -> impl Fn(Errno) -> std::io::Error + '_ {
    move |e| std::io::Error::new(std::io::Error::from(e).kind(), format!("{}: {e}", path.display()))
}

/// `dir` and everything below it become the user's.
pub fn give(dir: &Path, ids: &Ids) -> std::io::Result<()> {
    let fd = nix::fcntl::open(dir, dir_flags(), Mode::empty()).map_err(with_path(dir))?;
    let (uid, gid) = (Uid::from_raw(ids.uid), Gid::from_raw(ids.gid));
    nix::unistd::fchown(&fd, Some(uid), Some(gid)).map_err(with_path(dir))?;
    give_below(fd, ids, &[], 0).map_err(with_path(dir))
}

/// `dir` stays the sidecar's, writable by the user's group, sticky;
/// everything below it but the `keep` entries at its top becomes the
/// user's. With `below` false only `dir` itself changes.
pub fn share(dir: &Path, ids: &Ids, below: bool, keep: &[&str]) -> std::io::Result<()> {
    let fd = nix::fcntl::open(dir, dir_flags(), Mode::empty()).map_err(with_path(dir))?;
    let own = nix::unistd::geteuid();
    nix::unistd::fchown(&fd, Some(own), Some(Gid::from_raw(ids.gid))).map_err(with_path(dir))?;
    let mode = nix::sys::stat::fstat(&fd).map_err(with_path(dir))?.st_mode;
    let shared = (mode & 0o755) | 0o1070;
    nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(shared)).map_err(with_path(dir))?;
    if below {
        give_below(fd, ids, keep, 0).map_err(with_path(dir))?;
    }
    Ok(())
}

fn give_below(dir: OwnedFd, ids: &Ids, keep: &[&str], depth: usize) -> Result<(), Errno> {
    if depth > MAX_DEPTH {
        return Err(Errno::ELOOP);
    }
    let mut d = Dir::from_fd(dir)?;
    let names: Vec<CString> = d
        .iter()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_owned())
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .filter(|n| !keep.iter().any(|k| k.as_bytes() == n.as_bytes()))
        .collect();
    let (uid, gid) = (Uid::from_raw(ids.uid), Gid::from_raw(ids.gid));
    for name in names {
        let st = match nix::sys::stat::fstatat(d.as_fd(), name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Err(Errno::ENOENT) => continue,
            r => r?,
        };
        let is_dir = kind(&st) == SFlag::S_IFDIR;
        let theirs = st.st_uid == ids.uid && st.st_gid == ids.gid;
        if !theirs && !is_dir && st.st_nlink > 1 {
            tracing::warn!(name = %name.to_string_lossy(), links = st.st_nlink,
                "not handing a file with several links to the worker user: it may be a link to a file outside");
        } else if !theirs {
            match nix::unistd::fchownat(
                d.as_fd(),
                name.as_c_str(),
                Some(uid),
                Some(gid),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            ) {
                Err(Errno::ENOENT) => continue,
                r => r?,
            }
        }
        if is_dir {
            let sub = match nix::fcntl::openat(d.as_fd(), name.as_c_str(), dir_flags(), Mode::empty()) {
                Err(Errno::ENOENT) => continue,
                r => r?,
            };
            give_below(sub, ids, &[], depth + 1)?;
        }
    }
    Ok(())
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    /// Root only: chown to another user takes it.
    fn ids() -> Option<Ids> {
        nix::unistd::geteuid().is_root().then(|| Ids { uid: 64_123, gid: 64_124, groups: vec![64_124] })
    }

    #[test]
    fn a_shared_worktree_keeps_its_top_and_kept_entries_and_gives_the_rest_without_following_links() {
        let Some(ids) = ids() else {
            eprintln!("SKIPPED a_shared_worktree_keeps_its_top...: not root, cannot chown to another user");
            return;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "root's\n").expect("outside");
        let wt = dir.path().join("wt");
        std::fs::create_dir_all(wt.join("src/deep")).expect("dirs");
        std::fs::create_dir(wt.join(".swarm")).expect(".swarm");
        std::fs::write(wt.join(".git"), "gitdir: x\n").expect(".git");
        std::fs::write(wt.join(".swarm/task.md"), "task\n").expect("task");
        std::fs::write(wt.join("src/deep/a.rs"), "a\n").expect("a");
        std::os::unix::fs::symlink(&outside, wt.join("link")).expect("link");
        std::fs::hard_link(&outside, wt.join("hard")).expect("hard link");

        share(&wt, &ids, true, &[".git", ".swarm"]).expect("share");
        let meta = |p: &Path| std::fs::symlink_metadata(p).expect("meta");
        let top = meta(&wt);
        assert_eq!((top.uid(), top.gid(), top.mode() & 0o7777), (0, ids.gid, 0o1775));
        for kept in [".git", ".swarm", ".swarm/task.md"] {
            assert_eq!(meta(&wt.join(kept)).uid(), 0, "{kept} stays root's");
        }
        for given in ["src", "src/deep", "src/deep/a.rs", "link"] {
            let m = meta(&wt.join(given));
            assert_eq!((m.uid(), m.gid()), (ids.uid, ids.gid), "{given}");
        }
        assert_eq!(meta(&outside).uid(), 0, "neither the link nor the hard link handed over its target");

        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(tmp.join("x")).expect("tmp");
        give(&tmp, &ids).expect("give");
        assert_eq!(meta(&tmp).uid(), ids.uid);
        assert_eq!(meta(&tmp.join("x")).uid(), ids.uid);
        // A link where a directory was expected is refused, not followed.
        let e = give(&wt.join("link"), &ids).expect_err("a link");
        assert!(e.to_string().contains("link"), "{e}");
    }
}

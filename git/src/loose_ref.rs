//! Moving an integration ref by exchange, and putting it back after a power loss.
//!
//! A merge on disk spent about half its time in git's ref update (creating the lock, ext4's flush
//! before the rename over the ref, freeing the old file). Integration refs are written through
//! [`SwapLock`] instead, which keeps git's lock protocol without those costs; each ref has its own
//! spare, so that what a power loss can bring back in a ref's file is empty or an older value of
//! that same ref. The controller records every landed head in its fsynced store, and
//! [`Integrator::repair_ref`] puts such a ref back at that record, flushed, at the next start.
//!
//! Anything but a plain loose ref (packed only, symbolic, unreadable) is left to libgit2.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::GitError;
use crate::swap_file::{SwapLock, lock_path};
use crate::{Integrator, ref_name};

/// Which refs get a reflog entry when none exists yet: `core.logAllRefUpdates`, read as libgit2
/// reads it (unset means "branches" in a repository with a work tree, "none" in a bare one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReflogPolicy {
    /// Only refs that already have a reflog.
    Existing,
    /// Also branches, remote-tracking refs and notes.
    Branches,
    Always,
}

impl ReflogPolicy {
    pub(crate) fn of(repo: &git2::Repository) -> Self {
        let Ok(config) = repo.config() else { return ReflogPolicy::Existing };
        match config.get_string("core.logAllRefUpdates") {
            Ok(v) if v.eq_ignore_ascii_case("always") => ReflogPolicy::Always,
            Ok(_) => match config.get_bool("core.logAllRefUpdates") {
                Ok(true) => ReflogPolicy::Branches,
                _ => ReflogPolicy::Existing,
            },
            Err(_) if repo.is_bare() => ReflogPolicy::Existing,
            Err(_) => ReflogPolicy::Branches,
        }
    }

    fn creates_for(self, name: &str) -> bool {
        match self {
            ReflogPolicy::Existing => false,
            ReflogPolicy::Always => true,
            ReflogPolicy::Branches => {
                ["refs/heads/", "refs/remotes/", "refs/notes/"].iter().any(|p| name.starts_with(p))
            }
        }
    }
}

/// The outcome of [`Integrator::exchange_ref`].
pub(crate) enum Exchange {
    Moved,
    /// The ref holds another id; nothing was written.
    Found(gix::ObjectId),
    /// `<ref>.lock` exists: someone is updating the ref, or died doing so.
    Locked(PathBuf),
    /// Not a plain loose ref (packed only, symbolic, unreadable, or its directory is missing):
    /// nothing was written and the caller takes libgit2's path, which handles all of these.
    NotLoose,
}

/// What [`Integrator::repair_ref`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefRepair {
    /// The ref is at or ahead of the recorded head, diverged from it, symbolic, or not a loose ref:
    /// left alone.
    Intact,
    /// The loose ref held no commit id or an older one (`found`, lossily, at most 80 bytes) and now
    /// names the recorded head, flushed to disk.
    Repaired { found: String },
}

enum Loose {
    Id(gix::ObjectId),
    Symbolic,
    Unreadable(Vec<u8>),
    Absent,
}

fn read_loose(path: &Path) -> Result<Loose, GitError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Loose::Absent),
        Err(source) => return Err(GitError::Io { op: "read loose ref", source }),
    };
    if bytes.starts_with(b"ref:") {
        return Ok(Loose::Symbolic);
    }
    let line = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    Ok(match gix::ObjectId::from_hex(line) {
        Ok(id) => Loose::Id(id),
        Err(_) => Loose::Unreadable(bytes),
    })
}

impl Integrator {
    fn loose_ref_path(&self, name: &str) -> PathBuf {
        self.refs.commondir().join(name)
    }

    /// One spare per ref, so that what a power loss can bring back in a ref's file is only ever an
    /// older value of that same ref (see [`Integrator::repair_ref`]). Outside `refs/`, where git
    /// would read it as a ref, and not under `.git/swarm/`, which may be another file system (an
    /// exchange needs the same one).
    fn spare_path(&self, name: &str) -> PathBuf {
        self.refs.commondir().join("swarm-ref-spares").join(name)
    }

    /// Moves the loose ref `name` from `old` to `new` under git's lock protocol, committing by
    /// exchange (see the module's comment for why, and for the power-loss caveat).
    pub(crate) fn exchange_ref(
        &self,
        name: &str,
        old: gix::ObjectId,
        new: gix::ObjectId,
        message: &str,
    ) -> Result<Exchange, GitError> {
        let path = self.loose_ref_path(name);
        let mut lock = match SwapLock::take(&path, self.spare_path(name)) {
            Ok(Some(lock)) => lock,
            Ok(None) => return Ok(Exchange::Locked(lock_path(&path))),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Exchange::NotLoose),
            Err(source) => return Err(GitError::Io { op: "create ref lock", source }),
        };
        match read_loose(&path)? {
            Loose::Id(found) if found != old => return Ok(Exchange::Found(found)),
            Loose::Id(_) => {}
            Loose::Symbolic | Loose::Unreadable(_) | Loose::Absent => return Ok(Exchange::NotLoose),
        }
        lock.write_content(format!("{new}\n").as_bytes()).map_err(GitError::io("write ref lock"))?;
        // As git does: the reflog line goes first, so a failure to write it leaves the ref unmoved.
        self.append_reflog(name, old, new, message)?;
        lock.commit(&path).map_err(GitError::io("commit ref"))?;
        Ok(Exchange::Moved)
    }

    fn append_reflog(
        &self,
        name: &str,
        old: gix::ObjectId,
        new: gix::ObjectId,
        message: &str,
    ) -> Result<(), GitError> {
        let path = self.refs.commondir().join("logs").join(name);
        let exists = path.exists();
        if !exists && !self.reflog.creates_for(name) {
            return Ok(());
        }
        if !exists && let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(GitError::io("create reflog directory"))?;
        }
        let seconds = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let message = message.replace('\n', " ");
        let line = format!("{old} {new} {} <{}> {seconds} +0000\t{message}\n", self.name, self.email);
        let mut log =
            OpenOptions::new().append(true).create(true).open(&path).map_err(GitError::io("open reflog"))?;
        log.write_all(line.as_bytes()).map_err(GitError::io("append reflog"))
    }

    /// Puts `branch` back at `recorded`, the head the caller recorded durably after moving it, if a
    /// power loss undid the move: the loose ref holds no commit id (a file whose new data never
    /// reached the disk) or an older value (a recycled file, see [`SwapLock`]), that is a commit
    /// `recorded` contains. The new value is flushed before the ref is renamed into place, and the
    /// directory after. A ref at or ahead of `recorded` (the caller was stopped before it recorded a
    /// landing), one that diverged from it, a symbolic ref and a ref that is not loose are left alone.
    #[tracing::instrument(skip(self))]
    pub fn repair_ref(&self, branch: &str, recorded: &str) -> Result<RefRepair, GitError> {
        let name = ref_name(branch)?;
        let path = self.loose_ref_path(&name);
        let head = self.commit_id(recorded)?;
        let found = match read_loose(&path)? {
            Loose::Symbolic | Loose::Absent => return Ok(RefRepair::Intact),
            Loose::Unreadable(bytes) => String::from_utf8_lossy(&bytes[..bytes.len().min(80)]).into_owned(),
            Loose::Id(id) if id == head => return Ok(RefRepair::Intact),
            Loose::Id(id) => match self.commit_id(&id.to_string()) {
                Ok(_) if !self.is_ancestor_id(id, head)? => return Ok(RefRepair::Intact),
                Ok(_) | Err(GitError::MissingCommit { .. } | GitError::NotACommit { .. }) => id.to_string(),
                Err(e) => return Err(e),
            },
        };
        let held = SwapLock::take(&path, self.spare_path(&name)).map_err(GitError::io("create ref lock"))?;
        let Some(mut lock) = held else {
            return Err(GitError::Io {
                op: "repair ref",
                source: std::io::Error::new(ErrorKind::WouldBlock, format!("{name} is locked")),
            });
        };
        lock.write_content(format!("{head}\n").as_bytes()).map_err(GitError::io("write ref lock"))?;
        lock.sync().map_err(GitError::io("flush ref lock"))?;
        lock.commit_by_rename(&path).map_err(GitError::io("commit ref"))?;
        if let Some(dir) = path.parent() {
            File::open(dir).and_then(|d| d.sync_all()).map_err(GitError::io("flush ref directory"))?;
        }
        tracing::warn!(branch, head = %head, found = %found, "integration ref was behind its recorded head or unreadable; put back at the recorded head");
        Ok(RefRepair::Repaired { found })
    }
}

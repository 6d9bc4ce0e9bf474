//! Moving an integration ref by exchange, and putting it back after a power loss.
//!
//! git and libgit2 commit a ref update by creating `<ref>.lock`, writing the new id and renaming the
//! lock over `<ref>`. On ext4 (with its default `auto_da_alloc`) a rename that replaces a file first
//! starts writing the new file's data out, and creating a file costs an inode allocation; on a disk
//! the two were about half of a whole merge. Here the lock's inode is recycled from a per-ref spare
//! (see [`HeldLock`]), the new id is written over its old one, and `renameat2(RENAME_EXCHANGE)` swaps
//! the lock and the ref atomically, with no flush; the lock, now holding the old id, goes back to
//! being the spare. Readers see the old id or the new one, as with a rename, and writers that follow
//! git's protocol see `<ref>.lock` until the update is over, so they never interleave with it.
//!
//! The price is paid only on a power loss (a killed process leaves the page cache, and so the new id,
//! intact): the ref may come back empty, or holding an older id of the same ref. So this is used
//! only for integration refs, whose head the controller records in its fsynced store after every
//! landing, and [`Integrator::repair_ref`] puts such a ref back at that record, flushed, at the next
//! start.
//!
//! Anything but a plain loose ref (packed only, symbolic, unreadable) is left to libgit2.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::GitError;
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

/// `<ref>.lock`, held while the ref is checked and moved.
///
/// The lock's inode is recycled: it is taken by renaming this ref's spare file to `<ref>.lock`
/// (no-replace, so it fails exactly when `O_EXCL` would), and given back by renaming whatever file
/// `<ref>.lock` then names (after an exchange, the ref's old one) to the spare. Creating and
/// unlinking a file each cost ~150–200 µs on ext4 (inode allocation and freeing); a rename costs
/// ~15. Without a spare (the first update, another OS) the lock is created with `O_EXCL`.
struct HeldLock {
    path: PathBuf,
    spare: PathBuf,
    /// False once a rename consumed the lock: the name may then be another writer's lock.
    ours: bool,
}

impl HeldLock {
    /// `Ok(None)`: the lock exists. `Err(NotFound)`: the ref's directory is missing.
    fn take(path: PathBuf, spare: PathBuf) -> std::io::Result<Option<(HeldLock, File)>> {
        match rename_no_replace(&spare, &path) {
            Ok(true) => {
                let held = HeldLock { path, spare, ours: true };
                let file = OpenOptions::new().write(true).open(&held.path)?;
                return Ok(Some((held, file)));
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(None),
            // No spare yet (or no directory for the lock: creating it says which).
            Ok(false) | Err(_) => {}
        }
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => Ok(Some((HeldLock { path, spare, ours: true }, file))),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Puts the file `<ref>.lock` names back as the spare, or removes it.
    fn give_back(&self) -> std::io::Result<()> {
        let recycled = match rename_no_replace(&self.path, &self.spare) {
            Ok(done) => done,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                if let Some(dir) = self.spare.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                rename_no_replace(&self.path, &self.spare).unwrap_or(false)
            }
            Err(_) => false,
        };
        if recycled { Ok(()) } else { std::fs::remove_file(&self.path) }
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        if !self.ours {
            return;
        }
        if let Err(e) = self.give_back()
            && e.kind() != ErrorKind::NotFound
        {
            // Left behind, it blocks the ref like a killed writer's lock, and is cleared the same way.
            tracing::warn!(lock = %self.path.display(), error = %e, "could not remove a ref lock");
        }
    }
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
    /// would read it as a ref.
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
        let lock_path = PathBuf::from(format!("{}.lock", path.display()));
        let (lock, mut file) = match HeldLock::take(lock_path.clone(), self.spare_path(name)) {
            Ok(Some(held)) => held,
            Ok(None) => return Ok(Exchange::Locked(lock_path)),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Exchange::NotLoose),
            Err(source) => return Err(GitError::Io { op: "create ref lock", source }),
        };
        match read_loose(&path)? {
            Loose::Id(found) if found != old => return Ok(Exchange::Found(found)),
            Loose::Id(_) => {}
            Loose::Symbolic | Loose::Unreadable(_) | Loose::Absent => return Ok(Exchange::NotLoose),
        }
        write_id(&mut file, new)?;
        drop(file);
        // As git does: the reflog line goes first, so a failure to write it leaves the ref unmoved.
        self.append_reflog(name, old, new, message)?;
        if exchange(&lock.path, &path)? {
            // The lock now holds the old id; dropping it makes that file the spare.
            drop(lock);
        } else {
            rename_into_place(lock, &path)?;
        }
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
    /// reached the disk) or an older value (a recycled file, see [`HeldLock`]), that is a commit
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
        let lock_path = PathBuf::from(format!("{}.lock", path.display()));
        let held =
            HeldLock::take(lock_path, self.spare_path(&name)).map_err(GitError::io("create ref lock"))?;
        let Some((lock, mut file)) = held else {
            return Err(GitError::Io {
                op: "repair ref",
                source: std::io::Error::new(ErrorKind::WouldBlock, format!("{name} is locked")),
            });
        };
        write_id(&mut file, head)?;
        file.sync_all().map_err(GitError::io("flush ref lock"))?;
        drop(file);
        rename_into_place(lock, &path)?;
        if let Some(dir) = path.parent() {
            File::open(dir).and_then(|d| d.sync_all()).map_err(GitError::io("flush ref directory"))?;
        }
        tracing::warn!(branch, head = %head, found = %found, "integration ref was behind its recorded head or unreadable; put back at the recorded head");
        Ok(RefRepair::Repaired { found })
    }
}

/// Writes `id` over the lock file's old content, never truncating it to zero first: ext4 flushes a
/// file truncated to zero and rewritten, as it does one renamed over another.
fn write_id(file: &mut File, id: gix::ObjectId) -> Result<(), GitError> {
    let line = format!("{id}\n");
    file.write_all(line.as_bytes()).map_err(GitError::io("write ref lock"))?;
    if file.metadata().map_err(GitError::io("write ref lock"))?.len() > line.len() as u64 {
        file.set_len(line.len() as u64).map_err(GitError::io("write ref lock"))?;
    }
    Ok(())
}

fn rename_into_place(mut lock: HeldLock, path: &Path) -> Result<(), GitError> {
    std::fs::rename(&lock.path, path).map_err(GitError::io("commit ref"))?;
    lock.ours = false;
    Ok(())
}

/// Swaps `from` and `to`; false where the file system (or the OS) cannot exchange, and the caller
/// renames instead.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn exchange(from: &Path, to: &Path) -> Result<bool, GitError> {
    use nix::errno::Errno;
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_EXCHANGE) {
        Ok(()) => Ok(true),
        Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP | Errno::EXDEV) => Ok(false),
        Err(e) => Err(GitError::Io { op: "commit ref", source: e.into() }),
    }
}

/// Renames `from` to `to` unless `to` exists (`AlreadyExists`); false where the OS cannot.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<bool> {
    use nix::errno::Errno;
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
        Ok(()) => Ok(true),
        Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP | Errno::EXDEV) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn rename_no_replace(_from: &Path, _to: &Path) -> std::io::Result<bool> {
    Ok(false)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn exchange(_from: &Path, _to: &Path) -> Result<bool, GitError> {
    Ok(false)
}

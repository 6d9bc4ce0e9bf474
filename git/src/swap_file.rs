//! Replacing a file the way git does (through `<file>.lock`), without the costs ext4 adds to it.
//!
//! git takes `<file>.lock` by creating it exclusively, writes the new content and renames the lock
//! over the file. On ext4 each step costs: creating a file allocates an inode and freeing the old
//! one is journaled (~150–200 µs each with recently freed inodes), and a rename that replaces a file
//! first starts writing the new file's data out (the default `auto_da_alloc`: ~120–360 µs for a ref,
//! milliseconds for an 800 KB index). [`SwapLock`] keeps git's protocol and its atomic visibility
//! without them: the lock's inode is recycled from a spare (taken by a no-replace rename, which
//! fails exactly when `O_EXCL` would), the new content is written over the old one, and
//! `renameat2(RENAME_EXCHANGE)` swaps the lock and the file; the lock, now the old file, becomes
//! the spare again. Readers see the old file or the new one; writers that follow git's protocol see
//! `<file>.lock` until it is over.
//!
//! (The sidecar's 800 KB index was tried through it too: READY -> exec at 10,000 files did not get
//! faster in four alternated e2e pairs, so the index keeps git's flushing rename.)
//!
//! The price is paid only on a power loss (a killed process leaves the page cache intact): nothing
//! flushed the new content, so the file may come back empty, older, or, for a file of several
//! pages, mixed. Use it only for files the caller can rebuild: a ref whose value it records
//! elsewhere, an index it repairs. Without `renameat2` (another OS or file system) it falls back to
//! git's own create-and-rename.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

/// `<file>.lock`, held while the file is checked and replaced; released (back to the spare, or
/// removed) on drop unless [`SwapLock::commit`] consumed it.
pub(crate) struct SwapLock {
    lock: PathBuf,
    spare: PathBuf,
    file: Option<File>,
    /// False once a rename consumed the lock: the name may then be another writer's lock.
    ours: bool,
}

impl SwapLock {
    /// Takes `<path>.lock`, recycling `spare` if it exists. `Ok(None)`: the lock exists (someone is
    /// writing the file, or died doing so). `Err(NotFound)`: `path`'s directory is missing.
    pub(crate) fn take(path: &Path, spare: PathBuf) -> std::io::Result<Option<SwapLock>> {
        let lock = lock_path(path);
        match rename_no_replace(&spare, &lock) {
            Ok(true) => {
                let mut held = SwapLock { lock, spare, file: None, ours: true };
                held.file = Some(OpenOptions::new().write(true).open(&held.lock)?);
                return Ok(Some(held));
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(None),
            // No spare yet (or no directory for the lock: creating it says which).
            Ok(false) | Err(_) => {}
        }
        match OpenOptions::new().write(true).create_new(true).open(&lock) {
            Ok(file) => Ok(Some(SwapLock { lock, spare, file: Some(file), ours: true })),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes `bytes` as the lock's whole content: over the recycled file's old content, never
    /// truncating it to zero first (ext4 flushes a file truncated to zero and rewritten, as it does
    /// one renamed over another); a longer old content is cut after.
    pub(crate) fn write_content(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let file =
            self.file.as_mut().ok_or_else(|| std::io::Error::other("the lock was written and closed"))?;
        file.write_all(bytes)?;
        if file.metadata()?.len() > bytes.len() as u64 {
            file.set_len(bytes.len() as u64)?;
        }
        Ok(())
    }

    /// Flushes the lock's content to the disk, for a write that must survive a power loss.
    pub(crate) fn sync(&mut self) -> std::io::Result<()> {
        match &self.file {
            Some(file) => file.sync_all(),
            None => Ok(()),
        }
    }

    /// Puts the lock's content in place of `path` by exchange (by rename where the file system
    /// cannot exchange, or `path` does not exist); the old file becomes the spare.
    pub(crate) fn commit(mut self, path: &Path) -> std::io::Result<()> {
        self.file = None;
        if exchange(&self.lock, path)? {
            // The lock now names the old file; dropping `self` makes it the spare.
            return Ok(());
        }
        self.commit_by_rename(path)
    }

    /// Puts the lock's content in place of `path` by git's own rename: with [`SwapLock::sync`]
    /// first, the new content is on disk whatever happens next.
    pub(crate) fn commit_by_rename(mut self, path: &Path) -> std::io::Result<()> {
        self.file = None;
        std::fs::rename(&self.lock, path)?;
        self.ours = false;
        Ok(())
    }

    /// Puts the file `<file>.lock` names back as the spare, or removes it.
    fn give_back(&self) -> std::io::Result<()> {
        let recycled = match rename_no_replace(&self.lock, &self.spare) {
            Ok(done) => done,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                if let Some(dir) = self.spare.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                rename_no_replace(&self.lock, &self.spare).unwrap_or(false)
            }
            Err(_) => false,
        };
        if recycled { Ok(()) } else { std::fs::remove_file(&self.lock) }
    }
}

impl Drop for SwapLock {
    fn drop(&mut self) {
        self.file = None;
        if !self.ours {
            return;
        }
        if let Err(e) = self.give_back()
            && e.kind() != ErrorKind::NotFound
        {
            // Left behind, it blocks the file like a killed writer's lock, and is cleared the same way.
            tracing::warn!(lock = %self.lock.display(), error = %e, "could not release a lock file");
        }
    }
}

/// `<path>.lock`, the name git locks `path` with.
pub(crate) fn lock_path(path: &Path) -> PathBuf {
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    PathBuf::from(lock)
}

/// Swaps `from` and `to`; false where they cannot be exchanged (the OS or the file system cannot,
/// or `to` does not exist), and the caller renames instead.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn exchange(from: &Path, to: &Path) -> std::io::Result<bool> {
    use nix::errno::Errno;
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_EXCHANGE) {
        Ok(()) => Ok(true),
        Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP | Errno::EXDEV) => Ok(false),
        Err(Errno::ENOENT) if from.exists() => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn exchange(_from: &Path, _to: &Path) -> std::io::Result<bool> {
    Ok(false)
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

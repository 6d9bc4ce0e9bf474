//! The index of a tracked worktree: libgit2 keeps its entries in memory
//! between attempts, and the sidecar writes the file itself
//! ([`crate::index_file`]) once a move made the index its target's tree.
//!
//! libgit2 re-reads the file whenever its trailer is not the checksum
//! libgit2 itself last read or wrote; after our own write it never is, so
//! [`read`] asks the file first: while it still ends with the checksum we
//! wrote, nobody rewrote it and the entries in memory are current (or
//! ahead of it by the commit the sidecar made since, which a re-read
//! would undo).
//!
//! Beside the entries it keeps the ids of the trees they make
//! ([`CacheTree`]): every change the sidecar makes to the entries names
//! its path ([`IndexMemo::changed`]), so a move or a commit hashes only
//! the directories that changed, not all 10,000 entries; and the last
//! index it wrote, encoded ([`Encoded`]), so the next write encodes only
//! the entries of those paths.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use git2::{Oid, Repository};

use crate::cache_tree::{CacheTree, Trees};
use crate::index_file::{self, Checksum, Encoded, IndexFileError};
use crate::worktree::error::WorktreeError;

/// What the sidecar knows of its worktree's index beyond libgit2.
#[derive(Debug, Default)]
pub struct IndexMemo {
    /// The ids of the trees the in-memory index makes, but for the
    /// directories changed since ([`IndexMemo::changed`]); `None` when the
    /// index changed without saying where (read again from its file,
    /// checked out by libgit2), until a full hash makes it again.
    tree: Option<CacheTree>,
    /// The checksum of the last index written here.
    written: Option<Checksum>,
    /// The entries of the last index written here, and the paths changed
    /// in memory since: the next write encodes only those paths' entries.
    entries: Option<Encoded>,
    changed: BTreeSet<Vec<u8>>,
    /// How many times the whole index was hashed (libgit2's `write_tree`).
    full_hashes: u64,
}

impl IndexMemo {
    /// The in-memory index changed at `path` (a file, or a directory whose
    /// entries went).
    pub fn changed(&mut self, path: &Path) {
        let path = path.as_os_str().as_bytes();
        if let Some(tree) = &mut self.tree {
            tree.invalidate(path);
        }
        if self.entries.is_some() {
            self.changed.insert(path.to_vec());
        }
    }

    /// The in-memory index changed where nobody said: nothing kept here
    /// describes it any more.
    pub fn forget(&mut self) {
        self.tree = None;
        self.entries = None;
        self.changed.clear();
    }

    /// How many times the whole index was hashed since this memo began;
    /// every other tree came from the directories that changed.
    pub fn full_hashes(&self) -> u64 {
        self.full_hashes
    }
}

fn worktree_error(e: IndexFileError) -> WorktreeError {
    match e {
        IndexFileError::Io { path, source } => WorktreeError::Io { path, source },
        IndexFileError::Git(e) => WorktreeError::Git(e),
        other => WorktreeError::Invalid { what: "index", rule: other.to_string() },
    }
}

/// Brings libgit2's `index` up to the file when someone else (a worker's
/// `git add`, libgit2 itself) rewrote it since [`write`].
pub fn read(index: &mut git2::Index, memo: &mut IndexMemo) -> Result<(), WorktreeError> {
    if let (Some(ours), Some(path)) = (memo.written, index.path())
        && index_file::checksum(path).map_err(worktree_error)? == Some(ours)
    {
        return Ok(());
    }
    index.read(false)?;
    memo.forget();
    // From here on the file is what the entries in memory came from (or
    // fell behind them by a commit): only a later rewrite is news.
    memo.written = match index.path() {
        Some(path) => index_file::checksum(path).map_err(worktree_error)?,
        None => None,
    };
    Ok(())
}

/// The tree the in-memory index makes, written to the object store (a
/// commit's): only the changed directories hashed again while the memo
/// knows the rest, otherwise libgit2's full `write_tree`, after which the
/// memo knows every directory.
pub fn write_tree(
    repo: &Repository,
    index: &mut git2::Index,
    memo: &mut IndexMemo,
) -> Result<Oid, WorktreeError> {
    if let Some(tree) = &mut memo.tree {
        match tree.rebuild(repo, index, Trees::Write) {
            Ok(id) => return Ok(id),
            Err(e) => {
                tracing::warn!(error = %e, "hashing the changed directories failed; libgit2 hashes the index")
            }
        }
    }
    memo.forget();
    memo.full_hashes += 1;
    let id = index.write_tree()?;
    memo.tree = Some(CacheTree::of(repo, &repo.find_tree(id)?)?);
    Ok(id)
}

/// Writes the worktree's index, which a move just made `target`'s: with
/// our writer and a valid cache of tree ids when the entries in memory
/// make exactly `target`, with libgit2's when ours fails otherwise, and
/// not at all (an error) when the entries make another tree.
///
/// The entries' stat data is what the sidecar's own checkout or commit
/// recorded, with nothing written since (the tracker vouches for that), so
/// none needs the smudging git and libgit2 give entries that may have
/// changed within the index file's timestamp.
pub fn write(wt: &Repository, memo: &mut IndexMemo, target: &git2::Tree<'_>) -> Result<(), WorktreeError> {
    let mut index = wt.index()?;
    match write_ours(wt, &mut index, memo, target) {
        Ok(sum) => memo.written = Some(sum),
        // The move did not make the target: the files may not be the
        // target's either, so no index is written over them; the caller
        // checks the worktree out in full.
        Err(e @ IndexFileError::NotTarget { .. }) => {
            *memo = IndexMemo { full_hashes: memo.full_hashes, ..IndexMemo::default() };
            return Err(worktree_error(e));
        }
        Err(e) => {
            tracing::warn!(error = %e, "writing the index ourselves failed; libgit2 writes it");
            *memo = IndexMemo { full_hashes: memo.full_hashes, ..IndexMemo::default() };
            index.write()?;
        }
    }
    Ok(())
}

fn write_ours(
    wt: &Repository,
    index: &mut git2::Index,
    memo: &mut IndexMemo,
    target: &git2::Tree<'_>,
) -> Result<Checksum, IndexFileError> {
    // The changed directories hashed again make the target's root: every
    // tree below matches it too, since each id covers its subtrees.
    let tree = match memo.tree.take().map(|mut t| (t.rebuild(wt, index, Trees::Hash), t)) {
        Some((Ok(id), tree)) if id == target.id() => tree,
        known => {
            if let Some((made, _)) = known {
                tracing::debug!(made = ?made.map(|id| id.to_string()), target = %target.id(),
                    "the changed directories do not make the target; hashing the whole index");
            }
            // Without a cache, or with one that missed a change, none of
            // the bookkeeping of changed paths is trusted.
            memo.entries = None;
            memo.full_hashes += 1;
            verified(wt, index, target)?
        }
    };
    let path = index.path().ok_or_else(|| git2::Error::from_str("the index has no file"))?.to_path_buf();
    let encoded = match memo.entries.take() {
        Some(last) => last.splice(index, &memo.changed, true).or_else(|e| {
            tracing::debug!(error = %e, "the changed paths do not account for the index; encoding every entry");
            Encoded::of(index.iter(), true)
        })?,
        None => Encoded::of(index.iter(), true)?,
    };
    let sum = index_file::write(&path, &encoded, Some(&tree))?;
    memo.tree = Some(tree);
    memo.entries = Some(encoded);
    memo.changed.clear();
    Ok(sum)
}

/// The cache of `target` after libgit2 checked that the whole index makes it.
fn verified(
    wt: &Repository,
    index: &mut git2::Index,
    target: &git2::Tree<'_>,
) -> Result<CacheTree, IndexFileError> {
    if index.has_conflicts() {
        return Err(git2::Error::from_str("the index has conflicts").into());
    }
    let made = index.write_tree()?;
    if made != target.id() {
        return Err(IndexFileError::NotTarget { made: made.to_string(), target: target.id().to_string() });
    }
    Ok(CacheTree::of(wt, target)?)
}

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

use git2::Repository;

use crate::index_file::{self, CacheTree, Checksum, IndexFileError};
use crate::worktree::WorktreeError;

/// What the sidecar knows of its worktree's index file beyond libgit2.
#[derive(Debug, Default)]
pub struct IndexMemo {
    /// The cache of tree ids of the last index written here, kept to be
    /// updated by the directories the next move changes.
    tree: Option<CacheTree>,
    /// The checksum of the last index written here.
    written: Option<Checksum>,
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
pub fn read(index: &mut git2::Index, memo: &IndexMemo) -> Result<(), WorktreeError> {
    if let (Some(ours), Some(path)) = (memo.written, index.path())
        && index_file::checksum(path).map_err(worktree_error)? == Some(ours)
    {
        return Ok(());
    }
    index.read(false)?;
    Ok(())
}

/// Writes the worktree's index, which a move just made `target`'s: with
/// our writer and a valid cache of tree ids when the entries in memory
/// make exactly `target` (libgit2 hashes only the directories the move
/// invalidated), otherwise with libgit2's.
///
/// The entries' stat data is what the sidecar's own checkout or commit
/// recorded, with nothing written since (the tracker vouches for that), so
/// none needs the smudging git and libgit2 give entries that may have
/// changed within the index file's timestamp.
pub fn write(wt: &Repository, memo: &mut IndexMemo, target: &git2::Tree<'_>) -> Result<(), WorktreeError> {
    let mut index = wt.index()?;
    match write_ours(wt, &mut index, memo, target) {
        Ok(sum) => memo.written = Some(sum),
        Err(e) => {
            tracing::warn!(error = %e, "writing the index ourselves failed; libgit2 writes it");
            *memo = IndexMemo::default();
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
    if index.has_conflicts() {
        return Err(git2::Error::from_str("the index has conflicts").into());
    }
    let made = index.write_tree()?;
    if made != target.id() {
        let msg = format!("the index makes tree {made}, not the target's {}", target.id());
        return Err(git2::Error::from_str(&msg).into());
    }
    let tree = match memo.tree.take() {
        Some(mut t) => {
            t.update(wt, target)?;
            t
        }
        None => CacheTree::of(wt, target)?,
    };
    let path = index.path().ok_or_else(|| git2::Error::from_str("the index has no file"))?.to_path_buf();
    let sum = index_file::write(&path, index.iter(), Some(&tree))?;
    memo.tree = Some(tree);
    Ok(sum)
}

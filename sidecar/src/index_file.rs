//! Our own writer of a worktree's index file (format version 2, or 3 when
//! an entry has extended flags), with a valid cache of tree ids (the `TREE`
//! extension) and a plain SHA-1 trailer.
//!
//! libgit2 writes the whole index with SHA-1DC (collision detection, ~6×
//! slower than the CPU's SHA instructions; it buys nothing for a file we
//! wrote ourselves) and, on a move, only an invalidated cache of tree ids.
//! A 10,000-entry index is ~800 KB, and writing it before every worker
//! started was the part of an attempt that grew with the repository. The
//! trailer is a real SHA-1 (not the zero of `index.skipHash`): git before
//! 2.40 rejects a zero trailer, and the trailer is how the sidecar tells
//! whether anyone rewrote the file since (a zero is not unique).
//!
//! The writer takes the lock file `index.lock` the way git does (created
//! exclusively, renamed over the index), so it never overwrites an index a
//! git process is writing. Like git and libgit2 by default, it does not
//! fsync: the index is a cache of the worktree's state, and the sidecar
//! repairs one that disagrees with HEAD before the next attempt.
//! All functions here block; call them from a blocking thread.

use std::fs::OpenOptions;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use sha1::{Digest as _, Sha1};

pub use crate::cache_tree::CacheTree;
pub use crate::index_entries::{Encoded, IndexFileError};

/// The SHA-1 at the end of an index file, over everything before it.
pub type Checksum = [u8; 20];

const SIGNATURE: &[u8; 4] = b"DIRC";
fn io(path: &Path) -> impl FnOnce(std::io::Error) -> IndexFileError + '_ {
    move |source| IndexFileError::Io { path: path.to_path_buf(), source }
}

/// The bytes of an index of `entries` (in index order: by path, then
/// stage), with `tree` as its cache of tree ids when given; the checksum
/// is the last 20 bytes.
pub fn serialize(
    entries: impl IntoIterator<Item = git2::IndexEntry>,
    tree: Option<&CacheTree>,
) -> Result<Vec<u8>, IndexFileError> {
    let encoded = Encoded::of(entries, tree.is_some())?;
    let (head, tail) = frame(&encoded, tree)?;
    Ok([head.as_slice(), &encoded.bytes, &tail].concat())
}

/// What goes before the entries (signature, version, count) and after
/// them (the `TREE` extension, the checksum of everything).
fn frame(encoded: &Encoded, tree: Option<&CacheTree>) -> Result<(Vec<u8>, Vec<u8>), IndexFileError> {
    let count = u32::try_from(encoded.len()).map_err(|_| IndexFileError::Entry {
        path: String::new(),
        rule: "an index holds fewer than 2^32 entries",
    })?;
    let mut head = Vec::with_capacity(12);
    head.extend_from_slice(SIGNATURE);
    head.extend_from_slice(&(if encoded.v3 { 3u32 } else { 2 }).to_be_bytes());
    head.extend_from_slice(&count.to_be_bytes());
    let mut tail = Vec::new();
    if let Some(tree) = tree {
        if tree.entries() != count {
            return Err(IndexFileError::TreeMismatch { tree: tree.entries(), entries: count });
        }
        tail.extend_from_slice(b"TREE\0\0\0\0");
        tree.encode(&mut tail);
        let size = u32::try_from(tail.len() - 8).unwrap_or(u32::MAX);
        tail[4..8].copy_from_slice(&size.to_be_bytes());
    }
    let mut sha = Sha1::new();
    sha.update(&head);
    sha.update(&encoded.bytes);
    sha.update(&tail);
    tail.extend_from_slice(&sha.finalize());
    Ok((head, tail))
}

/// Writes the index file `path` of `encoded` entries (and `tree`, see
/// [`serialize`]) through `path.lock`, as git does; returns its checksum.
pub fn write(path: &Path, encoded: &Encoded, tree: Option<&CacheTree>) -> Result<Checksum, IndexFileError> {
    let (head, tail) = frame(encoded, tree)?;
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    let lock = PathBuf::from(lock);
    let mut f = OpenOptions::new().write(true).create_new(true).mode(0o666).open(&lock).map_err(io(&lock))?;
    let written = f
        .write_all(&head)
        .and_then(|()| f.write_all(&encoded.bytes))
        .and_then(|()| f.write_all(&tail))
        .and_then(|()| std::fs::rename(&lock, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&lock);
        return Err(io(path)(e));
    }
    let mut sum = [0; 20];
    sum.copy_from_slice(&tail[tail.len() - 20..]);
    Ok(sum)
}

/// The checksum at the end of the index file `path`, or `None` when there
/// is no such file or it is too short to have one.
pub fn checksum(path: &Path) -> Result<Option<Checksum>, IndexFileError> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    if f.seek(SeekFrom::End(0)).map_err(io(path))? < 12 + 20 {
        return Ok(None);
    }
    f.seek(SeekFrom::End(-20)).map_err(io(path))?;
    let mut sum = [0; 20];
    f.read_exact(&mut sum).map_err(io(path))?;
    Ok(Some(sum))
}

#[cfg(test)]
mod tests {
    use super::*;
    use git2::{Oid, Repository};

    /// A repository whose tree has files at the top and in two levels of
    /// directories (names of one length, where git's order of subtrees
    /// and the tree's agree), and its index read from that tree.
    fn repo_with_tree() -> (tempfile::TempDir, Repository, Oid) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let repo = Repository::init(tmp.path()).expect("init");
        let mut index = repo.index().expect("index");
        for (path, body) in
            [("a.txt", "a"), ("b/c.txt", "c"), ("b/x/y.txt", "y"), ("d/e.txt", "e"), ("z", "z")]
        {
            let full = tmp.path().join(path);
            std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
            std::fs::write(&full, body).expect("write");
            index.add_path(Path::new(path)).expect("add");
        }
        let tree = index.write_tree().expect("tree");
        index.write().expect("write");
        (tmp, repo, tree)
    }

    #[test]
    fn an_index_read_from_a_tree_is_byte_for_byte_what_libgit2_writes() {
        let (_tmp, repo, tree_id) = repo_with_tree();
        let tree = repo.find_tree(tree_id).expect("tree");
        let mut index = repo.index().expect("index");
        // Entries without stat data and a cache of tree ids made from the tree.
        index.read_tree(&tree).expect("read tree");
        index.write().expect("libgit2 writes");
        let theirs = std::fs::read(index.path().expect("path")).expect("read");
        let cache = CacheTree::of(&repo, &tree).expect("cache");
        assert_eq!(cache.id(), tree_id);
        assert_eq!(cache.entries(), 5);
        let ours = serialize(index.iter(), Some(&cache)).expect("serialize");
        assert_eq!(ours, theirs);
        // And libgit2 reads ours back to the same entries and tree.
        let path = index.path().expect("path").to_path_buf();
        let sum =
            write(&path, &Encoded::of(index.iter(), true).expect("encode"), Some(&cache)).expect("write");
        assert_eq!(checksum(&path).expect("checksum"), Some(sum));
        let mut again = git2::Index::open(&path).expect("libgit2 reads ours");
        assert_eq!(again.len(), 5);
        assert_eq!(again.write_tree_to(&repo).expect("tree"), tree_id);
        assert!(!path.with_extension("lock").exists(), "the lock is gone");
    }

    #[test]
    fn bad_entries_or_a_cache_of_another_size_are_refused_and_the_index_is_kept() {
        let (_tmp, repo, tree_id) = repo_with_tree();
        let tree = repo.find_tree(tree_id).expect("tree");
        let index = repo.index().expect("index");
        let entries = || index.iter().collect::<Vec<_>>();
        let mut unsorted = entries();
        unsorted.swap(0, 1);
        let err = serialize(unsorted, None).expect_err("unsorted");
        assert!(err.to_string().contains("sorted by path"), "{err}");
        let mut nul = entries();
        nul[0].path = b"a\0b".to_vec();
        let err = serialize(nul, None).expect_err("NUL");
        assert!(err.to_string().contains("NUL"), "{err}");
        let cache = CacheTree::of(&repo, &tree).expect("cache");
        let err = serialize(index.iter().skip(1), Some(&cache)).expect_err("fewer entries than the cache");
        assert!(matches!(err, IndexFileError::TreeMismatch { tree: 5, entries: 4 }), "{err}");

        // A git process holds the lock: nothing is written over it.
        let path = index.path().expect("path").to_path_buf();
        let before = std::fs::read(&path).expect("read");
        let lock = path.with_extension("lock");
        std::fs::write(&lock, "held").expect("lock");
        let encoded = Encoded::of(index.iter(), true).expect("encode");
        let err = write(&path, &encoded, Some(&cache)).expect_err("locked");
        assert!(matches!(err, IndexFileError::Io { .. }), "{err}");
        assert_eq!(std::fs::read(&path).expect("read"), before);
        assert_eq!(std::fs::read(&lock).expect("read"), b"held");
    }
}

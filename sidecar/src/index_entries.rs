//! The entries of the last index file written, kept encoded so the next
//! write encodes only the entries whose paths changed and copies the rest.
//!
//! Reading 10,000 entries out of libgit2 (one allocation each) and encoding
//! them took ~0.8 ms of every move at 10,000 files, the part of writing the
//! index that grew with the repository besides its checksum. The sidecar
//! knows which paths it changed since its last write (the same paths that
//! invalidate its cache of tree ids), so [`Encoded::splice`] takes from
//! libgit2 only the entries at or under those paths and merges them, in
//! index order, with the unchanged entries' bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

/// The stat fields, the object id and the flags: what precedes the
/// extended flags (when present) and the path of an encoded entry.
const FIXED: usize = 62;
const FLAG_EXTENDED: u16 = 0x4000;
/// The stage and assume-valid bits of an entry's flags (libgit2 keeps the
/// name length in the low bits; the writer computes it).
const FLAGS_KEPT: u16 = 0xb000;
const NAME_MASK: usize = 0x0fff;
/// The extended flags git writes (intent-to-add, skip-worktree); libgit2
/// keeps in-memory bits beside them that never reach the file.
const EXTENDED_KEPT: u16 = 0x6000;

#[derive(Debug, thiserror::Error)]
pub enum IndexFileError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("index entry {path:?}: {rule}")]
    Entry { path: String, rule: &'static str },
    #[error("the cache of tree ids covers {tree} entries but the index has {entries}")]
    TreeMismatch { tree: u32, entries: u32 },
    /// After a move, the entries in memory do not make the target's tree:
    /// the worktree was not where its tracker said.
    #[error("the index makes tree {made}, not the target's {target}")]
    NotTarget { made: String, target: String },
    #[error("git: {0}")]
    Git(#[from] git2::Error),
}

/// One entry, as the index stores it; returns whether it needs version 3.
pub(crate) fn put_entry(out: &mut Vec<u8>, e: &git2::IndexEntry) -> Result<bool, IndexFileError> {
    let bad = |rule| IndexFileError::Entry { path: String::from_utf8_lossy(&e.path).into_owned(), rule };
    if e.path.is_empty() || e.path.contains(&0) || e.path.starts_with(b"/") || e.path.ends_with(b"/") {
        return Err(bad("a path is relative, not empty, with no NUL byte and no trailing '/'"));
    }
    let extended = e.flags_extended & EXTENDED_KEPT;
    let start = out.len();
    for v in [
        e.ctime.seconds() as u32,
        e.ctime.nanoseconds(),
        e.mtime.seconds() as u32,
        e.mtime.nanoseconds(),
        e.dev,
        e.ino,
        e.mode,
        e.uid,
        e.gid,
        e.file_size,
    ] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(e.id.as_bytes());
    let mut flags = (e.flags & FLAGS_KEPT) | e.path.len().min(NAME_MASK) as u16;
    if extended != 0 {
        flags |= FLAG_EXTENDED;
    }
    out.extend_from_slice(&flags.to_be_bytes());
    if extended != 0 {
        out.extend_from_slice(&extended.to_be_bytes());
    }
    out.extend_from_slice(&e.path);
    // NUL-padded to a multiple of 8, with at least one NUL.
    let len = out.len() - start;
    out.resize(start + (len + 8) / 8 * 8, 0);
    Ok(extended != 0)
}

pub(crate) fn stage(e: &git2::IndexEntry) -> u16 {
    (e.flags >> 12) & 3
}

/// Encoded index entries (version 2, or 3 when one has extended flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub(crate) bytes: Vec<u8>,
    /// Per entry: where it starts in `bytes`, and where its path is.
    spans: Vec<Span>,
    pub(crate) v3: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: usize,
    path_at: usize,
    path_len: usize,
}

fn out_of_order(path: &[u8]) -> IndexFileError {
    IndexFileError::Entry {
        path: String::from_utf8_lossy(path).into_owned(),
        rule: "entries are sorted by path and stage, once each",
    }
}

impl Encoded {
    /// Encodes `entries` (in index order); with `for_tree`, a conflicted
    /// entry is refused, since such an index has no valid cache of tree ids.
    pub fn of(
        entries: impl IntoIterator<Item = git2::IndexEntry>,
        for_tree: bool,
    ) -> Result<Encoded, IndexFileError> {
        let mut out = Encoded { bytes: Vec::with_capacity(1 << 20), spans: Vec::new(), v3: false };
        let mut prev: Option<git2::IndexEntry> = None;
        for e in entries {
            if let Some(p) = &prev
                && (p.path.as_slice(), stage(p)) >= (e.path.as_slice(), stage(&e))
            {
                return Err(out_of_order(&e.path));
            }
            out.push(&e, for_tree)?;
            prev = Some(e);
        }
        Ok(out)
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    fn path(&self, i: usize) -> &[u8] {
        let s = self.spans[i];
        &self.bytes[s.path_at..s.path_at + s.path_len]
    }

    fn entry_bytes(&self, i: usize) -> &[u8] {
        let start = self.spans[i].start;
        let end = self.spans.get(i + 1).map_or(self.bytes.len(), |s| s.start);
        &self.bytes[start..end]
    }

    fn push(&mut self, e: &git2::IndexEntry, for_tree: bool) -> Result<(), IndexFileError> {
        if for_tree && stage(e) != 0 {
            return Err(IndexFileError::Entry {
                path: String::from_utf8_lossy(&e.path).into_owned(),
                rule: "a conflicted index has no valid cache of tree ids",
            });
        }
        let start = self.bytes.len();
        self.v3 |= put_entry(&mut self.bytes, e)?;
        self.push_span(start, e.path.len());
        Ok(())
    }

    fn push_copy(&mut self, from: &Encoded, i: usize) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(from.entry_bytes(i));
        self.v3 |= self.push_span(start, from.spans[i].path_len);
    }

    /// Records the entry just encoded at `start`; returns whether it has
    /// extended flags.
    fn push_span(&mut self, start: usize, path_len: usize) -> bool {
        let flags = u16::from_be_bytes([self.bytes[start + FIXED - 2], self.bytes[start + FIXED - 1]]);
        let extended = if flags & FLAG_EXTENDED != 0 { 2 } else { 0 };
        self.spans.push(Span { start, path_at: start + FIXED + extended, path_len });
        extended != 0
    }

    /// The entries of `index` now, given that only the paths in `changed`
    /// (files, or directories whose entries went) differ from `self`:
    /// their entries come from libgit2, every other entry's bytes from
    /// `self`. Fails when the result does not hold exactly `index`'s number
    /// of entries (then `changed` missed something: encode it all).
    pub fn splice(
        &self,
        index: &git2::Index,
        changed: &BTreeSet<Vec<u8>>,
        for_tree: bool,
    ) -> Result<Encoded, IndexFileError> {
        let mut stale = vec![false; self.len()];
        let mut fresh: BTreeMap<Vec<u8>, git2::IndexEntry> = BTreeMap::new();
        for c in changed {
            let mut dir = c.clone();
            dir.push(b'/');
            let at = self.lower_bound(c);
            if at < self.len() && self.path(at) == c.as_slice() {
                stale[at] = true;
            }
            let mut i = self.lower_bound(&dir);
            while i < self.len() && self.path(i).starts_with(&dir) {
                stale[i] = true;
                i += 1;
            }
            if let Some(e) = index.get_path(Path::new(OsStr::from_bytes(c)), 0) {
                fresh.insert(e.path.clone(), e);
            }
            if let Ok(mut n) = index.find_prefix(dir.as_slice()) {
                while let Some(e) = index.get(n).filter(|e| e.path.starts_with(&dir)) {
                    fresh.insert(e.path.clone(), e);
                    n += 1;
                }
            }
        }
        let mut out =
            Encoded { bytes: Vec::with_capacity(self.bytes.len() + 4096), spans: Vec::new(), v3: false };
        let mut fresh = fresh.into_values().peekable();
        for i in (0..self.len()).filter(|&i| !stale[i]) {
            while let Some(e) = fresh.next_if(|e| e.path.as_slice() < self.path(i)) {
                out.push(&e, for_tree)?;
            }
            if fresh.peek().is_some_and(|e| e.path.as_slice() == self.path(i)) {
                // A changed path's entry beside a kept one: `changed` is wrong.
                return Err(out_of_order(self.path(i)));
            }
            out.push_copy(self, i);
        }
        for e in fresh {
            out.push(&e, for_tree)?;
        }
        if out.len() != index.len() {
            return Err(IndexFileError::Entry {
                path: String::new(),
                rule: "the changed paths account for every entry that changed",
            });
        }
        Ok(out)
    }

    /// The first entry whose path is not below `path`.
    fn lower_bound(&self, path: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.path(mid) < path {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;

    fn entry(path: &str, n: u32) -> git2::IndexEntry {
        let time = git2::IndexTime::new(1_700_000_000, n);
        git2::IndexEntry {
            ctime: time,
            mtime: time,
            dev: 1,
            ino: n,
            mode: 0o100644,
            uid: 0,
            gid: 0,
            file_size: n,
            id: git2::Oid::hash_object(git2::ObjectType::Blob, path.as_bytes()).expect("hash"),
            flags: 0,
            flags_extended: 0,
            path: path.as_bytes().to_vec(),
        }
    }

    /// Random additions, changes and removals (of files and of whole
    /// directories, names that sort between a directory and its files
    /// among them), each spliced into the last encoding: always the bytes
    /// of encoding the whole index afresh.
    #[test]
    fn spliced_entries_are_the_entries_encoded_afresh() {
        let mut index = git2::Index::new().expect("in-memory index");
        let names = ["a", "a-b", "a.txt", "a/x", "a/y/z", "b", "b0", "b/c", "c/d/e", "c/d.f", "dd/e"];
        for (n, p) in names.iter().enumerate() {
            index.add(&entry(p, n as u32)).expect("add");
        }
        let mut last = Encoded::of(index.iter(), true).expect("encode");
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for round in 0..300u32 {
            let mut changed = BTreeSet::new();
            for _ in 0..rng.random_range(1..4) {
                let pick = names[rng.random_range(0..names.len())];
                match rng.random_range(0..4) {
                    0 => {
                        // A directory goes whole (or nothing, if `pick` is none).
                        let _ = index.remove_dir(Path::new(pick), 0);
                        changed.insert(pick.as_bytes().to_vec());
                    }
                    1 => {
                        let _ = index.remove_path(Path::new(pick));
                        changed.insert(pick.as_bytes().to_vec());
                    }
                    _ => {
                        // A file of that name, after whatever directory was
                        // there; libgit2 drops a file where a directory of
                        // it goes, so every ancestor changed too (as the
                        // tracker reports a file that became a directory).
                        let _ = index.remove_dir(Path::new(pick), 0);
                        index.add(&entry(pick, 1000 + round)).expect("add");
                        for (i, _) in pick.match_indices('/') {
                            changed.insert(pick.as_bytes()[..i].to_vec());
                        }
                        changed.insert(pick.as_bytes().to_vec());
                    }
                }
            }
            let spliced = last.splice(&index, &changed, true).expect("splice");
            assert_eq!(spliced, Encoded::of(index.iter(), true).expect("encode"), "round {round}");
            last = spliced;
        }
    }

    #[test]
    fn a_change_left_out_of_the_changed_paths_is_refused() {
        let mut index = git2::Index::new().expect("in-memory index");
        index.add(&entry("a", 1)).expect("add");
        let last = Encoded::of(index.iter(), true).expect("encode");
        index.add(&entry("b", 2)).expect("add");
        let err = last.splice(&index, &BTreeSet::new(), true).expect_err("b is not accounted for");
        assert!(err.to_string().contains("account for every entry"), "{err}");
    }
}

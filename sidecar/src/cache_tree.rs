//! The ids of the trees a worktree's index makes, kept beside libgit2's
//! in-memory index and brought up to date by the directories that changed.
//!
//! Moving a worktree and committing what its worker left both need the
//! tree the index makes: the move to check that its entries are exactly
//! the target's before it writes them with a cache of tree ids (git trusts
//! that cache when it commits), the commit to write that tree. libgit2's
//! `write_tree` scans every entry for conflicts and then reads every tree
//! object of the result back into its own cache: ~1.3 ms at p50 (5 ms at
//! p99 under load) at 10,000 files, on both paths of every attempt. This
//! is git's own cache-tree: every node holds its tree's id and how many
//! index entries it covers, [`CacheTree::invalidate`] marks the directories
//! along a changed path, and [`CacheTree::rebuild`] hashes only those again
//! from the index, skipping every clean subdirectory by its entry count.
//!
//! It is only as good as the promise that every change to the in-memory
//! index was invalidated here: the owner drops it whenever the index is
//! read again from its file, or changed by libgit2 on its own.

use git2::{ObjectType, Oid, Repository};

#[derive(Debug, thiserror::Error)]
pub enum CacheTreeError {
    #[error("git: {0}")]
    Git(#[from] git2::Error),
    #[error("index entry {path:?}: {rule}")]
    Entry { path: String, rule: &'static str },
}

/// A cache of tree ids: for a directory of the index, the id of the tree
/// its entries make and how many entries it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheTree {
    root: Node,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    name: Vec<u8>,
    id: Oid,
    entries: u32,
    /// In git's order: shorter names first, then bytewise.
    children: Vec<Node>,
    /// The index changed under this directory since `id` was computed.
    dirty: bool,
}

impl Node {
    fn new(name: &[u8]) -> Node {
        Node { name: name.to_vec(), id: Oid::zero(), entries: 0, children: Vec::new(), dirty: true }
    }
}

/// The order git keeps a directory's subtrees in.
fn git_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// What [`CacheTree::rebuild`] does with the trees it hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trees {
    /// Only their ids (the trees exist: a move to a known commit).
    Hash,
    /// Write them to the object store (a commit).
    Write,
}

const TREE_MODE: &[u8] = b"40000";
/// The extended flag of an intent-to-add entry, which no tree holds.
const INTENT_TO_ADD: u16 = 0x2000;
const STAGE_MASK: u16 = 0x3000;

impl CacheTree {
    /// The cache of `tree`, read from every one of its tree objects: right
    /// for an index whose entries are exactly that tree's.
    pub fn of(repo: &Repository, tree: &git2::Tree<'_>) -> Result<CacheTree, git2::Error> {
        let mut root = Node::new(b"");
        read(&mut root, repo, tree)?;
        Ok(CacheTree { root })
    }

    /// The id of the whole tree (stale while anything is invalidated).
    pub fn id(&self) -> Oid {
        self.root.id
    }

    /// How many index entries the whole tree covers.
    pub fn entries(&self) -> u32 {
        self.root.entries
    }

    /// Whether every node's id is the tree its entries make.
    pub fn is_clean(&self) -> bool {
        !self.root.dirty
    }

    /// Marks every directory that holds `path` (a `/`-separated path of the
    /// index; a directory's own path too, for one removed whole) as changed.
    pub fn invalidate(&mut self, path: &[u8]) {
        let mut node = &mut self.root;
        node.dirty = true;
        for name in path.split(|&b| b == b'/') {
            match node.children.iter().position(|c| c.name == name) {
                Some(i) => {
                    node = &mut node.children[i];
                    node.dirty = true;
                }
                // A new directory: its parent's rebuild makes it.
                None => return,
            }
        }
    }

    /// Hashes the invalidated directories again from `index` (the clean
    /// ones are taken by their ids and entry counts) and returns the id of
    /// the whole tree.
    pub fn rebuild(
        &mut self,
        repo: &Repository,
        index: &git2::Index,
        trees: Trees,
    ) -> Result<Oid, CacheTreeError> {
        if self.root.dirty {
            let odb = repo.odb()?;
            let end = rebuild(&mut self.root, index, &mut Vec::new(), 0, &odb, trees)?;
            if end != index.len() {
                let path = index.get(end).map(|e| String::from_utf8_lossy(&e.path).into_owned());
                return Err(CacheTreeError::Entry {
                    path: path.unwrap_or_default(),
                    rule: "every entry is under the root, in order",
                });
            }
        }
        Ok(self.root.id)
    }

    /// Appends the index's `TREE` extension body.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        encode(out, &self.root);
    }
}

fn read(node: &mut Node, repo: &Repository, tree: &git2::Tree<'_>) -> Result<(), git2::Error> {
    let mut entries = 0u32;
    for e in tree.iter() {
        if e.kind() != Some(ObjectType::Tree) {
            // Files, links and submodules are one index entry each.
            entries = entries.saturating_add(1);
            continue;
        }
        let mut child = Node::new(e.name_bytes());
        read(&mut child, repo, &repo.find_tree(e.id())?)?;
        entries = entries.saturating_add(child.entries);
        node.children.push(child);
    }
    node.children.sort_by(|a, b| git_order(&a.name, &b.name));
    node.id = tree.id();
    node.entries = entries;
    node.dirty = false;
    Ok(())
}

/// Makes `node` (the directory `prefix`, `""` or ending in `/`, whose
/// entries start at index position `start`) the tree of its entries;
/// returns the position after its last entry. Entries come in index order,
/// which is also the order of a tree's entries (a subdirectory sorts as its
/// name with a `/` after it, as its entries' paths do).
fn rebuild(
    node: &mut Node,
    index: &git2::Index,
    prefix: &mut Vec<u8>,
    start: usize,
    odb: &git2::Odb<'_>,
    trees: Trees,
) -> Result<usize, CacheTreeError> {
    let mut old = std::mem::take(&mut node.children);
    let mut body = Vec::new();
    let mut pos = start;
    while let Some(e) = index.get(pos) {
        let Some(rest) = e.path.strip_prefix(prefix.as_slice()) else { break };
        let bad = |rule| CacheTreeError::Entry { path: String::from_utf8_lossy(&e.path).into_owned(), rule };
        if e.flags & STAGE_MASK != 0 {
            return Err(bad("a conflicted index makes no tree"));
        }
        if e.flags_extended & INTENT_TO_ADD != 0 {
            return Err(bad("an intent-to-add entry is in no tree"));
        }
        let Some(slash) = rest.iter().position(|&b| b == b'/') else {
            if rest.is_empty() {
                return Err(bad("a path names a file, not a directory"));
            }
            put_tree_entry(&mut body, format!("{:o}", e.mode).as_bytes(), rest, e.id);
            pos += 1;
            continue;
        };
        let name = &rest[..slash];
        let mut child = match old.iter().position(|c| c.name == name) {
            Some(i) => old.swap_remove(i),
            None => Node::new(name),
        };
        if child.dirty {
            let len = prefix.len();
            prefix.extend_from_slice(name);
            prefix.push(b'/');
            let end = rebuild(&mut child, index, prefix, pos, odb, trees);
            prefix.truncate(len);
            pos = end?;
        } else {
            pos += child.entries as usize;
        }
        put_tree_entry(&mut body, TREE_MODE, name, child.id);
        node.children.push(child);
    }
    node.children.sort_by(|a, b| git_order(&a.name, &b.name));
    node.entries = u32::try_from(pos - start).unwrap_or(u32::MAX);
    node.id = match trees {
        Trees::Hash => Oid::hash_object(ObjectType::Tree, &body)?,
        Trees::Write => odb.write(ObjectType::Tree, &body)?,
    };
    node.dirty = false;
    Ok(pos)
}

fn put_tree_entry(body: &mut Vec<u8>, mode: &[u8], name: &[u8], id: Oid) {
    body.extend_from_slice(mode);
    body.push(b' ');
    body.extend_from_slice(name);
    body.push(0);
    body.extend_from_slice(id.as_bytes());
}

fn encode(out: &mut Vec<u8>, node: &Node) {
    out.extend_from_slice(&node.name);
    out.push(0);
    out.extend_from_slice(format!("{} {}\n", node.entries, node.children.len()).as_bytes());
    out.extend_from_slice(node.id.as_bytes());
    for c in &node.children {
        encode(out, c);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn add(repo: &Repository, index: &mut git2::Index, path: &str, body: &str) {
        let full = repo.workdir().expect("workdir").join(path);
        std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
        std::fs::write(&full, body).expect("write");
        index.add_path(Path::new(path)).expect("add");
    }

    #[test]
    fn rebuilt_directories_make_the_tree_libgit2_makes_of_the_whole_index() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let repo = Repository::init(tmp.path()).expect("init");
        let mut index = repo.index().expect("index");
        for (path, body) in
            [("a.txt", "a"), ("b/c.txt", "c"), ("b/x/y.txt", "y"), ("b.txt", "b"), ("d/e.txt", "e")]
        {
            add(&repo, &mut index, path, body);
        }
        let first = index.write_tree().expect("tree");
        let mut cache = CacheTree::of(&repo, &repo.find_tree(first).expect("tree")).expect("cache");
        assert!(cache.is_clean());
        assert_eq!((cache.id(), cache.entries()), (first, 5));

        // A change deep down, a new directory, a whole directory gone, and
        // a file turned into a directory (`b.txt/`, which sorts after `b/`).
        add(&repo, &mut index, "b/x/y.txt", "y2");
        add(&repo, &mut index, "n/m/o.txt", "o");
        index.remove_dir(Path::new("d"), 0).expect("rm d");
        index.remove_path(Path::new("b.txt")).expect("rm b.txt");
        std::fs::remove_file(tmp.path().join("b.txt")).expect("rm b.txt");
        add(&repo, &mut index, "b.txt/inner", "i");
        for path in ["b/x/y.txt", "n/m/o.txt", "d", "b.txt", "b.txt/inner"] {
            cache.invalidate(path.as_bytes());
        }
        assert!(!cache.is_clean());
        let hashed = cache.rebuild(&repo, &index, Trees::Hash).expect("rebuild");
        let theirs = index.write_tree().expect("libgit2's tree");
        assert_eq!(hashed, theirs);
        assert_eq!(cache, CacheTree::of(&repo, &repo.find_tree(theirs).expect("tree")).expect("afresh"));
        assert_eq!(cache.entries(), 5);

        // Written: the trees exist for a commit to name.
        add(&repo, &mut index, "n/m/o.txt", "o2");
        cache.invalidate(b"n/m/o.txt");
        let written = cache.rebuild(&repo, &index, Trees::Write).expect("rebuild");
        assert!(repo.find_tree(written).is_ok(), "the root tree is in the store");
        assert!(repo.find_tree(written).expect("tree").get_path(Path::new("n/m")).is_ok());
        assert_eq!(written, index.write_tree().expect("libgit2's tree"));
    }

    #[test]
    fn a_conflicted_entry_makes_no_tree() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let repo = Repository::init(tmp.path()).expect("init");
        let mut index = repo.index().expect("index");
        add(&repo, &mut index, "a.txt", "a");
        let tree = index.write_tree().expect("tree");
        let mut cache = CacheTree::of(&repo, &repo.find_tree(tree).expect("tree")).expect("cache");
        let mut theirs = index.get_path(Path::new("a.txt"), 0).expect("entry");
        theirs.flags |= 2 << 12;
        index.add(&theirs).expect("stage 2");
        cache.invalidate(b"a.txt");
        let err = cache.rebuild(&repo, &index, Trees::Hash).expect_err("conflicted");
        assert!(err.to_string().contains("conflicted"), "{err}");
    }
}

//! The files that differ between two trees, found by walking only the
//! subtrees whose ids differ: what a move of the worktree or a listing of
//! a result's changed files needs, at a cost that grows with the change.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use git2::Repository;

/// One non-tree entry that differs between two trees: its (id, file mode)
/// on each side, `None` where it is absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileDelta {
    pub path: PathBuf,
    pub old: Option<(git2::Oid, i32)>,
    pub new: Option<(git2::Oid, i32)>,
}

const TREE: i32 = 0o040000;
pub(crate) const BLOB: i32 = 0o100644;
pub(crate) const BLOB_EXECUTABLE: i32 = 0o100755;
pub(crate) const LINK: i32 = 0o120000;

/// The files (blobs, links, submodules) that differ between two trees, in
/// path order. Equal subtrees are skipped by their ids, so the cost grows
/// with what changed, not with the tree (libgit2's tree-to-tree diff walks
/// every entry of both).
pub(crate) fn diff_trees(
    repo: &Repository,
    a: Option<&git2::Tree<'_>>,
    b: Option<&git2::Tree<'_>>,
) -> Result<Vec<FileDelta>, git2::Error> {
    let mut out = Vec::new();
    diff_into(repo, Path::new(""), a, b, &mut out)?;
    out.sort_by(|x, y| x.path.as_os_str().as_bytes().cmp(y.path.as_os_str().as_bytes()));
    Ok(out)
}

fn diff_into(
    repo: &Repository,
    dir: &Path,
    a: Option<&git2::Tree<'_>>,
    b: Option<&git2::Tree<'_>>,
    out: &mut Vec<FileDelta>,
) -> Result<(), git2::Error> {
    type Entries = std::collections::BTreeMap<Vec<u8>, (git2::Oid, i32)>;
    let entries = |t: Option<&git2::Tree<'_>>| -> Entries {
        t.map(|t| t.iter().map(|e| (e.name_bytes().to_vec(), (e.id(), e.filemode()))).collect())
            .unwrap_or_default()
    };
    let (ea, eb) = (entries(a), entries(b));
    let names: BTreeSet<&Vec<u8>> = ea.keys().chain(eb.keys()).collect();
    for name in names {
        let (x, y) = (ea.get(name).copied(), eb.get(name).copied());
        if x == y {
            continue;
        }
        let path = dir.join(OsStr::from_bytes(name));
        let is_tree = |e: &(git2::Oid, i32)| e.1 == TREE;
        let (xt, yt) = (x.filter(is_tree), y.filter(is_tree));
        if xt.is_some() || yt.is_some() {
            let ta = xt.map(|e| repo.find_tree(e.0)).transpose()?;
            let tb = yt.map(|e| repo.find_tree(e.0)).transpose()?;
            diff_into(repo, &path, ta.as_ref(), tb.as_ref(), out)?;
        }
        let (xf, yf) = (x.filter(|e| !is_tree(e)), y.filter(|e| !is_tree(e)));
        if xf.is_some() || yf.is_some() {
            out.push(FileDelta { path, old: xf, new: yf });
        }
    }
    Ok(())
}

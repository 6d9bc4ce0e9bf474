//! Pack transfer between repositories that share no filesystem (controller ⇄ remote sidecars).
//!
//! [`build_pack`] packs everything reachable from `want` that is not reachable from the `haves`
//! the sender knows about; [`receive_pack`] indexes such a pack into a staging directory, checks
//! that it provides the expected tip commit (with its tree and parents, possibly from objects the
//! receiver already has) and only then moves it into `objects/pack`. A refused pack leaves the
//! receiving repository untouched.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{GitError, parse_commit_id};

/// Builds a pack with the objects reachable from commit `want` but not from any of `haves`.
///
/// `haves` that do not exist in `repo` are ignored (the receiver may know commits the sender
/// does not); malformed ids are an error. `want` must exist and be a commit.
#[tracing::instrument(skip(haves), fields(haves = haves.len()))]
pub fn build_pack(repo: &Path, want: &str, haves: &[String]) -> Result<Vec<u8>, GitError> {
    let want_id = parse_commit_id(want)?;
    let have_ids = haves.iter().map(|h| parse_commit_id(h)).collect::<Result<Vec<_>, _>>()?;
    let repo = open_git2(repo)?;
    let want_oid = to_git2(want_id)?;
    ensure_commit(&repo, want_oid)?;
    let mut walk = repo.revwalk().map_err(GitError::git2("revwalk"))?;
    walk.push(want_oid).map_err(GitError::git2("revwalk push want"))?;
    for have in have_ids {
        let oid = to_git2(have)?;
        if repo.find_object(oid, Some(git2::ObjectType::Commit)).is_ok() {
            walk.hide(oid).map_err(GitError::git2("revwalk hide have"))?;
        }
    }
    let mut builder = repo.packbuilder().map_err(GitError::git2("packbuilder"))?;
    builder.insert_walk(&mut walk).map_err(GitError::git2("pack insert walk"))?;
    let mut buf = git2::Buf::new();
    builder.write_buf(&mut buf).map_err(GitError::git2("pack write"))?;
    tracing::debug!(objects = builder.object_count(), bytes = buf.len(), "pack built");
    Ok(buf.to_vec())
}

/// Receives a pack produced by [`build_pack`] into `repo` and returns the number of objects it held.
///
/// Refuses (without changing `repo`) a pack larger than `max_bytes` ([`GitError::PackTooLarge`]), a
/// malformed pack or one referring to objects that neither it nor `repo` has ([`GitError::PackRejected`];
/// libgit2's indexer verifies connectivity), and a pack after which `expected_tip` is not a commit whose
/// tree and parents are present ([`GitError::PackMissingTip`]).
#[tracing::instrument(skip(pack), fields(bytes = pack.len()))]
pub fn receive_pack(repo: &Path, pack: &[u8], expected_tip: &str, max_bytes: usize) -> Result<u64, GitError> {
    if pack.len() > max_bytes {
        return Err(GitError::PackTooLarge { size: pack.len(), max: max_bytes });
    }
    receive_pack_from(repo, pack, expected_tip)
}

/// [`receive_pack`] from a file the caller wrote (and bounded) itself, so a
/// large pack is streamed through the indexer and never held in memory.
#[tracing::instrument]
pub fn receive_pack_file(
    repo: &Path,
    pack: &Path,
    expected_tip: &str,
    max_bytes: usize,
) -> Result<u64, GitError> {
    let file = std::fs::File::open(pack).map_err(GitError::io("open received pack"))?;
    let size = file.metadata().map_err(GitError::io("stat received pack"))?.len();
    if size > max_bytes as u64 {
        return Err(GitError::PackTooLarge { size: size as usize, max: max_bytes });
    }
    receive_pack_from(repo, std::io::BufReader::with_capacity(1 << 20, file), expected_tip)
}

fn receive_pack_from(repo: &Path, mut pack: impl std::io::Read, expected_tip: &str) -> Result<u64, GitError> {
    let tip = to_git2(parse_commit_id(expected_tip)?)?;
    let repo = open_git2(repo)?;
    let mut header = [0u8; 12];
    let mut got = 0;
    while got < header.len() {
        match pack.read(&mut header[got..]).map_err(GitError::io("read received pack"))? {
            0 => break,
            n => got += n,
        }
    }
    let header = &header[..got];
    let declared_objects = header.get(8..12).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    if declared_objects == Some(0) {
        // An empty pack (the receiver already had everything): nothing to index.
        verify_tip(&repo, tip, expected_tip)?;
        return Ok(0);
    }

    let objects_dir = repo.path().join("objects");
    let staging = Staging::create(&objects_dir)?;
    let odb = repo.odb().map_err(GitError::git2("open odb"))?;
    let indexed = Rc::new(Cell::new(0u64));
    {
        let mut indexer = git2::Indexer::new(Some(&odb), &staging.pack_dir, 0o444, true)
            .map_err(GitError::git2("create pack indexer"))?;
        let seen = Rc::clone(&indexed);
        indexer.progress(move |p| {
            seen.set(p.indexed_objects() as u64);
            true
        });
        let rejected = |message: String| GitError::PackRejected { tip: expected_tip.to_string(), message };
        std::io::Write::write_all(&mut indexer, header).map_err(|e| rejected(e.to_string()))?;
        std::io::copy(&mut pack, &mut indexer).map_err(|e| rejected(e.to_string()))?;
        indexer.commit().map_err(|e| rejected(e.message().to_string()))?;
    }

    // Verify against the staged pack plus what the repository already has.
    {
        let check = git2::Odb::new().map_err(GitError::git2("create verification odb"))?;
        for dir in [&staging.root, &objects_dir] {
            let dir = dir.to_str().ok_or_else(|| GitError::Io {
                op: "verification odb",
                source: std::io::Error::other(format!("non-UTF-8 path {}", dir.display())),
            })?;
            check.add_disk_alternate(dir).map_err(GitError::git2("add verification alternate"))?;
        }
        let check_repo =
            git2::Repository::from_odb(check).map_err(GitError::git2("verification repository"))?;
        verify_tip(&check_repo, tip, expected_tip)?;
    }

    staging.install(&objects_dir.join("pack"))?;
    Ok(indexed.get())
}

fn verify_tip(repo: &git2::Repository, tip: git2::Oid, expected_tip: &str) -> Result<(), GitError> {
    let missing = || GitError::PackMissingTip { tip: expected_tip.to_string() };
    let commit = repo.find_commit(tip).map_err(|_| missing())?;
    repo.find_tree(commit.tree_id()).map_err(|_| missing())?;
    for parent in commit.parent_ids() {
        repo.find_commit(parent).map_err(|_| missing())?;
    }
    Ok(())
}

pub(crate) fn open_git2(path: &Path) -> Result<git2::Repository, GitError> {
    git2::Repository::open(path)
        .map_err(|e| GitError::Open { path: path.to_path_buf(), message: e.message().to_string() })
}

pub(crate) fn to_git2(id: gix::ObjectId) -> Result<git2::Oid, GitError> {
    git2::Oid::from_bytes(id.as_bytes()).map_err(GitError::git2("convert object id"))
}

fn ensure_commit(repo: &git2::Repository, oid: git2::Oid) -> Result<(), GitError> {
    let object = repo.find_object(oid, None).map_err(|_| GitError::MissingCommit { id: oid.to_string() })?;
    match object.kind() {
        Some(git2::ObjectType::Commit) => Ok(()),
        kind => Err(GitError::NotACommit {
            id: oid.to_string(),
            kind: kind.map_or("unknown object", |k| k.str()).to_string(),
        }),
    }
}

/// A staging directory `objects/incoming-swarm-*/pack` removed on drop.
struct Staging {
    root: PathBuf,
    pack_dir: PathBuf,
}

impl Staging {
    fn create(objects_dir: &Path) -> Result<Self, GitError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let name = format!(
            "incoming-swarm-{}-{}-{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let root = objects_dir.join(name);
        let pack_dir = root.join("pack");
        std::fs::create_dir_all(&pack_dir).map_err(GitError::io("create pack staging directory"))?;
        Ok(Staging { root, pack_dir })
    }

    /// Moves the staged files into `target`: `.pack` first, `.idx` last, so that a reader never sees
    /// an index without its pack.
    fn install(&self, target: &Path) -> Result<(), GitError> {
        let mut files = std::fs::read_dir(&self.pack_dir)
            .map_err(GitError::io("list staged pack"))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(GitError::io("list staged pack"))?;
        files.sort_by_key(|p| p.extension().is_some_and(|e| e == "idx"));
        for file in files {
            let Some(name) = file.file_name() else { continue };
            std::fs::rename(&file, target.join(name)).map_err(GitError::io("install received pack"))?;
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.root) {
            tracing::warn!(dir = %self.root.display(), error = %e, "cannot remove pack staging directory");
        }
    }
}

//! The merge integration engine: in-memory tree merges with gix, ref compare-and-swap with git2.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use gix::bstr::{BStr, ByteSlice};
use swarm_core::plan::MergeStrategy;

use crate::graph::{Bases, CommitCache};
use crate::loose_ref::Exchange;
use crate::pack::{open_git2, to_git2};
use crate::{GitError, MergeError, parse_commit_id, ref_name};

mod batch;
mod speculative;
mod strategies;

pub use batch::BatchReport;
pub use speculative::Speculation;

/// How many times [`Integrator::integrate`] rebuilds on a fresh head when the integration ref moved.
pub const DEFAULT_MAX_CAS_RETRIES: u32 = 8;
/// How far [`Integrator::find_landed`] walks back along the first-parent history.
pub const FIND_LANDED_LIMIT: usize = 10_000;
/// The trailer key carried by every commit the integrator makes.
pub const ATTEMPT_TRAILER: &str = "Swarm-Attempt";
/// Commits on a task's first-parent chain replayed at most by the rebase strategy.
const MAX_REBASE_COMMITS: usize = 10_000;
/// Commit ids remembered as present (~40 B each); past this the set starts over.
const MAX_KNOWN_COMMITS: usize = 100_000;

/// One request to land a task's result commit on the integration branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeRequest {
    /// Short branch name (`swarm/auth/integration`), not `refs/heads/...`.
    pub integration_branch: String,
    /// The integration head the caller last saw; the ref is moved only from this value (or, after a
    /// retry, from a newer head that contains it).
    pub expected_head: String,
    /// The task's result commit.
    pub task_commit: String,
    pub strategy: MergeStrategy,
    /// `<swarm>/<task>#<attempt>`, e.g. `auth/api#2`; written as the `Swarm-Attempt` trailer.
    pub attempt_label: String,
    /// The task title, used in merge commit subjects.
    pub title: String,
    /// The task's summary, used as the squash commit message and merge commit body.
    pub summary: String,
}

/// The outcome of a successful [`Integrator::integrate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeReport {
    pub strategy: MergeStrategy,
    /// The integration head the result was built on (after retries, the head that was current then).
    pub base: String,
    /// The new integration head.
    pub result: String,
    /// Paths changed between `base` and `result`, sorted.
    pub files_changed: Vec<String>,
    pub duration: Duration,
    /// How many times the ref had moved and the result was rebuilt on a fresh head.
    pub cas_retries: u32,
}

/// The outcome of a successful [`Integrator::fast_forward`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastForward {
    pub old: String,
    pub new: String,
}

struct Caches {
    diff: gix::diff::blob::Platform,
    merge: gix::merge::blob::Platform,
}

/// How [`Integrator::compare_and_swap`] commits a ref.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RefWrite {
    /// An integration ref, whose head the caller records and can restore ([`Integrator::repair_ref`]).
    Exchange,
    /// Any other ref (a target branch): git's own rename, which ext4 flushes first.
    Replace,
}

enum Cas {
    Moved,
    MovedTo(gix::ObjectId),
    /// The ref's lock file exists; the ref may well still point at `old`.
    Locked(std::path::PathBuf),
}

/// The controller's git engine for one repository.
///
/// Owns a `gix::Repository` (tree merges, object writes, history walks) and a `git2::Repository`
/// (ref compare-and-swap). It is `Send` but not `Sync`: the controller keeps one value on a
/// dedicated blocking thread (or actor) and sends it requests.
pub struct Integrator {
    /// Reads from the object database, writes to memory: a merge's objects reach the disk only when
    /// its result is about to land ([`Integrator::persist`]), loose for one merge, one pack for a batch.
    repo: gix::Repository,
    /// The same object database, written through; never refreshed on a miss.
    disk: gix::Repository,
    /// Files created ahead of time for loose objects (`None`: gix creates them).
    pub(crate) object_files: Option<crate::object_files::ObjectFiles>,
    pub(crate) refs: git2::Repository,
    pub(crate) name: String,
    pub(crate) email: String,
    max_cas_retries: u32,
    /// Which refs [`Integrator::exchange_ref`] starts a reflog for.
    pub(crate) reflog: crate::loose_ref::ReflogPolicy,
    /// Reused across merges: gix's `Repository::merge_commits` rebuilds these per call, which loads the
    /// index (or, without one, builds it from HEAD's 10k-entry tree): ~3 ms of a 0.3 ms merge.
    caches: std::cell::RefCell<Caches>,
    /// Parsed commits (parents, dates) for merge-base walks; see `graph.rs`.
    graph: std::cell::RefCell<CommitCache>,
    /// Ids already found to name commits. Objects never change, and a header read bypasses gix's
    /// object cache: without this every merge re-opened and re-mapped the same loose base commit
    /// (twice for the ownership check, twice for the merge).
    commits: std::cell::RefCell<gix::hashtable::HashSet<gix::ObjectId>>,
    merge_options: gix::merge::tree::Options,
    #[cfg(test)]
    pub(crate) before_cas: std::cell::RefCell<Option<Box<dyn FnMut() + Send>>>,
}

// The controller moves its Integrator onto a dedicated blocking thread.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Integrator>();
};

impl std::fmt::Debug for Integrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Integrator").field("git_dir", &self.repo.git_dir()).finish_non_exhaustive()
    }
}

impl Integrator {
    /// Opens the repository at `repo_path` (a work tree or a bare repository).
    #[tracing::instrument]
    pub fn open(repo_path: &Path) -> Result<Self, GitError> {
        // Room for the packs that appear while the controller runs (merge batches, remote sidecars'
        // uploads): gix sizes its index slots once, from the packs present at opening.
        let slots = gix::odb::store::init::Slots::AsNeededByDiskState { multiplier: 2.0, minimum: 4096 };
        let mut repo = gix::open_opts(repo_path, gix::open::Options::default().object_store_slots(slots))
            .map_err(|e| GitError::Open { path: repo_path.to_path_buf(), message: e.to_string() })?;
        repo.object_cache_size_if_unset(16 * 1024 * 1024);
        let refs = open_git2(repo_path)?;
        let reflog = crate::loose_ref::ReflogPolicy::of(&refs);
        let object_files = crate::object_files::ObjectFiles::start(refs.commondir());
        let mut disk = repo.clone();
        // `disk` answers "is it there already?" for objects that are almost always new: a miss must
        // not rescan the pack directory (a false "no" only writes a duplicate loose object).
        disk.objects.refresh_never();
        let repo = repo.with_object_memory();
        // Attributes (merge drivers, text conversion) are read once, as of opening.
        let caches = Caches {
            diff: repo.diff_resource_cache_for_tree_diff().map_err(GitError::gix("diff resource cache"))?,
            merge: repo
                .merge_resource_cache(Default::default())
                .map_err(GitError::gix("merge resource cache"))?,
        };
        let merge_options = repo.tree_merge_options().map_err(GitError::gix("tree merge options"))?;
        Ok(Integrator {
            caches: std::cell::RefCell::new(caches),
            graph: std::cell::RefCell::new(CommitCache::default()),
            commits: Default::default(),
            merge_options,
            repo,
            disk,
            object_files,
            refs,
            name: "swarm".into(),
            email: "swarm@localhost".into(),
            max_cas_retries: DEFAULT_MAX_CAS_RETRIES,
            reflog,
            #[cfg(test)]
            before_cas: std::cell::RefCell::new(None),
        })
    }

    /// Sets the committer (and merge/squash author) identity; the default is `swarm <swarm@localhost>`.
    pub fn with_identity(mut self, name: &str, email: &str) -> Self {
        self.name = name.to_string();
        self.email = email.to_string();
        self
    }

    /// Sets how many times [`Integrator::integrate`] retries on a moved ref (default [`DEFAULT_MAX_CAS_RETRIES`]).
    pub fn with_max_cas_retries(mut self, retries: u32) -> Self {
        self.max_cas_retries = retries;
        self
    }

    /// Resolves a branch to its commit id (hex), `None` if the branch does not exist.
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn branch_head(&self, branch: &str) -> Result<Option<String>, GitError> {
        Ok(self.head_of(branch)?.map(|id| id.to_string()))
    }

    /// Creates `branch` at commit `at` if it does not exist and returns its head.
    /// Never moves an existing branch (it returns the existing head instead).
    #[tracing::instrument(skip(self))]
    pub fn ensure_branch(&self, branch: &str, at: &str) -> Result<String, GitError> {
        let name = ref_name(branch)?;
        let at = self.commit_id(at)?;
        if let Some(head) = self.head_of(branch)? {
            return Ok(head.to_string());
        }
        match self.refs.reference(&name, to_git2(at)?, false, "swarm: create branch") {
            Ok(_) => Ok(at.to_string()),
            // Someone created it concurrently: report what is there, never overwrite.
            Err(e) if e.code() == git2::ErrorCode::Exists => self
                .head_of(branch)?
                .map(|h| h.to_string())
                .ok_or(GitError::Git2 { op: "create branch", source: e }),
            Err(e) => Err(GitError::Git2 { op: "create branch", source: e }),
        }
    }

    /// Merges `req.task_commit` into `req.integration_branch` in memory and moves the ref by
    /// compare-and-swap from `req.expected_head`.
    ///
    /// If the ref has moved to a head that contains `expected_head`, the result is rebuilt on the
    /// fresh head, up to the configured number of retries ([`MergeReport::cas_retries`]).
    /// Strategies: `Merge` makes a no-fast-forward merge commit (parents: head, task commit);
    /// `Squash` a single-parent commit with the merged tree and `req.summary` as message; `Rebase`
    /// replays each commit of the task's first-parent chain since it left the integration history.
    /// Every commit made carries the trailer `Swarm-Attempt: <req.attempt_label>`.
    /// Nothing is written to refs on error; conflicts name every conflicting path.
    ///
    /// The ref is committed by exchange, not by git's flushing rename: after a power loss (not a
    /// crash) it may come back empty or at an older head, which [`Integrator::repair_ref`] puts back
    /// at the head the caller recorded. Record each landed head durably.
    #[tracing::instrument(skip(self, req), fields(
        branch = %req.integration_branch, attempt = %req.attempt_label, strategy = ?req.strategy,
        task_commit = %req.task_commit,
    ))]
    pub fn integrate(&self, req: &MergeRequest) -> Result<MergeReport, MergeError> {
        let started = Instant::now();
        let name = ref_name(&req.integration_branch)?;
        check_label(&req.attempt_label)?;
        let expected = self.commit_id(&req.expected_head)?;
        let task = self.commit_id(&req.task_commit)?;
        self.check_forbidden(expected, task, &req.task_commit)?;

        let mut head = expected;
        let mut retries = 0u32;
        // Whatever an earlier failed call left in memory.
        self.repo.objects.reset_object_memory();
        let result = loop {
            if head != expected
                && let Some(landed) = self.landed_since(expected, head, &req.attempt_label)?
            {
                return Err(MergeError::AlreadyLanded {
                    branch: req.integration_branch.clone(),
                    attempt: req.attempt_label.clone(),
                    merge_commit: landed.to_string(),
                    head: head.to_string(),
                });
            }
            if self.is_ancestor_id(task, head)? {
                return Err(MergeError::AlreadyContained {
                    branch: req.integration_branch.clone(),
                    head: head.to_string(),
                    task_commit: req.task_commit.clone(),
                });
            }
            let result = match req.strategy {
                MergeStrategy::Merge | MergeStrategy::Squash => self.merge_onto(head, task, req)?,
                MergeStrategy::Rebase => self.rebase_onto(head, task, req)?,
            };
            self.persist(Some(result), false)?;
            #[cfg(test)]
            if let Some(hook) = self.before_cas.borrow_mut().as_mut() {
                hook();
            }
            let moved =
                match self.compare_and_swap(&name, head, result, &req.attempt_label, RefWrite::Exchange)? {
                    None => break result,
                    Some(Cas::MovedTo(found)) => found,
                    Some(Cas::Moved) => {
                        return Err(MergeError::Git(GitError::MissingBranch {
                            branch: req.integration_branch.clone(),
                        }));
                    }
                    Some(Cas::Locked(lock)) => {
                        return Err(MergeError::RefLocked { branch: req.integration_branch.clone(), lock });
                    }
                };
            if retries >= self.max_cas_retries {
                return Err(MergeError::CasFailed {
                    branch: req.integration_branch.clone(),
                    expected: head.to_string(),
                    found: Some(moved.to_string()),
                    retries,
                });
            }
            if !self.is_ancestor_id(expected, moved)? {
                return Err(MergeError::HeadRewound {
                    branch: req.integration_branch.clone(),
                    expected: expected.to_string(),
                    found: moved.to_string(),
                });
            }
            tracing::debug!(from = %head, to = %moved, "integration ref moved; rebuilding on the fresh head");
            retries += 1;
            head = moved;
        };
        let files_changed = self.changed_paths_ids(head, result)?;
        let report = MergeReport {
            strategy: req.strategy,
            base: head.to_string(),
            result: result.to_string(),
            files_changed,
            duration: started.elapsed(),
            cas_retries: retries,
        };
        tracing::info!(result = %report.result, files = report.files_changed.len(), retries, "integrated");
        Ok(report)
    }

    /// Walks `integration_branch`'s first-parent history (at most [`FIND_LANDED_LIMIT`] commits) for a
    /// commit carrying `Swarm-Attempt: <attempt_label>` and returns the newest such commit.
    #[tracing::instrument(skip(self), fields(branch = %integration_branch, attempt = %attempt_label))]
    pub fn find_landed(
        &self,
        integration_branch: &str,
        attempt_label: &str,
    ) -> Result<Option<String>, GitError> {
        check_label(attempt_label)?;
        let Some(head) = self.head_of(integration_branch)? else {
            return Err(GitError::MissingBranch { branch: integration_branch.to_string() });
        };
        Ok(self.with_trailer(head, None, attempt_label)?.map(|id| id.to_string()))
    }

    /// The commit after `since` on `head`'s first-parent chain that carries
    /// `label`'s trailer, if any: the attempt landed since `since` was read.
    /// Only the leader's merger moves an integration ref, so another
    /// landing of the same attempt is a deposed leader's last merge.
    pub(crate) fn landed_since(
        &self,
        since: gix::ObjectId,
        head: gix::ObjectId,
        label: &str,
    ) -> Result<Option<gix::ObjectId>, GitError> {
        self.with_trailer(head, Some(since), label)
    }

    /// The first commit on `from`'s first-parent chain, before `stop` and
    /// within [`FIND_LANDED_LIMIT`] commits, whose message carries the
    /// `Swarm-Attempt` trailer of `label`.
    fn with_trailer(
        &self,
        from: gix::ObjectId,
        stop: Option<gix::ObjectId>,
        label: &str,
    ) -> Result<Option<gix::ObjectId>, GitError> {
        let wanted = format!("{ATTEMPT_TRAILER}: {label}");
        let mut id = from;
        for _ in 0..FIND_LANDED_LIMIT {
            if Some(id) == stop {
                return Ok(None);
            }
            let commit = self.repo.find_commit(id).map_err(GitError::gix_any("read commit"))?;
            let message = commit.message_raw().map_err(GitError::gix_any("read commit message"))?;
            if message.lines().any(|line| line.trim_end() == wanted.as_bytes()) {
                return Ok(Some(id));
            }
            match commit.parent_ids().next() {
                Some(parent) => id = parent.detach(),
                None => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Paths changed between commits `base` and `commit`, sorted; a rename appears as both paths.
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn changed_paths(&self, base: &str, commit: &str) -> Result<Vec<String>, GitError> {
        let base = self.commit_id(base)?;
        let commit = self.commit_id(commit)?;
        self.changed_paths_ids(base, commit)
    }

    /// Fast-forwards branch `target` to commit `new_head`, only if target's head is an ancestor of
    /// `new_head` (a no-op if equal). Never forces; the ref moves by compare-and-swap.
    #[tracing::instrument(skip(self))]
    pub fn fast_forward(&self, target: &str, new_head: &str) -> Result<FastForward, MergeError> {
        let name = ref_name(target)?;
        let new = self.commit_id(new_head)?;
        let current =
            self.head_of(target)?.ok_or_else(|| GitError::MissingBranch { branch: target.to_string() })?;
        if current == new {
            return Ok(FastForward { old: current.to_string(), new: new.to_string() });
        }
        if !self.is_ancestor_id(current, new)? {
            return Err(MergeError::NotFastForward {
                target: target.to_string(),
                current: current.to_string(),
                new: new.to_string(),
            });
        }
        match self.compare_and_swap(&name, current, new, "fast-forward", RefWrite::Replace)? {
            None => Ok(FastForward { old: current.to_string(), new: new.to_string() }),
            Some(Cas::MovedTo(found)) => Err(MergeError::CasFailed {
                branch: target.to_string(),
                expected: current.to_string(),
                found: Some(found.to_string()),
                retries: 0,
            }),
            Some(Cas::Moved) => Err(MergeError::CasFailed {
                branch: target.to_string(),
                expected: current.to_string(),
                found: None,
                retries: 0,
            }),
            Some(Cas::Locked(lock)) => Err(MergeError::RefLocked { branch: target.to_string(), lock }),
        }
    }

    /// True if `ancestor` is an ancestor of, or equal to, `descendant`. Both must be existing commits.
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn is_ancestor(&self, ancestor: &str, descendant: &str) -> Result<bool, GitError> {
        let a = self.commit_id(ancestor)?;
        let d = self.commit_id(descendant)?;
        self.is_ancestor_id(a, d)
    }

    /// True if `id` names a commit in the repository (false if absent or another kind of object).
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn commit_exists(&self, id: &str) -> Result<bool, GitError> {
        let id = parse_commit_id(id)?;
        let header = self.repo.try_find_header(id).map_err(GitError::gix_any("read object header"))?;
        Ok(header.is_some_and(|h| h.kind() == gix::object::Kind::Commit))
    }

    // ---- internals ----

    fn head_of(&self, branch: &str) -> Result<Option<gix::ObjectId>, GitError> {
        let name = ref_name(branch)?;
        let reference = match self.refs.find_reference(&name) {
            Ok(r) => r,
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(GitError::Git2 { op: "read branch", source: e }),
        };
        let oid = reference.resolve().map_err(GitError::git2("resolve branch"))?.target();
        oid.map(|o| gix::ObjectId::try_from(o.as_bytes()).map_err(GitError::gix_any("convert object id")))
            .transpose()
    }

    /// Validates `id` and checks that it names an existing commit.
    pub(crate) fn commit_id(&self, id: &str) -> Result<gix::ObjectId, GitError> {
        let oid = parse_commit_id(id)?;
        // A commit the merge-base cache parsed: no header read (gix maps every loose object it
        // reads, and each unmap interrupts every CPU the controller runs on).
        if self.graph.borrow().knows(&oid) || self.commits.borrow().contains(&oid) {
            return Ok(oid);
        }
        match self.repo.try_find_header(oid).map_err(GitError::gix_any("read object header"))? {
            None => Err(GitError::MissingCommit { id: id.to_string() }),
            Some(h) if h.kind() != gix::object::Kind::Commit => {
                Err(GitError::NotACommit { id: id.to_string(), kind: h.kind().to_string() })
            }
            Some(_) => {
                let mut commits = self.commits.borrow_mut();
                if commits.len() >= MAX_KNOWN_COMMITS {
                    commits.clear();
                }
                commits.insert(oid);
                Ok(oid)
            }
        }
    }

    pub(crate) fn is_ancestor_id(
        &self,
        ancestor: gix::ObjectId,
        descendant: gix::ObjectId,
    ) -> Result<bool, GitError> {
        if ancestor == descendant {
            return Ok(true);
        }
        match self.graph.borrow_mut().merge_bases(&self.repo, ancestor, descendant)? {
            Bases::One(base) => Ok(base == ancestor),
            Bases::None => Ok(false),
            // Ambiguous (clock skew, criss-cross): ask libgit2, which removes redundant bases.
            Bases::Many => {
                // libgit2 reads the disk: it must see commits still in memory.
                self.persist(None, false)?;
                self.refs
                    .graph_descendant_of(to_git2(descendant)?, to_git2(ancestor)?)
                    .map_err(GitError::git2("ancestry check"))
            }
        }
    }

    fn tree_of(&self, commit: gix::ObjectId) -> Result<gix::ObjectId, GitError> {
        let commit = self.repo.find_commit(commit).map_err(GitError::gix_any("read commit"))?;
        Ok(commit.tree_id().map_err(GitError::gix_any("read commit tree"))?.detach())
    }

    fn changed_paths_ids(&self, base: gix::ObjectId, commit: gix::ObjectId) -> Result<Vec<String>, GitError> {
        let old = self.tree_of(base)?;
        let new = self.tree_of(commit)?;
        self.changed_paths_trees(old, new)
    }

    fn changed_paths_trees(&self, old: gix::ObjectId, new: gix::ObjectId) -> Result<Vec<String>, GitError> {
        if old == new {
            return Ok(Vec::new());
        }
        let old = self.repo.find_tree(old).map_err(GitError::gix_any("read tree"))?;
        let new = self.repo.find_tree(new).map_err(GitError::gix_any("read tree"))?;
        let mut changes = Vec::new();
        let mut caches = self.caches.borrow_mut();
        caches.diff.clear_resource_cache_keep_allocation();
        gix::diff::tree_with_rewrites(
            gix::objs::TreeRefIter::from_bytes(&old.data, old.id.kind()),
            gix::objs::TreeRefIter::from_bytes(&new.data, new.id.kind()),
            &mut caches.diff,
            &mut Default::default(),
            &self.repo.objects,
            |change: gix::diff::tree_with_rewrites::ChangeRef<'_>| -> Result<_, gix::Error> {
                changes.push(change.into_owned());
                Ok(std::ops::ControlFlow::Continue(()))
            },
            gix::diff::tree_with_rewrites::Options {
                location: Some(gix::diff::tree::recorder::Location::Path),
                rewrites: None,
            },
        )
        .map_err(GitError::gix_any("diff trees"))?;
        let mut paths = BTreeSet::new();
        for change in &changes {
            if change.entry_mode().is_tree() {
                continue;
            }
            paths.insert(change.location().to_str_lossy().into_owned());
            paths.insert(change.source_location().to_str_lossy().into_owned());
        }
        Ok(paths.into_iter().collect())
    }

    /// `.swarm/` must never reach the integration branch: refuse a task that changes it.
    fn check_forbidden(
        &self,
        head: gix::ObjectId,
        task: gix::ObjectId,
        task_hex: &str,
    ) -> Result<(), MergeError> {
        let swarm_entry = |commit: gix::ObjectId| -> Result<Option<gix::ObjectId>, GitError> {
            let tree = self.repo.find_tree(self.tree_of(commit)?).map_err(GitError::gix_any("read tree"))?;
            Ok(tree.find_entry(".swarm").map(|e| e.object_id()))
        };
        let task_entry = swarm_entry(task)?;
        if task_entry.is_none() || task_entry == swarm_entry(head)? {
            return Ok(());
        }
        let base = self.merge_base(head, task)?;
        if swarm_entry(base)? == task_entry {
            return Ok(());
        }
        let paths: Vec<String> = self
            .changed_paths_ids(base, task)?
            .into_iter()
            .filter(|p| p == ".swarm" || p.starts_with(".swarm/"))
            .collect();
        if paths.is_empty() {
            return Ok(());
        }
        Err(MergeError::ForbiddenPath { task_commit: task_hex.to_string(), paths })
    }

    fn merge_base(&self, a: gix::ObjectId, b: gix::ObjectId) -> Result<gix::ObjectId, GitError> {
        if let Bases::One(base) = self.graph.borrow_mut().merge_bases(&self.repo, a, b)? {
            return Ok(base);
        }
        self.repo
            .merge_base(a, b)
            .map_err(GitError::gix("merge base"))?
            .map(|id| id.detach())
            .ok_or_else(|| GitError::UnrelatedHistories { ours: a.to_string(), theirs: b.to_string() })
    }

    fn signature(&self) -> gix::actor::Signature {
        gix::actor::Signature {
            name: self.name.as_str().into(),
            email: self.email.as_str().into(),
            time: gix::date::Time::now_local_or_utc(),
        }
    }

    fn write_commit(
        &self,
        tree: gix::ObjectId,
        parents: &[gix::ObjectId],
        author: gix::actor::Signature,
        message: String,
    ) -> Result<gix::ObjectId, GitError> {
        let commit = gix::objs::Commit {
            tree,
            parents: parents.iter().copied().collect(),
            author,
            committer: self.signature(),
            encoding: None,
            message: message.into(),
            extra_headers: Vec::new(),
        };
        Ok(self.repo.write_object(&commit).map_err(GitError::gix_any("write commit"))?.detach())
    }

    /// Moves `name` from `old` to `new`. `Ok(None)` on success; `Ok(Some(..))` if the ref no longer
    /// points at `old` (or vanished). `RefWrite::Exchange` is for refs the caller can put back after a
    /// power loss (see `loose_ref.rs`); every other ref is committed by libgit2's rename.
    fn compare_and_swap(
        &self,
        name: &str,
        old: gix::ObjectId,
        new: gix::ObjectId,
        why: &str,
        write: RefWrite,
    ) -> Result<Option<Cas>, GitError> {
        let message = format!("swarm: {why}");
        if write == RefWrite::Exchange {
            match self.exchange_ref(name, old, new, &message)? {
                Exchange::Moved => return Ok(None),
                Exchange::Found(found) => return Ok(Some(Cas::MovedTo(found))),
                Exchange::Locked(lock) => return Ok(Some(Cas::Locked(lock))),
                Exchange::NotLoose => {}
            }
        }
        let lock = self.refs.commondir().join(format!("{name}.lock"));
        match self.refs.reference_matching(name, to_git2(new)?, true, to_git2(old)?, &message) {
            Ok(_) => Ok(None),
            // Told apart from a moved ref: the ref may still hold `old`, and retrying cannot help
            // while the lock is there.
            Err(e) if e.code() == git2::ErrorCode::Locked || lock.exists() => Ok(Some(Cas::Locked(lock))),
            Err(e) if matches!(e.code(), git2::ErrorCode::Modified | git2::ErrorCode::NotFound) => {
                let branch = name.trim_start_matches("refs/heads/");
                Ok(Some(match self.head_of(branch)? {
                    Some(found) => Cas::MovedTo(found),
                    None => Cas::Moved,
                }))
            }
            Err(e) => Err(GitError::Git2 { op: "update ref", source: e }),
        }
    }
}

/// Runs a gix merge, turning a panic inside gix (gix-merge has internal `debug_assert!`s that fire on
/// some rename corner cases in debug builds) into an error, so that one odd task never takes the
/// controller's integration thread down. gix's caches are content-addressed, so a half-finished call
/// leaves nothing inconsistent behind.
fn guarded<T>(op: &'static str, f: impl FnOnce() -> T) -> Result<T, GitError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        GitError::Gix { op, message: format!("gix panicked: {message}") }
    })
}

struct OwnedLabels {
    ours: String,
    theirs: String,
}

impl OwnedLabels {
    fn as_labels(&self) -> gix::merge::blob::builtin_driver::text::Labels<'_> {
        gix::merge::blob::builtin_driver::text::Labels {
            ancestor: Some(BStr::new("merge base")),
            current: Some(self.ours.as_str().into()),
            other: Some(self.theirs.as_str().into()),
        }
    }
}

fn labels(branch: &str, attempt: &str) -> OwnedLabels {
    OwnedLabels { ours: branch.to_string(), theirs: attempt.to_string() }
}

fn check_label(label: &str) -> Result<(), GitError> {
    let bad =
        |reason: &str| Err(GitError::InvalidLabel { label: label.to_string(), reason: reason.to_string() });
    if label.trim().is_empty() {
        return bad("must not be empty");
    }
    if label.chars().any(|c| c.is_control()) {
        return bad("must not contain control characters or newlines");
    }
    if label != label.trim() {
        return bad("must not start or end with whitespace");
    }
    Ok(())
}

/// `message` (or `fallback()` if blank) without old attempt trailers, plus our trailer.
fn with_trailer(message: &str, label: &str, fallback: impl FnOnce() -> String) -> String {
    let prefix = format!("{ATTEMPT_TRAILER}:");
    let kept: Vec<&str> = message.lines().filter(|l| !l.starts_with(&prefix)).collect();
    let mut body = kept.join("\n").trim().to_string();
    if body.is_empty() {
        body = fallback().trim().to_string();
    }
    if body.is_empty() {
        format!("{ATTEMPT_TRAILER}: {label}\n")
    } else {
        format!("{body}\n\n{ATTEMPT_TRAILER}: {label}\n")
    }
}

#[cfg(test)]
mod tests;

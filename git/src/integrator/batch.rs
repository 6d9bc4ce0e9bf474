//! Landing many task commits at once (a merge queue's backlog), and how merged objects reach the disk.
//!
//! Every merge writes its trees and commit to memory first. A single [`Integrator::integrate`]
//! persists them as loose objects just before its compare-and-swap; a batch merges each request onto
//! the previous one's result in memory, then writes every new object as one pack and moves the ref
//! once. On a real disk a merge's cost is file creation (loose objects, the ref lock, the reflog),
//! so a batch of N costs about what one merge does, plus the CPU of N merges.

use std::io::Write as _;
use std::time::Instant;

use gix::objs::Write as _;
use swarm_core::plan::MergeStrategy;

use super::{Cas, Integrator, MergeReport, MergeRequest, RefWrite, check_label};
use crate::{GitError, MergeError, ref_name};

/// Fewer new objects than this (a batch of ~15 merges) are written loose: a pack per small batch
/// would pile up packs that every object lookup has to consult (`git gc` folds them together).
const PACK_MIN_OBJECTS: usize = 64;

/// The outcome of [`Integrator::integrate_batch`].
#[derive(Debug)]
pub struct BatchReport {
    /// The integration head the batch was built on.
    pub base: String,
    /// The integration head after the batch (equal to `base` if nothing landed).
    pub head: String,
    /// One result per request, in order. A request that failed (conflict, already contained,
    /// forbidden path, ...) left the head where the previous request put it.
    pub results: Vec<Result<MergeReport, MergeError>>,
    /// How many times the ref had moved and the whole batch was rebuilt on the fresh head.
    pub cas_retries: u32,
}

impl Integrator {
    /// Lands `reqs` (all for the same integration branch) one after another, in memory, then moves the
    /// branch once by compare-and-swap, after writing every new object as one pack.
    ///
    /// Each request is merged onto the result of the ones before it, exactly as a sequence of
    /// [`Integrator::integrate`] calls would (same strategies, trailers, conflict reports); a request
    /// whose `expected_head` is not contained in the head it would land on fails with
    /// [`MergeError::HeadRewound`]. If the ref moved meanwhile, the whole batch is rebuilt on the
    /// fresh head (up to the configured retries). The error of the batch itself (a missing or locked
    /// branch, a failed write) means nothing landed.
    #[tracing::instrument(skip_all, fields(requests = reqs.len()))]
    pub fn integrate_batch(&self, reqs: &[MergeRequest]) -> Result<BatchReport, MergeError> {
        let Some(first) = reqs.first() else {
            return Err(GitError::Gix { op: "integrate batch", message: "no requests".into() }.into());
        };
        let branch = first.integration_branch.clone();
        let name = ref_name(&branch)?;
        let mut retries = 0u32;
        loop {
            let (start, head, results) = self.chain(&branch, reqs, retries)?;
            if head == start {
                return Ok(BatchReport {
                    base: start.to_string(),
                    head: head.to_string(),
                    results,
                    cas_retries: retries,
                });
            }
            self.persist(Some(head), true)?;
            match self.compare_and_swap(
                &name,
                start,
                head,
                &format!("{} merges", results.len()),
                RefWrite::Exchange,
            )? {
                None => {
                    tracing::info!(landed = results.iter().filter(|r| r.is_ok()).count(), head = %head, "batch integrated");
                    return Ok(BatchReport {
                        base: start.to_string(),
                        head: head.to_string(),
                        results,
                        cas_retries: retries,
                    });
                }
                Some(Cas::Locked(lock)) => return Err(MergeError::RefLocked { branch, lock }),
                Some(Cas::Moved) => return Err(GitError::MissingBranch { branch }.into()),
                Some(Cas::MovedTo(found)) => {
                    if retries >= self.max_cas_retries {
                        return Err(MergeError::CasFailed {
                            branch,
                            expected: start.to_string(),
                            found: Some(found.to_string()),
                            retries,
                        });
                    }
                    retries += 1;
                }
            }
        }
    }

    /// Merges `reqs` in order onto `branch`'s head, each onto the result of the ones before it, in
    /// memory (nothing persisted, no ref moved): the branch's head, the last result, and each
    /// request's report or error. Shared by the batch and the merge queue's speculation.
    pub(super) fn chain(
        &self,
        branch: &str,
        reqs: &[MergeRequest],
        cas_retries: u32,
    ) -> Result<Chain, MergeError> {
        let start =
            self.head_of(branch)?.ok_or_else(|| GitError::MissingBranch { branch: branch.to_string() })?;
        self.chain_onto(branch, start, reqs, cas_retries)
    }

    /// As [`Self::chain`], onto `start` (the branch's head, or a commit
    /// that contains it: a merge queue's speculation stacked on another's).
    pub(super) fn chain_onto(
        &self,
        branch: &str,
        start: gix::ObjectId,
        reqs: &[MergeRequest],
        cas_retries: u32,
    ) -> Result<Chain, MergeError> {
        self.repo.objects.reset_object_memory();
        let mut head = start;
        let mut results = Vec::with_capacity(reqs.len());
        for req in reqs {
            let started = Instant::now();
            if let Some(landed) = self.landed_before(start, req)? {
                results.push(Err(landed));
                continue;
            }
            match self.land_on(head, req, branch) {
                Ok(result) => {
                    let files_changed = self.changed_paths_ids(head, result)?;
                    results.push(Ok(MergeReport {
                        strategy: req.strategy,
                        base: head.to_string(),
                        result: result.to_string(),
                        files_changed,
                        duration: started.elapsed(),
                        cas_retries,
                    }));
                    head = result;
                }
                Err(e) => results.push(Err(e)),
            }
        }
        Ok((start, head, results))
    }

    /// A request formed on an older head than the chain's `start` (the ref
    /// moved since: a retry, or a deposed leader's merge) whose attempt
    /// landed in between: its error. Free when the head did not move.
    fn landed_before(
        &self,
        start: gix::ObjectId,
        req: &MergeRequest,
    ) -> Result<Option<MergeError>, MergeError> {
        let Ok(expected) = self.commit_id(&req.expected_head) else { return Ok(None) };
        if expected == start {
            return Ok(None);
        }
        check_label(&req.attempt_label)?;
        Ok(self.landed_since(expected, start, &req.attempt_label)?.map(|landed| MergeError::AlreadyLanded {
            branch: req.integration_branch.clone(),
            attempt: req.attempt_label.clone(),
            merge_commit: landed.to_string(),
            head: start.to_string(),
        }))
    }

    /// One request of a batch on `head`: the checks of `integrate`, then the strategy.
    pub(super) fn land_on(
        &self,
        head: gix::ObjectId,
        req: &MergeRequest,
        branch: &str,
    ) -> Result<gix::ObjectId, MergeError> {
        if req.integration_branch != branch {
            return Err(GitError::InvalidBranch {
                branch: req.integration_branch.clone(),
                reason: format!("a batch lands on {branch} only"),
            }
            .into());
        }
        check_label(&req.attempt_label)?;
        let expected = self.commit_id(&req.expected_head)?;
        let task = self.commit_id(&req.task_commit)?;
        if !self.is_ancestor_id(expected, head)? {
            return Err(MergeError::HeadRewound {
                branch: branch.to_string(),
                expected: expected.to_string(),
                found: head.to_string(),
            });
        }
        self.check_forbidden(head, task, &req.task_commit)?;
        if self.is_ancestor_id(task, head)? {
            return Err(MergeError::AlreadyContained {
                branch: branch.to_string(),
                head: head.to_string(),
                task_commit: req.task_commit.clone(),
            });
        }
        match req.strategy {
            MergeStrategy::Merge | MergeStrategy::Squash => self.merge_onto(head, task, req),
            MergeStrategy::Rebase => self.rebase_onto(head, task, req),
        }
    }

    /// Writes the objects merges left in memory that `tip` reaches (all of them for `None`) to the
    /// object database, skipping those it already has: loose, or as one pack when `pack` and there
    /// are enough of them. Scratch objects (the sparse merge's restricted trees, a failed merge's
    /// trees) are dropped. Must run before a ref moves to `tip` (libgit2 checks a ref's target).
    pub(super) fn persist(&self, tip: Option<gix::ObjectId>, pack: bool) -> Result<(), GitError> {
        let Some(memory) = self.repo.objects.reset_object_memory() else { return Ok(()) };
        let hash = self.repo.object_hash();
        let roots: Vec<gix::ObjectId> = match tip {
            Some(tip) => vec![tip],
            None => memory.keys().copied().collect(),
        };
        // Children before parents: the walk trusts an object found on disk
        // to be complete there, so a parent must never reach the disk before
        // what it names (a kill between two loose writes would otherwise
        // leave a tree whose subtrees the next persist skips for good).
        let mut new = Vec::new();
        let mut seen = gix::hashtable::HashSet::default();
        let mut stack: Vec<(gix::ObjectId, bool)> = roots.into_iter().map(|id| (id, false)).collect();
        while let Some((id, children_done)) = stack.pop() {
            if children_done {
                if let Some(entry) = memory.get_key_value(&id) {
                    new.push(entry);
                }
                continue;
            }
            if !seen.insert(id) {
                continue;
            }
            // Not in memory, or already on disk: complete there, with everything it reaches.
            let Some((_, (kind, data))) = memory.get_key_value(&id) else { continue };
            if self.disk.has_object(id) {
                continue;
            }
            stack.push((id, true));
            match kind {
                gix::object::Kind::Commit => {
                    let mut commit = gix::objs::CommitRefIter::from_bytes(data, hash);
                    stack.push((commit.tree_id().map_err(GitError::gix_any("decode commit"))?, false));
                    stack.extend(commit.parent_ids().map(|p| (p, false)));
                }
                gix::object::Kind::Tree => {
                    for e in gix::objs::TreeRefIter::from_bytes(data, hash) {
                        let e = e.map_err(GitError::gix_any("decode tree"))?;
                        if !e.mode.is_commit() {
                            stack.push((e.oid.to_owned(), false));
                        }
                    }
                }
                _ => {}
            }
        }
        if new.is_empty() {
            return Ok(());
        }
        if !pack || new.len() < PACK_MIN_OBJECTS {
            for (id, (kind, data)) in new {
                if let Some(files) = &self.object_files
                    && files.write(id, *kind, data)?
                {
                    continue;
                }
                let written =
                    self.disk.objects.write_buf(*kind, data).map_err(GitError::gix_any("write object"))?;
                debug_assert_eq!(written, *id);
            }
            return Ok(());
        }
        let bytes = pack_of(&new)?;
        let odb = self.refs.odb().map_err(GitError::git2("open object database"))?;
        let mut writer = odb.packwriter().map_err(GitError::git2("pack writer"))?;
        writer.write_all(&bytes).map_err(GitError::io("write pack"))?;
        writer.commit().map_err(GitError::git2("index pack"))?;
        tracing::debug!(objects = new.len(), bytes = bytes.len(), "merged objects written as one pack");
        Ok(())
    }
}

/// A chain of merges in memory: the branch's head it started from, its last result, and each
/// request's report or error.
pub(super) type Chain = (gix::ObjectId, gix::ObjectId, Vec<Result<MergeReport, MergeError>>);

/// A version-2 pack of whole (undeltified) objects.
fn pack_of(objects: &[(&gix::ObjectId, &(gix::object::Kind, Vec<u8>))]) -> Result<Vec<u8>, GitError> {
    let mut out = Vec::with_capacity(objects.iter().map(|(_, (_, d))| d.len() / 2 + 16).sum::<usize>() + 32);
    out.extend_from_slice(b"PACK");
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&(objects.len() as u32).to_be_bytes());
    for (_, (kind, data)) in objects {
        let kind: u8 = match kind {
            gix::object::Kind::Commit => 1,
            gix::object::Kind::Tree => 2,
            gix::object::Kind::Blob => 3,
            gix::object::Kind::Tag => 4,
        };
        // Type and size: 4 bits of size in the first byte, then 7 per byte.
        let mut size = data.len() as u64;
        let mut byte = (kind << 4) | (size & 0x0f) as u8;
        size >>= 4;
        while size > 0 {
            out.push(byte | 0x80);
            byte = (size & 0x7f) as u8;
            size >>= 7;
        }
        out.push(byte);
        let mut z = gix::zlib::stream::deflate::Write::new(&mut out, gix::zlib::Compression::BEST_SPEED);
        z.write_all(data).map_err(GitError::io("compress object"))?;
        z.flush().map_err(GitError::io("compress object"))?;
    }
    let mut hasher = gix::hash::hasher(gix::hash::Kind::Sha1);
    hasher.update(&out);
    let sum = hasher.try_finalize().map_err(GitError::gix_any("pack checksum"))?;
    out.extend_from_slice(sum.as_slice());
    Ok(out)
}

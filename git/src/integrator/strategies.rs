//! The strategies: merge and squash (one tree merge, or a sparse merge
//! when the task only adds or modifies paths), rebase (replaying each
//! commit), and the conflict report.

use std::collections::BTreeSet;

use gix::bstr::ByteSlice;
use gix::merge::tree::TreatAsUnresolved;
use swarm_core::plan::MergeStrategy;

use super::{
    Caches, Integrator, MAX_REBASE_COMMITS, MergeRequest, OwnedLabels, guarded, labels, with_trailer,
};
use crate::graph::Bases;
use crate::{ConflictPath, GitError, MergeError, SideChange};

impl Integrator {
    /// Merge or squash `task` onto `head`; returns the new commit (refs untouched).
    pub(super) fn merge_onto(
        &self,
        head: gix::ObjectId,
        task: gix::ObjectId,
        req: &MergeRequest,
    ) -> Result<gix::ObjectId, MergeError> {
        let labels = labels(&req.integration_branch, &req.attempt_label);
        let bases = self.graph.borrow_mut().merge_bases(&self.repo, head, task)?;
        let (tree, conflicts, base_tree) = match bases {
            Bases::None => {
                return Err(GitError::UnrelatedHistories {
                    ours: head.to_string(),
                    theirs: task.to_string(),
                }
                .into());
            }
            Bases::One(base) => {
                let (base_tree, ours_tree, theirs_tree) =
                    (self.tree_of(base)?, self.tree_of(head)?, self.tree_of(task)?);
                match self.sparse_merge(base_tree, ours_tree, theirs_tree, &labels)? {
                    Some(tree) => (tree, None, base_tree),
                    None => {
                        let (tree, conflicts) =
                            self.merge_trees(base_tree, ours_tree, theirs_tree, &labels)?;
                        (tree, conflicts, base_tree)
                    }
                }
            }
            Bases::Many => self.merge_commits_virtual(head, task, &labels)?,
        };
        if let Some(conflicts) = conflicts {
            let ours_tree = self.tree_of(head)?;
            let paths = self.conflict_paths(&conflicts, tree, base_tree, ours_tree)?;
            return Err(MergeError::Conflict {
                branch: req.integration_branch.clone(),
                head: head.to_string(),
                task_commit: req.task_commit.clone(),
                replaying: None,
                paths,
            });
        }
        let commit = match req.strategy {
            MergeStrategy::Squash => {
                let message = with_trailer(&req.summary, &req.attempt_label, || req.title.clone());
                self.write_commit(tree, &[head], self.signature(), message)?
            }
            _ => {
                let subject = format!("Merge task {:?} ({})", req.title.trim(), req.attempt_label);
                let body = if req.summary.trim().is_empty() {
                    subject
                } else {
                    format!("{subject}\n\n{}", req.summary.trim())
                };
                let message = with_trailer(&body, &req.attempt_label, String::new);
                self.write_commit(tree, &[head, task], self.signature(), message)?
            }
        };
        Ok(commit)
    }

    /// Replays the task's first-parent chain (oldest first) onto `head`; returns the last new commit.
    pub(super) fn rebase_onto(
        &self,
        head: gix::ObjectId,
        task: gix::ObjectId,
        req: &MergeRequest,
    ) -> Result<gix::ObjectId, MergeError> {
        // Ensure there is common history at all, for a clear error.
        self.merge_base(head, task)?;
        let mut chain = Vec::new();
        let mut cursor = task;
        while !self.is_ancestor_id(cursor, head)? {
            if chain.len() >= MAX_REBASE_COMMITS {
                return Err(GitError::Gix {
                    op: "rebase",
                    message: format!("task {task} has more than {MAX_REBASE_COMMITS} commits to replay"),
                }
                .into());
            }
            chain.push(cursor);
            let commit = self.repo.find_commit(cursor).map_err(GitError::gix_any("read commit"))?;
            match commit.parent_ids().next() {
                Some(parent) => cursor = parent.detach(),
                None => break,
            }
        }
        chain.reverse();

        let labels = labels(&req.integration_branch, &req.attempt_label);
        let mut tip = head;
        let mut tip_tree = self.tree_of(head)?;
        for original in chain {
            let commit = self.repo.find_commit(original).map_err(GitError::gix_any("read commit"))?;
            let decoded = commit.decode().map_err(GitError::gix_any("decode commit"))?;
            let owned = decoded.to_owned().map_err(GitError::gix_any("decode commit"))?;
            let parent_tree = match owned.parents.first() {
                Some(parent) => self.tree_of(*parent)?,
                None => gix::ObjectId::empty_tree(self.repo.object_hash()),
            };
            let (tree, conflicts) = self.merge_trees(parent_tree, tip_tree, owned.tree, &labels)?;
            if let Some(conflicts) = conflicts {
                let paths = self.conflict_paths(&conflicts, tree, parent_tree, tip_tree)?;
                return Err(MergeError::Conflict {
                    branch: req.integration_branch.clone(),
                    head: head.to_string(),
                    task_commit: req.task_commit.clone(),
                    replaying: Some(original.to_string()),
                    paths,
                });
            }
            let message =
                with_trailer(&owned.message.to_str_lossy(), &req.attempt_label, || req.title.clone());
            tip = self.write_commit(tree, &[tip], owned.author, message)?;
            tip_tree = tree;
        }
        Ok(tip)
    }

    /// Fast path for the common case: the task touched a few paths, none deleted.
    ///
    /// gix diffs base→ours in full, and in a merge queue "ours" drifts further from the tasks' fork
    /// point with every landing (1,000 landings = 1,000 changed paths to diff on every merge). Like
    /// merge-ort's trivial directory resolution, everything the task did not touch is taken from ours:
    /// the merge runs on trees restricted to the task's paths (kept in memory) and the result is
    /// grafted onto ours. Returns `None` (use the full merge) whenever that could differ from a full
    /// merge: the task deletes something (a possible rename source), a path changes type, or the
    /// restricted merge reports any conflict, even an auto-resolved one (renames by ours out of the
    /// task's paths show up there as modify/delete).
    pub(super) fn sparse_merge(
        &self,
        base_tree: gix::ObjectId,
        ours_tree: gix::ObjectId,
        theirs_tree: gix::ObjectId,
        labels: &OwnedLabels,
    ) -> Result<Option<gix::ObjectId>, GitError> {
        const SPARSE_LIMIT: usize = 256;
        let paths = self.changed_paths_trees(base_tree, theirs_tree)?;
        if paths.is_empty() || paths.len() > SPARSE_LIMIT {
            return Ok(None);
        }
        // Scratch objects stay in memory: `persist` writes only what the result reaches.
        let mem = &self.repo;
        let base = mem.find_tree(base_tree).map_err(GitError::gix_any("read tree"))?;
        let ours = mem.find_tree(ours_tree).map_err(GitError::gix_any("read tree"))?;
        let theirs = mem.find_tree(theirs_tree).map_err(GitError::gix_any("read tree"))?;
        type Found = Option<Option<(gix::object::tree::EntryKind, gix::ObjectId)>>;
        let blob_at = |tree: &gix::Tree<'_>, path: &str| -> Result<Found, GitError> {
            // Some(None): absent; Some(Some(e)): a blob/link/submodule; None: a tree or below a non-tree.
            match tree.lookup_entry_by_path(path).map_err(GitError::gix_any("look up path"))? {
                Some(e) if e.mode().is_tree() => Ok(None),
                Some(e) => Ok(Some(Some((e.mode().kind(), e.object_id())))),
                None => {
                    let mut prefix = String::new();
                    for component in path.split('/') {
                        if !prefix.is_empty() {
                            prefix.push('/');
                        }
                        prefix.push_str(component);
                        if prefix.len() == path.len() {
                            break;
                        }
                        match tree.lookup_entry_by_path(&prefix).map_err(GitError::gix_any("look up path"))? {
                            Some(e) if !e.mode().is_tree() => return Ok(None),
                            Some(_) => {}
                            None => break,
                        }
                    }
                    Ok(Some(None))
                }
            }
        };
        let mut restricted = Vec::with_capacity(3);
        for (side, tree) in [("base", &base), ("ours", &ours), ("theirs", &theirs)] {
            let mut editor = mem.empty_tree().edit().map_err(GitError::gix_any("edit tree"))?;
            for path in &paths {
                match blob_at(tree, path)? {
                    None => return Ok(None),
                    Some(None) if side == "theirs" => return Ok(None), // the task deletes: full merge
                    Some(None) => {}
                    Some(Some((kind, id))) => {
                        editor.upsert(path.as_str(), kind, id).map_err(GitError::gix_any("edit tree"))?;
                    }
                }
            }
            restricted.push(editor.write().map_err(GitError::gix_any("write tree"))?.detach());
        }
        let mut caches = self.caches.borrow_mut();
        let Caches { diff, merge } = &mut *caches;
        diff.clear_resource_cache_keep_allocation();
        let merged = guarded("merge trees", || {
            gix::merge::plumbing::tree(
                &restricted[0],
                &restricted[1],
                &restricted[2],
                labels.as_labels(),
                mem,
                |buf| self.repo.write_blob(buf).map(|id| id.detach()),
                &mut Default::default(),
                diff,
                merge,
                self.merge_options.clone().into(),
            )
        })?;
        let mut outcome = merged.map_err(GitError::gix_any("merge trees"))?;
        drop(caches);
        if !outcome.conflicts.is_empty() {
            return Ok(None);
        }
        let merged_tree = outcome
            .tree
            .write(|t| mem.write_object(t).map(|id| id.detach()))
            .map_err(GitError::gix_any("write merged tree"))?;
        let merged_tree = mem.find_tree(merged_tree).map_err(GitError::gix_any("read tree"))?;
        let mut editor = self.repo.edit_tree(ours_tree).map_err(GitError::gix_any("edit tree"))?;
        for path in &paths {
            match merged_tree
                .lookup_entry_by_path(path.as_str())
                .map_err(GitError::gix_any("look up path"))?
            {
                Some(e) => editor.upsert(path.as_str(), e.mode().kind(), e.object_id()),
                None => editor.remove(path.as_str()),
            }
            .map_err(GitError::gix_any("edit tree"))?;
        }
        Ok(Some(editor.write().map_err(GitError::gix_any("write tree"))?.detach()))
    }

    /// Three-way tree merge with the cached resource caches. Returns the written tree and, if there
    /// are unresolved conflicts (as git counts them), the conflicts.
    pub(super) fn merge_trees(
        &self,
        base_tree: gix::ObjectId,
        ours_tree: gix::ObjectId,
        theirs_tree: gix::ObjectId,
        labels: &OwnedLabels,
    ) -> Result<(gix::ObjectId, Option<Vec<gix::merge::tree::Conflict>>), GitError> {
        let mut caches = self.caches.borrow_mut();
        let Caches { diff, merge } = &mut *caches;
        diff.clear_resource_cache_keep_allocation();
        let merged = guarded("merge trees", || {
            gix::merge::plumbing::tree(
                &base_tree,
                &ours_tree,
                &theirs_tree,
                labels.as_labels(),
                &self.repo,
                |buf| self.repo.write_blob(buf).map(|id| id.detach()),
                &mut Default::default(),
                diff,
                merge,
                self.merge_options.clone().into(),
            )
        })?;
        let mut outcome = merged.map_err(GitError::gix_any("merge trees"))?;
        drop(caches);
        let tree = outcome
            .tree
            .write(|t| self.repo.write_object(t).map(|id| id.detach()))
            .map_err(GitError::gix_any("write merged tree"))?;
        let conflicted = outcome.has_unresolved_conflicts(TreatAsUnresolved::git());
        Ok((tree, conflicted.then_some(outcome.conflicts)))
    }

    /// Criss-cross histories: let gix find all merge bases and merge them into a virtual one.
    /// Returns the merged tree, the unresolved conflicts if any, and the (virtual) base tree.
    #[allow(clippy::type_complexity)]
    pub(super) fn merge_commits_virtual(
        &self,
        head: gix::ObjectId,
        task: gix::ObjectId,
        labels: &OwnedLabels,
    ) -> Result<(gix::ObjectId, Option<Vec<gix::merge::tree::Conflict>>, gix::ObjectId), GitError> {
        let graph_cache = self.repo.commit_graph_if_enabled().map_err(GitError::gix("commit graph"))?;
        let mut graph = self.repo.revision_graph(graph_cache.as_ref());
        let mut caches = self.caches.borrow_mut();
        let Caches { diff, merge } = &mut *caches;
        diff.clear_resource_cache_keep_allocation();
        let options: gix::merge::commit::Options = self.merge_options.clone().into();
        let merged = guarded("merge commits", || {
            gix::merge::plumbing::commit(
                head,
                task,
                labels.as_labels(),
                &mut graph,
                diff,
                merge,
                &self.repo,
                &mut |id| id.to_hex_with_len(7).to_string(),
                options.into(),
            )
        })?;
        let mut outcome = merged.map_err(GitError::gix_any("merge commits"))?;
        drop(caches);
        let tree = outcome
            .tree_merge
            .tree
            .write(|t| self.repo.write_object(t).map(|id| id.detach()))
            .map_err(GitError::gix_any("write merged tree"))?;
        let conflicted = outcome.tree_merge.has_unresolved_conflicts(TreatAsUnresolved::git());
        Ok((tree, conflicted.then_some(outcome.tree_merge.conflicts), outcome.merge_base_tree_id))
    }

    /// The paths git would leave conflicted in the index (stage > 0), with what our side did to each.
    pub(super) fn conflict_paths(
        &self,
        conflicts: &[gix::merge::tree::Conflict],
        merged_tree: gix::ObjectId,
        base_tree: gix::ObjectId,
        ours_tree: gix::ObjectId,
    ) -> Result<Vec<ConflictPath>, GitError> {
        let mut index = gix::index::State::from_tree(
            &merged_tree,
            &self.repo.objects,
            gix::validate::path::component::Options::default(),
        )
        .map_err(GitError::gix_any("index from merged tree"))?;
        gix::merge::tree::apply_index_entries(
            conflicts,
            TreatAsUnresolved::git(),
            &mut index,
            gix::merge::tree::apply_index_entries::RemovalMode::Mark,
        );
        let mut paths = BTreeSet::new();
        for entry in index.entries() {
            if entry.stage() != gix::index::entry::Stage::Unconflicted
                && !entry.flags.contains(gix::index::entry::Flags::REMOVE)
            {
                paths.insert(entry.path(&index).to_str_lossy().into_owned());
            }
        }
        if paths.is_empty() {
            // Defensive: conflicts that left no index entries still name their locations.
            for c in conflicts.iter().filter(|c| c.is_unresolved(TreatAsUnresolved::git())) {
                paths.insert(c.ours.location().to_str_lossy().into_owned());
                paths.insert(c.theirs.location().to_str_lossy().into_owned());
            }
        }
        let base = self.repo.find_tree(base_tree).map_err(GitError::gix_any("read tree"))?;
        let ours = self.repo.find_tree(ours_tree).map_err(GitError::gix_any("read tree"))?;
        let lookup = |tree: &gix::Tree<'_>, path: &str| -> Result<Option<(gix::ObjectId, u16)>, GitError> {
            Ok(tree
                .lookup_entry_by_path(path)
                .map_err(GitError::gix_any("look up path"))?
                .map(|e| (e.object_id(), e.mode().value())))
        };
        paths
            .into_iter()
            .map(|path| {
                let ours_change = match (lookup(&base, &path)?, lookup(&ours, &path)?) {
                    (None, Some(_)) => SideChange::Added,
                    (Some(_), None) => SideChange::Deleted,
                    (Some(b), Some(o)) if b != o => SideChange::Modified,
                    _ => SideChange::Unchanged,
                };
                Ok(ConflictPath { path, ours: ours_change })
            })
            .collect()
    }
}

//! Speculative merges for a merge queue: a batch of task results merged onto
//! the integration head and written to the object database, with no ref
//! moved, so that the merged commit can be checked out and verified first;
//! then one compare-and-swap lands exactly the commit that was verified.

use super::{Cas, Integrator, MergeReport, MergeRequest, RefWrite};
use crate::{GitError, MergeError, ref_name};

/// The outcome of [`Integrator::speculate`].
#[derive(Debug)]
pub struct Speculation {
    /// The integration head the batch was merged onto.
    pub base: String,
    /// The merged commit (equal to `base` if no request merged).
    pub head: String,
    /// One result per request, in order; a failed request (a conflict, a
    /// forbidden path, ...) left the chain where the previous one put it.
    pub results: Vec<Result<MergeReport, MergeError>>,
}

impl Integrator {
    /// Merges `reqs` (all for `branch`) one after another onto the branch's
    /// head in memory, exactly as [`Integrator::integrate_batch`] would, and
    /// writes every new object to the object database; the branch does not
    /// move. Each request's `expected_head` must be contained in the head.
    #[tracing::instrument(skip_all, fields(branch, requests = reqs.len()))]
    pub fn speculate(&self, branch: &str, reqs: &[MergeRequest]) -> Result<Speculation, MergeError> {
        self.speculate_onto(branch, None, reqs)
    }

    /// As [`Self::speculate`], onto `onto` when given: the merged commit of
    /// a speculation still under verification, which must contain the
    /// branch's head (else the queue is behind the branch and must start
    /// over). The result lands only after `onto` has.
    pub fn speculate_onto(
        &self,
        branch: &str,
        onto: Option<&str>,
        reqs: &[MergeRequest],
    ) -> Result<Speculation, MergeError> {
        let (start, head, results) = match onto {
            None => self.chain(branch, reqs, 0)?,
            Some(onto) => {
                let onto = self.commit_id(onto)?;
                let head = self
                    .head_of(branch)?
                    .ok_or_else(|| GitError::MissingBranch { branch: branch.to_string() })?;
                if !self.is_ancestor_id(head, onto)? {
                    return Err(MergeError::NotFastForward {
                        target: branch.to_string(),
                        current: head.to_string(),
                        new: onto.to_string(),
                    });
                }
                self.chain_onto(branch, onto, reqs, 0)?
            }
        };
        // Written now: a sidecar checks the commit out before the ref moves.
        self.persist(Some(head), true)?;
        Ok(Speculation { base: start.to_string(), head: head.to_string(), results })
    }

    /// Moves `branch` from `expected` to `new` by one compare-and-swap;
    /// `new` must contain `expected`. Nothing is retried: a moved ref means
    /// the speculation was built on a stale head and must be redone. `branch` is an integration
    /// branch: like [`Integrator::integrate`], this commits the ref by exchange, which a power loss
    /// can undo ([`Integrator::repair_ref`]).
    #[tracing::instrument(skip(self))]
    pub fn advance(&self, branch: &str, expected: &str, new: &str, why: &str) -> Result<(), MergeError> {
        let name = ref_name(branch)?;
        let old = self.commit_id(expected)?;
        let to = self.commit_id(new)?;
        if !self.is_ancestor_id(old, to)? {
            return Err(MergeError::NotFastForward {
                target: branch.to_string(),
                current: expected.to_string(),
                new: new.to_string(),
            });
        }
        match self.compare_and_swap(&name, old, to, why, RefWrite::Exchange)? {
            None => Ok(()),
            Some(Cas::Locked(lock)) => Err(MergeError::RefLocked { branch: branch.to_string(), lock }),
            Some(Cas::Moved) => Err(GitError::MissingBranch { branch: branch.to_string() }.into()),
            Some(Cas::MovedTo(found)) => Err(MergeError::CasFailed {
                branch: branch.to_string(),
                expected: expected.to_string(),
                found: Some(found.to_string()),
                retries: 0,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use swarm_core::plan::MergeStrategy;
    use swarm_tests::TempRepo;

    use super::*;

    fn request(branch: &str, head: &str, commit: &str, label: &str) -> MergeRequest {
        MergeRequest {
            integration_branch: branch.into(),
            expected_head: head.into(),
            task_commit: commit.into(),
            strategy: MergeStrategy::Merge,
            attempt_label: label.into(),
            title: label.into(),
            summary: String::new(),
        }
    }

    /// A repository with branch `integ` at its base, and two task commits
    /// on the base adding a.txt and b.txt: (repo, base, a, b).
    fn two_tasks() -> (TempRepo, String, String, String) {
        let repo = TempRepo::with_files(&[]);
        let base = repo.head("main");
        repo.set_branch("integ", &base);
        let a = repo.commit(Some(&base), &[("a.txt", "a\n")], "a");
        let b = repo.commit(Some(&base), &[("b.txt", "b\n")], "b");
        (repo, base, a, b)
    }

    #[test]
    fn speculation_writes_the_merged_commit_and_moves_no_ref_until_advanced() {
        let (repo, base, a, b) = two_tasks();
        let integrator = Integrator::open(repo.path()).expect("open");
        let reqs = [request("integ", &base, &a, "s/a#1"), request("integ", &base, &b, "s/b#1")];
        let spec = integrator.speculate("integ", &reqs).expect("speculate");
        assert_eq!(spec.base, base);
        assert!(spec.results.iter().all(|r| r.is_ok()));
        assert_eq!(integrator.branch_head("integ").expect("head"), Some(base.clone()), "no ref moved");
        // The objects are on disk: git itself can read the merged tree.
        let files = repo.git(&["ls-tree", "--name-only", &spec.head]);
        assert!(files.contains("a.txt") && files.contains("b.txt"), "{files}");
        integrator.advance("integ", &base, &spec.head, "2 verified merges").expect("advance");
        assert_eq!(integrator.branch_head("integ").expect("head"), Some(spec.head.clone()));
        // The trailer search finds each landed attempt.
        assert!(integrator.find_landed("integ", "s/b#1").expect("find").is_some());
        // A second advance from the old head is refused: the ref moved.
        let err = integrator.advance("integ", &base, &spec.head, "again").expect_err("moved");
        assert!(matches!(err, MergeError::CasFailed { .. }), "{err}");
    }

    #[test]
    fn a_speculation_stacked_on_another_lands_only_after_it() {
        let (repo, base, a, b) = two_tasks();
        let integrator = Integrator::open(repo.path()).expect("open");
        let first = integrator.speculate("integ", &[request("integ", &base, &a, "s/a#1")]).expect("first");
        let second = integrator
            .speculate_onto("integ", Some(&first.head), &[request("integ", &first.head, &b, "s/b#1")])
            .expect("stacked");
        assert_eq!(second.base, first.head);
        let files = repo.git(&["ls-tree", "--name-only", &second.head]);
        assert!(files.contains("a.txt") && files.contains("b.txt"), "{files}");
        // The second cannot land before the first: its base is not the head.
        let err = integrator.advance("integ", &second.base, &second.head, "early").expect_err("not yet");
        assert!(matches!(err, MergeError::CasFailed { .. }), "{err}");
        integrator.advance("integ", &first.base, &first.head, "first").expect("first lands");
        integrator.advance("integ", &second.base, &second.head, "second").expect("then the second");
        // Stacking on a commit the branch is not in is refused.
        let stray = repo.commit(Some(&base), &[("c.txt", "c\n")], "c");
        let err = integrator.speculate_onto("integ", Some(&stray), &[]).expect_err("behind the branch");
        assert!(matches!(err, MergeError::NotFastForward { .. }), "{err}");
    }
}

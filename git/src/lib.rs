//! swarm's git engine: the controller's merge integration and the pack transfer for remote sidecars.
//!
//! # Integration
//!
//! [`Integrator`] lands a task's result commit on the swarm's integration branch without a work tree:
//! the tree merge runs in memory with gix (merge-ort-like, ~0.3 ms on a 10k-file repository), the
//! commit is written to the object database and the branch moves by compare-and-swap (by exchange of
//! a recycled lock file, `loose_ref.rs`). One `Integrator` owns its repository handles and is `Send`
//! but not `Sync`; the controller keeps it on a dedicated blocking thread.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use swarm_git::{Integrator, MergeRequest, MergeError};
//! use swarm_core::plan::MergeStrategy;
//! let integrator = Integrator::open(std::path::Path::new("/srv/repo"))?;
//! let head = integrator.ensure_branch("swarm/auth/integration", "4b825dc642cb6eb9a060e54bf8d69288fbee4904")?;
//! let req = MergeRequest {
//!     integration_branch: "swarm/auth/integration".into(),
//!     expected_head: head,
//!     task_commit: "0123456789abcdef0123456789abcdef01234567".into(),
//!     strategy: MergeStrategy::Merge,
//!     attempt_label: "auth/api#2".into(),
//!     title: "API endpoints".into(),
//!     summary: "Adds the login endpoint.".into(),
//! };
//! match integrator.integrate(&req) {
//!     Ok(report) => println!("landed {} ({} files)", report.result, report.files_changed.len()),
//!     Err(MergeError::Conflict { paths, .. }) => println!("conflict in {paths:?}"),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok(()) }
//! ```
//!
//! API in one place:
//!
//! - [`Integrator::open`], [`Integrator::with_identity`], [`Integrator::with_max_cas_retries`]
//! - [`Integrator::branch_head`], [`Integrator::ensure_branch`] (never moves an existing branch)
//! - [`Integrator::integrate`] (`Merge`: no-ff merge commit; `Squash`: one commit with the summary;
//!   `Rebase`: replays the task's first-parent chain) → [`MergeReport`] or [`MergeError`]
//! - [`Integrator::integrate_batch`]: a merge queue's backlog in memory, one pack, one ref update
//! - [`Integrator::find_landed`]: crash recovery, finds the commit with `Swarm-Attempt: <label>`
//! - [`Integrator::changed_paths`], [`Integrator::is_ancestor`], [`Integrator::commit_exists`]
//! - [`Integrator::fast_forward`]: lands the integration branch on a target branch, never forcing
//! - [`Integrator::repair_ref`]: after a power loss, puts an integration ref left empty back at the
//!   head the caller recorded (integration refs are committed by exchange, see `loose_ref.rs`)
//! - [`Integrator::remove_stale_ref_lock`]: removes a `<ref>.lock` left by a killed process (the
//!   caller decides which refs it owns); a lock is reported as [`MergeError::RefLocked`]
//! - [`paths_outside`]: ownership globs
//! - [`merge::MergeService`]: the controller's merge service on top of all this: a
//!   [`merge::MergeJob`] in, a typed [`merge::Verdict`] out (with [`merge::MergeStats`]); merge-queue
//!   speculation and landing; stale integration-ref locks and ref repair
//! - [`build_pack`] / [`receive_pack`]: object transfer as git packs
//!
//! # Performance notes
//!
//! - gix's resource caches (attributes, merge drivers) are built once in [`Integrator::open`], so
//!   `.gitattributes` changes take effect for a new `Integrator`.
//! - Merge bases come from a cache of parsed commits kept by the `Integrator` (git's date-ordered
//!   walk); criss-cross histories fall back to gix's virtual merge base.
//! - A task that only adds or modifies a few paths is merged on trees restricted to those paths and
//!   grafted onto the integration tree (merge-ort's "trivial directory resolution"); deletions and
//!   any conflict take the full gix merge. The differential test checks both paths against git.
//! - The cost of a merge on a real disk is dominated by file creation (one loose object per new
//!   commit/tree; the ref's lock file is recycled, not created):
//!   `cargo bench -p swarm-git --bench integrate -- --dir /dev/shm`
//!   shows the CPU side.
//!
//! # Differences from `git merge`
//!
//! - No directory-rename detection (gix does not implement it): git would move a file the task
//!   added into a directory the integration branch renamed wholesale (and report a conflict by
//!   default); the integrator leaves it where the task put it.
//!
//! # Invariants
//!
//! - Refs only move by compare-and-swap from a value the caller (or a retry) observed; nothing here
//!   force-updates a ref, and an integration ref never moves to a commit that lacks the expected head.
//! - Every commit the integrator writes carries the trailer `Swarm-Attempt: <swarm>/<task>#<n>`.
//! - A task commit that changes `.swarm/` is refused ([`MergeError::ForbiddenPath`]).
//! - Ids are full 40-hex commit ids ([`swarm_core::names::check_commit`]); branch names are short
//!   names ([`swarm_core::names::check_branch`]); invalid input is an error naming it, never a panic.

mod error;
mod graph;
mod integrator;
mod locks;
mod loose_ref;
pub mod merge;
mod object_files;
mod ownership;
mod pack;
mod swap_file;
mod worktrees;

pub use error::{ConflictPath, GitError, MergeError, SideChange};
pub use integrator::{
    ATTEMPT_TRAILER, BatchReport, DEFAULT_MAX_CAS_RETRIES, FIND_LANDED_LIMIT, FastForward, Integrator,
    MergeReport, MergeRequest, Speculation,
};
pub use locks::RefLock;
pub use loose_ref::RefRepair;
pub use ownership::paths_outside;
pub use pack::{build_pack, receive_pack, receive_pack_file};
pub use swarm_core::plan::MergeStrategy;
pub use worktrees::checked_out_in;

/// Validates a full hex commit id and parses it.
pub(crate) fn parse_commit_id(id: &str) -> Result<gix::ObjectId, GitError> {
    swarm_core::names::check_commit(id)
        .map_err(|reason| GitError::InvalidCommitId { id: id.to_string(), reason })?;
    gix::ObjectId::from_hex(id.as_bytes())
        .map_err(|e| GitError::InvalidCommitId { id: id.to_string(), reason: e.to_string() })
}

/// Validates a short branch name and returns its full ref name.
pub(crate) fn ref_name(branch: &str) -> Result<String, GitError> {
    swarm_core::names::check_branch(branch)
        .map_err(|reason| GitError::InvalidBranch { branch: branch.to_string(), reason })?;
    Ok(format!("refs/heads/{branch}"))
}

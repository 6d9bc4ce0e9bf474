//! Ownership checks: which changed paths fall outside a task's owned globs.

use swarm_core::globs::OwnedGlobs;

use crate::GitError;

/// Returns the paths in `paths` matched by none of `globs`, in input order,
/// with the meaning [`OwnedGlobs`] gives them everywhere: globset syntax with
/// `literal_separator` (`src/*` matches `src/a` but not `src/a/b`; `**`
/// crosses directories); a glob ending in `/` (`docs/`) means everything
/// below that directory. An empty `globs` owns nothing.
#[tracing::instrument(level = "debug", skip_all, fields(globs = globs.len(), paths = paths.len()))]
pub fn paths_outside(globs: &[String], paths: &[String]) -> Result<Vec<String>, GitError> {
    let owned =
        OwnedGlobs::new(globs).map_err(|e| GitError::InvalidGlob { glob: e.glob, message: e.message })?;
    Ok(owned.outside(paths).into_iter().cloned().collect())
}

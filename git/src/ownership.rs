//! Ownership checks: which changed paths fall outside a task's owned globs.

use globset::{GlobBuilder, GlobSetBuilder};

use crate::GitError;

/// Returns the paths in `paths` matched by none of `globs`, in input order.
///
/// Globs use [`globset`] syntax with `literal_separator`: `src/*` matches `src/a` but not `src/a/b`;
/// `**` crosses directories (`src/**` matches everything below `src/`). A glob ending in `/`
/// (`docs/`) means everything below that directory. An empty `globs` owns nothing.
#[tracing::instrument(level = "debug", skip_all, fields(globs = globs.len(), paths = paths.len()))]
pub fn paths_outside(globs: &[String], paths: &[String]) -> Result<Vec<String>, GitError> {
    let mut builder = GlobSetBuilder::new();
    for glob in globs {
        let pattern = if glob.ends_with('/') { format!("{glob}**") } else { glob.clone() };
        let compiled = GlobBuilder::new(&pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| GitError::InvalidGlob { glob: glob.clone(), message: e.to_string() })?;
        builder.add(compiled);
    }
    let set = builder
        .build()
        .map_err(|e| GitError::InvalidGlob { glob: globs.join(","), message: e.to_string() })?;
    Ok(paths.iter().filter(|p| !set.is_match(p.as_str())).cloned().collect())
}

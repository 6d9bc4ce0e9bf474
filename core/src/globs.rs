//! A task's owned globs, with one meaning everywhere they are read: the
//! scheduler's check that two running tasks never own a common path, the
//! integrator's check that a result stays inside its task's globs, and the
//! agent permission policy that refuses an edit outside them.
//!
//! Syntax is [`globset`]'s with `literal_separator`: `src/*` matches `src/a`
//! but not `src/a/b`, `**` crosses directories, and a glob ending in `/`
//! (`docs/`) owns everything below that directory.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// The characters that make a glob more than a plain path.
const WILDCARDS: [char; 4] = ['*', '?', '[', '{'];

/// Compiled owned globs.
#[derive(Debug, Clone)]
pub struct OwnedGlobs {
    /// As the plan wrote them, for messages.
    text: Vec<String>,
    /// Globs without wildcards: paths compared as text.
    literals: Vec<String>,
    /// For each wildcard glob, the literal text before its first wildcard
    /// (`src/api/` for `src/api/**/*.rs`, `docs/` for `docs/`): every path
    /// it matches starts with it.
    prefixes: Vec<String>,
    /// Only built when there are wildcard globs: a GlobSet costs about a
    /// kilobyte, and most tasks of a big plan own plain paths.
    set: GlobSet,
    /// Owns every path (see [`OwnedGlobs::everything`]).
    everything: bool,
}

/// Why a glob cannot be owned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("owned glob {glob:?}: {message}")]
pub struct GlobError {
    pub glob: String,
    pub message: String,
}

impl OwnedGlobs {
    pub fn new(globs: &[String]) -> Result<OwnedGlobs, GlobError> {
        let mut literals = Vec::new();
        let mut prefixes = Vec::new();
        let mut builder = GlobSetBuilder::new();
        for g in globs {
            // `docs/` is a directory: everything below it.
            let pattern = directory_pattern(g);
            match pattern.find(WILDCARDS) {
                None => {
                    literals.push(pattern);
                    continue;
                }
                Some(at) => prefixes.push(pattern[..at].to_string()),
            }
            let compiled = GlobBuilder::new(&pattern)
                .literal_separator(true)
                .build()
                .map_err(|e| GlobError { glob: g.clone(), message: e.to_string() })?;
            builder.add(compiled);
        }
        let set = if prefixes.is_empty() {
            GlobSet::empty()
        } else {
            builder.build().map_err(|e| GlobError { glob: globs.join(","), message: e.to_string() })?
        };
        Ok(OwnedGlobs { text: globs.to_vec(), literals, prefixes, set, everything: false })
    }

    /// Owns every path: what a caller falls back to when globs it was told
    /// are valid do not compile, since owning too much only serializes.
    pub fn everything() -> OwnedGlobs {
        OwnedGlobs {
            text: vec!["**".to_string()],
            literals: Vec::new(),
            prefixes: vec![String::new()],
            set: GlobSet::empty(),
            everything: true,
        }
    }

    /// The globs as written.
    pub fn as_written(&self) -> &[String] {
        &self.text
    }

    /// Whether `path` (relative to the repository root) is owned.
    pub fn matches(&self, path: &str) -> bool {
        self.everything
            || self.literals.iter().any(|l| l == path)
            || (!self.prefixes.is_empty() && self.set.is_match(path))
    }

    /// The paths of `paths` that none of the globs owns, in input order.
    pub fn outside<'a>(&self, paths: &'a [String]) -> Vec<&'a String> {
        paths.iter().filter(|p| !self.matches(p)).collect()
    }

    /// Whether some path could be owned by both. Exact when one side is a
    /// plain path (it is matched against the other's globs); for two
    /// wildcard globs it is conservative: every path a glob matches starts
    /// with its literal prefix, so a common path needs one prefix to extend
    /// the other (`src/api/` and `src/db/` are disjoint; `src/*.rs` and
    /// `src/*.md` count as overlapping). A false overlap only serializes
    /// two tasks; a missed one would let them collide.
    pub fn overlaps(&self, other: &OwnedGlobs) -> bool {
        if self.literals.iter().any(|p| other.matches(p)) || other.literals.iter().any(|p| self.matches(p)) {
            return true;
        }
        self.prefixes
            .iter()
            .any(|a| other.prefixes.iter().any(|b| a.starts_with(b.as_str()) || b.starts_with(a.as_str())))
    }

    /// Whether every path `glob` could match is owned here, so a task owning
    /// `glob` stays inside these globs (a sub-plan's tasks own parts of
    /// their parent's files). Conservative: a wildcard glob is covered only
    /// by the same glob or by a directory glob (`dir/`, `dir/**`) above it;
    /// `src/*.rs` under `src/*` counts as not covered, which refuses a plan
    /// rather than letting a child's result fail its parent's merge.
    pub fn covers(&self, glob: &str) -> bool {
        if self.everything {
            return true;
        }
        let pattern = directory_pattern(glob);
        if !pattern.contains(WILDCARDS) {
            return self.matches(&pattern);
        }
        self.text.iter().map(|g| directory_pattern(g)).any(|owned| {
            if owned == pattern {
                return true;
            }
            owned.strip_suffix("**").is_some_and(|dir| {
                !dir.contains(WILDCARDS) && (dir.is_empty() || dir.ends_with('/')) && pattern.starts_with(dir)
            })
        })
    }

    /// Plain paths owned (no wildcard), for indexes keyed by path.
    pub fn literals(&self) -> &[String] {
        &self.literals
    }

    /// Whether any glob has a wildcard.
    pub fn has_wildcards(&self) -> bool {
        !self.prefixes.is_empty()
    }
}

/// `docs/` is a directory: everything below it.
fn directory_pattern(glob: &str) -> String {
    if glob.ends_with('/') { format!("{glob}**") } else { glob.to_string() }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn owned(globs: &[&str]) -> OwnedGlobs {
        OwnedGlobs::new(&globs.iter().map(|g| g.to_string()).collect::<Vec<_>>()).expect("globs")
    }

    #[test]
    fn a_glob_is_covered_only_by_globs_that_own_every_path_it_could_match() {
        let auth = owned(&["auth/**", "api.txt", "src/*.rs"]);
        for inside in [
            "auth/login.txt",
            "auth/login/**",
            "auth/login/",
            "auth/*.txt",
            "api.txt",
            "src/*.rs",
            "src/a.rs",
        ] {
            assert!(auth.covers(inside), "{inside} is inside");
        }
        for outside in ["authx/a.txt", "auth", "api.md", "src/**", "src/a/b.rs", "**", "*.txt"] {
            assert!(!auth.covers(outside), "{outside} is outside");
        }
        assert!(owned(&["docs/"]).covers("docs/guide/**"), "a directory covers what is below it");
        assert!(OwnedGlobs::everything().covers("**"));
    }

    #[test]
    fn a_directory_glob_owns_what_is_below_it_for_every_reader() {
        let docs = owned(&["docs/"]);
        let guide = owned(&["docs/guide.md"]);
        assert!(docs.matches("docs/guide.md"));
        assert!(docs.matches("docs/a/b.md"));
        assert!(!docs.matches("docs"), "the directory itself is not a file it owns");
        assert!(docs.overlaps(&guide) && guide.overlaps(&docs), "docs/ and docs/guide.md share a path");
        assert!(!owned(&["docs/"]).overlaps(&owned(&["doc/x.md"])));
        let all = OwnedGlobs::everything();
        assert!(
            all.matches("any/path") && all.overlaps(&guide) && guide.overlaps(&all) && all.overlaps(&docs)
        );
    }

    #[test]
    fn disjoint_directories_do_not_overlap_and_shared_paths_do() {
        assert!(!owned(&["src/api/**"]).overlaps(&owned(&["src/db/**"])));
        assert!(!owned(&["a.txt"]).overlaps(&owned(&["b.txt"])));
        assert!(!owned(&["src/*.rs"]).overlaps(&owned(&["docs/a.md"])));
        assert!(owned(&["src/**"]).overlaps(&owned(&["src/api/**"])));
        assert!(owned(&["src/*.rs"]).overlaps(&owned(&["src/lib.rs"])));
        assert!(owned(&["**/*.rs"]).overlaps(&owned(&["src/x/**"])));
        assert!(!owned(&["src/*"]).matches("src/a/b"), "* stays within a directory");
        assert_eq!(owned(&["src/**"]).outside(&["src/a".into(), "b".into()]), vec!["b"]);
    }

    /// Globs from a small alphabet, so random pairs often share paths.
    fn glob() -> impl Strategy<Value = String> {
        let part = prop_oneof![
            Just("a".to_string()),
            Just("b".to_string()),
            Just("docs".to_string()),
            Just("*".to_string()),
            Just("**".to_string()),
            Just("a?".to_string()),
            Just("*.md".to_string()),
            Just("{a,b}".to_string()),
            Just("[ab]".to_string()),
        ];
        (proptest::collection::vec(part, 1..4), any::<bool>()).prop_map(|(parts, dir)| {
            let g = parts.join("/");
            if dir { format!("{g}/") } else { g }
        })
    }

    fn path() -> impl Strategy<Value = String> {
        let part =
            prop_oneof![Just("a"), Just("b"), Just("docs"), Just("ab"), Just("x.md"), Just("guide.md")];
        proptest::collection::vec(part, 1..5).prop_map(|p| p.join("/"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        #[test]
        fn globs_that_share_a_path_always_count_as_overlapping(
            a in glob(), b in glob(), paths in proptest::collection::vec(path(), 1..20)
        ) {
            let (ga, gb) = (owned(&[a.as_str()]), owned(&[b.as_str()]));
            for p in &paths {
                if ga.matches(p) && gb.matches(p) {
                    prop_assert!(ga.overlaps(&gb) && gb.overlaps(&ga), "{a:?} and {b:?} both own {p:?}");
                }
            }
        }
    }
}

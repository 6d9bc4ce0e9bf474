//! Ownership globs.

use swarm_git::{GitError, paths_outside};

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn single_star_does_not_cross_directories_but_double_star_does() {
    let globs = strings(&["src/*", "docs/**", "Cargo.toml"]);
    let paths = strings(&["src/a.rs", "src/a/b.rs", "docs/x/y/z.md", "Cargo.toml", "Cargo.lock", "docs"]);
    assert_eq!(
        paths_outside(&globs, &paths).expect("valid globs"),
        strings(&["src/a/b.rs", "Cargo.lock", "docs"])
    );
}

#[test]
fn trailing_slash_owns_the_whole_directory() {
    let globs = strings(&["web/"]);
    let paths = strings(&["web/a/b.js", "web.js", "webx/a"]);
    assert_eq!(paths_outside(&globs, &paths).expect("valid"), strings(&["web.js", "webx/a"]));
}

#[test]
fn no_globs_own_nothing_and_no_paths_are_fine() {
    assert_eq!(paths_outside(&[], &strings(&["a"])).expect("valid"), strings(&["a"]));
    assert!(paths_outside(&strings(&["**"]), &[]).expect("valid").is_empty());
    assert!(paths_outside(&strings(&["**"]), &strings(&["a/b/c", "d"])).expect("valid").is_empty());
}

#[test]
fn an_invalid_glob_is_an_error_naming_it() {
    let err = paths_outside(&strings(&["src/[a"]), &strings(&["src/a"])).expect_err("invalid");
    assert!(matches!(&err, GitError::InvalidGlob { glob, .. } if glob == "src/[a"), "{err}");
}

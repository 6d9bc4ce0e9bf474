//! Validation of every name that crosses a boundary: ids, branch names,
//! commit ids. Each check returns the rule that was broken, so callers can
//! prefix it with the field's path.

/// Longest id we accept; ids end up in branch names, paths and span names.
pub const MAX_ID_LEN: usize = 64;
/// Longest branch name we accept.
pub const MAX_BRANCH_LEN: usize = 200;

/// Swarm, task and worker ids: lowercase ASCII letters, digits, `-` and `_`,
/// starting and ending with a letter or digit (the Elisha seed's branch
/// pattern without `/`, so an id is always one path component).
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("must not be empty".into());
    }
    if id.len() > MAX_ID_LEN {
        return Err(format!("must be at most {MAX_ID_LEN} characters"));
    }
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
    let ok_edge = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !id.chars().all(ok_char) {
        return Err(format!(
            "{id:?} must match ^[a-z0-9][a-z0-9_-]*[a-z0-9]$ (lowercase letters, digits, '-', '_')"
        ));
    }
    let (first, last) = (id.chars().next(), id.chars().last());
    if !first.is_some_and(ok_edge) || !last.is_some_and(ok_edge) {
        return Err(format!("{id:?} must start and end with a lowercase letter or digit"));
    }
    Ok(())
}

/// Branch names: git's ref-name rules (`git check-ref-format --branch`) plus
/// a strict character set, so that no branch name can smuggle options,
/// paths or revision syntax into a git command.
pub fn check_branch(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_BRANCH_LEN {
        return Err(format!("must be at most {MAX_BRANCH_LEN} characters"));
    }
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '/' | '.');
    if let Some(bad) = name.chars().find(|c| !ok_char(*c)) {
        return Err(format!(
            "{name:?} contains {bad:?}; allowed are ASCII letters, digits, '-', '_', '.', '/'"
        ));
    }
    if name.starts_with('-') {
        return Err(format!("{name:?} must not start with '-'"));
    }
    if name.contains("..") {
        return Err(format!("{name:?} must not contain '..'"));
    }
    if name.contains("//") || name.starts_with('/') || name.ends_with('/') {
        return Err(format!("{name:?} must not have empty path components ('//', leading or trailing '/')"));
    }
    if name.ends_with('.') {
        return Err(format!("{name:?} must not end with '.'"));
    }
    for component in name.split('/') {
        if component.starts_with('.') {
            return Err(format!("{name:?}: component {component:?} must not start with '.'"));
        }
        if component.ends_with(".lock") {
            return Err(format!("{name:?}: component {component:?} must not end with '.lock'"));
        }
    }
    if name == "HEAD" {
        return Err("\"HEAD\" is not a branch name".into());
    }
    Ok(())
}

/// A full commit id: 40 lowercase hex digits (SHA-1 repositories).
pub fn check_commit(id: &str) -> Result<(), String> {
    if id.len() == 40 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(())
    } else {
        Err(format!("{:?} must be a full commit id (40 lowercase hex digits)", truncate(id, 60)))
    }
}

/// Owned-file globs: relative, inside the repository, not empty.
pub fn check_glob(glob: &str) -> Result<(), String> {
    if glob.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if glob.starts_with('/') || glob.starts_with('\\') || glob.get(1..3) == Some(":\\") {
        return Err(format!("{glob:?} must be relative to the repository root, not absolute"));
    }
    if glob.split(['/', '\\']).any(|part| part == "..") {
        return Err(format!("{glob:?} must not contain '..' components"));
    }
    if glob.contains('\0') {
        return Err("must not contain NUL".into());
    }
    // Only glob syntax can fail to parse: a plain path (most globs of a big
    // plan) skips building a matcher just to check it.
    if glob.contains(['*', '?', '[', ']', '{', '}', '\\']) {
        globset::Glob::new(glob).map_err(|e| format!("{glob:?} is not a valid glob: {e}"))?;
    }
    Ok(())
}

/// Bounds a free-text field (summaries, messages, questions).
pub fn check_text(text: &str, max: usize) -> Result<(), String> {
    if text.len() > max {
        return Err(format!("must be at most {max} bytes (got {})", text.len()));
    }
    Ok(())
}

/// Longest repository path a peer may name.
pub const MAX_PATH_LEN: usize = 4096;

/// A path a peer reports (files changed, files modified): relative, inside
/// the repository, and printable, because it ends up in events, task text
/// and terminals, where a NUL, an escape sequence or a newline would forge
/// or garble what an operator reads.
pub fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("must not be empty".into());
    }
    if path.len() > MAX_PATH_LEN {
        return Err(format!("must be at most {MAX_PATH_LEN} bytes (got {})", path.len()));
    }
    if let Some(c) = path.chars().find(|c| c.is_control()) {
        return Err(format!("must not contain control characters (found U+{:04X})", c as u32));
    }
    if path.starts_with('/') {
        return Err(format!("{:?} must be relative to the repository root", truncate(path, 60)));
    }
    if path.split('/').any(|part| part == "..") {
        return Err(format!("{:?} must not contain '..' components", truncate(path, 60)));
    }
    Ok(())
}

/// Cuts a string at a char boundary for use inside an error message.
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_strict_pattern() {
        for ok in ["a", "auth", "api-v2", "db_migrate", "x9"] {
            assert!(check_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Auth", "-a", "a-", "a/b", "a b", "a.b", &"x".repeat(65)] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn branches_follow_git_ref_rules() {
        for ok in ["main", "swarm/auth/integration", "feature/ui-redesign", "v1.2"] {
            assert!(check_branch(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-x",
            "a..b",
            "a//b",
            "/a",
            "a/",
            "a.",
            "a/.hidden",
            "a.lock",
            "a b",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[",
            "a\\b",
            "HEAD",
            "a@{1}",
        ] {
            assert!(check_branch(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reported_paths_are_relative_printable_and_bounded() {
        for ok in ["src/a.rs", "docs/guide.md", "a b/ü.txt", ".github/ci.yml"] {
            assert!(check_path(ok).is_ok(), "{ok}");
        }
        let long = "a/".repeat(MAX_PATH_LEN);
        for bad in
            ["", "/etc/passwd", "a/../b", "..", "a\0b", "a\u{1b}[31mred", "a\nb", "a\rb", long.as_str()]
        {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
        assert!(check_path("a\u{1b}x").expect_err("escape").contains("U+001B"));
    }

    #[test]
    fn commits_must_be_full_hex() {
        assert!(check_commit(&"a".repeat(40)).is_ok());
        assert!(check_commit("abc123").is_err());
        assert!(check_commit(&"A".repeat(40)).is_err());
        assert!(check_commit(&"g".repeat(40)).is_err());
    }

    #[test]
    fn globs_stay_inside_the_repository() {
        for good in ["src/**/*.rs", "src/lib.rs", "docs/", "a-b_c.d/e f"] {
            assert!(check_glob(good).is_ok(), "{good}");
        }
        for bad in ["", "  ", "/etc/passwd", "../x", "src/../../x", "a[", "src/{a,b", "a]b[", "C:\\x"] {
            assert!(check_glob(bad).is_err(), "{bad}");
        }
    }
}

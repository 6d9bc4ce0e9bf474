//! Branch names, checked before they reach git's argv or an API query.
//!
//! A strict subset of `git check-ref-format --branch`: ASCII letters,
//! digits and `-_./`, in components that neither start with `.` nor end
//! with `.lock`, with no `..` or `//`, not starting with `-` (an option to
//! git) and not `HEAD`. Every name swarm makes (`swarm/<swarm>/<task>`)
//! fits; a name outside it is refused, not escaped.

/// Longest branch name accepted (git's own limit is the file system's).
pub const BRANCH_MAX: usize = 255;

/// Checks a branch name (without `refs/heads/`); the error names the rule.
pub fn check_branch(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > BRANCH_MAX {
        return Err(format!("a branch name is 1 to {BRANCH_MAX} bytes"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || "-_./".contains(*c))) {
        return Err(format!("a branch name may hold only letters, digits and '-', '_', '.', '/', not {c:?}"));
    }
    if name.starts_with('-') {
        return Err("a branch name may not start with '-'".into());
    }
    if name == "HEAD" {
        return Err("a branch may not be called HEAD".into());
    }
    if name.contains("..") || name.contains("//") {
        return Err("a branch name may not contain '..' or '//'".into());
    }
    if name.starts_with('/') || name.ends_with('/') || name.ends_with('.') {
        return Err("a branch name may not start or end with '/', nor end with '.'".into());
    }
    if name.split('/').any(|c| c.starts_with('.') || c.ends_with(".lock")) {
        return Err("no component of a branch name may start with '.' or end with '.lock'".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_names_follow_a_strict_subset_of_gits_rules() {
        for ok in ["main", "swarm/s1/auth-api", "release/1.2", "a_b", "x.y/z"] {
            assert_eq!(check_branch(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "-f",
            "HEAD",
            "a..b",
            "a//b",
            "/a",
            "a/",
            "a.",
            ".a",
            "a/.b",
            "a.lock",
            "a/b.lock/c",
            "a b",
            "a:b",
            "a~1",
            "a^",
            "a?",
            "a*",
            "a[",
            "a\\b",
            "a@{1}",
            "é",
            "a\nb",
        ] {
            assert!(check_branch(bad).is_err(), "{bad:?}");
        }
        assert!(check_branch(&"a".repeat(256)).is_err());
    }
}

//! CI demands what it promises: under `CI`, `.ci/check-skips` (the end of
//! `.ci/test`) fails on a skip `.ci/allowed-skips` does not name, by test
//! and reason, and lets the named ones (optional machine features) pass.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::Path;
use std::process::{Command, Output};

use swarm_tests::docker::repo_root;

/// Runs the check on a log of `(test, why)` lines, with `CI` as given.
fn check(root: &Path, skips: &[(&str, &str)], ci: Option<&str>) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("skipped-tests.log");
    let text: String = skips.iter().map(|(t, why)| format!("{t}\t{why}\n")).collect();
    std::fs::write(&log, text).unwrap();
    let mut cmd = Command::new(root.join(".ci/check-skips"));
    cmd.arg(&log).current_dir(root).env_remove("CI");
    if let Some(ci) = ci {
        cmd.env("CI", ci);
    }
    cmd.output().unwrap()
}

const MEMORY: &str = "a_memory_hog_fails_with_its_memory_limit_as_the_reason";

#[test]
fn under_ci_a_skip_for_a_promised_prerequisite_fails_and_an_allowed_one_passes() {
    let root = repo_root();
    let cgroup = (MEMORY, "the cgroup /sys/fs/cgroup/x has no memory controller");
    let postgres = ("store_conformance_on_postgres", "no PostgreSQL server binaries (initdb)");

    let allowed = check(&root, &[cgroup], Some("true"));
    assert!(allowed.status.success(), "{}", String::from_utf8_lossy(&allowed.stdout));

    let refused = check(&root, &[cgroup, postgres], Some("1"));
    let out = String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{out}");
    assert!(out.contains("store_conformance_on_postgres: no PostgreSQL"), "{out}");
    assert!(!out.contains(&format!("  {MEMORY}: ")), "the allowed skip is not refused: {out}");

    // The allowed test, skipped for another reason, is refused.
    let other = check(&root, &[(MEMORY, "only root may run this")], Some("1"));
    assert_eq!(other.status.code(), Some(1), "{}", String::from_utf8_lossy(&other.stdout));

    // Outside CI (or CI=false) the skips are listed, and pass.
    for ci in [None, Some("false"), Some("0")] {
        let listed = check(&root, &[postgres], ci);
        let out = String::from_utf8_lossy(&listed.stdout);
        assert!(listed.status.success() && out.contains("SKIPPED 1 test(s)"), "{ci:?}: {out}");
    }
}

#[test]
fn every_allowed_skip_names_a_test_that_exists_and_says_why() {
    let root = repo_root();
    let list = std::fs::read_to_string(root.join(".ci/allowed-skips")).unwrap();
    let mut sources = String::new();
    for entry in std::fs::read_dir(root.join("tests/tests")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            sources.push_str(&std::fs::read_to_string(path).unwrap());
        }
    }
    let entries: Vec<&str> = list.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
    assert!(!entries.is_empty());
    for line in entries {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 3, "test, reason fragment and why, tab-separated: {line:?}");
        assert!(sources.contains(&format!("fn {}(", fields[0])), "no test {} in tests/tests", fields[0]);
        assert!(!fields[1].trim().is_empty() && fields[2].len() > 20, "say which skip and why: {line:?}");
    }
}

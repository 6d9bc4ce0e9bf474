use super::*;

/// A plan of `tasks`, each `(id, deps, files, extra TOML lines)`.
fn plan(tasks: &[(&str, &[&str], &[&str], &str)]) -> Plan {
    let mut text = String::from("name = \"p\"\n[defaults]\ncommand = \"true\"\n");
    for (id, deps, files, extra) in tasks {
        let list = |xs: &[&str]| xs.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>().join(", ");
        text.push_str(&format!(
            "[[tasks]]\nid = \"{id}\"\ndeps = [{}]\nfiles = [{}]\n{extra}\n",
            list(deps),
            list(files)
        ));
    }
    Plan::parse(&text).expect("plan")
}

fn repo(files: &[&str]) -> RepoFacts {
    RepoFacts { files: files.iter().map(|f| f.to_string()).collect(), has_test_command: false }
}

const TREE: &[&str] = &["README.md", "src/a.rs", "src/b.rs", "docs/guide.md", "Cargo.toml"];

fn check(p: &Plan, r: &RepoFacts) -> Vec<Finding> {
    check_against_repo(p, r, &RuleConfig::default())
}

#[test]
fn globs_of_existing_paths_and_new_files_under_existing_directories_pass() {
    let p = plan(&[
        ("a", &[], &["src/a.rs"], ""),
        ("b", &["a"], &["src/new/*.rs", "docs/"], ""),
        ("c", &["b"], &["NEWS.md"], ""),
    ]);
    assert_eq!(check(&p, &repo(TREE)), vec![]);
}

#[test]
fn a_glob_under_a_missing_directory_names_the_glob_and_the_directory() {
    let p = plan(&[("a", &[], &["src/a.rs", "nothere/x.rs"], "")]);
    let found = check(&p, &repo(TREE));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].path.as_str(), found[0].severity), ("tasks[0].files[1]", Severity::Error));
    assert!(found[0].rule.contains("\"nothere/x.rs\"") && found[0].rule.contains("\"nothere\""), "{found:?}");
    // Nothing exists yet in an empty tree: every file is new.
    assert_eq!(check(&p, &repo(&[])), vec![]);
}

#[test]
fn concurrent_tasks_owning_a_common_file_name_both_tasks_and_the_file() {
    let p = plan(&[("a", &[], &["src/*.rs"], ""), ("b", &[], &["docs/", "src/b.rs"], "")]);
    let found = check(&p, &repo(TREE));
    assert_eq!(found.len(), 1, "{found:?}");
    let f = &found[0];
    assert_eq!((f.path.as_str(), f.severity), ("tasks[0].files[0]", Severity::Error));
    assert!(f.rule.contains("\"a\" and \"b\"") && f.rule.contains("\"src/b.rs\""), "{f:?}");
    assert!(f.rule.contains("tasks[1].files[1]"), "{f:?}");
}

#[test]
fn tasks_ordered_by_dependencies_may_own_the_same_files() {
    // c depends on a through b: never at once.
    let p = plan(&[
        ("a", &[], &["src/a.rs"], ""),
        ("b", &["a"], &["docs/"], ""),
        ("c", &["b"], &["src/*.rs"], ""),
    ]);
    assert_eq!(check(&p, &repo(TREE)), vec![]);
}

#[test]
fn globs_that_share_only_a_new_path_are_reported_by_how_sure_the_overlap_is() {
    // `src/new/**` owns everything `src/new/*.rs` could create.
    let p = plan(&[("a", &[], &["src/new/**"], ""), ("b", &[], &["src/new/*.rs"], "")]);
    let found = check(&p, &repo(TREE));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].severity, Severity::Error, "{found:?}");
    // `src/new/*.rs` and `src/new/*.md` only seem to overlap.
    let p = plan(&[("a", &[], &["src/new/*.md"], ""), ("b", &[], &["src/new/*.rs"], "")]);
    let found = check(&p, &repo(TREE));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].severity, Severity::Warning, "{found:?}");
    assert!(found[0].rule.contains("one after the other"), "{found:?}");
}

#[test]
fn a_lockfile_two_concurrent_tasks_own_is_a_warning_unless_a_later_task_owns_it() {
    let tree = repo(&["Cargo.lock", "a/x.rs", "b/y.rs"]);
    let p = plan(&[("a", &[], &["a/", "Cargo.lock"], ""), ("b", &[], &["b/", "Cargo.lock"], "")]);
    let found = check(&p, &tree);
    assert_eq!(found.len(), 1, "{found:?}");
    let f = &found[0];
    assert_eq!((f.path.as_str(), f.severity), ("tasks[0].files[1]", Severity::Warning));
    assert!(
        f.rule.contains("\"Cargo.lock\"") && f.rule.contains("\"a\"") && f.rule.contains("\"b\""),
        "{f:?}"
    );

    let p = plan(&[
        ("a", &[], &["a/", "Cargo.lock"], ""),
        ("b", &[], &["b/", "Cargo.lock"], ""),
        ("lock", &["a", "b"], &["Cargo.lock"], ""),
    ]);
    assert_eq!(check(&p, &tree), vec![]);
}

#[test]
fn a_registry_beside_files_concurrent_tasks_add_is_a_warning_unless_a_later_task_owns_it() {
    let tree = repo(&["src/lib.rs", "src/a.rs"]);
    let p = plan(&[("a", &[], &["src/x.rs"], ""), ("b", &[], &["src/y.rs"], "")]);
    let found = check(&p, &tree);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].severity, Severity::Warning);
    assert!(
        found[0].rule.contains("\"src/lib.rs\"") && found[0].rule.contains("adds files beside it"),
        "{found:?}"
    );

    let p = plan(&[
        ("a", &[], &["src/x.rs"], ""),
        ("b", &[], &["src/y.rs"], ""),
        ("wire", &["a", "b"], &["src/lib.rs"], ""),
    ]);
    assert_eq!(check(&p, &tree), vec![]);
    // One task adding files changes the registry alone.
    let p = plan(&[("a", &[], &["src/x.rs"], ""), ("b", &[], &["docs/y.md"], "")]);
    assert_eq!(check(&p, &repo(&["src/lib.rs", "docs/z.md"])), vec![]);
}

#[test]
fn tasks_verify_when_the_repository_has_a_test_command() {
    let mut tree = repo(TREE);
    tree.has_test_command = true;
    let p = plan(&[
        ("a", &[], &["src/a.rs"], "verify = [{ name = \"test\", command = \"cargo test\" }]"),
        ("b", &[], &["docs/"], ""),
    ]);
    let found = check(&p, &tree);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].path.as_str(), found[0].severity), ("tasks[1].verify", Severity::Error));
    tree.has_test_command = false;
    assert_eq!(check(&p, &tree), vec![]);
}

#[test]
fn a_planned_plan_needs_every_estimate() {
    let p = plan(&[("a", &[], &["src/a.rs"], "estimate = \"20m\""), ("b", &[], &["docs/"], "")]);
    let planned = RuleConfig { planned: true, ..RuleConfig::default() };
    let found = check_against_repo(&p, &repo(TREE), &planned);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].path, "tasks[1].estimate");
    assert_eq!(check(&p, &repo(TREE)), vec![]);
}

#[test]
fn no_task_owns_more_than_its_share_of_a_big_enough_tree() {
    let files: Vec<String> = (0..10).map(|i| format!("src/f{i}.rs")).collect();
    let tree = RepoFacts { files, has_test_command: false };
    let p = plan(&[("a", &[], &["src/f[0-5].rs"], ""), ("b", &["a"], &["src/f[6-9].rs"], "")]);
    let found = check(&p, &tree);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].path.as_str(), found[0].severity), ("tasks[0].files", Severity::Error));
    assert!(found[0].rule.contains("6 of the repository's 10 files (60%)"), "{found:?}");
    let loose = RuleConfig { max_share: 0.6, ..RuleConfig::default() };
    assert_eq!(check_against_repo(&p, &tree, &loose), vec![]);
    // Below ten files the share says nothing.
    let p = plan(&[("a", &[], &["**"], "")]);
    assert_eq!(check(&p, &repo(TREE)), vec![]);
}

#[test]
fn findings_print_their_severity_path_and_rule() {
    let f = Finding::warning("tasks[1].files[0]", "x");
    assert_eq!(f.to_string(), "warning: tasks[1].files[0]: x");
    // Serialized with its severity in words (TOML here: swarm-core has no JSON crate).
    let text = toml::to_string(&f).expect("serialize");
    assert!(text.contains("severity = \"warning\""), "{text}");
}

use super::*;

#[test]
fn trailer_replaces_old_attempt_lines() {
    let msg = with_trailer("fix\n\nSwarm-Attempt: a/b#1\n", "a/b#2", String::new);
    assert_eq!(msg, "fix\n\nSwarm-Attempt: a/b#2\n");
    assert_eq!(with_trailer("  ", "x#1", || "title".into()), "title\n\nSwarm-Attempt: x#1\n");
}

fn commit(repo: &git2::Repository, parent: Option<git2::Oid>, path: &str, content: &str) -> git2::Oid {
    let mut builder = match parent {
        Some(p) => {
            let tree = repo.find_commit(p).expect("parent").tree().expect("tree");
            repo.treebuilder(Some(&tree)).expect("treebuilder")
        }
        None => repo.treebuilder(None).expect("treebuilder"),
    };
    let blob = repo.blob(content.as_bytes()).expect("blob");
    builder.insert(path, blob, 0o100644).expect("insert");
    let tree = repo.find_tree(builder.write().expect("write tree")).expect("tree");
    let sig = git2::Signature::now("t", "t@example.com").expect("sig");
    let parents: Vec<git2::Commit<'_>> =
        parent.map(|p| repo.find_commit(p).expect("parent")).into_iter().collect();
    let refs: Vec<&git2::Commit<'_>> = parents.iter().collect();
    repo.commit(None, &sig, &sig, path, &tree, &refs).expect("commit")
}

#[test]
fn ref_moved_between_merge_and_update_is_retried_on_the_new_head() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = git2::Repository::init(dir.path()).expect("init");
    let base = commit(&repo, None, "base.txt", "b\n");
    let task = commit(&repo, Some(base), "task.txt", "t\n");
    let other = commit(&repo, Some(base), "other.txt", "o\n");
    repo.reference("refs/heads/integration", base, true, "test").expect("ref");

    let integrator = Integrator::open(dir.path()).expect("open");
    let path = dir.path().to_path_buf();
    let mut fired = false;
    *integrator.before_cas.borrow_mut() = Some(Box::new(move || {
        if !fired {
            fired = true;
            let repo = git2::Repository::open(&path).expect("open");
            repo.reference("refs/heads/integration", other, true, "behind its back").expect("move");
        }
    }));
    let report = integrator
        .integrate(&MergeRequest {
            integration_branch: "integration".into(),
            expected_head: base.to_string(),
            task_commit: task.to_string(),
            strategy: MergeStrategy::Merge,
            attempt_label: "s/t#1".into(),
            title: "t".into(),
            summary: String::new(),
        })
        .expect("integrate");
    assert_eq!(report.cas_retries, 1);
    assert_eq!(report.base, other.to_string());
    let result = repo.find_commit(git2::Oid::from_str(&report.result).expect("oid")).expect("commit");
    assert_eq!(result.parent_ids().collect::<Vec<_>>(), vec![other, task]);
    let tree = result.tree().expect("tree");
    for path in ["base.txt", "task.txt", "other.txt"] {
        assert!(tree.get_name(path).is_some(), "{path} missing");
    }
    assert_eq!(report.files_changed, vec!["task.txt".to_string()]);
}

#[test]
fn labels_are_validated() {
    assert!(check_label("auth/api#2").is_ok());
    assert!(check_label("a\nb").is_err());
    assert!(check_label("").is_err());
}

use swarm_core::TaskKey;
use swarm_core::plan::{MergeStrategy, OwnershipPolicy};
use swarm_tests::TempRepo;

use super::*;
use crate::SideChange;

const BRANCH: &str = "swarm/s/integration";

fn job(repo: &TempRepo, base: &str, name: &str, files: &[(&str, &str)], globs: &[&str]) -> MergeJob {
    let commit = repo.commit(Some(base), files, name);
    MergeJob {
        task: TaskKey::parse(&format!("s/{name}")).expect("key"),
        attempt: 1,
        attempt_label: format!("s/{name}#1"),
        integration_branch: BRANCH.into(),
        task_commit: commit,
        base_commit: base.into(),
        strategy: MergeStrategy::Merge,
        ownership: OwnershipPolicy::Enforce,
        owned_globs: globs.iter().map(|g| g.to_string()).collect(),
        title: name.into(),
        summary: String::new(),
        recovering: false,
    }
}

/// Merges `jobs` as one backlog and returns the results reported.
fn merge_backlog(repo: &TempRepo, jobs: &[MergeJob]) -> Vec<MergeResult> {
    let service = MergeService::open(repo.path()).expect("open");
    let mut out = Vec::new();
    let listening = service.merge(jobs.to_vec(), |r| {
        if let Report::Merged(m) = r {
            out.push(m);
        }
        true
    });
    assert!(listening);
    out
}

fn reflog_len(repo: &TempRepo) -> usize {
    repo.git2().reflog(&format!("refs/heads/{BRANCH}")).expect("reflog").len()
}

#[test]
fn a_backlog_lands_in_one_ref_update_with_per_job_verdicts_in_order() {
    let repo = TempRepo::with_files(&[("shared.txt", "one\ntwo\nthree\n")]);
    let base = repo.head("main");
    repo.set_branch(BRANCH, &base);
    // The integration branch moved on: it edits shared.txt.
    let head = repo.commit(Some(&base), &[("shared.txt", "one\nTWO\nthree\n")], "integration edit");
    repo.set_branch(BRANCH, &head);
    let mut jobs: Vec<MergeJob> = (0..40)
        .map(|i| {
            let path = format!("d{i}/f.txt");
            job(&repo, &base, &format!("t{i}"), &[(path.as_str(), "x\n")], &[&format!("d{i}/**")])
        })
        .collect();
    jobs.insert(5, job(&repo, &base, "conflicts", &[("shared.txt", "one\n2\nthree\n")], &["shared.txt"]));
    jobs.insert(9, job(&repo, &base, "trespasses", &[("d0/g.txt", "y\n")], &["elsewhere/**"]));
    let before = reflog_len(&repo);

    let results = merge_backlog(&repo, &jobs);
    assert_eq!(results.len(), jobs.len());
    let mut last_head = head.clone();
    for (r, j) in results.iter().zip(&jobs) {
        assert_eq!(r.task, j.task, "results come back in the order the jobs went in");
        match (&r.verdict, j.task.task.as_str()) {
            (Verdict::Conflict(c), "conflicts") => {
                assert_eq!(c.path_names(), ["shared.txt"]);
                assert_eq!(c.paths[0].ours, SideChange::Modified);
                assert_eq!((c.branch.as_str(), c.task_commit.as_str()), (BRANCH, j.task_commit.as_str()));
            }
            (Verdict::Refused(Refusal::OutsideOwnedGlobs { paths }), "trespasses") => {
                assert_eq!(paths, &["d0/g.txt"])
            }
            (Verdict::Merged { head, merge_commit, stats }, _) => {
                assert_eq!(head, merge_commit);
                assert!(repo.parents(merge_commit).contains(&last_head), "each lands on the one before");
                match stats {
                    MergeStats::Integrated { result, files_changed, .. } => {
                        assert_eq!(result, merge_commit);
                        assert!(!files_changed.is_empty());
                    }
                    other => panic!("{other:?}"),
                }
                last_head = head.clone();
            }
            (other, task) => panic!("{task}: {other:?}"),
        }
    }
    assert_eq!(repo.head(BRANCH), last_head);
    assert_eq!(reflog_len(&repo), before + 1, "one compare-and-swap for the whole backlog");
    let tree = repo.tree(&last_head);
    assert_eq!(tree.get("shared.txt").map(String::as_str), Some("one\nTWO\nthree\n"));
    assert!((0..40).all(|i| tree.contains_key(&format!("d{i}/f.txt"))));

    // A restarted controller resubmits them all: each landed attempt is
    // found by its trailer and nothing is merged twice.
    let fresh = Integrator::open(repo.path()).expect("open");
    for j in &jobs {
        let found = fresh.find_landed(BRANCH, &j.attempt_label).expect("find");
        let landed = !matches!(j.task.task.as_str(), "conflicts" | "trespasses");
        assert_eq!(found.is_some(), landed, "{}", j.attempt_label);
    }
    drop(fresh);
    let again: Vec<MergeJob> = jobs
        .iter()
        .filter(|j| !matches!(j.task.task.as_str(), "conflicts" | "trespasses"))
        .map(|j| MergeJob { recovering: true, ..j.clone() })
        .collect();
    for r in merge_backlog(&repo, &again) {
        match r.verdict {
            Verdict::Merged { head, stats: MergeStats::Recovered { strategy }, .. } => {
                assert_eq!(head, last_head);
                assert_eq!(strategy, MergeStrategy::Merge);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(repo.head(BRANCH), last_head);
}

#[test]
fn a_backlog_for_two_branches_lands_on_each() {
    let repo = TempRepo::with_files(&[]);
    let base = repo.head("main");
    repo.set_branch(BRANCH, &base);
    repo.set_branch("swarm/t/integration", &base);
    let mut jobs = Vec::new();
    for i in 0..6 {
        let mut j = job(&repo, &base, &format!("t{i}"), &[(format!("f{i}").as_str(), "x\n")], &["**"]);
        if i % 2 == 1 {
            j.integration_branch = "swarm/t/integration".into();
        }
        jobs.push(j);
    }
    let results = merge_backlog(&repo, &jobs);
    assert!(results.iter().all(|r| matches!(r.verdict, Verdict::Merged { .. })), "{results:?}");
    assert_eq!(repo.tree(&repo.head(BRANCH)).len(), 4); // README + f0, f2, f4
    assert_eq!(repo.tree(&repo.head("swarm/t/integration")).len(), 4);
}

#[test]
fn a_missing_integration_branch_fails_each_job_with_its_cause() {
    let repo = TempRepo::with_files(&[]);
    let base = repo.head("main");
    let jobs: Vec<MergeJob> = (0..3)
        .map(|i| job(&repo, &base, &format!("t{i}"), &[(format!("f{i}").as_str(), "x\n")], &["**"]))
        .collect();
    let results = merge_backlog(&repo, &jobs);
    assert_eq!(results.len(), 3);
    for r in results {
        match r.verdict {
            Verdict::Failed(failure @ MergeFailure::NoIntegrationBranch { .. }) => {
                assert_eq!(failure.to_string(), format!("integration branch {BRANCH} does not exist"))
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn an_already_contained_result_is_merged_without_a_new_commit() {
    let repo = TempRepo::with_files(&[]);
    let base = repo.head("main");
    let j = job(&repo, &base, "t", &[("f", "x\n")], &["**"]);
    repo.set_branch(BRANCH, &j.task_commit);
    let results = merge_backlog(&repo, std::slice::from_ref(&j));
    match &results[0].verdict {
        Verdict::Merged { head, stats: MergeStats::AlreadyContained { .. }, .. } => {
            assert_eq!(head, &j.task_commit)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_speculation_decides_conflicts_and_chains_the_rest_until_advanced() {
    let repo = TempRepo::with_files(&[("shared.txt", "one\n")]);
    let base = repo.head("main");
    let head = repo.commit(Some(&base), &[("shared.txt", "ONE\n")], "integration edit");
    repo.set_branch(BRANCH, &head);
    let jobs = vec![
        job(&repo, &base, "a", &[("a.txt", "a\n")], &["a.txt"]),
        job(&repo, &base, "conflicts", &[("shared.txt", "1\n")], &["shared.txt"]),
        job(&repo, &base, "b", &[("b.txt", "b\n")], &["b.txt"]),
    ];
    let service = MergeService::open(repo.path()).expect("open");
    let swarm = swarm_core::SwarmId::new("s").expect("swarm");
    let request =
        QueueRequest::Speculate { swarm: swarm.clone(), job: 7, branch: BRANCH.into(), onto: None, jobs };
    let QueueReport::Speculated { base: on, head: merged, chained, decided, error, .. } =
        service.queue(request)
    else {
        panic!("not a speculation")
    };
    assert!(error.is_none(), "{error:?}");
    assert_eq!(on, head);
    assert_eq!(chained.iter().map(|c| c.task.task.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert!(matches!(&decided[..], [MergeResult { verdict: Verdict::Conflict(_), .. }]), "{decided:?}");
    assert_eq!(repo.head(BRANCH), head, "no ref moved");

    let advance = QueueRequest::Advance {
        swarm,
        job: 7,
        branch: BRANCH.into(),
        base: head.clone(),
        head: merged.clone(),
        count: 2,
    };
    let QueueReport::Advanced { error, .. } = service.queue(advance.clone()) else { panic!("not a landing") };
    assert!(error.is_none(), "{error:?}");
    assert_eq!(repo.head(BRANCH), merged);
    // Once more from the old head: the ref moved, and the cause says so.
    let QueueReport::Advanced { error, .. } = service.queue(advance) else { panic!("not a landing") };
    assert!(matches!(error, Some(MergeError::CasFailed { .. })), "{error:?}");
}

//! A DAG plan runs to MERGED through the real binaries.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::collections::BTreeMap;

use swarm_tests::{
    Cluster, PlanBuilder, TempRepo, create_swarm, merges_of, task, wait_all_merged, worker_script,
};

#[tokio::test(flavor = "multi_thread")]
async fn dag_plan_reaches_merged_with_the_expected_tree_and_one_merge_per_task() {
    // a ─► b ─┐
    //   └─► c ─┴─► d      e (independent, owns a directory)
    let script = worker_script(&[
        ("d", r#"cat a.txt b.txt c.txt > d.txt"#),
        ("e", "mkdir -p out && echo one > out/1.txt && echo two > out/2.txt"),
    ]);
    let repo = TempRepo::with_files(&[("worker.sh", &script), ("README.md", "dag\n")]);
    let plan = PlanBuilder::new("dag")
        .task(task("a"))
        .task(task("b").deps(&["a"]))
        .task(task("c").deps(&["a"]))
        .task(task("d").deps(&["b", "c"]))
        .task(task("e").files(&["out/**"]))
        .build();
    let cluster = Cluster::start(&repo, 2, &[]);
    let swarm = create_swarm(&cluster.url(), &plan).await;
    assert_eq!(swarm.integration_branch, "swarm/dag/integration");

    let tasks = wait_all_merged(&cluster.url(), "dag").await;
    assert_eq!(tasks.len(), 5);

    let tree = repo.tree("swarm/dag/integration");
    let expected: BTreeMap<String, String> = [
        ("README.md", "dag\n"),
        ("worker.sh", script.as_str()),
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        ("c.txt", "c\n"),
        ("d.txt", "a\nb\nc\n"),
        ("out/1.txt", "one\n"),
        ("out/2.txt", "two\n"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(tree, expected);

    for id in ["a", "b", "c", "d", "e"] {
        assert_eq!(merges_of(&repo, "swarm/dag/integration", "dag", id), 1, "merges of {id}");
        let t = &tasks[id];
        assert_eq!(t.merge_commit.len(), 40, "{id} has a merge commit");
        assert!(repo.has(&t.merge_commit));
    }
    // The base branch is untouched until `land`.
    assert_eq!(repo.subjects("main"), vec!["initial commit".to_string()]);
}

//! Many sidecars starting at once on one brand-new repository create their
//! worktrees without racing each other: no attempt fails, every task merges.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use swarm_proto::v1::Outcome;
use swarm_tests::{
    PlanBuilder, TempRepo, attempts, create_swarm, outcome_of, spawn_controller, spawn_sidecar, task,
    wait_all_merged,
};

const SIDECARS: usize = 8;
const TASKS: usize = 16;
const ROUNDS: usize = 3;

#[tokio::test(flavor = "multi_thread")]
async fn eight_sidecars_starting_together_on_a_fresh_repository_fail_nothing() {
    for round in 0..ROUNDS {
        // Fresh repository each round: no .git/worktrees, no workspaces yet.
        let repo = TempRepo::with_files(&[("worker.sh", &swarm_tests::worker_script(&[]))]);
        let controller = spawn_controller(repo.path(), &[]);
        let url = controller.url();
        let swarm = format!("p{round}");
        // Retries off: a failed attempt would fail its task.
        let mut plan = PlanBuilder::new(&swarm).default("retries", "0");
        for n in 0..TASKS {
            plan = plan.task(task(&format!("t{n}")));
        }
        // The work is waiting before any sidecar exists, so all of them
        // create their worktrees at the same moment.
        create_swarm(&url, &plan.build()).await;
        let sidecars: Vec<_> =
            (0..SIDECARS).map(|n| spawn_sidecar(&url, repo.path(), &format!("local-{n}"), &[])).collect();
        let merged = wait_all_merged(&url, &swarm).await;
        assert_eq!(merged.len(), TASKS);
        for id in merged.keys() {
            let a = attempts(&url, &format!("{swarm}/{id}")).await;
            let outcomes: Vec<Outcome> = a.iter().map(outcome_of).collect();
            assert_eq!(outcomes, vec![Outcome::Success], "round {round}: {id} took one successful attempt");
        }
        for n in 0..TASKS {
            assert_eq!(
                repo.tree(&format!("swarm/{swarm}/integration"))[&format!("t{n}.txt")],
                format!("t{n}\n")
            );
        }
        drop(sidecars);
        drop(controller);
    }
}

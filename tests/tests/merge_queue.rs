//! The merge queue verifies merged trees: real controller, real sidecars
//! (workers labelled `role=work`, a verifier labelled `role=verify`), real
//! git. Integration verify commands append the commit they saw to a file
//! outside the repository, so the verifications counted are the ones that
//! really ran.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::Path;

use swarm_proto::v1;
use swarm_tests::{
    Gate, PlanBuilder, TempRepo, create_swarm, events, spawn_controller, spawn_sidecar, task,
    wait_all_merged, wait_task_state, worker_script,
};

/// Work sidecars `w1`.. and the queue's plan lines.
/// A plan whose merge queue runs `verify`, which may write below `marks`
/// (its sandbox says so: the tiers run confined, like workers).
fn queue_plan(name: &str, verify: &str, max_batch: u32, marks: &Path) -> PlanBuilder {
    PlanBuilder::new(name).default("labels", r#"{ role = "work" }"#).default("retries", "3").tables(&format!(
        "[[integration_verify]]\nname = \"integration\"\ncommand = '''{verify}'''\n\n\
             [merge_queue]\nmax_batch = {max_batch}\nlabels = {{ role = \"verify\" }}\n\
             sandbox = {{ write = [{:?}] }}\n",
        marks.display().to_string()
    ))
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

fn kinds<'a>(evs: &'a [v1::Event], kind: &str) -> Vec<&'a v1::Event> {
    evs.iter().filter(|e| e.kind == kind).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_semantic_conflict_is_caught_bisected_to_the_caller_and_fixed_on_its_next_attempt() {
    let out = tempfile::tempdir().unwrap();
    let count = out.path().join("verifications");
    let gate = Gate::new();
    // `rename` renames old_name to new_name; `caller` adds a call of
    // old_name, unless its task text says the integration verify failed
    // (then it calls the new name). Each passes its own verify.
    let caller = format!(
        "{wait}\ncp \"$SWARM_TASK_FILE\" '{out}/caller-task-'\"$SWARM_ATTEMPT\".md\n\
         if grep -q 'Failing integration verify output' \"$SWARM_TASK_FILE\"; then\n\
         printf 'new_name\\n' > caller.sh\nelse\nprintf 'old_name\\n' > caller.sh\nfi",
        wait = gate.wait_sh(),
        out = out.path().display()
    );
    let script =
        worker_script(&[("rename", "printf 'new_name() { echo hi; }\\n' > lib.sh"), ("caller", &caller)]);
    let repo = TempRepo::with_files(&[("worker.sh", &script), ("lib.sh", "old_name() { echo hi; }\n")]);
    // The rename alone passes (no caller yet); the caller alone passes (the
    // old name still exists); both together do not.
    let verify = format!(
        "echo \"$SWARM_VERIFY_COMMIT\" >> '{}'; . ./lib.sh; if [ -f caller.sh ]; then . ./caller.sh; fi",
        count.display()
    );
    let plan = queue_plan("sem", &verify, 8, out.path())
        // The caller copies its task text out for the test to read.
        .sandbox(&[], &[out.path()])
        .task(
            task("rename")
                .files(&["lib.sh"])
                .set("verify", r#"[{ name = "own", command = "sh -n lib.sh" }]"#),
        )
        .task(
            task("caller")
                .files(&["caller.sh"])
                .set("verify", r#"[{ name = "own", command = "test -s caller.sh" }]"#),
        )
        .build();
    let controller = spawn_controller(repo.path(), &[]);
    let url = controller.url();
    let _w: Vec<_> =
        ["w1", "w2"].iter().map(|w| spawn_sidecar(&url, repo.path(), w, &["--label", "role=work"])).collect();
    create_swarm(&url, &plan).await;

    // Both results wait in the queue before a verifier exists: one batch.
    wait_task_state(&url, "sem", "rename", v1::TaskState::Merging).await;
    gate.open();
    wait_task_state(&url, "sem", "caller", v1::TaskState::Merging).await;
    let _v = spawn_sidecar(&url, repo.path(), "v1", &["--label", "role=verify"]);

    let tasks = wait_all_merged(&url, "sem").await;
    assert_eq!(tasks["rename"].attempts, 1, "the rename landed on its first attempt");
    assert_eq!(tasks["caller"].attempts, 2, "the caller was handed back once");

    let evs = events(&url, "sem", 0, 1).await;
    let culprits = kinds(&evs, "merge_queue.culprit");
    assert_eq!(culprits.len(), 1, "one culprit: {culprits:?}");
    assert!(culprits[0].task_id.ends_with("caller"), "the caller is the culprit: {:?}", culprits[0]);
    // The batch of both failed, the rename alone passed and landed, and
    // the caller was then the culprit without a verification of its own.
    let batches = kinds(&evs, "merge_queue.batch");
    assert!(batches[0].message.contains("rename") && batches[0].message.contains("caller"), "{batches:?}");
    assert_eq!(kinds(&evs, "merge_queue.failed").len(), 1);

    // The second attempt's task text held the failing tier's output.
    let text = std::fs::read_to_string(out.path().join("caller-task-2.md")).unwrap();
    assert!(text.contains("Failing integration verify output"), "{text}");
    assert!(text.contains("old_name"), "the failing output names the missing function: {text}");
    let first = std::fs::read_to_string(out.path().join("caller-task-1.md")).unwrap();
    assert!(!first.contains("Failing integration verify output"));

    // The integration head holds both changes, and its tree passes.
    assert_eq!(repo.file("swarm/sem/integration", "lib.sh").unwrap(), "new_name() { echo hi; }\n");
    assert_eq!(repo.file("swarm/sem/integration", "caller.sh").unwrap(), "new_name\n");
    // Verifications: the batch, the rename alone, then the fixed caller.
    let ran = lines(&count);
    assert_eq!(ran.len(), 3, "{ran:?}");
    assert_eq!(
        ran.last().unwrap(),
        &repo.head("swarm/sem/integration"),
        "the landed head is what was verified"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_of_8_with_one_culprit_costs_at_most_four_verifications() {
    let out = tempfile::tempdir().unwrap();
    let count = out.path().join("verifications");
    // t5 writes "bad" on its first attempt: its own verify passes, the
    // integration verify (no file says bad) does not.
    // `after` depends on t5: it must start from a head holding t5's landed,
    // verified result, so its first attempt finds t5.txt saying good.
    let script = worker_script(&[
        ("t5", "if [ \"$SWARM_ATTEMPT\" = 1 ]; then echo bad > t5.txt; else echo good > t5.txt; fi"),
        ("after", "test \"$(cat t5.txt)\" = good; echo after > after.txt"),
    ]);
    let repo = TempRepo::with_files(&[("worker.sh", &script)]);
    let verify = format!("echo \"$SWARM_VERIFY_COMMIT\" >> '{}'; ! grep -l bad *.txt", count.display());
    let mut plan = queue_plan("eight", &verify, 8, out.path());
    for i in 1..=8 {
        plan = plan.task(task(&format!("t{i}")));
    }
    plan = plan.task(task("after").deps(&["t5"]));
    let controller = spawn_controller(repo.path(), &[]);
    let url = controller.url();
    let _w: Vec<_> =
        ["w1", "w2"].iter().map(|w| spawn_sidecar(&url, repo.path(), w, &["--label", "role=work"])).collect();
    create_swarm(&url, &plan.build()).await;
    for i in 1..=8 {
        wait_task_state(&url, "eight", &format!("t{i}"), v1::TaskState::Merging).await;
    }
    let _v = spawn_sidecar(&url, repo.path(), "v1", &["--label", "role=verify"]);
    let tasks = wait_all_merged(&url, "eight").await;
    assert_eq!(tasks["t5"].attempts, 2);
    assert_eq!(tasks["after"].attempts, 1, "the dependent started only after t5 landed verified");
    for i in [1, 2, 3, 4, 6, 7, 8] {
        assert_eq!(tasks[&format!("t{i}")].attempts, 1, "t{i} was not handed back");
    }

    let evs = events(&url, "eight", 0, 1).await;
    let culprit = evs.iter().position(|e| e.kind == "merge_queue.culprit").expect("a culprit event");
    assert!(evs[culprit].task_id.ends_with("t5"), "{:?}", evs[culprit]);
    assert_eq!(kinds(&evs, "merge_queue.culprit").len(), 1);
    let first_batch = kinds(&evs, "merge_queue.batch")[0];
    assert!(first_batch.message.starts_with("batch of 8"), "{first_batch:?}");
    // The verifications before the culprit was named: at most ⌈log2 8⌉ + 1,
    // each one a run of the verify command on that commit.
    let before: Vec<String> = evs[..culprit]
        .iter()
        .filter(|e| e.kind == "merge_queue.verifying")
        .map(|e| {
            serde_json::from_str::<serde_json::Value>(&e.data).unwrap()["commit"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(before.len() <= 4, "{} verifications to find the culprit", before.len());
    let ran = lines(&count);
    assert_eq!(&ran[..before.len()], &before[..], "the verify command ran once per verification");
    // Everything landed with its own merge, the fixed t5 included.
    assert_eq!(repo.file("swarm/eight/integration", "t5.txt").unwrap(), "good\n");
    let tree = repo.tree("swarm/eight/integration");
    assert_eq!(tree.keys().filter(|p| p.ends_with(".txt")).count(), 9, "{tree:?}");
    assert!(!tree.iter().any(|(p, v)| p.ends_with(".txt") && v.contains("bad")), "{tree:?}");
}

/// A plan of two independent tasks whose integration verify records each
/// run and waits for `gate` (so a verification is in flight when the test
/// kills something).
fn gated_plan(name: &str, count: &Path, gate: &Gate) -> String {
    let verify = format!("echo \"$SWARM_VERIFY_COMMIT\" >> '{}'; {}", count.display(), gate.wait_sh());
    let marks = count.parent().expect("the count's directory");
    queue_plan(name, &verify, 8, marks).task(task("a")).task(task("b")).build()
}

async fn wait_lines(path: &Path, n: usize) {
    swarm_tests::poll(&format!("{n} verifications to start"), std::time::Duration::from_secs(60), || async {
        (lines(path).len() >= n).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_controller_killed_mid_verification_verifies_the_batch_again_and_lands_it_once() {
    let out = tempfile::tempdir().unwrap();
    let count = out.path().join("verifications");
    let gate = Gate::new();
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let mut controller = spawn_controller(repo.path(), swarm_tests::FAST_LEASES);
    let url = controller.url();
    let _w = spawn_sidecar(&url, repo.path(), "w1", &["--label", "role=work"]);
    create_swarm(&url, &gated_plan("crash", &count, &gate)).await;
    wait_task_state(&url, "crash", "a", v1::TaskState::Merging).await;
    wait_task_state(&url, "crash", "b", v1::TaskState::Merging).await;
    let _v = spawn_sidecar(&url, repo.path(), "v1", &["--label", "role=verify"]);
    wait_lines(&count, 1).await;

    controller.restart_after_kill9();
    // The restarted controller rebuilds the queue from the MERGING tasks and
    // verifies the batch again (the first run's verdict went nowhere).
    wait_lines(&count, 2).await;
    gate.open();
    wait_all_merged(&url, "crash").await;
    for id in ["a", "b"] {
        assert_eq!(
            swarm_tests::merges_of(&repo, "swarm/crash/integration", "crash", id),
            1,
            "merges of {id}"
        );
    }
    let ran = lines(&count);
    assert_eq!(ran.last().unwrap(), &repo.head("swarm/crash/integration"), "the landed head was verified");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_verifier_lost_mid_verification_is_replaced_and_the_batch_verified_elsewhere() {
    let out = tempfile::tempdir().unwrap();
    let count = out.path().join("verifications");
    let gate = Gate::new();
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let controller = spawn_controller(repo.path(), swarm_tests::FAST_LEASES);
    let url = controller.url();
    let _w = spawn_sidecar(&url, repo.path(), "w1", &["--label", "role=work"]);
    create_swarm(&url, &gated_plan("lost", &count, &gate)).await;
    wait_task_state(&url, "lost", "a", v1::TaskState::Merging).await;
    wait_task_state(&url, "lost", "b", v1::TaskState::Merging).await;
    let mut verifier = spawn_sidecar(&url, repo.path(), "v1", &["--label", "role=verify"]);
    wait_lines(&count, 1).await;
    // What the operator sees of the queue: MERGING, verifying on v1.
    let mut op = swarm_tests::operator(&url).await;
    let listed = swarm_tests::tasks(&mut op, "lost").await;
    for id in ["a", "b"] {
        let t = &listed[id];
        assert_eq!(swarm_tests::state_of(t), v1::TaskState::Merging);
        assert!(t.reason.contains("integration verify") && t.reason.contains("on v1"), "{}", t.reason);
    }
    let report = swarm_tests::stdout(&swarm_tests::swarmctl(&url, &["report", "lost"]));
    let queue = report.split("## Integration queue").nth(1).unwrap_or_default();
    assert!(
        queue.contains(". a: integration verify") && queue.contains(". b: integration verify"),
        "{report}"
    );
    verifier.kill9();
    let _v2 = spawn_sidecar(&url, repo.path(), "v2", &["--label", "role=verify"]);
    wait_lines(&count, 2).await;
    gate.open();
    wait_all_merged(&url, "lost").await;
    let evs = events(&url, "lost", 0, 1).await;
    assert_eq!(kinds(&evs, "merge_queue.verifier_lost").len(), 1, "{evs:?}");
    let verifiers: Vec<&str> =
        kinds(&evs, "merge_queue.verifying").iter().map(|e| e.worker_id.as_str()).collect();
    assert_eq!(verifiers, vec!["v1", "v2"]);
    assert_eq!(lines(&count).last().unwrap(), &repo.head("swarm/lost/integration"));
}

/// Three cars verified at once on three verifiers, each stacked on the
/// one ahead; a verifier and then the controller are killed -9 while all
/// three verifications are in flight. Every task lands once, and the
/// integration ref only ever stopped at commits a verifier ran.
#[tokio::test(flavor = "multi_thread")]
async fn cars_verified_at_once_land_in_order_through_a_verifier_and_a_controller_kill9() {
    let out = tempfile::tempdir().unwrap();
    let count = out.path().join("verifications");
    let gate = Gate::new();
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let verify = format!("echo \"$SWARM_VERIFY_COMMIT\" >> '{}'; {}", count.display(), gate.wait_sh());
    let ids = ["a", "b", "c", "d", "e", "f"];
    let plan = ids
        .iter()
        .fold(queue_plan("train", &verify, 2, out.path()), |p, id| p.task(task(id)))
        .build()
        .replace("max_batch = 2\n", "max_batch = 2\nmax_parallel = 3\n");
    assert!(plan.contains("max_parallel = 3"), "{plan}");
    let mut controller = spawn_controller(repo.path(), swarm_tests::FAST_LEASES);
    let url = controller.url();
    let _w = spawn_sidecar(&url, repo.path(), "w1", &["--label", "role=work"]);
    create_swarm(&url, &plan).await;
    for id in ids {
        wait_task_state(&url, "train", id, v1::TaskState::Merging).await;
    }
    let mut verifiers: Vec<_> = ["v1", "v2", "v3"]
        .iter()
        .map(|v| spawn_sidecar(&url, repo.path(), v, &["--label", "role=verify"]))
        .collect();
    // Three cars of two, each verification held at the gate: all three run
    // at once.
    wait_lines(&count, 3).await;
    let evs = events(&url, "train", 0, 1).await;
    let behind: Vec<u64> = kinds(&evs, "merge_queue.batch")
        .iter()
        .map(|e| serde_json::from_str::<serde_json::Value>(&e.data).unwrap()["ahead"].as_u64().unwrap())
        .collect();
    assert_eq!(behind, vec![0, 1, 2], "each car is stacked on the ones ahead of it");

    verifiers[1].kill9();
    controller.restart_after_kill9();
    verifiers.push(spawn_sidecar(&url, repo.path(), "v4", &["--label", "role=verify"]));
    gate.open();
    wait_all_merged(&url, "train").await;

    let branch = "swarm/train/integration";
    for id in ids {
        assert_eq!(swarm_tests::merges_of(&repo, branch, "train", id), 1, "merges of {id}");
        assert!(repo.file(branch, &format!("{id}.txt")).is_some(), "{id}'s work landed");
    }
    let verified = lines(&count);
    let evs = events(&url, "train", 0, 1).await;
    let landed: Vec<String> = kinds(&evs, "merge_queue.landed")
        .iter()
        .map(|e| {
            serde_json::from_str::<serde_json::Value>(&e.data).unwrap()["head"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(!landed.is_empty());
    for head in &landed {
        assert!(verified.contains(head), "landed {head}, which no verifier ran: {verified:?}");
    }
    assert_eq!(landed.last().unwrap(), &repo.head(branch), "the branch is at the last verified landing");
}

/// The integration tiers run the tasks' merged code, so they are confined
/// like a worker: a tier cannot read a file outside what the plan names,
/// while it writes where `[merge_queue] sandbox` lets it.
#[tokio::test(flavor = "multi_thread")]
async fn the_integration_tiers_run_confined() {
    if !swarm_sidecar::sandbox::probe().is_full() {
        return swarm_tests::skip_for(
            "the_integration_tiers_run_confined",
            swarm_tests::Needs::Kernel,
            "this kernel does not enforce the sandbox",
        );
    }
    let (out, secret_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "TOPSECRET\n").unwrap();
    let seen = out.path().join("seen");
    let verify = format!(
        "if cat '{}' >/dev/null 2>&1; then echo read >> '{s}'; else echo denied >> '{s}'; fi",
        secret.display(),
        s = seen.display()
    );
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let plan = queue_plan("conf", &verify, 8, out.path()).task(task("a")).build();
    let controller = spawn_controller(repo.path(), &[]);
    let url = controller.url();
    let _w = spawn_sidecar(&url, repo.path(), "w1", &["--label", "role=work"]);
    let _v = spawn_sidecar(&url, repo.path(), "v1", &["--label", "role=verify"]);
    create_swarm(&url, &plan).await;
    wait_task_state(&url, "conf", "a", v1::TaskState::Merged).await;
    assert_eq!(lines(&seen), vec!["denied"], "the tier ran once, confined");
}

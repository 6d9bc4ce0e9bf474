//! A hostile client against the real controller on 127.0.0.1: it may say
//! anything the wire allows, and must change nothing it does not own.

mod support;

use std::time::Duration;

use futures::StreamExt;

use support::*;
use swarm_proto::limits::{SECRET_HEADER, WORKER_HEADER};
use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;
use swarm_proto::v1::sidecar_service_client::SidecarServiceClient;
use tonic::Code;
use tonic::metadata::MetadataValue;

const ONE: &str = "name = \"s\"\n[defaults]\ncommand = \"true\"\nretries = 1\nbackoff_initial_ms = 10\n\
                   backoff_max_ms = 20\n[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n";

fn started(a: &v1::Assign) -> Body {
    Body::Started(v1::AttemptStarted { attempt: Some(attempt_ref(a)), pid: 1, restarts: 0, sandbox: None })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_for_a_connected_worker_without_its_secret_is_refused_and_the_owner_keeps_its_attempt() {
    let h = Harness::start().await;
    h.create(ONE).await;
    let mut owner = h.sidecar("w1").await;
    let a = owner.assign().await;
    assert_eq!(owner.secret().len(), 32, "Welcome carries a resume secret");

    for forged in ["", "00000000000000000000000000000000"] {
        let refused =
            Sim::try_connect(h.channel.clone(), "w1", None, 0, forged).await.err().expect("refused");
        assert_eq!(refused.code(), Code::AlreadyExists, "{}", refused.message());
        assert!(refused.message().contains("resume secret"), "{}", refused.message());
    }
    // The owner's stream is untouched: its reports still apply.
    let seq = owner.send(started(&a)).await;
    owner.acked(seq).await;
    assert_eq!(h.task("s/a").await.attempts[0].state, v1::AttemptState::Running as i32);
    let events = h.events().await;
    assert_eq!(events.iter().filter(|e| e.kind == "hello.refused").count(), 1, "audited once per window");

    // The owner itself (after a restart, with its journaled secret) may take over.
    let secret = owner.secret();
    let mut back = Sim::connect(h.channel.clone(), "w1", Some(attempt_ref(&a)), seq, &secret).await;
    assert!(back.welcome.attempt_resumed);
    let commit = h.repo().commit(Some(&a.base_commit), &[("a.txt", "A\n")], "a");
    back.result(&a, v1::Outcome::Success, 0, &commit).await;
    h.wait_state("s/a", v1::TaskState::Merged).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnected_worker_holding_an_attempt_is_not_claimed_without_its_secret() {
    let h = Harness::start().await;
    h.create(ONE).await;
    let mut owner = h.sidecar("w1").await;
    let a = owner.assign().await;
    let secret = owner.secret();
    drop(owner);
    // Wait until the controller has seen the stream go.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let workers =
            h.operator().list_workers(v1::ListWorkersRequest::default()).await.expect("workers").into_inner();
        if workers.workers.iter().any(|w| w.id == "w1" && !w.connected) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "w1 never disconnected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refused = Sim::try_connect(h.channel.clone(), "w1", Some(attempt_ref(&a)), 0, "").await.err();
    let refused = refused.expect("an impostor is refused");
    assert_eq!(refused.code(), Code::AlreadyExists);
    assert!(refused.message().contains("s/a#1"), "{}", refused.message());
    let back = Sim::connect(h.channel.clone(), "w1", Some(attempt_ref(&a)), 0, &secret).await;
    assert!(back.welcome.attempt_resumed, "the real sidecar resumes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_gap_is_refused_closes_the_stream_and_changes_nothing() {
    let h = Harness::start().await;
    h.create(ONE).await;
    let mut secret = String::new();
    for jump in [1_000u64, u64::MAX] {
        let mut sc = connect_when_released(&h, "w1", None, &secret).await;
        let a = sc.assign().await;
        let before = h.task("s/a").await;
        let next = sc.seq + 1;
        let gap = if jump == u64::MAX { u64::MAX } else { next + jump };
        sc.send_raw(
            gap,
            Body::Result(v1::AttemptResult {
                attempt: Some(attempt_ref(&a)),
                outcome: v1::Outcome::Error as i32,
                exit_code: 1,
                ..Default::default()
            }),
        )
        .await;
        let status = sc.closed().await;
        assert_eq!(status.code(), Code::FailedPrecondition, "{}", status.message());
        assert!(status.message().contains(&format!("sequence number {next}")), "{}", status.message());
        let after = h.task("s/a").await;
        assert_eq!(after.task, before.task, "nothing applied");
        assert_eq!(after.attempts, before.attempts);

        // The worker is not wedged: reconnected, its next number applies.
        secret = sc.secret();
        drop(sc);
        let mut back = connect_when_released(&h, "w1", Some(attempt_ref(&a)), &secret).await;
        assert_eq!(back.welcome.last_applied_seq, next - 1, "the gap was not recorded as applied");
        let seq = back.send(started(&a)).await;
        assert_eq!(seq, next);
        back.acked(seq).await;
        secret = back.secret();
        drop(back);
        // Let the next round start from a worker without a stream.
        wait_disconnected(&h, "w1").await;
    }
}

/// Connects as `worker` once the controller has let go of its last stream.
async fn connect_when_released(
    h: &Harness,
    worker: &str,
    in_hand: Option<v1::AttemptRef>,
    secret: &str,
) -> Sim {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match Sim::try_connect(h.channel.clone(), worker, in_hand.clone(), 0, secret).await {
            Ok(sim) => return sim,
            Err(status) if status.code() == Code::AlreadyExists && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(status) => panic!("{worker}: {status:?}"),
        }
    }
}

async fn wait_disconnected(h: &Harness, worker: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let workers =
            h.operator().list_workers(v1::ListWorkersRequest::default()).await.expect("workers").into_inner();
        if workers.workers.iter().all(|w| w.id != worker || !w.connected) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{worker} never disconnected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_the_integrator_refuses_fails_its_attempt_and_forgets_the_commit() {
    let h = Harness::start().await;
    h.create(ONE).await;
    let mut sc = h.sidecar("w1").await;
    let a1 = sc.assign().await;
    // A commit id the repository does not have.
    sc.result(&a1, v1::Outcome::Success, 0, &"ab".repeat(20)).await;
    let a2 = sc.assign().await;
    assert_eq!(attempt_ref(&a2).attempt, 2, "the retry policy decides");
    let d = h.task("s/a").await;
    assert_eq!(d.attempts[0].state, v1::AttemptState::Failed as i32, "never SUCCEEDED with a missing commit");
    assert!(d.attempts[0].error.contains("does not exist"), "{}", d.attempts[0].error);
    assert_eq!(d.task.expect("task").retries_used, 1);
    // A commit outside the owned globs (ownership is enforced by default).
    let outside = h.repo().commit(Some(&a2.base_commit), &[("b.txt", "not mine\n")], "outside");
    sc.result(&a2, v1::Outcome::Success, 0, &outside).await;
    let d = h.wait_state("s/a", v1::TaskState::Failed).await;
    assert_eq!(d.attempts[1].state, v1::AttemptState::Failed as i32);
    assert_eq!(d.task.expect("task").state, v1::TaskState::Failed as i32);
    assert!(h.events().await.iter().any(|e| e.kind == "task.result_refused" && e.attempt == 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_over_the_message_limit_ends_the_stream_with_resource_exhausted() {
    let h = Harness::start().await;
    h.create(ONE).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    sc.send(Body::Result(v1::AttemptResult {
        attempt: Some(attempt_ref(&a)),
        outcome: v1::Outcome::Error as i32,
        summary: "x".repeat(swarm_proto::limits::MAX_MESSAGE_BYTES + 1),
        ..Default::default()
    }))
    .await;
    let status = sc.closed().await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{}", status.message());
    assert!(status.message().contains(&swarm_proto::limits::MAX_MESSAGE_BYTES.to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_with_bad_options_is_refused_naming_the_option_and_changes_nothing() {
    let h = Harness::start().await;
    h.create(ONE).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    for (options, field) in [
        (vec!["ok".to_string(), "two\nlines".into()], "question.options[1]"),
        (vec![" ".to_string()], "question.options[0]"),
        (vec!["x".to_string(); swarm_proto::limits::MAX_OPTIONS + 1], "question.options"),
    ] {
        sc.send(Body::Question(v1::Question {
            attempt: Some(attempt_ref(&a)),
            question_id: "q1".into(),
            text: "which?".into(),
            category: "design".into(),
            options,
        }))
        .await;
        let status = sc.closed().await;
        assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
        assert!(status.message().contains(field), "{field}: {}", status.message());
        let task = h.task("s/a").await.task.expect("task");
        assert!(task.pending_question.is_empty() && task.pending_options.is_empty(), "nothing recorded");
        let secret = sc.secret();
        drop(sc);
        sc = connect_when_released(&h, "w1", Some(attempt_ref(&a)), &secret).await;
    }
}

fn with_claim<T>(message: T, worker: &str, secret: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.metadata_mut().insert(WORKER_HEADER, MetadataValue::try_from(worker).expect("ascii"));
    r.metadata_mut().insert(SECRET_HEADER, MetadataValue::try_from(secret).expect("ascii"));
    r
}

fn chunk(attempt: &v1::AttemptRef, tip: &str, data: Vec<u8>) -> v1::PushPackChunk {
    v1::PushPackChunk { attempt: Some(attempt.clone()), tip: tip.into(), data }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packs_move_only_for_the_live_attempt_of_the_caller() {
    let h = Harness::start().await;
    h.create(ONE).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    let secret = sc.secret();
    let mut client = SidecarServiceClient::new(h.channel.clone());
    let tip = h.repo().commit(Some(&a.base_commit), &[("a.txt", "A\n")], "a");
    let pack =
        swarm_git::build_pack(h.repo().path(), &tip, std::slice::from_ref(&a.base_commit)).expect("pack");
    let objects_before = count_packs(h.repo().path());

    let forged = v1::AttemptRef { fencing_token: attempt_ref(&a).fencing_token + 1, ..attempt_ref(&a) };
    let nonexistent = v1::AttemptRef { task_id: "zz".into(), ..attempt_ref(&a) };
    let cases = [
        (attempt_ref(&a), "w1", "", Code::PermissionDenied),
        (attempt_ref(&a), "w1", "ffffffffffffffffffffffffffffffff", Code::PermissionDenied),
        (attempt_ref(&a), "w2", secret.as_str(), Code::PermissionDenied),
        (forged, "w1", secret.as_str(), Code::PermissionDenied),
        (nonexistent, "w1", secret.as_str(), Code::PermissionDenied),
    ];
    for (i, (attempt, worker, secret, code)) in cases.into_iter().enumerate() {
        let req = with_claim(tokio_stream::iter([chunk(&attempt, &tip, pack.clone())]), worker, secret);
        let status = client.push_pack(req).await.expect_err("refused");
        assert_eq!(status.code(), code, "case {}: {}", i + 1, status.message());
    }
    let status = client
        .push_pack(tokio_stream::iter([chunk(&attempt_ref(&a), &tip, pack.clone())]))
        .await
        .expect_err("no claim at all");
    assert_eq!(status.code(), Code::Unauthenticated, "{}", status.message());
    assert_eq!(count_packs(h.repo().path()), objects_before, "no refused pack installed anything");

    let fetch = with_claim(v1::FetchPackRequest { want: a.base_commit.clone(), have: vec![] }, "w1", "");
    assert_eq!(client.fetch_pack(fetch).await.expect_err("fetch refused").code(), Code::PermissionDenied);

    let ok = with_claim(tokio_stream::iter([chunk(&attempt_ref(&a), &tip, pack)]), "w1", &secret);
    let resp = client.push_pack(ok).await.expect("the live attempt's pack is taken").into_inner();
    assert_eq!(resp.tip, tip);
    let fetch = with_claim(v1::FetchPackRequest { want: tip.clone(), have: vec![] }, "w1", &secret);
    assert!(client.fetch_pack(fetch).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_context_is_told_only_to_the_sidecar_holding_the_attempt() {
    let h = Harness::start().await;
    h.create(ONE).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    let secret = sc.secret();
    let mut client = SidecarServiceClient::new(h.channel.clone());
    let ask = |attempt: v1::AttemptRef| v1::GetTaskContextRequest { attempt: Some(attempt) };

    let forged = v1::AttemptRef { fencing_token: attempt_ref(&a).fencing_token + 1, ..attempt_ref(&a) };
    let other_task = v1::AttemptRef { task_id: "zz".into(), ..attempt_ref(&a) };
    let cases = [
        (attempt_ref(&a), "w1", "", Code::PermissionDenied),
        (attempt_ref(&a), "w2", secret.as_str(), Code::PermissionDenied),
        (forged, "w1", secret.as_str(), Code::PermissionDenied),
        (other_task, "w1", secret.as_str(), Code::PermissionDenied),
    ];
    for (i, (attempt, worker, secret, code)) in cases.into_iter().enumerate() {
        let status =
            client.get_task_context(with_claim(ask(attempt), worker, secret)).await.expect_err("refused");
        assert_eq!(status.code(), code, "case {}: {}", i + 1, status.message());
    }
    let none = with_claim(v1::GetTaskContextRequest { attempt: None }, "w1", &secret);
    let status = client.get_task_context(none).await.expect_err("no attempt");
    assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
    assert!(status.message().starts_with("attempt"), "{}", status.message());
    let status = client.get_task_context(ask(attempt_ref(&a))).await.expect_err("no claim at all");
    assert_eq!(status.code(), Code::Unauthenticated, "{}", status.message());

    let ok = client.get_task_context(with_claim(ask(attempt_ref(&a)), "w1", &secret)).await;
    let context = ok.expect("the live attempt's holder is told").into_inner();
    assert!(context.dependencies.is_empty() && context.siblings.is_empty(), "{context:?}");
}

/// The plan of a task owning a directory, for a child to own parts of.
const OWNS_DIR: &str =
    "name = \"s\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"src/**\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_is_spawned_only_by_the_sidecar_holding_the_attempt_and_only_inside_its_files() {
    let h = Harness::start().await;
    h.create(OWNS_DIR).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    let secret = sc.secret();
    let mut client = SidecarServiceClient::new(h.channel.clone());
    let fragment = "[[tasks]]\nid = \"x\"\nfiles = [\"src/x/**\"]\n";
    let spawn = |attempt: v1::AttemptRef, plan: &str| v1::SpawnChildrenRequest {
        attempt: Some(attempt),
        plan_toml: plan.to_string(),
    };
    let forged = v1::AttemptRef { fencing_token: attempt_ref(&a).fencing_token + 1, ..attempt_ref(&a) };
    let refused = [
        (attempt_ref(&a), "w1", "", fragment, Code::PermissionDenied, "pack for worker w1"),
        (attempt_ref(&a), "w2", secret.as_str(), fragment, Code::PermissionDenied, "pack for worker w2"),
        (forged, "w1", secret.as_str(), fragment, Code::PermissionDenied, "is not its live attempt"),
        (
            attempt_ref(&a),
            "w1",
            secret.as_str(),
            "[[tasks]]\nid = \"x\"\nfiles = [\"lib/**\"]\n",
            Code::InvalidArgument,
            "tasks[0].files[0]: \"lib/**\" is not inside",
        ),
        (
            attempt_ref(&a),
            "w1",
            secret.as_str(),
            "name = \"y\"\n",
            Code::InvalidArgument,
            "name: only tasks may be given",
        ),
    ];
    for (i, (attempt, worker, secret, plan, code, says)) in refused.into_iter().enumerate() {
        let status = client
            .spawn_children(with_claim(spawn(attempt, plan), worker, secret))
            .await
            .expect_err("refused");
        assert_eq!(status.code(), code, "case {}: {}", i + 1, status.message());
        assert!(status.message().contains(says), "case {}: {}", i + 1, status.message());
    }
    let swarms = || async {
        let list =
            h.operator().list_swarms(v1::ListSwarmsRequest::default()).await.expect("list").into_inner();
        list.swarms.len()
    };
    assert_eq!(swarms().await, 1, "no refused spawn made a swarm");
    let none = client.get_children(with_claim(
        v1::GetChildrenRequest { attempt: Some(attempt_ref(&a)) },
        "w1",
        &secret,
    ));
    assert_eq!(none.await.expect("children").into_inner().swarm, "", "none spawned yet");

    let first = client.spawn_children(with_claim(spawn(attempt_ref(&a), fragment), "w1", &secret)).await;
    let first = first.expect("the holder spawns").into_inner();
    assert_eq!((first.swarm.as_str(), first.tasks.len()), ("s/a", 1), "{first:?}");
    let again = client.spawn_children(with_claim(spawn(attempt_ref(&a), fragment), "w1", &secret)).await;
    assert_eq!(again.expect("the same tasks again").into_inner().swarm, "s/a");
    assert_eq!(swarms().await, 2, "one child, however often it is asked for");
    let other = "[[tasks]]\nid = \"y\"\nfiles = [\"src/y/**\"]\n";
    let status = client
        .spawn_children(with_claim(spawn(attempt_ref(&a), other), "w1", &secret))
        .await
        .expect_err("other tasks");
    assert_eq!(status.code(), Code::FailedPrecondition, "{}", status.message());
    let asked = v1::GetChildrenRequest { attempt: Some(attempt_ref(&a)) };
    let status = client.get_children(with_claim(asked, "w2", &secret)).await.expect_err("not the holder");
    assert_eq!(status.code(), Code::PermissionDenied, "{}", status.message());
}

fn count_packs(repo: &std::path::Path) -> usize {
    std::fs::read_dir(repo.join(".git/objects/pack")).map(|d| d.count()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_pack_is_refused_while_it_streams() {
    let max = 8 << 20;
    let h = Harness::start_with(|c| c.max_pack_bytes = max).await;
    h.create(ONE).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    let secret = sc.secret();
    let tip = a.base_commit.clone();
    // Chunks are made as they are sent, so the test holds one at a time.
    let r = attempt_ref(&a);
    let chunks = futures::stream::iter(0..(max / (4 << 20) + 2)).map(move |i| v1::PushPackChunk {
        attempt: (i == 0).then(|| r.clone()),
        tip: if i == 0 { tip.clone() } else { String::new() },
        data: vec![0u8; 4 << 20],
    });
    let status = SidecarServiceClient::new(h.channel.clone())
        .push_pack(with_claim(chunks, "w1", &secret))
        .await
        .expect_err("too large");
    assert_eq!(status.code(), Code::ResourceExhausted, "{}", status.message());
    assert!(status.message().contains(&max.to_string()));
    let incoming = h.repo().path().join(".git/swarm/incoming");
    assert_eq!(std::fs::read_dir(incoming).map(|d| d.count()).unwrap_or(0), 0, "the staging file is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_swarm_refuses_refs_another_swarm_owns_before_making_any() {
    let h = Harness::start().await;
    h.create(ONE).await;
    let plans = [
        ("name = \"t\"\nintegration_branch = \"swarm/s/integration\"", "integration_branch"),
        ("name = \"t\"\nintegration_branch = \"swarm/s/mine\"", "integration_branch"),
        ("name = \"t\"\ntarget_branch = \"swarm/s/integration\"", "target_branch"),
    ];
    for (head, field) in plans {
        let plan =
            format!("{head}\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n");
        let status = h
            .operator()
            .create_swarm(v1::CreateSwarmRequest { plan_toml: plan, origin: None })
            .await
            .expect_err("refused");
        assert_eq!(status.code(), Code::AlreadyExists, "{}", status.message());
        assert!(status.message().contains(field), "{}", status.message());
    }
    let branches = h.repo().git(&["branch", "--list", "swarm/s/mine"]);
    assert!(branches.is_empty(), "no branch was made for a refused plan");
    let swarms = h.operator().list_swarms(v1::ListSwarmsRequest::default()).await.expect("list").into_inner();
    assert_eq!(swarms.swarms.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn land_moves_only_branches_outside_every_swarm_and_records_it() {
    let h = Harness::start().await;
    h.create(ONE).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    let commit = h.repo().commit(Some(&a.base_commit), &[("a.txt", "A\n")], "a");
    sc.result(&a, v1::Outcome::Success, 0, &commit).await;
    h.wait_state("s/a", v1::TaskState::Merged).await;
    let mut op = h.operator();
    let land = |target: &str| v1::LandRequest { swarm_id: "s".into(), target_branch: target.into() };
    for target in ["swarm/s/a", "swarm/s/integration"] {
        let status = op.land(land(target)).await.expect_err("a swarm's branch");
        assert_eq!(status.code(), Code::InvalidArgument, "{target}: {}", status.message());
    }
    // A branch checked out in a worktree is not moved under it.
    h.repo().git(&["branch", "release", "main"]);
    let wt = h.dir.path().join("release-wt");
    h.repo().git(&["worktree", "add", wt.to_str().expect("utf-8"), "release"]);
    let status = op.land(land("release")).await.expect_err("checked out");
    assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
    assert!(status.message().contains("checked out"), "{}", status.message());
    h.repo().git(&["worktree", "remove", "--force", wt.to_str().expect("utf-8")]);

    let landed = op.land(land("release")).await.expect("lands").into_inner();
    let head = h.repo().git(&["rev-parse", "swarm/s/integration"]);
    assert_eq!(landed.new_commit, head);
    assert_eq!(h.repo().git(&["rev-parse", "release"]), head);
    let events = h.events().await;
    assert!(events.iter().any(|e| e.kind == "swarm.landed" && e.message.contains("release")));
    assert_eq!(
        events.iter().filter(|e| e.kind == "swarm.land_failed").count(),
        1,
        "the refusal by git state"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_reports_cannot_grow_the_audit_log_at_the_rate_they_are_sent() {
    let h = Harness::start().await;
    h.create(ONE).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    let stale = v1::AttemptRef { fencing_token: attempt_ref(&a).fencing_token + 99, ..attempt_ref(&a) };
    let before = h.events().await.len();
    for n in 1..=5_000 {
        let last = sc
            .send(Body::Status(v1::Status {
                attempt: Some(stale.clone()),
                status: v1::WorkerStatus::Working as i32,
                message: "forged".into(),
            }))
            .await;
        // Read the acks as a real sidecar does: one that lets its inbound
        // queue fill is disconnected.
        if n % 250 == 0 {
            sc.acked(last).await;
        }
    }
    let events = h.events().await;
    let added = &events[before..];
    assert_eq!(added.iter().filter(|e| e.kind == "report.fenced").count(), 1, "first of the window only");
    assert!(added.len() <= 2, "{} events for 5,000 fenced reports", added.len());
    assert_eq!(h.state("s/a").await, v1::TaskState::Running, "nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_gone_and_idle_are_forgotten_but_their_events_stay() {
    let h = Harness::start_with(|c| c.forget_workers_after = Duration::from_millis(300)).await;
    let sc = h.sidecar("passing-by").await;
    drop(sc);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let workers =
            h.operator().list_workers(v1::ListWorkersRequest::default()).await.expect("workers").into_inner();
        if workers.workers.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never forgotten: {workers:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let events = h.events().await;
    assert!(events.iter().any(|e| e.kind == "worker.connected" && e.worker_id == "passing-by"));
    assert!(events.iter().any(|e| e.kind == "worker.forgotten" && e.worker_id == "passing-by"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_never_says_hello_is_cut() {
    let h = Harness::start_with(|c| c.hello_timeout = Duration::from_millis(300)).await;
    let (_tx, rx) = tokio::sync::mpsc::channel::<v1::SidecarMessage>(1);
    let result = tokio::time::timeout(
        WAIT,
        SidecarServiceClient::new(h.channel.clone()).connect(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
    .await
    .expect("answered in time");
    let status = match result {
        Err(status) => status,
        Ok(resp) => resp.into_inner().message().await.expect_err("cut"),
    };
    assert_eq!(status.code(), Code::DeadlineExceeded, "{}", status.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_of_a_swarm_spawn_at_most_a_thousand_tasks_in_all() {
    let mut plan = String::from("name = \"s\"\n[defaults]\ncommand = \"true\"\n");
    for i in 0..11 {
        plan.push_str(&format!("[[tasks]]\nid = \"p{i}\"\nfiles = [\"p{i}/**\"]\n"));
    }
    let h = Harness::start().await;
    h.create(&plan).await;
    let mut client = SidecarServiceClient::new(h.channel.clone());
    let (mut last, mut held) = (None, Vec::new());
    for i in 0..11 {
        let mut sc = h.sidecar(&format!("w{i}")).await;
        let a = sc.assign().await;
        let parent = attempt_ref(&a).task_id;
        // Labels no sidecar here has: the next sidecar takes the next parent.
        let fragment: String = (0..100)
            .map(|k| {
                format!("[[tasks]]\nid = \"c{k}\"\nfiles = [\"{parent}/c{k}.txt\"]\nlabels = {{ pool = \"none\" }}\n")
            })
            .collect();
        let req = v1::SpawnChildrenRequest { attempt: Some(attempt_ref(&a)), plan_toml: fragment };
        last = Some(client.spawn_children(with_claim(req, &format!("w{i}"), &sc.secret())).await);
        if i < 10 {
            assert!(last.as_ref().is_some_and(|r| r.is_ok()), "spawn {i}: {last:?}");
        }
        held.push(sc); // keeps its stream, so the next sidecar takes the next task
    }
    let status = last.expect("eleven spawns").expect_err("the eleventh passes the cap");
    assert_eq!(status.code(), Code::FailedPrecondition, "{}", status.message());
    assert!(status.message().contains("spawned 1000 tasks; at most 1000"), "{}", status.message());
}

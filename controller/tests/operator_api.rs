//! The Operator API: Watch across the replay/live switch, and a table of
//! bad inputs that must each get the right code, name the field and rule,
//! and change nothing.

mod support;

use std::time::Duration;

use futures::StreamExt;
use support::*;
use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;
use swarm_proto::v1::sidecar_service_client::SidecarServiceClient;
use tonic::Code;

const PLAN: &str = "name = \"s\"\n[defaults]\ncommand = \"true\"\nretries = 100\nbackoff_initial_ms = 1\nbackoff_max_ms = 1\n[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_across_the_replay_live_switch_without_gaps_or_duplicates() {
    let h = Harness::start().await;
    h.create(PLAN).await;
    let mut sc = h.sidecar("w1").await;
    // Keep events flowing while watchers attach: every failed attempt is
    // retried at once and writes several events.
    let producer = tokio::spawn(async move {
        for _ in 0..40 {
            let a = sc.assign().await;
            sc.result(&a, v1::Outcome::Error, 1, "").await;
        }
        sc
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut op = h.operator();
    let mut early = op
        .watch(v1::WatchRequest { after_event_id: 0, swarm_id: String::new(), ..Default::default() })
        .await
        .expect("watch")
        .into_inner();
    let first: Vec<u64> = {
        let mut ids = Vec::new();
        for _ in 0..5 {
            ids.push(early.next().await.expect("event").expect("ok").id);
        }
        ids
    };
    let resume_from = first[2];
    let mut resumed = op
        .watch(v1::WatchRequest { after_event_id: resume_from, swarm_id: "s".into(), ..Default::default() })
        .await
        .expect("watch")
        .into_inner();
    let _sc = producer.await.expect("producer");
    // Everything after resume_from, in order, no gap (all events here
    // belong to swarm s or to worker w1; the filtered stream skips only
    // worker events).
    let all = h.events().await;
    let expected: Vec<u64> =
        all.iter().filter(|e| e.id > resume_from && e.swarm_id == "s").map(|e| e.id).collect();
    assert!(expected.len() > 50, "enough events to cross the switch: {}", expected.len());
    let mut got = Vec::new();
    while got.len() < expected.len() {
        let e =
            tokio::time::timeout(WAIT, resumed.next()).await.expect("in time").expect("event").expect("ok");
        got.push(e.id);
    }
    assert_eq!(got, expected);
    let mut ids: Vec<u64> = all.iter().map(|e| e.id).collect();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "no duplicates");
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "event ids are dense and increasing");
}

async fn store_fingerprint(h: &Harness) -> (usize, Vec<String>) {
    let events = h.events().await.len();
    let swarms =
        h.operator().list_swarms(v1::ListSwarmsRequest::default()).await.expect("list").into_inner().swarms;
    (events, swarms.into_iter().map(|s| format!("{}:{}:{:?}", s.id, s.state, s.tasks_by_state)).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_operator_requests_name_the_field_and_change_nothing() {
    let h = Harness::start().await;
    h.create(PLAN).await;
    let before = store_fingerprint(&h).await;
    let mut op = h.operator();
    let bad_plan = |text: &str| v1::CreateSwarmRequest { plan_toml: text.into(), origin: None };
    let plan_with = |extra: &str| {
        format!(
            "name = \"t\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n{extra}"
        )
    };
    let cases: Vec<(tonic::Status, Code, &str)> = vec![
        (op.create_swarm(bad_plan("name = ")).await.expect_err("1"), Code::InvalidArgument, "plan_toml"),
        (
            op.create_swarm(bad_plan(&plan_with("deps = [\"db\"]"))).await.expect_err("2"),
            Code::InvalidArgument,
            "tasks[0].deps[0]: unknown task \"db\"",
        ),
        (
            op.create_swarm(bad_plan(&plan_with("colour = 1"))).await.expect_err("3"),
            Code::InvalidArgument,
            "tasks[0].colour",
        ),
        (
            op.create_swarm(bad_plan(&plan_with("").replace("\"t\"", "\"../x\""))).await.expect_err("4"),
            Code::InvalidArgument,
            "name",
        ),
        (
            op.create_swarm(bad_plan(&plan_with("").replace("[\"a\"]", "[\"/etc/passwd\"]")))
                .await
                .expect_err("5"),
            Code::InvalidArgument,
            "tasks[0].files[0]",
        ),
        (
            op.create_swarm(bad_plan(&format!("base_branch = \"nope\"\n{}", plan_with(""))))
                .await
                .expect_err("6"),
            Code::FailedPrecondition,
            "nope",
        ),
        (
            op.create_swarm(bad_plan(&PLAN.replace("a.txt", "b.txt"))).await.expect_err("7"),
            Code::AlreadyExists,
            "already exists",
        ),
        (
            op.get_swarm(v1::GetSwarmRequest { swarm_id: "S!".into() }).await.expect_err("8"),
            Code::InvalidArgument,
            "swarm_id",
        ),
        (
            op.get_swarm(v1::GetSwarmRequest { swarm_id: "nope".into() }).await.expect_err("9"),
            Code::NotFound,
            "nope",
        ),
        (
            op.get_task(v1::GetTaskRequest { task_id: "s".into() }).await.expect_err("10"),
            Code::InvalidArgument,
            "task_id",
        ),
        (
            op.get_task(v1::GetTaskRequest { task_id: "s/zz".into() }).await.expect_err("11"),
            Code::NotFound,
            "s/zz",
        ),
        (
            op.list_tasks(v1::ListTasksRequest {
                swarm_id: "s".into(),
                states: vec![99],
                ..Default::default()
            })
            .await
            .expect_err("12"),
            Code::InvalidArgument,
            "states[0]",
        ),
        (
            op.cancel_task(v1::CancelTaskRequest { task_id: "s/a".into(), reason: "x".repeat(70_000) })
                .await
                .expect_err("13"),
            Code::InvalidArgument,
            "reason",
        ),
        (
            op.retry_task(v1::RetryTaskRequest { task_id: "s/a".into() }).await.expect_err("14"),
            Code::FailedPrecondition,
            "READY",
        ),
        (
            op.answer(v1::AnswerRequest {
                task_id: "s/a".into(),
                question_id: String::new(),
                text: " ".into(),
            })
            .await
            .expect_err("15"),
            Code::InvalidArgument,
            "text",
        ),
        (
            op.answer(v1::AnswerRequest {
                task_id: "s/a".into(),
                question_id: "Q 1".into(),
                text: "x".into(),
            })
            .await
            .expect_err("16"),
            Code::InvalidArgument,
            "question_id",
        ),
        (
            op.answer(v1::AnswerRequest {
                task_id: "s/a".into(),
                question_id: String::new(),
                text: "x".into(),
            })
            .await
            .expect_err("17"),
            Code::FailedPrecondition,
            "no open question",
        ),
        (
            op.drain_worker(v1::DrainWorkerRequest { worker_id: "-w".into() }).await.expect_err("18"),
            Code::InvalidArgument,
            "worker_id",
        ),
        (
            op.drain_worker(v1::DrainWorkerRequest { worker_id: "ghost".into() }).await.expect_err("19"),
            Code::NotFound,
            "ghost",
        ),
        (
            op.land(v1::LandRequest { swarm_id: "s".into(), target_branch: "a..b".into() })
                .await
                .expect_err("20"),
            Code::InvalidArgument,
            "target_branch",
        ),
        (
            op.land(v1::LandRequest { swarm_id: "s".into(), target_branch: "swarm/s/integration".into() })
                .await
                .expect_err("21"),
            Code::InvalidArgument,
            "target_branch",
        ),
        (
            op.cancel_swarm(v1::CancelSwarmRequest { swarm_id: String::new(), reason: String::new() })
                .await
                .expect_err("22"),
            Code::InvalidArgument,
            "swarm_id",
        ),
    ];
    for (i, (status, code, names)) in cases.iter().enumerate() {
        assert_eq!(status.code(), *code, "case {}: {}", i + 1, status.message());
        assert!(
            status.message().contains(names),
            "case {}: {:?} should name {names:?}",
            i + 1,
            status.message()
        );
    }
    assert_eq!(store_fingerprint(&h).await, before, "bad requests changed nothing");
}

/// Opens a raw Connect stream, sends `messages`, and returns the status the
/// controller ends it with.
async fn connect_status(h: &Harness, messages: Vec<v1::SidecarMessage>) -> tonic::Status {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    for m in messages {
        tx.send(m).await.expect("queue");
    }
    let mut client = SidecarServiceClient::new(h.channel.clone());
    match client.connect(tokio_stream::wrappers::ReceiverStream::new(rx)).await {
        Err(status) => status,
        Ok(resp) => {
            let mut stream = resp.into_inner();
            loop {
                match tokio::time::timeout(WAIT, stream.message()).await.expect("ends in time") {
                    Ok(Some(_)) => continue,
                    Ok(None) => panic!("stream ended without an error"),
                    Err(status) => return status,
                }
            }
        }
    }
}

fn hello(worker: &str) -> v1::SidecarMessage {
    v1::SidecarMessage {
        seq: 0,
        body: Some(Body::Hello(v1::Hello {
            worker_id: worker.into(),
            capacity: 1,
            shares_repository: true,
            ..Default::default()
        })),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sidecar_messages_close_the_stream_with_the_field_and_change_nothing() {
    let h = Harness::start().await;
    h.create(PLAN).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    let before = h.task("s/a").await.task.expect("task");
    let good_ref = attempt_ref(&a);
    let msg = |seq: u64, body: Body| v1::SidecarMessage { seq, body: Some(body) };
    let cases: Vec<(Vec<v1::SidecarMessage>, &str)> = vec![
        (vec![msg(0, Body::Heartbeat(v1::Heartbeat::default()))], "hello"),
        (vec![hello("Bad Worker")], "hello.worker_id"),
        (
            vec![v1::SidecarMessage {
                seq: 0,
                body: Some(Body::Hello(v1::Hello {
                    worker_id: "w9".into(),
                    labels: [("bad key".to_string(), "v".to_string())].into(),
                    ..Default::default()
                })),
            }],
            "hello.labels",
        ),
        (
            // A sidecar of a newer protocol revision than this controller's.
            vec![v1::SidecarMessage {
                seq: 0,
                body: Some(Body::Hello(v1::Hello {
                    worker_id: "w9".into(),
                    capacity: 1,
                    protocol: swarm_proto::compat::PROTOCOL + 1,
                    ..Default::default()
                })),
            }],
            "hello.protocol",
        ),
        (
            vec![
                hello("w9"),
                msg(
                    1,
                    Body::Result(v1::AttemptResult {
                        attempt: Some(good_ref.clone()),
                        outcome: v1::Outcome::Success as i32,
                        commit: "abc".into(),
                        ..Default::default()
                    }),
                ),
            ],
            "result.commit",
        ),
        (
            vec![
                hello("w9"),
                msg(
                    1,
                    Body::Result(v1::AttemptResult {
                        attempt: Some(good_ref.clone()),
                        outcome: v1::Outcome::Success as i32,
                        ..Default::default()
                    }),
                ),
            ],
            "result.commit",
        ),
        (
            vec![
                hello("w9"),
                msg(
                    1,
                    Body::Result(v1::AttemptResult {
                        attempt: Some(good_ref.clone()),
                        outcome: 77,
                        ..Default::default()
                    }),
                ),
            ],
            "result.outcome",
        ),
        (
            vec![
                hello("w9"),
                msg(
                    0,
                    Body::Result(v1::AttemptResult {
                        attempt: Some(good_ref.clone()),
                        outcome: v1::Outcome::Error as i32,
                        ..Default::default()
                    }),
                ),
            ],
            "seq",
        ),
        (
            vec![
                hello("w9"),
                msg(
                    1,
                    Body::Result(v1::AttemptResult {
                        attempt: None,
                        outcome: v1::Outcome::Error as i32,
                        ..Default::default()
                    }),
                ),
            ],
            "result.attempt",
        ),
        (
            vec![
                hello("w9"),
                msg(
                    0,
                    Body::Progress(v1::Progress {
                        attempt: Some(good_ref.clone()),
                        percent: 101,
                        ..Default::default()
                    }),
                ),
            ],
            "progress.percent",
        ),
        (
            vec![
                hello("w9"),
                msg(
                    1,
                    Body::Question(v1::Question {
                        attempt: Some(good_ref.clone()),
                        question_id: "q1".into(),
                        text: String::new(),
                        ..Default::default()
                    }),
                ),
            ],
            "question.text",
        ),
        (
            vec![
                hello("w9"),
                msg(
                    1,
                    Body::Result(v1::AttemptResult {
                        attempt: Some(good_ref.clone()),
                        outcome: v1::Outcome::Error as i32,
                        files_changed: vec!["../../etc/passwd".into()],
                        ..Default::default()
                    }),
                ),
            ],
            "result.files_changed[0]",
        ),
        (
            vec![
                hello("w9"),
                msg(
                    1,
                    Body::Result(v1::AttemptResult {
                        attempt: Some(good_ref.clone()),
                        outcome: v1::Outcome::Error as i32,
                        files_changed: vec!["ok.rs".into(), "src/a\0.rs".into()],
                        ..Default::default()
                    }),
                ),
            ],
            "result.files_changed[1]",
        ),
        (
            vec![
                hello("w9"),
                msg(
                    1,
                    Body::Result(v1::AttemptResult {
                        attempt: Some(good_ref.clone()),
                        outcome: v1::Outcome::Error as i32,
                        files_changed: vec!["ok.rs".into(), "src/\u{1b}[2Jclear.rs".into()],
                        ..Default::default()
                    }),
                ),
            ],
            "result.files_changed[1]",
        ),
        (
            vec![
                hello("w9"),
                msg(
                    1,
                    Body::Result(v1::AttemptResult {
                        attempt: Some(good_ref.clone()),
                        outcome: v1::Outcome::Error as i32,
                        files_changed: vec!["ok.rs".into(), "src/two\nlines.rs".into()],
                        ..Default::default()
                    }),
                ),
            ],
            "result.files_changed[1]",
        ),
        (
            vec![
                hello("w9"),
                msg(
                    1,
                    Body::Status(v1::Status {
                        attempt: Some(good_ref.clone()),
                        status: 42,
                        ..Default::default()
                    }),
                ),
            ],
            "status.status",
        ),
        (vec![hello("w9"), hello("w9")], "hello"),
    ];
    for (i, (mut messages, field)) in cases.into_iter().enumerate() {
        // A worker id per case: a closed stream's Disconnected may reach the
        // scheduler after the next case's Hello, which would then be refused
        // as a takeover of a connected worker.
        for m in &mut messages {
            if let Some(Body::Hello(h)) = &mut m.body
                && h.worker_id == "w9"
            {
                h.worker_id = format!("w9-{i}");
            }
        }
        let status = connect_status(&h, messages).await;
        assert_eq!(status.code(), Code::InvalidArgument, "case {}: {}", i + 1, status.message());
        assert!(
            status.message().contains(field),
            "case {}: {:?} should name {field:?}",
            i + 1,
            status.message()
        );
    }
    let after = h.task("s/a").await.task.expect("task");
    assert_eq!(
        (after.state, after.attempts, after.retries_used),
        (before.state, before.attempts, before.retries_used)
    );
    assert_eq!(after.state, v1::TaskState::Running as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_serving_and_reflection_lists_both_services() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let h = Harness::start().await;
    let mut health = HealthClient::new(h.channel.clone());
    for service in ["", "swarm.v1.SidecarService", "swarm.v1.OperatorService"] {
        let r = health
            .check(tonic_health::pb::HealthCheckRequest { service: service.into() })
            .await
            .expect("health check")
            .into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "{service:?}");
    }
    let mut reflection = ServerReflectionClient::new(h.channel.clone());
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .expect("reflection")
        .into_inner();
    let response = responses.message().await.expect("ok").expect("a response");
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("expected a service list")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(names.contains(&"swarm.v1.SidecarService".to_string()), "{names:?}");
    assert!(names.contains(&"swarm.v1.OperatorService".to_string()), "{names:?}");
}

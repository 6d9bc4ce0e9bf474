use super::*;
use crate::outcome::{AttemptOutcome, ReviewVerdict, UsageLimit};
use crate::report::StatusKind;
use crate::sandbox::SandboxReport;
use crate::status::WorkerStatus;
use crate::verify::TierOutcome;
use swarm_proto::convert::AttemptRef;
use swarm_proto::v1::sidecar_message::Body;

fn wire_attempt() -> v1::AttemptRef {
    v1::AttemptRef { swarm_id: "s".into(), task_id: "t".into(), attempt: 2, fencing_token: 7 }
}

fn attempt() -> AttemptRef {
    AttemptRef::try_from(&wire_attempt()).expect("attempt")
}

fn heartbeat_like(n: u64) -> Event {
    Event::Status {
        attempt: attempt(),
        status: StatusKind::Worker(WorkerStatus::Working),
        message: format!("step {n}"),
    }
}

#[test]
fn append_replay_and_compact_survive_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.journal");
    let mut j = Journal::open(&path).expect("open");
    let assign = v1::Assign { branch: "swarm/s/t".into(), ..Default::default() };
    j.set_in_hand(&assign).expect("assign");
    j.set_pid(42, 1).expect("pid");
    for n in 0..3 {
        assert_eq!(j.append_report(heartbeat_like(n)).expect("append"), n + 1);
    }
    drop(j);
    let mut j = Journal::open(&path).expect("reopen");
    assert_eq!(j.unacked().len(), 3);
    assert_eq!(j.in_hand().expect("in hand").pid, Some(42));
    assert_eq!(j.in_hand().expect("in hand").restarts, 1);
    j.ack(2).expect("ack");
    assert_eq!(j.unacked().iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![3]);
    j.release().expect("release");
    drop(j);
    let mut j = Journal::open(&path).expect("reopen 2");
    assert_eq!(j.acked(), 2);
    assert!(j.in_hand().is_none());
    assert_eq!(j.unacked().len(), 1);
    j.ack(3).expect("ack all");
    drop(j);
    let mut j = Journal::open(&path).expect("reopen 3");
    assert!(j.unacked().is_empty());
    assert_eq!(j.append_report(heartbeat_like(9)).expect("append"), 4, "seq never goes back");
}

#[test]
fn torn_last_line_is_ignored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.journal");
    let mut j = Journal::open(&path).expect("open");
    j.append_report(heartbeat_like(1)).expect("append");
    j.append_report(heartbeat_like(2)).expect("append");
    drop(j);
    let mut f = OpenOptions::new().append(true).open(&path).expect("open raw");
    f.write_all(br#"{"t":"report","seq":3,"msg":"0a0"#).expect("torn write");
    drop(f);
    let mut j = Journal::open(&path).expect("reopen");
    assert_eq!(j.unacked().len(), 2);
    assert_eq!(j.append_report(heartbeat_like(3)).expect("append"), 3);
    drop(j);
    assert_eq!(Journal::open(&path).expect("reopen").unacked().len(), 3);
}

#[test]
fn the_resume_secret_survives_compaction_and_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.journal");
    let mut j = Journal::open(&path).expect("open");
    assert_eq!(j.resume_secret(), "");
    j.set_resume_secret("00ff").expect("secret");
    j.append_report(heartbeat_like(1)).expect("append");
    j.ack(1).expect("ack compacts");
    drop(j);
    assert_eq!(Journal::open(&path).expect("reopen").resume_secret(), "00ff");
}

#[test]
fn reports_are_renumbered_for_a_controller_that_applied_less() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.journal");
    let mut j = Journal::open(&path).expect("open");
    for n in 0..5 {
        j.append_report(heartbeat_like(n)).expect("append");
    }
    j.ack(3).expect("ack");
    // A controller whose store was replaced has applied nothing.
    j.applied_up_to(0).expect("rebase");
    let seqs: Vec<u64> = j.unacked().iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, vec![1, 2]);
    assert_eq!(j.append_report(heartbeat_like(9)).expect("append"), 3);
    drop(j);
    let j = Journal::open(&path).expect("reopen");
    assert_eq!(j.unacked().iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![1, 2, 3]);
}

#[test]
fn a_result_releases_its_attempt_in_the_same_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.journal");
    let mut j = Journal::open(&path).expect("open");
    j.set_in_hand(&v1::Assign { branch: "swarm/s/t".into(), ..Default::default() }).expect("assign");
    j.set_pid(7, 0).expect("pid");
    let result = Event::Result(AttemptOutcome::error(attempt(), "failed"));
    assert_eq!(j.append_result(result).expect("result"), 1);
    assert!(j.in_hand().is_none());
    drop(j);
    let j = Journal::open(&path).expect("reopen");
    assert!(j.in_hand().is_none(), "released with the result");
    assert_eq!(j.unacked().len(), 1);
}

#[test]
fn acks_are_appended_and_the_file_stays_small() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.journal");
    let mut j = Journal::open(&path).expect("open");
    for n in 1..=500 {
        assert_eq!(j.append_report(heartbeat_like(n)).expect("append"), n);
        j.ack(n).expect("ack");
    }
    drop(j);
    let lines = std::fs::read_to_string(&path).expect("read").lines().count();
    assert!(lines <= COMPACT_AFTER + 2, "{lines} lines: compaction keeps the journal bounded");
    let mut j = Journal::open(&path).expect("reopen");
    assert!(j.unacked().is_empty());
    assert_eq!(j.acked(), 500);
    assert_eq!(j.append_report(heartbeat_like(0)).expect("append"), 501);
}

#[test]
fn hex_round_trips() {
    assert_eq!(unhex(&hex(&[0, 1, 254, 255])).expect("hex"), vec![0, 1, 254, 255]);
}

/// Every kind of report, with every field of a result set.
fn reports() -> Vec<Event> {
    let result = AttemptOutcome {
        exit_code: 0,
        signal: Some(9),
        restarts: 1,
        log_tail: vec!["last line".into()],
        commit: "a".repeat(40),
        files_changed: vec!["src/lib.rs".into()],
        tiers: vec![TierOutcome {
            name: "test".into(),
            passed: false,
            blocking: true,
            exit_code: 1,
            duration_ms: 12,
            output_tail: "failed".into(),
        }],
        summary: "did it".into(),
        error: "a blocking verify tier failed".into(),
        category: "ambiguous_spec".into(),
        usage: Some(swarm_core::Usage {
            input_tokens: 3,
            output_tokens: 4,
            cost_usd: 0.5,
            ..Default::default()
        }),
        session_id: "sess-1".into(),
        usage_limit: Some(UsageLimit { reset_unix_ms: 1_700_000_000_000, kind: "five_hour".into() }),
        review: Some(ReviewVerdict {
            decision: "approve".into(),
            message: "fine".into(),
            error: String::new(),
        }),
        ..AttemptOutcome::new(attempt(), swarm_core::Outcome::RateLimited)
    };
    vec![
        Event::Started {
            attempt: attempt(),
            pid: 42,
            restarts: 1,
            sandbox: SandboxReport {
                mode: "on".into(),
                enforced: vec!["filesystem".into()],
                missing: vec![],
            },
        },
        heartbeat_like(1),
        Event::note(&attempt(), "a stale lock removed".into()),
        Event::Status { attempt: attempt(), status: StatusKind::Invalid, message: "bad json".into() },
        Event::Question {
            attempt: attempt(),
            id: "q1".into(),
            text: "which one?".into(),
            category: "question".into(),
            options: vec!["a".into(), "b".into()],
        },
        Event::Orphans { worktrees: vec!["w9".into()], removed: true },
        Event::Result(result),
    ]
}

#[test]
fn reports_are_read_back_as_they_were_written_and_survive_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.journal");
    let mut j = Journal::open(&path).expect("open");
    for e in reports() {
        j.append_report(e).expect("append");
    }
    drop(j);
    let text = std::fs::read_to_string(&path).expect("read");
    assert!(text.lines().all(|l| l.contains(r#""t":"event","seq":"#) && l.contains(r#""v":1"#)), "{text}");
    let mut j = Journal::open(&path).expect("reopen");
    let read: Vec<Event> = j.unacked().iter().map(|(_, e)| e.clone()).collect();
    assert_eq!(read, reports());
    j.compact().expect("compact");
    drop(j);
    let j = Journal::open(&path).expect("reopen after compaction");
    assert_eq!(j.unacked().iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(), reports());
}

/// What a sidecar before versioned records wrote: the hex of each
/// report's `SidecarMessage`, and of the Assign in hand.
fn old_journal(path: &Path, bodies: &[Body], assign: &v1::Assign) {
    let mut text = format!("{{\"t\":\"assign\",\"msg\":\"{}\"}}\n", hex(&assign.encode_to_vec()));
    text.push_str("{\"t\":\"pid\",\"pid\":4242,\"restarts\":1}\n");
    for (i, body) in bodies.iter().enumerate() {
        let msg = v1::SidecarMessage { seq: i as u64 + 1, body: Some(body.clone()) };
        text.push_str(&format!(
            "{{\"t\":\"report\",\"seq\":{},\"msg\":\"{}\"}}\n",
            i + 1,
            hex(&msg.encode_to_vec())
        ));
    }
    text.push_str("{\"t\":\"ack\",\"seq\":1}\n");
    std::fs::write(path, text).expect("write old journal");
}

#[test]
fn a_journal_written_by_an_older_sidecar_replays_the_same_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.journal");
    let bodies: Vec<Body> = reports().iter().map(Body::from).collect();
    let assign =
        v1::Assign { attempt: Some(wire_attempt()), branch: "swarm/s/t".into(), ..Default::default() };
    old_journal(&path, &bodies, &assign);
    let mut j = Journal::open(&path).expect("open old journal");
    assert_eq!(j.acked(), 1);
    let held = j.in_hand().expect("in hand");
    assert_eq!((&held.assign, held.pid, held.restarts), (&assign, Some(4242), 1));
    let replayed: Vec<v1::SidecarMessage> =
        j.unacked().iter().map(|(seq, e)| crate::wire::message(*seq, e)).collect();
    let expected: Vec<v1::SidecarMessage> = bodies
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, b)| v1::SidecarMessage { seq: i as u64 + 1, body: Some(b.clone()) })
        .collect();
    assert_eq!(replayed, expected, "the controller sees what the old sidecar would have sent");
    // New reports follow in the new format, and the old ones are rewritten in it.
    assert_eq!(j.append_report(heartbeat_like(9)).expect("append"), bodies.len() as u64 + 1);
    j.compact().expect("compact");
    drop(j);
    let text = std::fs::read_to_string(&path).expect("read");
    assert!(!text.contains(r#""t":"report""#), "{text}");
    let j = Journal::open(&path).expect("reopen");
    assert_eq!(j.unacked().len(), bodies.len());
    assert_eq!(j.in_hand().expect("in hand").pid, Some(4242));
}

#[test]
fn a_record_from_a_newer_sidecar_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.journal");
    let mut j = Journal::open(&path).expect("open");
    j.append_report(heartbeat_like(1)).expect("append");
    j.append_report(heartbeat_like(2)).expect("append");
    drop(j);
    let text = std::fs::read_to_string(&path).expect("read").replacen(r#""v":1"#, r#""v":2"#, 1);
    std::fs::write(&path, text).expect("write");
    let e = Journal::open(&path).expect_err("newer record");
    assert!(e.to_string().contains("version 2"), "{e}");
}

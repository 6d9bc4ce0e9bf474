//! The scheduler's own loop with its commit pipeline: nothing leaves
//! before the sync that makes it durable.

use super::*;
use crate::error::SchedError;
use crate::scheduler::views::SwarmView;

type Created = oneshot::Receiver<Result<(SwarmView, bool), SchedError>>;

/// A CreateSwarm for `name` on the rig's base, and where its reply lands.
fn create(rig: &Rig, name: &str) -> (Command, Created) {
    let text = format!(
        "name = \"{name}\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n"
    );
    let plan = Arc::new(Plan::parse(&text).expect("plan"));
    let (reply, rx) = oneshot::channel();
    let op = OperatorOp::CreateSwarm {
        plan_text: text,
        plan,
        integration_head: rig.base.clone(),
        origin: None,
        reply,
    };
    (Command::Operator(op), rx)
}

#[test]
fn a_failed_wal_sync_stops_the_scheduler_and_releases_nothing_it_would_have_covered() {
    let rig = Rig::new(0);
    let wal = rig._dir.path().join("swarm.db-wal");
    let (first, first_reply) = create(&rig, "synced");
    let (second, second_reply) = create(&rig, "unsynced");
    let Rig { sched, _dir, .. } = rig;
    let (commands, _results, inbox) = super::super::inbox(16);
    let running = std::thread::spawn(move || sched.run(inbox));

    commands.send(first).expect("send");
    let created = first_reply.blocking_recv().expect("the first reply is released after its sync");
    assert!(created.is_ok(), "{created:?}");

    // The WAL's name is gone: SQLite keeps writing to the file it holds
    // open, but nothing can make that file durable any more.
    std::fs::remove_file(&wal).expect("remove the WAL");
    commands.send(second).expect("send");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !running.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "the scheduler goes on after its WAL could not be synced"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let stopped = running.join().expect("the scheduler thread does not panic");
    let err = stopped.expect_err("a failed sync stops the scheduler").to_string();
    assert!(err.contains("swarm.db-wal"), "the error names the WAL: {err}");
    assert!(second_reply.blocking_recv().is_err(), "the unsynced change was never acknowledged");
}

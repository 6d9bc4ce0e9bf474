use super::*;

fn swarm(id: &str) -> SwarmRow {
    SwarmRow {
        id: id.into(),
        plan: "name = \"x\"".into(),
        state: "ACTIVE".into(),
        integration_head: "h".into(),
        created_at: 1,
    }
}

fn task(swarm: &str, id: &str, state: &str) -> TaskRow {
    TaskRow {
        swarm: swarm.into(),
        id: id.into(),
        state: state.into(),
        notes: "{}".into(),
        ..Default::default()
    }
}

fn event(id: u64, swarm: &str) -> EventRow {
    EventRow { id, swarm: swarm.into(), kind: "task.state".into(), data: "{}".into(), ..Default::default() }
}

#[test]
fn a_committed_batch_is_loaded_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("swarm.db");
    let mut store = Store::open(&path).expect("open");
    let mut batch = Batch::default();
    batch.new_swarm(swarm("s"));
    batch.task(task("s", "a", "READY"));
    batch.task(task("s", "a", "RUNNING")); // the last write of a key wins
    batch.attempt(AttemptRow {
        swarm: "s".into(),
        task: "a".into(),
        number: 1,
        token: 9,
        agent: r#"{"kind":"claude","session_id":"s1","usage":{"input_tokens":3,"cost_usd":0.5}}"#.into(),
        ..Default::default()
    });
    batch.worker(WorkerRow {
        id: "w1".into(),
        last_applied_seq: 4,
        labels: "{}".into(),
        ..Default::default()
    });
    batch.event(event(1, "s"));
    batch.event(event(2, "s"));
    store.commit(&batch).expect("commit");
    drop(store);

    let store = Store::open(&path).expect("reopen");
    let snap = store.load().expect("load");
    assert_eq!(snap.swarms, vec![swarm("s")]);
    assert_eq!(snap.tasks.len(), 1);
    assert_eq!(snap.tasks[0].state, "RUNNING");
    assert_eq!(snap.attempts[0].token, 9);
    assert!(snap.attempts[0].agent.contains("\"session_id\":\"s1\""), "the agent record survives a restart");
    assert_eq!(snap.workers[0].last_applied_seq, 4);
    assert_eq!(snap.last_event_id, 2);
}

#[test]
fn reopening_after_the_writer_died_mid_batch_keeps_only_committed_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("swarm.db");
    let mut store = Store::open(&path).expect("open");
    let mut first = Batch::default();
    first.new_swarm(swarm("s"));
    first.task(task("s", "a", "READY"));
    first.event(event(1, "s"));
    store.commit(&first).expect("commit");

    // A second batch is half written when the writer dies: the transaction
    // is open, rows are in the WAL, and nothing rolls it back or closes the
    // connection (as with kill -9).
    store
        .conn
        .execute_batch(
            "BEGIN;
             UPDATE tasks SET state = 'RUNNING' WHERE id = 'a';
             INSERT INTO events (id, at, swarm, task, attempt, worker, kind, message, data)
               VALUES (2, 0, 's', 'a', 1, '', 'task.state', '', '{}');",
        )
        .expect("partial batch");
    std::mem::forget(store);

    let store = Store::open(&path).expect("reopen after crash");
    let snap = store.load().expect("load");
    assert_eq!(snap.tasks[0].state, "READY");
    assert_eq!(snap.last_event_id, 1);
    let reader = Store::reader(&path).expect("reader");
    let events = read_events(&reader, 0, u64::MAX >> 1, None, 10).expect("events");
    assert_eq!(events.iter().map(|e| e.id).collect::<Vec<_>>(), vec![1]);
}

#[test]
fn events_are_read_in_id_order_within_bounds_and_by_swarm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("swarm.db");
    let mut store = Store::open(&path).expect("open");
    let mut batch = Batch::default();
    for id in 1..=10 {
        batch.event(event(id, if id % 2 == 0 { "even" } else { "odd" }));
    }
    store.commit(&batch).expect("commit");
    let reader = Store::reader(&path).expect("reader");
    let ids = |v: Vec<EventRow>| v.into_iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(ids(read_events(&reader, 3, 7, None, 100).expect("read")), vec![4, 5, 6, 7]);
    assert_eq!(ids(read_events(&reader, 0, 10, Some("even"), 2).expect("read")), vec![2, 4]);
}

#[test]
fn a_store_from_a_newer_controller_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("swarm.db");
    drop(Store::open(&path).expect("open"));
    let conn = Connection::open(&path).expect("raw");
    conn.pragma_update(None, "user_version", 99).expect("bump");
    drop(conn);
    match Store::open(&path) {
        Err(StoreError::TooNew { found: 99, .. }) => {}
        other => panic!("expected TooNew, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn swarm_progress_is_written_without_rewriting_the_plan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("swarm.db");
    let mut store = Store::open(&path).expect("open");
    let mut batch = Batch::default();
    batch.new_swarm(swarm("s"));
    store.commit(&batch).expect("create");
    let mut batch = Batch::default();
    batch.swarm(SwarmRow { state: "COMPLETED".into(), integration_head: "h2".into(), ..swarm("s") });
    store.commit(&batch).expect("progress");
    let snap = store.load().expect("load");
    assert_eq!(snap.swarms[0].state, "COMPLETED");
    assert_eq!(snap.swarms[0].integration_head, "h2");
    assert_eq!(&*snap.swarms[0].plan, "name = \"x\"");
}

#[test]
fn a_version_1_store_is_migrated_with_its_swarms_progress() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("swarm.db");
    {
        let conn = Connection::open(&path).expect("raw");
        conn.execute_batch(schema::MIGRATIONS[0]).expect("v1 schema");
        conn.pragma_update(None, "user_version", 1).expect("v1");
        conn.execute(
            "INSERT INTO swarms (id, plan, state, integration_head, created_at) VALUES ('s', 'p', 'ACTIVE', 'h1', 1)",
            [],
        )
        .expect("v1 row");
    }
    let store = Store::open(&path).expect("migrates");
    let snap = store.load().expect("load");
    assert_eq!((snap.swarms[0].state.as_str(), snap.swarms[0].integration_head.as_str()), ("ACTIVE", "h1"));
}

#[test]
fn a_tasks_events_are_read_through_their_own_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("swarm.db");
    let mut store = Store::open(&path).expect("open");
    let mut batch = Batch::default();
    batch.new_swarm(swarm("s"));
    for id in 1..=30u64 {
        let task = ["a", "b", "c"][(id % 3) as usize];
        batch.event(EventRow { task: task.into(), ..event(id, "s") });
    }
    store.commit(&batch).expect("commit");
    let conn = Store::reader(&path).expect("reader");
    let a = read_task_events(&conn, "s", "a", 100).expect("read");
    assert_eq!(
        a.iter().map(|e| e.id).collect::<Vec<_>>(),
        (1..=30).filter(|i| i % 3 == 0).collect::<Vec<_>>()
    );
    assert!(a.iter().all(|e| e.task == "a"));
    let plan: String = conn
        .query_row(
            "EXPLAIN QUERY PLAN SELECT id FROM events WHERE swarm = 's' AND task = 'a' ORDER BY id",
            [],
            |r| r.get(3),
        )
        .expect("plan");
    assert!(plan.contains("events_by_task"), "{plan}");
}

#[test]
fn a_forgotten_worker_is_deleted_and_a_claim_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("swarm.db");
    let mut store = Store::open(&path).expect("open");
    let mut batch = Batch::default();
    for id in ["w1", "w2"] {
        batch.worker(WorkerRow {
            id: id.into(),
            labels: "{}".into(),
            resume_secret: format!("{id}-secret"),
            ..Default::default()
        });
    }
    store.commit(&batch).expect("commit");
    let mut batch = Batch::default();
    batch.forget_worker("w2");
    store.commit(&batch).expect("commit");
    drop(store);
    let snap = Store::open(&path).expect("reopen").load().expect("load");
    assert_eq!(snap.workers.len(), 1);
    assert_eq!(snap.workers[0].resume_secret, "w1-secret");
}

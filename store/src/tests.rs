//! The store's conformance suite: every test runs against SQLite and
//! against a real PostgreSQL (skipped, saying why, where none is installed).

use std::path::PathBuf;

use super::*;
use crate::lease::{Claim, Lease};

/// One backend's store, fresh for one test.
enum Fixture {
    Sqlite { _dir: tempfile::TempDir, path: PathBuf },
    Postgres { url: String, epoch: i64 },
}

impl Fixture {
    fn sqlite() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("swarm.db");
        Fixture::Sqlite { _dir: dir, path }
    }

    /// `None` where no PostgreSQL can be started (the reason is printed).
    fn postgres(test: &str) -> Option<Fixture> {
        let db = swarm_tests::postgres::database(test)?;
        let mut lease =
            Lease::connect(&db.url, "http://test", std::time::Duration::from_secs(600)).expect("lease");
        let Claim::Won(epoch) = lease.try_acquire().expect("acquire") else {
            panic!("a fresh lease is free")
        };
        Some(Fixture::Postgres { url: db.url, epoch })
    }

    fn location(&self) -> Location {
        match self {
            Fixture::Sqlite { path, .. } => Location::Sqlite(path.clone()),
            Fixture::Postgres { url, epoch } => Location::Postgres { url: url.clone(), epoch: *epoch },
        }
    }

    fn open(&self) -> Store {
        Store::open_at(&self.location()).expect("open")
    }

    fn reader(&self) -> Reader {
        Reader::open(&self.location()).expect("reader")
    }

    fn pg(&self) -> ::postgres::Client {
        match self {
            Fixture::Postgres { url, .. } => postgres::connect(url).expect("connect"),
            Fixture::Sqlite { .. } => panic!("not a Postgres fixture"),
        }
    }
}

/// Runs each named test against both backends.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite_backend {
            $(#[test] fn $name() { super::$name(super::Fixture::sqlite()) })*
        }
        mod postgres_backend {
            $(#[test] fn $name() {
                if let Some(f) = super::Fixture::postgres(stringify!($name)) { super::$name(f) }
            })*
        }
    };
}

conformance!(
    a_committed_batch_is_loaded_back,
    reopening_after_the_writer_died_mid_batch_keeps_only_committed_batches,
    events_are_read_in_id_order_within_bounds_and_by_swarm,
    a_store_from_a_newer_controller_is_refused,
    swarm_progress_is_written_without_rewriting_the_plan,
    a_swarms_origin_is_written_with_its_plan_and_survives_reopen,
    a_tasks_events_are_read_through_their_own_index,
    a_forgotten_worker_is_deleted_and_a_claim_survives_reopen,
    batches_committed_together_end_as_the_later_wrote_them,
    text_with_nul_bytes_is_stored,
    a_commit_of_many_events_keeps_each_with_its_own_fields,
    many_tasks_and_attempts_are_inserted_and_then_updated_in_one_commit_each,
    a_forgotten_swarm_leaves_no_row_and_its_id_can_be_created_again,
    a_swarm_forgotten_and_created_again_in_one_commit_ends_as_the_new_one,
    old_fleet_events_are_forgotten_and_swarm_events_kept,
    a_forgotten_swarms_durations_outlive_it_and_a_later_run_replaces_them,
);

fn swarm(id: &str) -> SwarmRow {
    SwarmRow {
        id: id.into(),
        plan: "name = \"x\"".into(),
        state: "ACTIVE".into(),
        integration_head: "h".into(),
        created_at: 1,
        control: String::new(),
        origin: String::new(),
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

fn a_committed_batch_is_loaded_back(f: Fixture) {
    let mut store = f.open();
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

    let snap = f.open().load().expect("load");
    assert_eq!(snap.swarms, vec![swarm("s")]);
    assert_eq!(snap.tasks.len(), 1);
    assert_eq!(snap.tasks[0].state, "RUNNING");
    assert_eq!(snap.attempts[0].token, 9);
    assert!(snap.attempts[0].agent.contains("\"session_id\":\"s1\""), "the agent record survives a restart");
    assert_eq!(snap.workers[0].last_applied_seq, 4);
    assert_eq!(snap.last_event_id, 2);
}

fn reopening_after_the_writer_died_mid_batch_keeps_only_committed_batches(f: Fixture) {
    let mut store = f.open();
    let mut first = Batch::default();
    first.new_swarm(swarm("s"));
    first.task(task("s", "a", "READY"));
    first.event(event(1, "s"));
    store.commit(&first).expect("commit");

    // A second batch is half written when the writer dies: the transaction
    // is open, its rows written, and nothing rolls it back or closes the
    // connection (as with kill -9).
    let partial = "BEGIN;
         UPDATE tasks SET state = 'RUNNING' WHERE id = 'a';
         INSERT INTO events (id, at, swarm, task, attempt, worker, kind, message, data)
           VALUES (2, 0, 's', 'a', 1, '', 'task.state', '', '{}');";
    match &mut store {
        Store::Sqlite(s) => s.conn.execute_batch(partial).expect("partial batch"),
        Store::Postgres(_) => {
            let mut raw = f.pg();
            raw.batch_execute(partial).expect("partial batch");
            std::mem::forget(raw);
        }
    }
    std::mem::forget(store);

    let snap = f.open().load().expect("load after the crash");
    assert_eq!(snap.tasks[0].state, "READY");
    assert_eq!(snap.last_event_id, 1);
    let events = f.reader().read_events(0, u64::MAX >> 1, None, 10).expect("events");
    assert_eq!(events.iter().map(|e| e.id).collect::<Vec<_>>(), vec![1]);
}

fn events_are_read_in_id_order_within_bounds_and_by_swarm(f: Fixture) {
    let mut store = f.open();
    let mut batch = Batch::default();
    for id in 1..=10 {
        batch.event(event(id, if id % 2 == 0 { "even" } else { "odd" }));
    }
    store.commit(&batch).expect("commit");
    let mut reader = f.reader();
    let ids = |v: Vec<EventRow>| v.into_iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(ids(reader.read_events(3, 7, None, 100).expect("read")), vec![4, 5, 6, 7]);
    assert_eq!(ids(reader.read_events(0, 10, Some("even"), 2).expect("read")), vec![2, 4]);
    assert_eq!(ids(reader.read_events(0, u64::MAX, None, 100).expect("read")).len(), 10, "an unbounded read");
    assert_eq!(reader.last_event_id().expect("last id"), 10);
}

fn a_store_from_a_newer_controller_is_refused(f: Fixture) {
    drop(f.open());
    match &f {
        Fixture::Sqlite { path, .. } => {
            let conn = rusqlite::Connection::open(path).expect("raw");
            conn.pragma_update(None, "user_version", 99).expect("bump");
        }
        Fixture::Postgres { .. } => {
            f.pg().execute("UPDATE swarm_schema SET version = 99", &[]).expect("bump");
        }
    }
    match Store::open_at(&f.location()) {
        Err(StoreError::TooNew { found: 99, .. }) => {}
        other => panic!("expected TooNew, got {:?}", other.map(|_| ())),
    }
}

fn swarm_progress_is_written_without_rewriting_the_plan(f: Fixture) {
    let mut store = f.open();
    let mut batch = Batch::default();
    batch.new_swarm(swarm("s"));
    store.commit(&batch).expect("create");
    let mut batch = Batch::default();
    let control = r#"{"paused":{"reason":"r"}}"#;
    batch.swarm(SwarmRow {
        state: "COMPLETED".into(),
        integration_head: "h2".into(),
        control: control.into(),
        ..swarm("s")
    });
    store.commit(&batch).expect("progress");
    let snap = store.load().expect("load");
    assert_eq!(snap.swarms[0].state, "COMPLETED");
    assert_eq!(snap.swarms[0].control, control);
    assert_eq!(snap.swarms[0].integration_head, "h2");
    assert_eq!(&*snap.swarms[0].plan, "name = \"x\"");
}

fn a_swarms_origin_is_written_with_its_plan_and_survives_reopen(f: Fixture) {
    let origin = r#"{"goal":"add a flag\nwith docs","planner_agent":"claude"}"#;
    let mut store = f.open();
    let mut batch = Batch::default();
    batch.new_swarm(SwarmRow { origin: origin.into(), ..swarm("planned") });
    batch.new_swarm(swarm("by-hand"));
    store.commit(&batch).expect("create");
    // A progress row carries no origin of its own; the stored one stays.
    let mut batch = Batch::default();
    batch.swarm(SwarmRow { state: "COMPLETED".into(), ..swarm("planned") });
    store.commit(&batch).expect("progress");
    drop(store);
    let snap = f.open().load().expect("load");
    let by_id = |id: &str| snap.swarms.iter().find(|s| s.id == id).expect("swarm");
    assert_eq!(by_id("planned").origin, origin);
    assert_eq!(by_id("planned").state, "COMPLETED");
    assert_eq!(by_id("by-hand").origin, "");
}

fn a_tasks_events_are_read_through_their_own_index(f: Fixture) {
    let mut store = f.open();
    let mut batch = Batch::default();
    batch.new_swarm(swarm("s"));
    for id in 1..=30u64 {
        let task = ["a", "b", "c"][(id % 3) as usize];
        batch.event(EventRow { task: task.into(), ..event(id, "s") });
    }
    store.commit(&batch).expect("commit");
    let a = f.reader().read_task_events("s", "a", 100).expect("read");
    assert_eq!(
        a.iter().map(|e| e.id).collect::<Vec<_>>(),
        (1..=30).filter(|i| i % 3 == 0).collect::<Vec<_>>()
    );
    assert!(a.iter().all(|e| e.task == "a"));
    let query = "SELECT id FROM events WHERE swarm = 's' AND task = 'a' ORDER BY id";
    let plan = match &f {
        Fixture::Sqlite { path, .. } => rusqlite::Connection::open(path)
            .expect("raw")
            .query_row(&format!("EXPLAIN QUERY PLAN {query}"), [], |r| r.get::<_, String>(3))
            .expect("plan"),
        Fixture::Postgres { .. } => {
            // Thirty rows fit a page, where a scan is cheaper: ask what
            // the planner would use when it is not.
            let mut raw = f.pg();
            raw.batch_execute("SET enable_seqscan = off").expect("set");
            let rows = raw.query(&format!("EXPLAIN {query}"), &[]).expect("plan");
            rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>().join("\n")
        }
    };
    assert!(plan.contains("events_by_task"), "{plan}");
}

fn a_forgotten_worker_is_deleted_and_a_claim_survives_reopen(f: Fixture) {
    let mut store = f.open();
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
    let snap = f.open().load().expect("load");
    assert_eq!(snap.workers.len(), 1);
    assert_eq!(snap.workers[0].resume_secret, "w1-secret");
}

fn batches_committed_together_end_as_the_later_wrote_them(f: Fixture) {
    let mut store = f.open();
    let mut first = Batch::default();
    first.new_swarm(swarm("s"));
    first.task(task("s", "a", "READY"));
    first.worker(WorkerRow { id: "w1".into(), labels: "{}".into(), ..Default::default() });
    first.forget_worker("w2");
    first.event(event(1, "s"));
    let mut second = Batch::default();
    second.swarm(SwarmRow { state: "COMPLETED".into(), ..swarm("s") });
    second.task(task("s", "a", "MERGED"));
    second.forget_worker("w1");
    second.worker(WorkerRow { id: "w2".into(), labels: "{}".into(), ..Default::default() });
    second.event(event(2, "s"));
    let stats = store.commit_all(&[&first, &second]).expect("commit");
    assert_eq!(stats.rows, first.len() + second.len());
    let snap = store.load().expect("load");
    assert_eq!(snap.swarms[0].state, "COMPLETED");
    assert_eq!(snap.tasks.iter().map(|t| t.state.as_str()).collect::<Vec<_>>(), vec!["MERGED"]);
    assert_eq!(snap.workers.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(), vec!["w2"]);
    assert_eq!(snap.last_event_id, 2);
}

fn text_with_nul_bytes_is_stored(f: Fixture) {
    let mut store = f.open();
    let mut batch = Batch::default();
    batch.event(EventRow { message: "before\0after".into(), ..event(1, "s") });
    store.commit(&batch).expect("a NUL in a worker's output does not fail the commit");
    let events = f.reader().read_events(0, 1, None, 10).expect("read");
    assert!(events[0].message.starts_with("before") && events[0].message.ends_with("after"));
}

// SQLite only: Postgres stores start at the schema SQLite reached by then.
#[test]
fn a_version_1_store_is_migrated_with_its_swarms_progress() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("swarm.db");
    {
        let conn = rusqlite::Connection::open(&path).expect("raw");
        conn.execute_batch(sqlite::schema::MIGRATIONS[0]).expect("v1 schema");
        conn.pragma_update(None, "user_version", 1).expect("v1");
        conn.execute(
            "INSERT INTO swarms (id, plan, state, integration_head, created_at) VALUES ('s', 'p', 'ACTIVE', 'h1', 1)",
            [],
        )
        .expect("v1 row");
    }
    let snap = Store::open(&path).expect("migrates").load().expect("load");
    assert_eq!((snap.swarms[0].state.as_str(), snap.swarms[0].integration_head.as_str()), ("ACTIVE", "h1"));
    let indexes: Vec<String> = rusqlite::Connection::open(&path)
        .expect("raw")
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(indexes, vec!["events_by_task".to_string()], "events_by_swarm is dropped");
}

// SQLite only: the rowid order is SQLite's physical order.
#[test]
fn a_commits_task_rows_are_written_once_each_in_key_order() {
    let f = Fixture::sqlite();
    let mut store = f.open();
    let ids: Vec<String> = (0..200).map(|i| format!("t{i:03}")).collect();
    let mut first = Batch::default();
    first.new_swarm(swarm("s"));
    for id in &ids {
        first.task(task("s", id, "READY"));
    }
    let mut second = Batch::default();
    second.task(task("s", "t007", "RUNNING"));
    store.commit_all(&[&first, &second]).expect("commit");
    let Fixture::Sqlite { path, .. } = &f else { unreachable!() };
    let conn = rusqlite::Connection::open(path).expect("raw");
    let by_rowid: Vec<(String, String)> = conn
        .prepare("SELECT id, state FROM tasks ORDER BY rowid")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    let expected: Vec<(String, String)> = ids
        .iter()
        .map(|id| (id.clone(), if id == "t007" { "RUNNING" } else { "READY" }.to_string()))
        .collect();
    assert_eq!(by_rowid, expected, "one row per task, laid out in id order, the later turn's state kept");
}

/// Whether the database file itself, WAL ignored, holds task `s/id`: what
/// a checkpoint has copied.
fn checkpointed(path: &std::path::Path, id: &str) -> bool {
    let uri = format!("file:{}?immutable=1", path.display());
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI;
    rusqlite::Connection::open_with_flags(&uri, flags)
        .and_then(|c| c.query_row("SELECT COUNT(*) FROM tasks WHERE id = ?1", [id], |r| r.get::<_, i64>(0)))
        .is_ok_and(|n| n == 1)
}

// SQLite only: PostgreSQL checkpoints in its own server process.
#[test]
fn a_grown_wal_is_checkpointed_in_the_background_and_a_small_one_is_left_to_the_committer() {
    let f = Fixture::sqlite();
    let Fixture::Sqlite { path, .. } = &f else { unreachable!() };
    let mut store = f.open();
    store.checkpoint_in_background().expect("checkpointer");
    let mut small = Batch::default();
    small.new_swarm(swarm("s"));
    small.task(task("s", "small", "READY"));
    store.commit(&small).expect("commit");
    // A small WAL grows on: a store on a nearly full disk must still need
    // new space to commit, and fail with SQLITE_FULL rather than reuse it.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!checkpointed(path, "small"), "a WAL of a few pages was checkpointed in the background");

    // ~10 MiB of plan text: past the background threshold of ~8 MiB.
    let mut big = Batch::default();
    big.new_swarm(SwarmRow { plan: "#".repeat(10 << 20).into(), ..swarm("big") });
    big.task(task("big", "after", "READY"));
    store.commit(&big).expect("commit");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !checkpointed(path, "after") {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint copied the commit into {}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The committer goes on after (and over) the background's checkpoint.
    let mut next = Batch::default();
    next.task(task("big", "after", "MERGED"));
    store.commit(&next).expect("a commit after the checkpoint");
    let snap = store.load().expect("load");
    let after = snap.tasks.iter().find(|t| t.id == "after").expect("task");
    assert_eq!(after.state, "MERGED");
}

// Past one multi-row insert (SQLite writes events 32 to a statement), with
// a remainder: every event keeps its own fields.
fn a_commit_of_many_events_keeps_each_with_its_own_fields(f: Fixture) {
    let mut store = f.open();
    let mut batch = Batch::default();
    batch.new_swarm(swarm("s"));
    let count = 70u64;
    for id in 1..=count {
        batch.event(EventRow {
            at: id as i64 * 10,
            task: format!("t{id}"),
            attempt: id as u32,
            worker: format!("w{id}"),
            message: format!("m{id}"),
            data: format!("{{\"n\":{id}}}"),
            ..event(id, "s")
        });
    }
    store.commit(&batch).expect("commit");
    let events = f.reader().read_events(0, u64::MAX >> 1, None, 1_000).expect("events");
    assert_eq!(events.len(), count as usize);
    for (e, id) in events.iter().zip(1..=count) {
        let expected = (id, id as i64 * 10, format!("t{id}"), id as u32, format!("w{id}"), format!("m{id}"));
        assert_eq!((e.id, e.at, e.task.clone(), e.attempt, e.worker.clone(), e.message.clone()), expected);
        assert_eq!(e.data, format!("{{\"n\":{id}}}"));
        assert_eq!((e.swarm.as_str(), e.kind.as_str()), ("s", "task.state"));
    }
}

// Past one multi-row statement (SQLite writes 32 rows to one), with a
// remainder: the first commit inserts, the second updates every row.
fn many_tasks_and_attempts_are_inserted_and_then_updated_in_one_commit_each(f: Fixture) {
    let mut store = f.open();
    let ids: Vec<String> = (0..70).map(|i| format!("t{i:02}")).collect();
    let attempt = |id: &str, state: &str, token: u64| AttemptRow {
        swarm: "s".into(),
        task: id.into(),
        number: 1,
        state: state.into(),
        token,
        ..Default::default()
    };
    let mut first = Batch::default();
    first.new_swarm(swarm("s"));
    for id in &ids {
        first.task(task("s", id, "RUNNING"));
        first.attempt(attempt(id, "ASSIGNED", 1));
    }
    store.commit(&first).expect("insert");
    let mut second = Batch::default();
    for (i, id) in ids.iter().enumerate() {
        second.task(TaskRow { result_commit: format!("c{i}"), ..task("s", id, "MERGED") });
        second.attempt(attempt(id, "SUCCEEDED", i as u64));
    }
    store.commit(&second).expect("update");
    let snap = store.load().expect("load");
    assert_eq!(snap.tasks.len(), ids.len());
    assert_eq!(snap.attempts.len(), ids.len());
    for (i, id) in ids.iter().enumerate() {
        let t = snap.tasks.iter().find(|t| &t.id == id).expect("task");
        assert_eq!((t.state.as_str(), t.result_commit.clone()), ("MERGED", format!("c{i}")), "{id}");
        let a = snap.attempts.iter().find(|a| &a.task == id).expect("attempt");
        assert_eq!((a.state.as_str(), a.token), ("SUCCEEDED", i as u64), "{id}");
    }
}

/// A swarm with one task, one attempt and two events, committed.
fn stored_swarm(store: &mut crate::Store, id: &str, first_event: u64) {
    let mut batch = Batch::default();
    batch.new_swarm(swarm(id));
    batch.task(task(id, "a", "MERGED"));
    batch.attempt(AttemptRow { swarm: id.into(), task: "a".into(), number: 1, ..Default::default() });
    batch.event(EventRow { task: "a".into(), ..event(first_event, id) });
    batch.event(event(first_event + 1, id));
    store.commit(&batch).expect("commit");
}

fn a_forgotten_swarm_leaves_no_row_and_its_id_can_be_created_again(f: Fixture) {
    let mut store = f.open();
    stored_swarm(&mut store, "gone", 1);
    stored_swarm(&mut store, "kept", 3);
    let mut batch = Batch::default();
    batch.forget_swarm("gone");
    batch.event(event(5, ""));
    store.commit(&batch).expect("commit");
    let snap = f.open().load().expect("load");
    assert_eq!(snap.swarms.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), vec!["kept"]);
    assert!(snap.tasks.iter().all(|t| t.swarm == "kept"), "{:?}", snap.tasks);
    assert!(snap.attempts.iter().all(|a| a.swarm == "kept"), "{:?}", snap.attempts);
    assert_eq!(snap.last_event_id, 5);
    let mut reader = f.reader();
    let swarms = |v: Vec<EventRow>| v.into_iter().map(|e| (e.id, e.swarm)).collect::<Vec<_>>();
    assert_eq!(
        swarms(reader.read_events(0, u64::MAX, None, 100).expect("read")),
        vec![(3, "kept".into()), (4, "kept".into()), (5, String::new())]
    );
    stored_swarm(&mut store, "gone", 6);
    let snap = f.open().load().expect("load");
    assert_eq!(snap.swarms.len(), 2, "the id is free again");
}

fn a_forgotten_swarms_durations_outlive_it_and_a_later_run_replaces_them(f: Fixture) {
    let mut store = f.open();
    stored_swarm(&mut store, "p", 1);
    let row = |task: &str, ms: u64| crate::DurationRow {
        plan: "p".into(),
        task: task.into(),
        ms,
        samples: 2,
        updated_at: 7,
    };
    let mut batch = Batch::default();
    batch.duration(row("a", 4_000));
    batch.duration(row("b", 9_000));
    batch.forget_swarm("p");
    store.commit(&batch).expect("commit");
    let mut later = Batch::default();
    later.duration(row("a", 5_000));
    store.commit(&later).expect("commit");
    let mut snap = f.open().load().expect("load");
    assert!(snap.swarms.is_empty(), "the swarm is gone");
    snap.durations.sort_by(|x, y| x.task.cmp(&y.task));
    assert_eq!(snap.durations, vec![row("a", 5_000), row("b", 9_000)]);
}

fn a_swarm_forgotten_and_created_again_in_one_commit_ends_as_the_new_one(f: Fixture) {
    let mut store = f.open();
    stored_swarm(&mut store, "s", 1);
    let mut old = Batch::default();
    old.task(task("s", "a", "CANCELLED"));
    old.forget_swarm("s");
    let mut new = Batch::default();
    new.new_swarm(SwarmRow { created_at: 9, ..swarm("s") });
    new.task(task("s", "b", "READY"));
    new.event(event(3, "s"));
    store.commit_all(&[&old, &new]).expect("commit");
    let snap = f.open().load().expect("load");
    assert_eq!(snap.swarms.iter().map(|s| s.created_at).collect::<Vec<_>>(), vec![9]);
    assert_eq!(snap.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), vec!["b"]);
    assert!(snap.attempts.is_empty());
    let ids = f.reader().read_events(0, u64::MAX, None, 100).expect("read");
    assert_eq!(ids.into_iter().map(|e| e.id).collect::<Vec<_>>(), vec![3]);
}

fn old_fleet_events_are_forgotten_and_swarm_events_kept(f: Fixture) {
    let mut store = f.open();
    let mut batch = Batch::default();
    batch.event(event(1, ""));
    batch.event(EventRow { worker: "w1".into(), ..event(2, "") });
    batch.event(event(3, "s"));
    batch.event(event(4, ""));
    store.commit(&batch).expect("commit");
    let mut batch = Batch::default();
    batch.forget_fleet_events_before(4);
    store.commit(&batch).expect("commit");
    let ids = f.reader().read_events(0, u64::MAX, None, 100).expect("read");
    assert_eq!(ids.into_iter().map(|e| e.id).collect::<Vec<_>>(), vec![3, 4]);
}

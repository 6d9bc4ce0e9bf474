//! A commit's rows, table by table, many rows to a statement.
//!
//! One row per statement paid the statement's step and reset for each row;
//! tasks, attempts and events (nearly every row of a commit) go up to
//! [`ROWS_PER_STATEMENT`] to a multi-row INSERT, the remainder one by one.
//! Each statement is prepared once per shape and cached: a cache lookup
//! hashes the whole SQL text. Tables go parents first (swarms, tasks,
//! attempts) for the foreign keys.

use std::sync::OnceLock;

use rusqlite::{CachedStatement, ToSql, Transaction, params};

use crate::StoreError;
use crate::rows::{AttemptRow, EventRow, Merged, TaskRow};

/// Rows per multi-row statement: 32 tasks bind 416 parameters, well under
/// SQLite's limit of 32,766.
const ROWS_PER_STATEMENT: usize = 32;

/// A multi-row INSERT: `{head} VALUES (?, …), … {tail}`, its two shapes'
/// SQL text built once (the commit path only looks them up).
struct Insert {
    head: &'static str,
    columns: usize,
    tail: &'static str,
    full: OnceLock<String>,
    single: OnceLock<String>,
}

impl Insert {
    const fn new(head: &'static str, columns: usize, tail: &'static str) -> Insert {
        Insert { head, columns, tail, full: OnceLock::new(), single: OnceLock::new() }
    }

    fn sql(&self, rows: usize) -> String {
        let row = format!("({})", vec!["?"; self.columns].join(", "));
        format!("{} VALUES {} {}", self.head, vec![row; rows].join(", "), self.tail)
    }

    /// [`ROWS_PER_STATEMENT`] rows.
    fn full(&self) -> &str {
        self.full.get_or_init(|| self.sql(ROWS_PER_STATEMENT))
    }

    fn single(&self) -> &str {
        self.single.get_or_init(|| self.sql(1))
    }
}

/// Binds a statement's parameters in order.
struct Binder<'s, 'c> {
    stmt: &'s mut CachedStatement<'c>,
    next: usize,
}

impl Binder<'_, '_> {
    fn put<T: ToSql>(&mut self, value: T) -> rusqlite::Result<()> {
        self.next += 1;
        self.stmt.raw_bind_parameter(self.next, value)
    }
}

fn write<R>(
    tx: &Transaction<'_>,
    insert: &Insert,
    rows: &[&R],
    bind: fn(&mut Binder<'_, '_>, &R) -> rusqlite::Result<()>,
) -> Result<(), StoreError> {
    let run = |stmt: &mut CachedStatement<'_>, chunk: &[&R]| -> Result<(), StoreError> {
        let mut binder = Binder { stmt, next: 0 };
        for row in chunk {
            bind(&mut binder, row)?;
        }
        binder.stmt.raw_execute()?;
        Ok(())
    };
    let mut chunks = rows.chunks_exact(ROWS_PER_STATEMENT);
    if chunks.len() > 0 {
        let mut stmt = tx.prepare_cached(insert.full())?;
        for chunk in chunks.by_ref() {
            run(&mut stmt, chunk)?;
        }
    }
    if !chunks.remainder().is_empty() {
        let mut one = tx.prepare_cached(insert.single())?;
        for row in chunks.remainder() {
            run(&mut one, std::slice::from_ref(row))?;
        }
    }
    Ok(())
}

static TASKS: Insert = Insert::new(
    "INSERT INTO tasks (swarm, id, state, attempts, retries_used, not_before, resume_commit,
           result_commit, merge_commit, reason, cancel_requested, notes, updated_at)",
    13,
    // An upsert updates the row in place; REPLACE would delete and
    // re-insert it (and its index entry) on every write.
    "ON CONFLICT(swarm, id) DO UPDATE SET state = excluded.state, attempts = excluded.attempts,
           retries_used = excluded.retries_used, not_before = excluded.not_before,
           resume_commit = excluded.resume_commit, result_commit = excluded.result_commit,
           merge_commit = excluded.merge_commit, reason = excluded.reason,
           cancel_requested = excluded.cancel_requested, notes = excluded.notes,
           updated_at = excluded.updated_at",
);

fn bind_task(b: &mut Binder<'_, '_>, r: &TaskRow) -> rusqlite::Result<()> {
    b.put(&r.swarm)?;
    b.put(&r.id)?;
    b.put(&r.state)?;
    b.put(r.attempts)?;
    b.put(r.retries_used)?;
    b.put(r.not_before)?;
    b.put(&r.resume_commit)?;
    b.put(&r.result_commit)?;
    b.put(&r.merge_commit)?;
    b.put(&r.reason)?;
    b.put(r.cancel_requested)?;
    b.put(&r.notes)?;
    b.put(r.updated_at)
}

static ATTEMPTS: Insert = Insert::new(
    "INSERT INTO attempts (swarm, task, number, state, worker, token, base_commit,
           result_commit, outcome, exit_code, summary, error, started_at, ended_at, tiers, agent)",
    16,
    "ON CONFLICT(swarm, task, number) DO UPDATE SET state = excluded.state, worker = excluded.worker,
           token = excluded.token, base_commit = excluded.base_commit,
           result_commit = excluded.result_commit, outcome = excluded.outcome,
           exit_code = excluded.exit_code, summary = excluded.summary, error = excluded.error,
           started_at = excluded.started_at, ended_at = excluded.ended_at, tiers = excluded.tiers,
           agent = excluded.agent",
);

fn bind_attempt(b: &mut Binder<'_, '_>, r: &AttemptRow) -> rusqlite::Result<()> {
    b.put(&r.swarm)?;
    b.put(&r.task)?;
    b.put(r.number)?;
    b.put(&r.state)?;
    b.put(&r.worker)?;
    b.put(r.token as i64)?;
    b.put(&r.base_commit)?;
    b.put(&r.result_commit)?;
    b.put(&r.outcome)?;
    b.put(r.exit_code)?;
    b.put(&r.summary)?;
    b.put(&r.error)?;
    b.put(r.started_at)?;
    b.put(r.ended_at)?;
    b.put(&r.tiers)?;
    b.put(&r.agent)
}

static EVENTS: Insert =
    Insert::new("INSERT INTO events (id, at, swarm, task, attempt, worker, kind, message, data)", 9, "");

fn bind_event(b: &mut Binder<'_, '_>, e: &EventRow) -> rusqlite::Result<()> {
    b.put(e.id as i64)?;
    b.put(e.at)?;
    b.put(&e.swarm)?;
    b.put(&e.task)?;
    b.put(e.attempt)?;
    b.put(&e.worker)?;
    b.put(&e.kind)?;
    b.put(&e.message)?;
    b.put(&e.data)
}

/// Deletes what retention dropped: swarms whole, children before
/// parents for the foreign keys, and old fleet events. Each goes through
/// an index (`events_by_task` leads with the swarm, then the task).
fn forget(tx: &Transaction<'_>, m: &Merged<'_>) -> Result<(), StoreError> {
    const SWARM: [&str; 5] = [
        "DELETE FROM events WHERE swarm = ?1",
        "DELETE FROM attempts WHERE swarm = ?1",
        "DELETE FROM tasks WHERE swarm = ?1",
        "DELETE FROM swarm_progress WHERE swarm = ?1",
        "DELETE FROM swarms WHERE id = ?1",
    ];
    for sql in SWARM {
        let mut stmt = tx.prepare_cached(sql)?;
        for id in &m.forgotten_swarms {
            stmt.execute(params![id])?;
        }
    }
    if let Some(before) = m.fleet_events_before {
        tx.prepare_cached("DELETE FROM events WHERE swarm = '' AND task = '' AND id < ?1")?
            .execute(params![before as i64])?;
    }
    Ok(())
}

/// Writes every row of `m` in `tx`, after deleting what it forgets.
pub(super) fn rows(tx: &Transaction<'_>, m: &Merged<'_>) -> Result<(), StoreError> {
    forget(tx, m)?;
    let mut stmt = tx.prepare_cached(
        "INSERT INTO swarms (id, plan, state, integration_head, created_at, origin)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for r in &m.new_swarms {
        stmt.execute(params![r.id, &*r.plan, r.state, r.integration_head, r.created_at, r.origin])?;
    }
    let mut stmt = tx.prepare_cached(
        "INSERT INTO swarm_progress (swarm, state, integration_head, control) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(swarm) DO UPDATE SET state = excluded.state, integration_head = excluded.integration_head,
           control = excluded.control",
    )?;
    for r in m.swarms.values() {
        stmt.execute(params![r.id, r.state, r.integration_head, r.control])?;
    }
    write(tx, &TASKS, &m.tasks.values().copied().collect::<Vec<_>>(), bind_task)?;
    write(tx, &ATTEMPTS, &m.attempts.values().copied().collect::<Vec<_>>(), bind_attempt)?;
    let mut forget = tx.prepare_cached("DELETE FROM workers WHERE id = ?1")?;
    for id in &m.forgotten {
        forget.execute(params![id])?;
    }
    let mut upsert = tx.prepare_cached(
        "INSERT INTO workers (id, host, labels, last_applied_seq, draining, updated_at,
           resume_secret, principal)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT(id) DO UPDATE SET host = excluded.host, labels = excluded.labels,
           last_applied_seq = excluded.last_applied_seq, draining = excluded.draining,
           updated_at = excluded.updated_at, resume_secret = excluded.resume_secret,
           principal = excluded.principal",
    )?;
    for r in m.workers.values() {
        upsert.execute(params![
            r.id,
            r.host,
            r.labels,
            r.last_applied_seq as i64,
            r.draining,
            r.updated_at,
            r.resume_secret,
            r.principal
        ])?;
    }
    let mut durations = tx.prepare_cached(
        "INSERT INTO task_durations (plan, task, ms, samples, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT(plan, task) DO UPDATE SET ms = excluded.ms, samples = excluded.samples,
           updated_at = excluded.updated_at",
    )?;
    for r in m.durations.values() {
        durations.execute(params![r.plan, r.task, r.ms as i64, r.samples, r.updated_at])?;
    }
    write(tx, &EVENTS, &m.events, bind_event)
}

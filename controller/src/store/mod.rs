//! The durable store: one SQLite file (WAL), owned by the scheduler's
//! thread, written in batches (group commit).
//!
//! The scheduler applies a batch of commands to its in-memory model, which
//! yields a [`Batch`] of rows; [`Store::commit`] writes the whole batch in
//! one transaction, so a state change and its event are always durable
//! together. Acks, assigns and Watch events go out only after the commit.
//! A restarted controller rebuilds its model with [`Store::load`].

mod load;
mod schema;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rusqlite::{Connection, OpenFlags, params};

pub use load::Snapshot;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: {source}")]
    Open { path: PathBuf, source: rusqlite::Error },
    #[error("store {path} has schema version {found}, newer than this controller's {supported}")]
    TooNew { path: PathBuf, found: i64, supported: i64 },
    #[error("store: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("store row {table}/{key}: {reason}")]
    Corrupt { table: &'static str, key: String, reason: String },
    #[error("store: {0}")]
    Io(#[from] std::io::Error),
    /// SQLite refused to write: a full or read-only filesystem, an I/O
    /// error. Nothing of the failed transaction was written.
    #[error("store: {message} ({code}) at {}", path.display())]
    Write { path: PathBuf, code: &'static str, message: String },
}

/// Names the file and SQLite's result code of a write failure, so "disk
/// full" reads as such in the log and the exit message.
fn at_path(path: &Path, e: StoreError) -> StoreError {
    let StoreError::Sql(rusqlite::Error::SqliteFailure(failure, message)) = &e else { return e };
    use rusqlite::ErrorCode as C;
    let code = match failure.code {
        C::DiskFull => "SQLITE_FULL",
        C::ReadOnly => "SQLITE_READONLY",
        C::SystemIoFailure => "SQLITE_IOERR",
        C::CannotOpen => "SQLITE_CANTOPEN",
        C::PermissionDenied => "SQLITE_PERM",
        C::DatabaseBusy => "SQLITE_BUSY",
        C::DatabaseCorrupt => "SQLITE_CORRUPT",
        _ => return e,
    };
    let message = message.clone().unwrap_or_else(|| failure.to_string());
    StoreError::Write { path: path.to_path_buf(), code, message }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SwarmRow {
    pub id: String,
    /// Shared: the plan text is large and written once, so rows carry it
    /// by reference.
    pub plan: std::sync::Arc<str>,
    pub state: String,
    pub integration_head: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskRow {
    pub swarm: String,
    pub id: String,
    pub state: String,
    pub attempts: u32,
    pub retries_used: u32,
    pub not_before: i64,
    pub resume_commit: String,
    pub result_commit: String,
    pub merge_commit: String,
    pub reason: String,
    pub cancel_requested: bool,
    /// JSON: earlier failures, answers, pending question, conflict.
    pub notes: String,
    pub updated_at: i64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct AttemptRow {
    pub swarm: String,
    pub task: String,
    pub number: u32,
    pub state: String,
    pub worker: String,
    pub token: u64,
    pub base_commit: String,
    pub result_commit: String,
    pub outcome: String,
    pub exit_code: i32,
    pub summary: String,
    pub error: String,
    pub started_at: i64,
    pub ended_at: i64,
    /// JSON array of tier results.
    pub tiers: String,
    /// JSON: the agent, its session and usage; empty for a plain command.
    pub agent: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct WorkerRow {
    pub id: String,
    pub host: String,
    /// JSON object.
    pub labels: String,
    pub last_applied_seq: u64,
    pub draining: bool,
    pub updated_at: i64,
    /// The secret that proves a sidecar's claim on this id (see Welcome).
    pub resume_secret: String,
    /// The credential this worker last connected with; empty without one.
    pub principal: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct EventRow {
    pub id: u64,
    pub at: i64,
    pub swarm: String,
    pub task: String,
    pub attempt: u32,
    pub worker: String,
    pub kind: String,
    pub message: String,
    pub data: String,
}

/// Everything one group commit writes. Rows of the same key collapse to
/// the last one written in the batch.
#[derive(Debug, Default)]
pub struct Batch {
    swarms: HashMap<String, SwarmRow>,
    /// Swarms created in this batch: their plan is written once.
    new_swarms: std::collections::HashSet<String>,
    tasks: HashMap<(String, String), TaskRow>,
    attempts: HashMap<(String, String, u32), AttemptRow>,
    workers: HashMap<String, WorkerRow>,
    forgotten_workers: std::collections::HashSet<String>,
    pub events: Vec<EventRow>,
}

impl Batch {
    /// A new swarm: its plan and its progress.
    pub fn new_swarm(&mut self, row: SwarmRow) {
        self.new_swarms.insert(row.id.clone());
        self.swarms.insert(row.id.clone(), row);
    }
    /// A swarm's progress (state, integration head); the plan is not
    /// rewritten.
    pub fn swarm(&mut self, row: SwarmRow) {
        self.swarms.insert(row.id.clone(), row);
    }
    pub fn task(&mut self, row: TaskRow) {
        self.tasks.insert((row.swarm.clone(), row.id.clone()), row);
    }
    pub fn attempt(&mut self, row: AttemptRow) {
        self.attempts.insert((row.swarm.clone(), row.task.clone(), row.number), row);
    }
    pub fn worker(&mut self, row: WorkerRow) {
        self.forgotten_workers.remove(&row.id);
        self.workers.insert(row.id.clone(), row);
    }
    /// Deletes a worker's row; its events stay.
    pub fn forget_worker(&mut self, id: &str) {
        self.workers.remove(id);
        self.forgotten_workers.insert(id.to_string());
    }
    pub fn event(&mut self, row: EventRow) {
        self.events.push(row);
    }
    pub fn is_empty(&self) -> bool {
        self.swarms.is_empty()
            && self.tasks.is_empty()
            && self.attempts.is_empty()
            && self.workers.is_empty()
            && self.forgotten_workers.is_empty()
            && self.events.is_empty()
    }
    /// Rows in the batch, for the batch-size metric.
    pub fn len(&self) -> usize {
        self.swarms.len()
            + self.tasks.len()
            + self.attempts.len()
            + self.workers.len()
            + self.forgotten_workers.len()
            + self.events.len()
    }
}

/// Figures from one commit, for metrics and the benchmark.
#[derive(Debug, Clone, Copy)]
pub struct CommitStats {
    pub rows: usize,
    pub micros: u64,
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl Store {
    /// Opens (creating if needed) the store and runs pending migrations.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_inner(path).map_err(|e| at_path(path, e))
    }

    fn open_inner(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let conn = Connection::open(path).map_err(|source| StoreError::Open { path: path.into(), source })?;
        // WAL + synchronous=FULL: every commit is durable, readers never
        // block the writer.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Keep the working set in memory: the scheduler rewrites the same
        // task and attempt rows many times.
        conn.pragma_update(None, "cache_size", -65_536)?;
        // Checkpoint the WAL every ~40 MiB rather than every 4 MiB: under
        // load, checkpoints were a sixth of the writer's time.
        conn.pragma_update(None, "wal_autocheckpoint", 10_000)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let mut store = Store { conn, path: path.into() };
        schema::migrate(&mut store.conn, &store.path)?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens a read-only connection for Watch replays and the like.
    pub fn reader(path: &Path) -> Result<Connection, StoreError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|source| StoreError::Open { path: path.into(), source })?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(conn)
    }

    pub fn load(&self) -> Result<Snapshot, StoreError> {
        load::load(&self.conn)
    }

    /// Writes a batch in one transaction; on error nothing of it is written.
    #[tracing::instrument(level = "debug", skip_all, fields(rows = batch.len()))]
    pub fn commit(&mut self, batch: &Batch) -> Result<CommitStats, StoreError> {
        self.commit_all(&[batch])
    }

    /// Writes several batches (consecutive turns, oldest first) in one transaction: a row two of
    /// them write ends as the later one wrote it. On error nothing of any of them is written.
    #[tracing::instrument(level = "debug", skip_all, fields(batches = batches.len()))]
    pub fn commit_all(&mut self, batches: &[&Batch]) -> Result<CommitStats, StoreError> {
        let path = self.path.clone();
        self.commit_inner(batches).map_err(|e| at_path(&path, e))
    }

    fn commit_inner(&mut self, batches: &[&Batch]) -> Result<CommitStats, StoreError> {
        let started = Instant::now();
        let tx = self.conn.transaction()?;
        for batch in batches {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO swarms (id, plan, state, integration_head, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for id in &batch.new_swarms {
                if let Some(r) = batch.swarms.get(id) {
                    stmt.execute(params![r.id, &*r.plan, r.state, r.integration_head, r.created_at])?;
                }
            }
            let mut stmt = tx.prepare_cached(
                "INSERT INTO swarm_progress (swarm, state, integration_head) VALUES (?1, ?2, ?3)
                 ON CONFLICT(swarm) DO UPDATE SET state = excluded.state, integration_head = excluded.integration_head",
            )?;
            for r in batch.swarms.values() {
                stmt.execute(params![r.id, r.state, r.integration_head])?;
            }
            let mut stmt = tx.prepare_cached(
                // An upsert updates the row in place; REPLACE would delete
                // and re-insert it (and its index entry) on every write.
                "INSERT INTO tasks (swarm, id, state, attempts, retries_used, not_before, resume_commit,
                   result_commit, merge_commit, reason, cancel_requested, notes, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
                 ON CONFLICT(swarm, id) DO UPDATE SET state = excluded.state, attempts = excluded.attempts,
                   retries_used = excluded.retries_used, not_before = excluded.not_before,
                   resume_commit = excluded.resume_commit, result_commit = excluded.result_commit,
                   merge_commit = excluded.merge_commit, reason = excluded.reason,
                   cancel_requested = excluded.cancel_requested, notes = excluded.notes,
                   updated_at = excluded.updated_at",
            )?;
            for r in batch.tasks.values() {
                stmt.execute(params![
                    r.swarm,
                    r.id,
                    r.state,
                    r.attempts,
                    r.retries_used,
                    r.not_before,
                    r.resume_commit,
                    r.result_commit,
                    r.merge_commit,
                    r.reason,
                    r.cancel_requested,
                    r.notes,
                    r.updated_at
                ])?;
            }
            let mut stmt = tx.prepare_cached(
                "INSERT INTO attempts (swarm, task, number, state, worker, token, base_commit,
                   result_commit, outcome, exit_code, summary, error, started_at, ended_at, tiers, agent)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
                 ON CONFLICT(swarm, task, number) DO UPDATE SET state = excluded.state, worker = excluded.worker,
                   token = excluded.token, base_commit = excluded.base_commit,
                   result_commit = excluded.result_commit, outcome = excluded.outcome,
                   exit_code = excluded.exit_code, summary = excluded.summary, error = excluded.error,
                   started_at = excluded.started_at, ended_at = excluded.ended_at, tiers = excluded.tiers,
                   agent = excluded.agent",
            )?;
            for r in batch.attempts.values() {
                stmt.execute(params![
                    r.swarm,
                    r.task,
                    r.number,
                    r.state,
                    r.worker,
                    r.token as i64,
                    r.base_commit,
                    r.result_commit,
                    r.outcome,
                    r.exit_code,
                    r.summary,
                    r.error,
                    r.started_at,
                    r.ended_at,
                    r.tiers,
                    r.agent
                ])?;
            }
            let mut stmt = tx.prepare_cached(
                "INSERT INTO workers (id, host, labels, last_applied_seq, draining, updated_at,
                   resume_secret, principal)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT(id) DO UPDATE SET host = excluded.host, labels = excluded.labels,
                   last_applied_seq = excluded.last_applied_seq, draining = excluded.draining,
                   updated_at = excluded.updated_at, resume_secret = excluded.resume_secret,
                   principal = excluded.principal",
            )?;
            for r in batch.workers.values() {
                stmt.execute(params![
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
            let mut stmt = tx.prepare_cached("DELETE FROM workers WHERE id = ?1")?;
            for id in &batch.forgotten_workers {
                stmt.execute(params![id])?;
            }
            let mut stmt = tx.prepare_cached(
                "INSERT INTO events (id, at, swarm, task, attempt, worker, kind, message, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?;
            for e in &batch.events {
                stmt.execute(params![
                    e.id as i64,
                    e.at,
                    e.swarm,
                    e.task,
                    e.attempt,
                    e.worker,
                    e.kind,
                    e.message,
                    e.data
                ])?;
            }
        }
        tx.commit()?;
        let rows = batches.iter().map(|b| b.len()).sum();
        Ok(CommitStats { rows, micros: started.elapsed().as_micros() as u64 })
    }
}

/// Reads events with ids in `(after, up_to]`, at most `limit`, optionally
/// of one swarm.
pub fn read_events(
    conn: &Connection,
    after: u64,
    up_to: u64,
    swarm: Option<&str>,
    limit: usize,
) -> Result<Vec<EventRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, at, swarm, task, attempt, worker, kind, message, data FROM events
         WHERE id > ?1 AND id <= ?2 AND (?3 IS NULL OR swarm = ?3) ORDER BY id LIMIT ?4",
    )?;
    let rows = stmt.query_map(params![after as i64, up_to as i64, swarm, limit as i64], event_row)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// Every event of one task, oldest first, at most `limit`.
pub fn read_task_events(
    conn: &Connection,
    swarm: &str,
    task: &str,
    limit: usize,
) -> Result<Vec<EventRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, at, swarm, task, attempt, worker, kind, message, data FROM events
         WHERE swarm = ?1 AND task = ?2 ORDER BY id LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![swarm, task, limit as i64], event_row)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

fn event_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<EventRow> {
    Ok(EventRow {
        id: r.get::<_, i64>(0)? as u64,
        at: r.get(1)?,
        swarm: r.get(2)?,
        task: r.get(3)?,
        attempt: r.get(4)?,
        worker: r.get(5)?,
        kind: r.get(6)?,
        message: r.get(7)?,
        data: r.get(8)?,
    })
}

#[cfg(test)]
mod tests;

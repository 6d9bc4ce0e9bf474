//! The embedded backend: one SQLite file (WAL), for `swarmctl run`, the
//! demo and a single controller.

mod checkpoint;
mod load;
pub(super) mod schema;
mod write;

use std::path::{Path, PathBuf};
use std::time::Instant;

use rusqlite::{Connection, OpenFlags, params};

use super::{Batch, CommitStats, EventRow, Merged, Snapshot, StoreError};

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

pub struct SqliteStore {
    pub(super) conn: Connection,
    path: PathBuf,
    /// Background WAL checkpoints, on the pipelined committer's store only.
    checkpointer: Option<checkpoint::Checkpointer>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store and runs pending migrations.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_inner(path).map_err(|e| at_path(path, e))
    }

    fn open_inner(path: &Path) -> Result<SqliteStore, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let conn = Connection::open(path).map_err(|source| StoreError::Open { path: path.into(), source })?;
        // WAL + synchronous=FULL: every commit is durable, readers never
        // block the writer.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // 4 MiB of page cache: the pages a commit touches (the tail of the
        // events, the index and table pages of the tasks in flight) stay
        // cached, and the rest is a read from the OS's cache. Larger costs
        // more than it saves: a B-tree page split parks a page under the
        // lock-byte page's number, and the commit that follows scans the
        // cache's whole hash table to drop it. With 64 MiB that scan was a
        // sixth of the committer's time.
        conn.pragma_update(None, "cache_size", -4_096)?;
        // Checkpoint the WAL every ~40 MiB rather than every 4 MiB: under
        // load, checkpoints were a sixth of the writer's time.
        conn.pragma_update(None, "wal_autocheckpoint", 10_000)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let mut store = SqliteStore { conn, path: path.into(), checkpointer: None };
        schema::migrate(&mut store.conn, &store.path)?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes this connection's commits leave the WAL unsynced: the caller
    /// syncs it with the returned [`WalSync`] before anything a commit
    /// holds leaves the process. A pipelined committer then writes the next
    /// transaction while the last one's sync is under way, where
    /// `synchronous=FULL` would hold the write lock through every fsync.
    ///
    /// WAL mode stays consistent at `synchronous=NORMAL` (SQLite syncs the
    /// WAL before each checkpoint and the WAL header before the WAL is
    /// reused); what the caller adds is durability, commit by commit.
    pub fn defer_sync(&mut self) -> Result<WalSync, StoreError> {
        // The WAL exists from here on: opening a WAL-mode store (which
        // `open` did, reading its schema version) creates it.
        self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let wal = PathBuf::from(wal);
        let sync = WalSync { wal };
        sync.sync_dir().map_err(|e| at_path(&self.path, e))?;
        Ok(sync)
    }

    /// Checkpoints a grown WAL on a thread of its own from now on, so this
    /// store's commits seldom stop for one (see [`checkpoint`]).
    pub fn checkpoint_in_background(&mut self) -> Result<(), StoreError> {
        if self.checkpointer.is_none() {
            self.checkpointer = Some(checkpoint::Checkpointer::start(&self.path)?);
            checkpoint::install_hook(&self.conn);
        }
        Ok(())
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

    /// Writes several batches (consecutive turns, oldest first) in one transaction: a row two of
    /// them write ends as the later one wrote it. On error nothing of any of them is written.
    #[tracing::instrument(level = "debug", skip_all, fields(batches = batches.len()))]
    pub fn commit_all(&mut self, batches: &[&Batch]) -> Result<CommitStats, StoreError> {
        let path = self.path.clone();
        self.commit_inner(batches).map_err(|e| at_path(&path, e))
    }

    fn commit_inner(&mut self, batches: &[&Batch]) -> Result<CommitStats, StoreError> {
        let started = Instant::now();
        let m = Merged::of(batches);
        let tx = self.conn.transaction()?;
        write::rows(&tx, &m)?;
        tx.commit()?;
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.committed(checkpoint::wal_pages_after_commit());
        }
        let rows = batches.iter().map(|b| b.len()).sum();
        Ok(CommitStats { rows, micros: started.elapsed().as_micros() as u64 })
    }
}

/// Syncs a store's WAL for a connection opened with
/// [`SqliteStore::defer_sync`]: once [`WalSync::sync`] returns, every
/// transaction that connection committed before the call is durable.
#[derive(Debug, Clone)]
pub struct WalSync {
    wal: PathBuf,
}

impl WalSync {
    /// `fdatasync` of the WAL. The file is opened anew each time: an fsync
    /// flushes the file, whichever descriptor wrote it, and a fresh open
    /// cannot be left holding a WAL that was replaced.
    pub fn sync(&self) -> Result<(), StoreError> {
        let wal = std::fs::File::open(&self.wal).map_err(|e| self.failed(e))?;
        wal.sync_data().map_err(|e| self.failed(e))
    }

    /// The WAL's directory entry, once: SQLite syncs the directory of a
    /// new WAL at its first sync, which a deferred-sync connection may
    /// never make itself.
    fn sync_dir(&self) -> Result<(), StoreError> {
        let dir = self.wal.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| self.failed(e))
    }

    fn failed(&self, e: std::io::Error) -> StoreError {
        StoreError::Write { path: self.wal.clone(), code: "fsync", message: e.to_string() }
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
         WHERE id > ?1 AND id <= ?2 AND (?3 IS NULL OR swarm = ?3 OR substr(swarm, 1, length(?3) + 1) = ?3 || '/')
         ORDER BY id LIMIT ?4",
    )?;
    let rows = stmt.query_map(
        params![clamp(after), clamp(up_to), swarm, limit.min(i64::MAX as usize) as i64],
        event_row,
    )?;
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

/// Ids are u64 in the model and signed here; bounds past i64 mean "all"
/// (a cast would wrap them negative and match nothing).
fn clamp(id: u64) -> i64 {
    id.min(i64::MAX as u64) as i64
}

//! The durable store, owned by the scheduler's thread and written in
//! batches (group commit).
//!
//! The scheduler applies a batch of commands to its in-memory model, which
//! yields a [`Batch`] of rows; [`Store::commit`] writes the whole batch in
//! one transaction, so a state change and its event are always durable
//! together. Acks, assigns and Watch events go out only after the commit.
//! A restarted controller rebuilds its model with [`Store::load`].
//!
//! Two backends keep that contract: SQLite ([`sqlite`], one file, the
//! embedded default) and PostgreSQL ([`postgres`], shared by several
//! controllers of which one leads). A Postgres store is opened with the
//! leader's epoch and every commit checks it in the same transaction, so a
//! deposed leader can write nothing; the lease itself, the row a leader
//! holds and renews, is [`lease`].
//!
//! Nothing here knows the scheduler: the rows are plain text and numbers,
//! mapped to and from the model by the controller.

pub mod lease;
pub mod postgres;
mod rows;
pub mod sqlite;

use std::path::{Path, PathBuf};

use rows::Merged;
pub use rows::{AttemptRow, Batch, CommitStats, DurationRow, EventRow, SwarmRow, TaskRow, WorkerRow};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: {source}")]
    Open { path: PathBuf, source: rusqlite::Error },
    #[error("store {url}: {source}")]
    Connect { url: String, source: ::postgres::Error },
    #[error("store {store} has schema version {found}, newer than this controller's {supported}")]
    TooNew { store: String, found: i64, supported: i64 },
    #[error("store: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("store: {0}")]
    Pg(#[from] ::postgres::Error),
    #[error("store row {table}/{key}: {reason}")]
    Corrupt { table: &'static str, key: String, reason: String },
    #[error("store: {0}")]
    Io(#[from] std::io::Error),
    /// SQLite refused to write: a full or read-only filesystem, an I/O
    /// error. Nothing of the failed transaction was written.
    #[error("store: {message} ({code}) at {}", path.display())]
    Write { path: PathBuf, code: &'static str, message: String },
    /// Another controller holds a later lease: this one is no longer the
    /// leader, and nothing of the refused transaction was written.
    #[error("store: leader epoch {epoch} was superseded; this controller is no longer the leader")]
    Fenced { epoch: i64 },
    #[error("store URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
}

/// The whole model as committed, read at start (or on winning the lease).
#[derive(Debug, Default)]
pub struct Snapshot {
    pub swarms: Vec<SwarmRow>,
    pub tasks: Vec<TaskRow>,
    pub attempts: Vec<AttemptRow>,
    pub workers: Vec<WorkerRow>,
    pub last_event_id: u64,
    /// What forgotten swarms' tasks took, for the next runs of their plans.
    pub durations: Vec<DurationRow>,
}

/// Where a store lives: what readers and a second writer connection need.
#[derive(Debug, Clone)]
pub enum Location {
    Sqlite(PathBuf),
    /// A `postgres://` URL and the leader epoch that fences its writes.
    Postgres {
        url: String,
        epoch: i64,
    },
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            Location::Postgres { url, .. } => f.write_str(&postgres::redact(url)),
        }
    }
}

/// The scheduler's write handle, one backend or the other.
pub enum Store {
    // Both boxed: each handle is a few hundred bytes (the connection and its
    // statement cache), and a store is moved between threads at start.
    Sqlite(Box<sqlite::SqliteStore>),
    Postgres(Box<postgres::PgStore>),
}

impl Store {
    /// Opens (creating if needed) a SQLite store and runs pending migrations.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        sqlite::SqliteStore::open(path).map(|s| Store::Sqlite(Box::new(s)))
    }

    /// Opens the store at `location` and runs pending migrations.
    pub fn open_at(location: &Location) -> Result<Store, StoreError> {
        match location {
            Location::Sqlite(path) => Store::open(path),
            Location::Postgres { url, epoch } => {
                postgres::PgStore::open(url, *epoch).map(|s| Store::Postgres(Box::new(s)))
            }
        }
    }

    pub fn location(&self) -> Location {
        match self {
            Store::Sqlite(s) => Location::Sqlite(s.path().to_path_buf()),
            Store::Postgres(s) => s.location(),
        }
    }

    /// A second write connection to the same store (for the pipelined
    /// committer), fenced by the same epoch.
    pub fn reopen(&self) -> Result<Store, StoreError> {
        Store::open_at(&self.location())
    }

    /// Moves WAL checkpoints off the committing thread once the WAL has
    /// grown (SQLite; PostgreSQL checkpoints in its own server process).
    pub fn checkpoint_in_background(&mut self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(s) => s.checkpoint_in_background(),
            Store::Postgres(_) => Ok(()),
        }
    }

    /// For a pipelined committer: commits stop syncing on their own, and
    /// the returned [`sqlite::WalSync`] makes them durable. `None` where every
    /// commit is durable when it returns and syncing apart buys nothing
    /// (PostgreSQL syncs on the server).
    pub fn defer_sync(&mut self) -> Result<Option<sqlite::WalSync>, StoreError> {
        match self {
            Store::Sqlite(s) => s.defer_sync().map(Some),
            Store::Postgres(_) => Ok(None),
        }
    }

    pub fn load(&mut self) -> Result<Snapshot, StoreError> {
        match self {
            Store::Sqlite(s) => s.load(),
            Store::Postgres(s) => s.load(),
        }
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
        match self {
            Store::Sqlite(s) => s.commit_all(batches),
            Store::Postgres(s) => s.commit_all(batches),
        }
    }
}

/// A read connection for Watch replays and GetTask's events.
pub enum Reader {
    Sqlite(rusqlite::Connection),
    Postgres(Box<::postgres::Client>),
}

impl Reader {
    pub fn open(location: &Location) -> Result<Reader, StoreError> {
        match location {
            Location::Sqlite(path) => sqlite::SqliteStore::reader(path).map(Reader::Sqlite),
            Location::Postgres { url, .. } => postgres::reader(url).map(|c| Reader::Postgres(Box::new(c))),
        }
    }

    /// Events with ids in `(after, up_to]`, at most `limit`, optionally of
    /// one swarm and its child swarms (`app/auth` is a child of `app`), in
    /// id order.
    pub fn read_events(
        &mut self,
        after: u64,
        up_to: u64,
        swarm: Option<&str>,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        match self {
            Reader::Sqlite(c) => sqlite::read_events(c, after, up_to, swarm, limit),
            Reader::Postgres(c) => postgres::read_events(c, after, up_to, swarm, limit),
        }
    }

    /// Every event of one task, oldest first, at most `limit`.
    pub fn read_task_events(
        &mut self,
        swarm: &str,
        task: &str,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        match self {
            Reader::Sqlite(c) => sqlite::read_task_events(c, swarm, task, limit),
            Reader::Postgres(c) => postgres::read_task_events(c, swarm, task, limit),
        }
    }

    /// The id of the last committed event; 0 when there is none.
    pub fn last_event_id(&mut self) -> Result<u64, StoreError> {
        match self {
            Reader::Sqlite(c) => {
                Ok(c.query_row("SELECT COALESCE(MAX(id), 0) FROM events", [], |r| r.get::<_, i64>(0))? as u64)
            }
            Reader::Postgres(c) => postgres::last_event_id(c),
        }
    }
}

#[cfg(test)]
mod tests;

//! The shared backend: PostgreSQL, for several controllers of which one
//! leads (see `lease`, and the controller's `leader`).
//!
//! The client is the synchronous `postgres` crate: the store lives on the
//! scheduler's own OS threads (the scheduler and its committer), which
//! block on every commit by design, so a blocking client keeps the commit
//! path the same shape as SQLite's, with no runtime to hand across.
//!
//! A commit is one transaction that first takes a share lock on the lease
//! row *if it still carries this store's epoch*. A standby that wins the
//! lease bumps the epoch with an UPDATE, which waits for that lock: either
//! the old leader's commit finishes before the epoch moves, or it finds
//! the new epoch and writes nothing ([`StoreError::Fenced`]).

mod load;
pub mod schema;
mod write;

use std::time::Duration;

use ::postgres::{Client, Config, NoTls};

use super::{Batch, CommitStats, EventRow, Location, Snapshot, StoreError};

/// The scheduler's write connection, fenced by a leader epoch.
pub struct PgStore {
    client: Client,
    url: String,
    epoch: i64,
    statements: Option<write::Statements>,
}

/// `postgres://user:secret@host/db` → `postgres://user@host/db`, for logs
/// and error messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (auth, host) = match rest.rsplit_once('@') {
        Some((auth, host)) => (auth, host),
        None => return url.to_string(),
    };
    let user = auth.split(':').next().unwrap_or_default();
    format!("{scheme}://{user}@{host}")
}

/// Parses and checks a store URL without connecting.
pub fn config(url: &str) -> Result<Config, StoreError> {
    let bad = |reason: &str| StoreError::BadUrl { url: redact(url), reason: reason.into() };
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(bad("must start with postgres:// or postgresql://"));
    }
    let mut config: Config = url.parse().map_err(|e: ::postgres::Error| bad(&e.to_string()))?;
    if config.get_dbname().is_none() {
        return Err(bad("must name a database (postgres://user@host:port/DATABASE)"));
    }
    if config.get_connect_timeout().is_none() {
        // A standby retries; an unreachable server must not hang start.
        config.connect_timeout(Duration::from_secs(5));
    }
    config.application_name("swarm-controller");
    Ok(config)
}

/// One connection to the store's database.
pub fn connect(url: &str) -> Result<Client, StoreError> {
    config(url)?.connect(NoTls).map_err(|source| StoreError::Connect { url: redact(url), source })
}

/// Connects and brings the schema up to date: what a controller does
/// before it competes for the lease.
pub fn prepare(url: &str) -> Result<Client, StoreError> {
    let mut client = connect(url)?;
    schema::migrate(&mut client, &redact(url))?;
    Ok(client)
}

/// A read connection for Watch replays and GetTask.
pub fn reader(url: &str) -> Result<Client, StoreError> {
    connect(url)
}

impl PgStore {
    /// Opens the store as the leader of `epoch`; every commit is refused
    /// once another controller holds a later epoch.
    pub fn open(url: &str, epoch: i64) -> Result<PgStore, StoreError> {
        let client = prepare(url)?;
        Ok(PgStore { client, url: url.to_string(), epoch, statements: None })
    }

    pub fn location(&self) -> Location {
        Location::Postgres { url: self.url.clone(), epoch: self.epoch }
    }

    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    pub fn load(&mut self) -> Result<Snapshot, StoreError> {
        load::load(&mut self.client)
    }

    /// Writes several batches in one transaction fenced by the epoch; on
    /// error nothing of any of them is written.
    pub fn commit_all(&mut self, batches: &[&Batch]) -> Result<CommitStats, StoreError> {
        let started = std::time::Instant::now();
        let statements = match self.statements.take() {
            Some(s) => s,
            None => write::Statements::prepare(&mut self.client)?,
        };
        let written = commit_fenced(&mut self.client, &statements, self.epoch, batches);
        self.statements = Some(statements);
        written?;
        let rows = batches.iter().map(|b| b.len()).sum();
        Ok(CommitStats { rows, micros: started.elapsed().as_micros() as u64 })
    }
}

fn commit_fenced(
    client: &mut Client,
    statements: &write::Statements,
    epoch: i64,
    batches: &[&Batch],
) -> Result<(), StoreError> {
    let mut tx = client.transaction()?;
    // First, so the lease row stays locked until the commit: see the
    // module's comment.
    if tx.query_opt(&statements.fence, &[&epoch])?.is_none() {
        return Err(StoreError::Fenced { epoch });
    }
    write::write(&mut tx, statements, batches)?;
    tx.commit()?;
    Ok(())
}

const EVENT_COLUMNS: &str = "id, at, swarm, task, attempt, worker, kind, message, data";

pub fn read_events(
    client: &mut Client,
    after: u64,
    up_to: u64,
    swarm: Option<&str>,
    limit: usize,
) -> Result<Vec<EventRow>, StoreError> {
    let rows = client.query(
        &format!(
            "SELECT {EVENT_COLUMNS} FROM events
             WHERE id > $1 AND id <= $2 AND ($3::text IS NULL OR swarm = $3 OR starts_with(swarm, $3 || '/'))
             ORDER BY id LIMIT $4"
        ),
        &[&clamp(after), &clamp(up_to), &swarm, &(limit.min(i64::MAX as usize) as i64)],
    )?;
    rows.iter().map(event_row).collect()
}

pub fn read_task_events(
    client: &mut Client,
    swarm: &str,
    task: &str,
    limit: usize,
) -> Result<Vec<EventRow>, StoreError> {
    let rows = client.query(
        &format!("SELECT {EVENT_COLUMNS} FROM events WHERE swarm = $1 AND task = $2 ORDER BY id LIMIT $3"),
        &[&swarm, &task, &(limit.min(i64::MAX as usize) as i64)],
    )?;
    rows.iter().map(event_row).collect()
}

pub fn last_event_id(client: &mut Client) -> Result<u64, StoreError> {
    let id: i64 = client.query_one("SELECT COALESCE(MAX(id), 0)::BIGINT FROM events", &[])?.get(0);
    Ok(id.max(0) as u64)
}

/// Ids are u64 in the model and BIGINT here; bounds past i64 mean "all".
fn clamp(id: u64) -> i64 {
    id.min(i64::MAX as u64) as i64
}

fn event_row(r: &::postgres::Row) -> Result<EventRow, StoreError> {
    Ok(EventRow {
        id: r.try_get::<_, i64>(0)? as u64,
        at: r.try_get(1)?,
        swarm: r.try_get(2)?,
        task: r.try_get(3)?,
        attempt: load::narrow("events", r.try_get(4)?)?,
        worker: r.try_get(5)?,
        kind: r.try_get(6)?,
        message: r.try_get(7)?,
        data: r.try_get(8)?,
    })
}

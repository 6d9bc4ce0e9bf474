//! Versioned Postgres migrations. A migration is appended, never edited;
//! the version a database has reached is the one row of `swarm_schema`.
//! Every controller sharing the database runs this at start, so the whole
//! run holds an advisory lock: two controllers starting together migrate
//! once, one after the other.

use ::postgres::Client;

use crate::StoreError;

/// The advisory lock key taken while migrating ("swarmsch" in ASCII).
const MIGRATION_LOCK: i64 = 0x7377_6172_6d73_6368;

pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the schema SQLite reached at its version 5, in Postgres types, and
    // the leader lease whose epoch fences every commit.
    "CREATE TABLE swarms (
        id TEXT PRIMARY KEY,
        plan TEXT NOT NULL,
        created_at BIGINT NOT NULL
    );
    CREATE TABLE swarm_progress (
        swarm TEXT PRIMARY KEY REFERENCES swarms(id),
        state TEXT NOT NULL,
        integration_head TEXT NOT NULL
    );
    CREATE TABLE tasks (
        swarm TEXT NOT NULL REFERENCES swarms(id),
        id TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts BIGINT NOT NULL,
        retries_used BIGINT NOT NULL,
        not_before BIGINT NOT NULL,
        resume_commit TEXT NOT NULL,
        result_commit TEXT NOT NULL,
        merge_commit TEXT NOT NULL,
        reason TEXT NOT NULL,
        cancel_requested BOOLEAN NOT NULL,
        notes TEXT NOT NULL,
        updated_at BIGINT NOT NULL,
        PRIMARY KEY (swarm, id)
    );
    CREATE TABLE attempts (
        swarm TEXT NOT NULL,
        task TEXT NOT NULL,
        number BIGINT NOT NULL,
        state TEXT NOT NULL,
        worker TEXT NOT NULL,
        token BIGINT NOT NULL,
        base_commit TEXT NOT NULL,
        result_commit TEXT NOT NULL,
        outcome TEXT NOT NULL,
        exit_code BIGINT NOT NULL,
        summary TEXT NOT NULL,
        error TEXT NOT NULL,
        started_at BIGINT NOT NULL,
        ended_at BIGINT NOT NULL,
        tiers TEXT NOT NULL,
        agent TEXT NOT NULL,
        PRIMARY KEY (swarm, task, number),
        FOREIGN KEY (swarm, task) REFERENCES tasks(swarm, id)
    );
    CREATE TABLE workers (
        id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        labels TEXT NOT NULL,
        last_applied_seq BIGINT NOT NULL,
        draining BOOLEAN NOT NULL,
        updated_at BIGINT NOT NULL,
        resume_secret TEXT NOT NULL,
        principal TEXT NOT NULL
    );
    CREATE TABLE events (
        id BIGINT PRIMARY KEY,
        at BIGINT NOT NULL,
        swarm TEXT NOT NULL,
        task TEXT NOT NULL,
        attempt BIGINT NOT NULL,
        worker TEXT NOT NULL,
        kind TEXT NOT NULL,
        message TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX events_by_swarm ON events (swarm, id);
    CREATE INDEX events_by_task ON events (swarm, task, id);
    CREATE TABLE swarm_leader (
        id INT PRIMARY KEY CHECK (id = 1),
        epoch BIGINT NOT NULL,
        holder TEXT NOT NULL,
        url TEXT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    );
    INSERT INTO swarm_leader (id, epoch, holder, url, expires_at) VALUES (1, 0, '', '', '-infinity');",
    // 2: what the operator set on a swarm (a pause, a budget) survives a
    // restart; JSON, empty for nothing.
    "ALTER TABLE swarm_progress ADD COLUMN control TEXT NOT NULL DEFAULT '';",
    // 3: how a swarm was made (a planner's goal, session and cost), JSON,
    // empty for a plan written by hand; written once, with the plan.
    "ALTER TABLE swarms ADD COLUMN origin TEXT NOT NULL DEFAULT '';",
    // 4: what a forgotten swarm's tasks took, by plan name and task id
    // (as SQLite's migration 9).
    "CREATE TABLE task_durations (
        plan TEXT NOT NULL,
        task TEXT NOT NULL,
        ms BIGINT NOT NULL,
        samples BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        PRIMARY KEY (plan, task)
    );",
];

pub const VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database to [`VERSION`]; refuses one a newer controller
/// migrated, since this one would misread or damage its rows.
pub fn migrate(client: &mut Client, store: &str) -> Result<(), StoreError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS swarm_schema (id INT PRIMARY KEY CHECK (id = 1), version BIGINT NOT NULL);
         INSERT INTO swarm_schema (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;",
    )?;
    let found: i64 = tx.query_one("SELECT version FROM swarm_schema WHERE id = 1", &[])?.get(0);
    if found > VERSION {
        return Err(StoreError::TooNew { store: store.to_string(), found, supported: VERSION });
    }
    if found == VERSION {
        return Ok(());
    }
    for sql in MIGRATIONS.iter().skip(found as usize) {
        tx.batch_execute(sql)?;
    }
    tx.execute("UPDATE swarm_schema SET version = $1 WHERE id = 1", &[&VERSION])?;
    tx.commit()?;
    tracing::info!(from = found, to = VERSION, store, "store migrated");
    Ok(())
}

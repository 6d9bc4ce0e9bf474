//! Versioned migrations. A migration is appended, never edited: the
//! version a store has reached is kept in `PRAGMA user_version`.

use std::path::Path;

use rusqlite::Connection;

use crate::StoreError;

pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    "CREATE TABLE swarms (
        id TEXT PRIMARY KEY,
        plan TEXT NOT NULL,
        state TEXT NOT NULL,
        integration_head TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE tasks (
        swarm TEXT NOT NULL REFERENCES swarms(id),
        id TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        retries_used INTEGER NOT NULL,
        not_before INTEGER NOT NULL,
        resume_commit TEXT NOT NULL,
        result_commit TEXT NOT NULL,
        merge_commit TEXT NOT NULL,
        reason TEXT NOT NULL,
        cancel_requested INTEGER NOT NULL,
        notes TEXT NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (swarm, id)
    );
    CREATE TABLE attempts (
        swarm TEXT NOT NULL,
        task TEXT NOT NULL,
        number INTEGER NOT NULL,
        state TEXT NOT NULL,
        worker TEXT NOT NULL,
        token INTEGER NOT NULL,
        base_commit TEXT NOT NULL,
        result_commit TEXT NOT NULL,
        outcome TEXT NOT NULL,
        exit_code INTEGER NOT NULL,
        summary TEXT NOT NULL,
        error TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        ended_at INTEGER NOT NULL,
        tiers TEXT NOT NULL,
        PRIMARY KEY (swarm, task, number),
        FOREIGN KEY (swarm, task) REFERENCES tasks(swarm, id)
    );
    CREATE TABLE workers (
        id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        labels TEXT NOT NULL,
        last_applied_seq INTEGER NOT NULL,
        draining INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        at INTEGER NOT NULL,
        swarm TEXT NOT NULL,
        task TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        worker TEXT NOT NULL,
        kind TEXT NOT NULL,
        message TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX events_by_swarm ON events (swarm, id);",
    // 2: a swarm's changing state lives apart from its plan text, which can
    // be megabytes: updating the head must not rewrite the plan's pages.
    // (swarms.state and swarms.integration_head keep their values from
    // creation and are no longer read.)
    "CREATE TABLE swarm_progress (
        swarm TEXT PRIMARY KEY REFERENCES swarms(id),
        state TEXT NOT NULL,
        integration_head TEXT NOT NULL
    );
    INSERT INTO swarm_progress (swarm, state, integration_head)
        SELECT id, state, integration_head FROM swarms;",
    // 3: a worker's claim on its id survives a controller restart: the
    // resume secret its sidecar keeps, and the credential it last proved.
    "ALTER TABLE workers ADD COLUMN resume_secret TEXT NOT NULL DEFAULT '';
    ALTER TABLE workers ADD COLUMN principal TEXT NOT NULL DEFAULT '';",
    // 4: a task's events are read by task, so describing one task costs
    // what it returns rather than its whole swarm's history.
    "CREATE INDEX events_by_task ON events (swarm, task, id);",
    // 5: agent attempts keep their agent, session and usage (JSON), so a
    // restarted controller still resumes sessions and sums costs.
    "ALTER TABLE attempts ADD COLUMN agent TEXT NOT NULL DEFAULT '';",
    // 6: no query reads events through (swarm, id): a swarm's events are
    // read by id range (a prefix match on the swarm cannot use it) and a
    // task's through events_by_task, whose (swarm, task, id) also serves
    // any lookup by swarm. Every event insert paid for it.
    "DROP INDEX events_by_swarm;",
    // 7: what the operator set on a swarm (a pause, a budget) survives a
    // restart; JSON, empty for nothing.
    "ALTER TABLE swarm_progress ADD COLUMN control TEXT NOT NULL DEFAULT '';",
    // 8: how a swarm was made (a planner's goal, session and cost), JSON,
    // empty for a plan written by hand. It never changes, so it sits with
    // the plan rather than with the progress rewritten on every change.
    "ALTER TABLE swarms ADD COLUMN origin TEXT NOT NULL DEFAULT '';",
    // 9: what a forgotten swarm's tasks took (the mean of their succeeded
    // attempts), by plan name and task id: the next run of the plan weighs
    // its tasks by them. Retention does not delete these; a row is
    // replaced when the plan's next swarm is forgotten.
    "CREATE TABLE task_durations (
        plan TEXT NOT NULL,
        task TEXT NOT NULL,
        ms INTEGER NOT NULL,
        samples INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (plan, task)
    );",
];

pub const VERSION: i64 = MIGRATIONS.len() as i64;

pub fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if found > VERSION {
        return Err(StoreError::TooNew { store: path.display().to_string(), found, supported: VERSION });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}

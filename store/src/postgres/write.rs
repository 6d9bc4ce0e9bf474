//! One group commit in Postgres: the batches are merged ([`Merged`]), then each table is written by one
//! statement over arrays (`UNNEST`), so a commit costs a round trip per
//! table rather than one per row.

use std::borrow::Cow;

use ::postgres::{Client, Statement, Transaction};

use crate::{AttemptRow, Batch, Merged, StoreError, SwarmRow, TaskRow, WorkerRow};

pub struct Statements {
    pub fence: Statement,
    new_swarms: Statement,
    progress: Statement,
    tasks: Statement,
    attempts: Statement,
    workers: Statement,
    forget: Statement,
    /// Retention's deletes, children before parents for the foreign keys.
    forget_swarms: [Statement; 5],
    forget_fleet_events: Statement,
    events: Statement,
}

impl Statements {
    pub fn prepare(client: &mut Client) -> Result<Statements, StoreError> {
        Ok(Statements {
            fence: client.prepare("SELECT 1 FROM swarm_leader WHERE id = 1 AND epoch = $1 FOR SHARE")?,
            new_swarms: client.prepare(
                "INSERT INTO swarms (id, plan, created_at, origin)
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::text[])",
            )?,
            progress: client.prepare(
                "INSERT INTO swarm_progress (swarm, state, integration_head, control)
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[])
                 ON CONFLICT (swarm) DO UPDATE SET state = EXCLUDED.state,
                   integration_head = EXCLUDED.integration_head, control = EXCLUDED.control",
            )?,
            tasks: client.prepare(
                "INSERT INTO tasks (swarm, id, state, attempts, retries_used, not_before, resume_commit,
                   result_commit, merge_commit, reason, cancel_requested, notes, updated_at)
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[], $6::int8[],
                   $7::text[], $8::text[], $9::text[], $10::text[], $11::bool[], $12::text[], $13::int8[])
                 ON CONFLICT (swarm, id) DO UPDATE SET state = EXCLUDED.state, attempts = EXCLUDED.attempts,
                   retries_used = EXCLUDED.retries_used, not_before = EXCLUDED.not_before,
                   resume_commit = EXCLUDED.resume_commit, result_commit = EXCLUDED.result_commit,
                   merge_commit = EXCLUDED.merge_commit, reason = EXCLUDED.reason,
                   cancel_requested = EXCLUDED.cancel_requested, notes = EXCLUDED.notes,
                   updated_at = EXCLUDED.updated_at",
            )?,
            attempts: client.prepare(
                "INSERT INTO attempts (swarm, task, number, state, worker, token, base_commit,
                   result_commit, outcome, exit_code, summary, error, started_at, ended_at, tiers, agent)
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::text[], $5::text[], $6::int8[],
                   $7::text[], $8::text[], $9::text[], $10::int8[], $11::text[], $12::text[], $13::int8[],
                   $14::int8[], $15::text[], $16::text[])
                 ON CONFLICT (swarm, task, number) DO UPDATE SET state = EXCLUDED.state,
                   worker = EXCLUDED.worker, token = EXCLUDED.token, base_commit = EXCLUDED.base_commit,
                   result_commit = EXCLUDED.result_commit, outcome = EXCLUDED.outcome,
                   exit_code = EXCLUDED.exit_code, summary = EXCLUDED.summary, error = EXCLUDED.error,
                   started_at = EXCLUDED.started_at, ended_at = EXCLUDED.ended_at, tiers = EXCLUDED.tiers,
                   agent = EXCLUDED.agent",
            )?,
            workers: client.prepare(
                "INSERT INTO workers (id, host, labels, last_applied_seq, draining, updated_at,
                   resume_secret, principal)
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[], $5::bool[], $6::int8[],
                   $7::text[], $8::text[])
                 ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, labels = EXCLUDED.labels,
                   last_applied_seq = EXCLUDED.last_applied_seq, draining = EXCLUDED.draining,
                   updated_at = EXCLUDED.updated_at, resume_secret = EXCLUDED.resume_secret,
                   principal = EXCLUDED.principal",
            )?,
            forget: client.prepare("DELETE FROM workers WHERE id = ANY($1::text[])")?,
            forget_swarms: [
                client.prepare("DELETE FROM events WHERE swarm = ANY($1::text[])")?,
                client.prepare("DELETE FROM attempts WHERE swarm = ANY($1::text[])")?,
                client.prepare("DELETE FROM tasks WHERE swarm = ANY($1::text[])")?,
                client.prepare("DELETE FROM swarm_progress WHERE swarm = ANY($1::text[])")?,
                client.prepare("DELETE FROM swarms WHERE id = ANY($1::text[])")?,
            ],
            forget_fleet_events: client
                .prepare("DELETE FROM events WHERE swarm = '' AND task = '' AND id < $1")?,
            events: client.prepare(
                "INSERT INTO events (id, at, swarm, task, attempt, worker, kind, message, data)
                 SELECT * FROM UNNEST($1::int8[], $2::int8[], $3::text[], $4::text[], $5::int8[], $6::text[],
                   $7::text[], $8::text[], $9::text[])",
            )?,
        })
    }
}

/// Postgres text cannot hold NUL, which a worker's output may carry; it
/// becomes U+FFFD rather than failing the whole commit.
fn text(s: &str) -> Cow<'_, str> {
    if s.contains('\0') { Cow::Owned(s.replace('\0', "\u{FFFD}")) } else { Cow::Borrowed(s) }
}

fn texts<'a, R>(rows: &[&'a R], f: impl Fn(&'a R) -> &'a str) -> Vec<Cow<'a, str>> {
    rows.iter().map(|r| text(f(r))).collect()
}

fn ints<R>(rows: &[&R], f: impl Fn(&R) -> i64) -> Vec<i64> {
    rows.iter().map(|r| f(r)).collect()
}

fn flags<R>(rows: &[&R], f: impl Fn(&R) -> bool) -> Vec<bool> {
    rows.iter().map(|r| f(r)).collect()
}

pub fn write(tx: &mut Transaction<'_>, st: &Statements, batches: &[&Batch]) -> Result<(), StoreError> {
    let m = Merged::of(batches);
    // Deletes first: a swarm forgotten and created again in one commit
    // ends as the new one.
    if !m.forgotten_swarms.is_empty() {
        let ids: Vec<&str> = m.forgotten_swarms.iter().copied().collect();
        for stmt in &st.forget_swarms {
            tx.execute(stmt, &[&ids])?;
        }
    }
    if let Some(before) = m.fleet_events_before {
        tx.execute(&st.forget_fleet_events, &[&(before as i64)])?;
    }
    if !m.new_swarms.is_empty() {
        let r = &m.new_swarms;
        tx.execute(
            &st.new_swarms,
            &[
                &texts(r, |r| &r.id),
                &texts(r, |r| &r.plan),
                &ints(r, |r| r.created_at),
                &texts(r, |r| &r.origin),
            ],
        )?;
    }
    if !m.swarms.is_empty() {
        let r: Vec<&SwarmRow> = m.swarms.values().copied().collect();
        let r = &r;
        tx.execute(
            &st.progress,
            &[
                &texts(r, |r| &r.id),
                &texts(r, |r| &r.state),
                &texts(r, |r| &r.integration_head),
                &texts(r, |r| &r.control),
            ],
        )?;
    }
    if !m.tasks.is_empty() {
        let r: Vec<&TaskRow> = m.tasks.values().copied().collect();
        write_tasks(tx, st, &r)?;
    }
    if !m.attempts.is_empty() {
        let r: Vec<&AttemptRow> = m.attempts.values().copied().collect();
        write_attempts(tx, st, &r)?;
    }
    if !m.forgotten.is_empty() {
        let ids: Vec<&str> = m.forgotten.iter().copied().collect();
        tx.execute(&st.forget, &[&ids])?;
    }
    if !m.workers.is_empty() {
        let r: Vec<&WorkerRow> = m.workers.values().copied().collect();
        let r = &r;
        tx.execute(
            &st.workers,
            &[
                &texts(r, |r| &r.id),
                &texts(r, |r| &r.host),
                &texts(r, |r| &r.labels),
                &ints(r, |r| r.last_applied_seq as i64),
                &flags(r, |r| r.draining),
                &ints(r, |r| r.updated_at),
                &texts(r, |r| &r.resume_secret),
                &texts(r, |r| &r.principal),
            ],
        )?;
    }
    for r in m.durations.values() {
        // Rare (a swarm forgotten), so one statement per row.
        tx.execute(
            "INSERT INTO task_durations (plan, task, ms, samples, updated_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (plan, task) DO UPDATE SET ms = excluded.ms, samples = excluded.samples,
               updated_at = excluded.updated_at",
            &[&r.plan, &r.task, &(r.ms as i64), &i64::from(r.samples), &r.updated_at],
        )?;
    }
    if !m.events.is_empty() {
        let r = &m.events;
        tx.execute(
            &st.events,
            &[
                &ints(r, |r| r.id as i64),
                &ints(r, |r| r.at),
                &texts(r, |r| &r.swarm),
                &texts(r, |r| &r.task),
                &ints(r, |r| i64::from(r.attempt)),
                &texts(r, |r| &r.worker),
                &texts(r, |r| &r.kind),
                &texts(r, |r| &r.message),
                &texts(r, |r| &r.data),
            ],
        )?;
    }
    Ok(())
}

fn write_tasks(tx: &mut Transaction<'_>, st: &Statements, r: &[&TaskRow]) -> Result<(), StoreError> {
    tx.execute(
        &st.tasks,
        &[
            &texts(r, |r| &r.swarm),
            &texts(r, |r| &r.id),
            &texts(r, |r| &r.state),
            &ints(r, |r| i64::from(r.attempts)),
            &ints(r, |r| i64::from(r.retries_used)),
            &ints(r, |r| r.not_before),
            &texts(r, |r| &r.resume_commit),
            &texts(r, |r| &r.result_commit),
            &texts(r, |r| &r.merge_commit),
            &texts(r, |r| &r.reason),
            &flags(r, |r| r.cancel_requested),
            &texts(r, |r| &r.notes),
            &ints(r, |r| r.updated_at),
        ],
    )?;
    Ok(())
}

fn write_attempts(tx: &mut Transaction<'_>, st: &Statements, r: &[&AttemptRow]) -> Result<(), StoreError> {
    tx.execute(
        &st.attempts,
        &[
            &texts(r, |r| &r.swarm),
            &texts(r, |r| &r.task),
            &ints(r, |r| i64::from(r.number)),
            &texts(r, |r| &r.state),
            &texts(r, |r| &r.worker),
            &ints(r, |r| r.token as i64),
            &texts(r, |r| &r.base_commit),
            &texts(r, |r| &r.result_commit),
            &texts(r, |r| &r.outcome),
            &ints(r, |r| i64::from(r.exit_code)),
            &texts(r, |r| &r.summary),
            &texts(r, |r| &r.error),
            &ints(r, |r| r.started_at),
            &ints(r, |r| r.ended_at),
            &texts(r, |r| &r.tiers),
            &texts(r, |r| &r.agent),
        ],
    )?;
    Ok(())
}

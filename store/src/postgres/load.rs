//! Reading the whole model back from Postgres: at start, and when a
//! standby wins the lease.

use ::postgres::{Client, Row};

use crate::{AttemptRow, DurationRow, Snapshot, StoreError, SwarmRow, TaskRow, WorkerRow};

/// A BIGINT column that the model keeps as u32/i32: out of range is a
/// corrupt row, not a wrap.
pub(super) fn narrow<T: TryFrom<i64>>(table: &'static str, v: i64) -> Result<T, StoreError> {
    T::try_from(v).map_err(|_| StoreError::Corrupt {
        table,
        key: v.to_string(),
        reason: "out of range".into(),
    })
}

pub fn load(client: &mut Client) -> Result<Snapshot, StoreError> {
    // One snapshot of the database for the whole read.
    let mut tx =
        client.build_transaction().isolation_level(::postgres::IsolationLevel::RepeatableRead).start()?;
    let mut snap = Snapshot::default();
    for r in tx.query(
        "SELECT s.id, s.plan, p.state, p.integration_head, s.created_at, p.control, s.origin
         FROM swarms s JOIN swarm_progress p ON p.swarm = s.id ORDER BY s.created_at, s.id",
        &[],
    )? {
        snap.swarms.push(SwarmRow {
            id: r.try_get(0)?,
            plan: r.try_get::<_, String>(1)?.into(),
            state: r.try_get(2)?,
            integration_head: r.try_get(3)?,
            created_at: r.try_get(4)?,
            control: r.try_get(5)?,
            origin: r.try_get(6)?,
        });
    }
    for r in tx.query(
        "SELECT swarm, id, state, attempts, retries_used, not_before, resume_commit, result_commit,
                merge_commit, reason, cancel_requested, notes, updated_at FROM tasks",
        &[],
    )? {
        snap.tasks.push(task(&r)?);
    }
    for r in tx.query(
        "SELECT swarm, task, number, state, worker, token, base_commit, result_commit, outcome, exit_code,
                summary, error, started_at, ended_at, tiers, agent FROM attempts ORDER BY swarm, task, number",
        &[],
    )? {
        snap.attempts.push(attempt(&r)?);
    }
    for r in tx.query(
        "SELECT id, host, labels, last_applied_seq, draining, updated_at, resume_secret, principal FROM workers",
        &[],
    )? {
        snap.workers.push(WorkerRow {
            id: r.try_get(0)?,
            host: r.try_get(1)?,
            labels: r.try_get(2)?,
            last_applied_seq: r.try_get::<_, i64>(3)? as u64,
            draining: r.try_get(4)?,
            updated_at: r.try_get(5)?,
            resume_secret: r.try_get(6)?,
            principal: r.try_get(7)?,
        });
    }
    for r in tx.query("SELECT plan, task, ms, samples, updated_at FROM task_durations", &[])? {
        snap.durations.push(DurationRow {
            plan: r.try_get(0)?,
            task: r.try_get(1)?,
            ms: r.try_get::<_, i64>(2)?.max(0) as u64,
            samples: narrow("task_durations", r.try_get(3)?)?,
            updated_at: r.try_get(4)?,
        });
    }
    let last: i64 = tx.query_one("SELECT COALESCE(MAX(id), 0)::BIGINT FROM events", &[])?.get(0);
    snap.last_event_id = last.max(0) as u64;
    tx.commit()?;
    Ok(snap)
}

fn task(r: &Row) -> Result<TaskRow, StoreError> {
    Ok(TaskRow {
        swarm: r.try_get(0)?,
        id: r.try_get(1)?,
        state: r.try_get(2)?,
        attempts: narrow("tasks", r.try_get(3)?)?,
        retries_used: narrow("tasks", r.try_get(4)?)?,
        not_before: r.try_get(5)?,
        resume_commit: r.try_get(6)?,
        result_commit: r.try_get(7)?,
        merge_commit: r.try_get(8)?,
        reason: r.try_get(9)?,
        cancel_requested: r.try_get(10)?,
        notes: r.try_get(11)?,
        updated_at: r.try_get(12)?,
    })
}

fn attempt(r: &Row) -> Result<AttemptRow, StoreError> {
    Ok(AttemptRow {
        swarm: r.try_get(0)?,
        task: r.try_get(1)?,
        number: narrow("attempts", r.try_get(2)?)?,
        state: r.try_get(3)?,
        worker: r.try_get(4)?,
        token: r.try_get::<_, i64>(5)? as u64,
        base_commit: r.try_get(6)?,
        result_commit: r.try_get(7)?,
        outcome: r.try_get(8)?,
        exit_code: narrow("attempts", r.try_get(9)?)?,
        summary: r.try_get(10)?,
        error: r.try_get(11)?,
        started_at: r.try_get(12)?,
        ended_at: r.try_get(13)?,
        tiers: r.try_get(14)?,
        agent: r.try_get(15)?,
    })
}

//! Reading the whole model back from SQLite after a restart.

use rusqlite::Connection;

use crate::{AttemptRow, DurationRow, Snapshot, StoreError, SwarmRow, TaskRow, WorkerRow};

pub fn load(conn: &Connection) -> Result<Snapshot, StoreError> {
    Ok(Snapshot {
        swarms: swarms(conn)?,
        tasks: tasks(conn)?,
        attempts: attempts(conn)?,
        workers: workers(conn)?,
        durations: durations(conn)?,
        last_event_id: conn
            .query_row("SELECT COALESCE(MAX(id), 0) FROM events", [], |r| r.get::<_, i64>(0))?
            as u64,
    })
}

fn swarms(conn: &Connection) -> Result<Vec<SwarmRow>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT s.id, s.plan, COALESCE(p.state, s.state), COALESCE(p.integration_head, s.integration_head), s.created_at,
                COALESCE(p.control, ''), s.origin
         FROM swarms s LEFT JOIN swarm_progress p ON p.swarm = s.id ORDER BY s.created_at, s.id",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(SwarmRow {
                id: r.get(0)?,
                plan: r.get::<_, String>(1)?.into(),
                state: r.get(2)?,
                integration_head: r.get(3)?,
                created_at: r.get(4)?,
                control: r.get(5)?,
                origin: r.get(6)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

fn tasks(conn: &Connection) -> Result<Vec<TaskRow>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT swarm, id, state, attempts, retries_used, not_before, resume_commit, result_commit,
                merge_commit, reason, cancel_requested, notes, updated_at FROM tasks",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(TaskRow {
                swarm: r.get(0)?,
                id: r.get(1)?,
                state: r.get(2)?,
                attempts: r.get(3)?,
                retries_used: r.get(4)?,
                not_before: r.get(5)?,
                resume_commit: r.get(6)?,
                result_commit: r.get(7)?,
                merge_commit: r.get(8)?,
                reason: r.get(9)?,
                cancel_requested: r.get(10)?,
                notes: r.get(11)?,
                updated_at: r.get(12)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

fn attempts(conn: &Connection) -> Result<Vec<AttemptRow>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT swarm, task, number, state, worker, token, base_commit, result_commit, outcome, exit_code,
                summary, error, started_at, ended_at, tiers, agent FROM attempts ORDER BY swarm, task, number",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(AttemptRow {
                swarm: r.get(0)?,
                task: r.get(1)?,
                number: r.get(2)?,
                state: r.get(3)?,
                worker: r.get(4)?,
                token: r.get::<_, i64>(5)? as u64,
                base_commit: r.get(6)?,
                result_commit: r.get(7)?,
                outcome: r.get(8)?,
                exit_code: r.get(9)?,
                summary: r.get(10)?,
                error: r.get(11)?,
                started_at: r.get(12)?,
                ended_at: r.get(13)?,
                tiers: r.get(14)?,
                agent: r.get(15)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

fn workers(conn: &Connection) -> Result<Vec<WorkerRow>, StoreError> {
    let mut stmt =
        conn.prepare("SELECT id, host, labels, last_applied_seq, draining, updated_at, resume_secret, principal FROM workers")?;
    let rows = stmt
        .query_map([], |r| {
            Ok(WorkerRow {
                id: r.get(0)?,
                host: r.get(1)?,
                labels: r.get(2)?,
                last_applied_seq: r.get::<_, i64>(3)? as u64,
                draining: r.get(4)?,
                updated_at: r.get(5)?,
                resume_secret: r.get(6)?,
                principal: r.get(7)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

fn durations(conn: &Connection) -> Result<Vec<DurationRow>, StoreError> {
    let mut stmt = conn.prepare("SELECT plan, task, ms, samples, updated_at FROM task_durations")?;
    let rows = stmt
        .query_map([], |r| {
            Ok(DurationRow {
                plan: r.get(0)?,
                task: r.get(1)?,
                ms: r.get::<_, i64>(2)?.max(0) as u64,
                samples: r.get(3)?,
                updated_at: r.get(4)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

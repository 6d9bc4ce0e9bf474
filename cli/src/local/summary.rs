//! When a local run is over, and the summary it prints.

use std::collections::{BTreeMap, HashMap};

use swarm_core::plan::{ConflictPolicy, Plan};
use swarm_proto::v1;
use v1::TaskState as S;

use crate::client::Client;
use crate::exit;
use crate::output::{UsageView, duration_text, plain_table, short_commit, task_state};

/// How a run ended: counts of what the tasks came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub merged: usize,
    /// FAILED or CANCELLED, or PENDING behind one of those.
    pub failed: usize,
    /// BLOCKED, ESCALATED, CONFLICT on hold, or PENDING behind one of those.
    pub waiting: usize,
}

impl Outcome {
    /// Every task merged: the swarm completed.
    pub fn completed(&self) -> bool {
        self.failed == 0 && self.waiting == 0
    }

    pub fn code(&self) -> u8 {
        if self.failed > 0 {
            exit::FAILURE
        } else if self.waiting > 0 {
            exit::WAITING
        } else {
            exit::SUCCESS
        }
    }
}

/// `Some` once the run is over: the controller reports the swarm finished
/// or STALLED (nothing can move without the operator), so `swarmctl run`
/// and `swarmctl get swarms` agree. Two things only local mode knows keep
/// it going or end it early: an ESCALATED task about to be answered
/// (`answer_due`, the demo's) is not the operator's to wait for, and a
/// task whose required labels the local sidecars lack (`labels`) never
/// starts, although the controller counts it as READY.
pub fn outcome(
    plan: &Plan,
    swarm: v1::SwarmState,
    tasks: &[v1::Task],
    labels: &BTreeMap<String, String>,
    answer_due: impl Fn(&str) -> bool,
) -> Option<Outcome> {
    if tasks.len() < plan.tasks.len() {
        return None;
    }
    let state: HashMap<&str, S> =
        tasks.iter().map(|t| (t.id.as_str(), S::try_from(t.state).unwrap_or(S::Unspecified))).collect();
    let answering = tasks.iter().any(|t| t.state == S::Escalated as i32 && answer_due(&t.id));
    let settled = match swarm {
        v1::SwarmState::Completed | v1::SwarmState::Failed | v1::SwarmState::Cancelled => true,
        // Every task merged; what is left is people's (CI, reviewers, the
        // merge) on the pull request, which outlives this run.
        v1::SwarmState::Landing => true,
        v1::SwarmState::Stalled => !answering,
        // Paused (the breaker, a usage limit): settled once what runs has
        // ended, since nothing new starts until someone resumes it.
        v1::SwarmState::Paused => {
            !tasks.iter().any(|t| matches!(S::try_from(t.state), Ok(S::Running | S::Succeeded | S::Merging)))
        }
        _ => starved_of_labels(plan, &state, labels, &answer_due),
    };
    if !settled {
        return None;
    }
    let mut out = Outcome { merged: 0, failed: 0, waiting: 0 };
    for spec in &plan.tasks {
        match state.get(spec.id.as_str()) {
            Some(S::Merged) => out.merged += 1,
            Some(S::Failed | S::Cancelled) => out.failed += 1,
            Some(S::Pending) if behind_failure(plan, &state, spec.id.as_str()) => out.failed += 1,
            // READY or PENDING for want of labels, BLOCKED, ESCALATED, CONFLICT on hold.
            _ => out.waiting += 1,
        }
    }
    Some(out)
}

/// Whether nothing can move once tasks needing labels no local sidecar has
/// count as stuck (false when every task can run here: the controller's
/// state decides then).
fn starved_of_labels(
    plan: &Plan,
    state: &HashMap<&str, S>,
    labels: &BTreeMap<String, String>,
    answer_due: &impl Fn(&str) -> bool,
) -> bool {
    let runnable =
        |spec: &swarm_core::plan::TaskSpec| spec.labels.iter().all(|(k, v)| labels.get(k) == Some(v));
    if plan.tasks.iter().all(|spec| runnable(spec)) {
        return false;
    }
    // Whether a task may still reach MERGED without the operator.
    let mut moving: HashMap<&str, bool> = HashMap::new();
    for spec in &plan.tasks {
        let id = spec.id.as_str();
        let m = match state.get(id).copied().unwrap_or(S::Unspecified) {
            S::Ready | S::Pending => runnable(spec), // PENDING: also decided below, from its deps
            S::Running | S::Succeeded | S::Merging | S::Unspecified => true,
            S::Conflict => spec.on_conflict == ConflictPolicy::Return,
            S::Escalated => answer_due(id),
            // A reviewer attempt decides on its own; the operator's review does not.
            S::Review => spec.review.as_deref().is_some_and(swarm_core::plan::ReviewSpec::has_reviewer),
            S::Merged | S::Failed | S::Blocked | S::Cancelled | S::Rejected => false,
        };
        moving.insert(id, m);
    }
    // A PENDING task moves only if all its deps are merged or moving; plan
    // order is not topological, so iterate to a fixpoint.
    loop {
        let mut changed = false;
        for spec in &plan.tasks {
            let id = spec.id.as_str();
            if state.get(id) != Some(&S::Pending) || moving.get(id) != Some(&true) {
                continue;
            }
            let stuck = spec
                .deps
                .iter()
                .any(|d| state.get(d.as_str()) != Some(&S::Merged) && moving.get(d.as_str()) != Some(&true));
            if stuck {
                moving.insert(id, false);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    !moving.values().any(|m| *m)
}

/// Whether a PENDING task waits (transitively) on a FAILED or CANCELLED one.
fn behind_failure(plan: &Plan, state: &HashMap<&str, S>, id: &str) -> bool {
    let mut stack = vec![id];
    let mut seen = std::collections::HashSet::new();
    while let Some(cur) = stack.pop() {
        if !seen.insert(cur) {
            continue;
        }
        let Some(spec) = plan.tasks.iter().find(|t| t.id.as_str() == cur) else { continue };
        for d in &spec.deps {
            match state.get(d.as_str()) {
                Some(S::Failed | S::Cancelled) => return true,
                Some(S::Pending) => stack.push(d.as_str()),
                _ => {}
            }
        }
    }
    false
}

/// The summary table: task, state, attempts, time, merge commit.
pub async fn print(client: &mut Client, plan: &Plan, outcome: &Outcome) -> anyhow::Result<()> {
    let mut table = plain_table();
    // Agents cost money: show what each task spent when any task runs one.
    let agents = plan.tasks.iter().any(|t| t.agent.is_some());
    let mut header = vec!["TASK", "STATE", "ATTEMPTS", "TIME", "MERGE COMMIT", "REASON"];
    if agents {
        header.insert(4, "COST");
    }
    table.set_header(header);
    let mut total_cost = 0.0;
    // One paginated list, not a call per task: the summary of a big swarm
    // costs what it shows.
    let mut tasks: std::collections::HashMap<String, v1::Task> =
        crate::client::all_tasks(client, plan.swarm.as_str())
            .await?
            .into_iter()
            .map(|t| (t.id.clone(), t))
            .collect();
    for spec in &plan.tasks {
        let task = tasks.remove(spec.id.as_str()).unwrap_or_default();
        let (start, end) = (task.first_started_at_unix_ms, task.last_ended_at_unix_ms);
        let time = if start > 0 && end > start { duration_text((end - start) as u64) } else { "-".into() };
        let mut row = vec![
            spec.id.to_string(),
            task_state(task.state),
            task.attempts.to_string(),
            time,
            short_commit(&task.merge_commit),
            swarm_core::names::truncate(&task.reason, 50).to_string(),
        ];
        if agents {
            let usage = UsageView::from(task.usage.as_ref());
            total_cost += usage.cost_usd;
            row.insert(4, usage.cost());
        }
        table.add_row(row);
    }
    println!("\n{table}");
    // Planning is not one of the swarm's attempts: said apart, never summed in.
    let swarm =
        client.get_swarm(v1::GetSwarmRequest { swarm_id: plan.swarm.to_string() }).await?.into_inner();
    let planning = swarm.origin.map(|o| UsageView::from(o.planner_usage.as_ref()).cost_usd);
    match (agents, planning) {
        (true, None) => println!("agents spent ${total_cost:.2} in all"),
        (true, Some(p)) => println!("agents spent ${total_cost:.2} in all; planning spent ${p:.2} apart"),
        (false, Some(p)) => println!("planning spent ${p:.2}"),
        (false, None) => {}
    }
    let verdict = match outcome.code() {
        exit::SUCCESS => format!("all {} tasks merged", outcome.merged),
        exit::FAILURE => format!("{} merged, {} failed or cancelled", outcome.merged, outcome.failed),
        _ => format!("{} merged, {} waiting on the operator", outcome.merged, outcome.waiting),
    };
    println!("{verdict}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use v1::SwarmState as Sw;

    fn plan() -> Plan {
        Plan::parse(
            r#"
name = "s"
[defaults]
command = "true"
[[tasks]]
id = "a"
files = ["a"]
[[tasks]]
id = "b"
files = ["b"]
deps = ["a"]
[[tasks]]
id = "c"
files = ["c"]
on_conflict = "hold"
"#,
        )
        .expect("plan")
    }

    fn tasks(states: &[S]) -> Vec<v1::Task> {
        ["a", "b", "c"]
            .iter()
            .zip(states)
            .map(|(id, s)| v1::Task { id: id.to_string(), state: *s as i32, ..Default::default() })
            .collect()
    }

    #[test]
    fn running_work_is_not_over() {
        assert_eq!(
            outcome(
                &plan(),
                Sw::Active,
                &tasks(&[S::Running, S::Pending, S::Merged]),
                &BTreeMap::new(),
                |_| false
            ),
            None
        );
        assert_eq!(
            outcome(
                &plan(),
                Sw::Active,
                &tasks(&[S::Merged, S::Pending, S::Merged]),
                &BTreeMap::new(),
                |_| false
            ),
            None
        );
    }

    #[test]
    fn ready_task_without_a_matching_sidecar_waits_on_the_operator() {
        let plan = Plan::parse(
            "name = \"s\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"g\"\nfiles = [\"g\"]\nlabels = { gpu = \"yes\" }\n",
        )
        .expect("plan");
        let ready = vec![v1::Task { id: "g".into(), state: S::Ready as i32, ..Default::default() }];
        let o = outcome(&plan, Sw::Active, &ready, &BTreeMap::new(), |_| false).expect("over");
        assert_eq!(o.code(), exit::WAITING);
        let gpu = BTreeMap::from([("gpu".to_string(), "yes".to_string())]);
        assert_eq!(outcome(&plan, Sw::Active, &ready, &gpu, |_| false), None);
    }

    #[test]
    fn the_controllers_state_decides_when_every_task_can_run_here() {
        // The same tasks: over only once the controller calls the swarm STALLED.
        let t = tasks(&[S::Failed, S::Pending, S::Merged]);
        assert_eq!(outcome(&plan(), Sw::Active, &t, &BTreeMap::new(), |_| false), None);
        assert!(outcome(&plan(), Sw::Stalled, &t, &BTreeMap::new(), |_| false).is_some());
    }

    #[test]
    fn a_paused_swarm_is_over_for_local_mode_once_nothing_runs() {
        let running = tasks(&[S::Running, S::Ready, S::Pending]);
        assert_eq!(outcome(&plan(), Sw::Paused, &running, &BTreeMap::new(), |_| false), None);
        let held = tasks(&[S::Merged, S::Ready, S::Pending]);
        let o = outcome(&plan(), Sw::Paused, &held, &BTreeMap::new(), |_| false).expect("over");
        assert_eq!(o.code(), exit::WAITING);
    }

    #[test]
    fn a_swarm_waiting_on_its_pull_request_ends_the_run_as_success() {
        let merged = tasks(&[S::Merged, S::Merged, S::Merged]);
        let o = outcome(&plan(), Sw::Landing, &merged, &BTreeMap::new(), |_| false);
        assert_eq!(o.map(|o| o.code()), Some(exit::SUCCESS));
    }

    #[test]
    fn all_merged_is_success() {
        let o = outcome(
            &plan(),
            Sw::Completed,
            &tasks(&[S::Merged, S::Merged, S::Merged]),
            &BTreeMap::new(),
            |_| false,
        );
        assert_eq!(o.map(|o| o.code()), Some(exit::SUCCESS));
    }

    #[test]
    fn pending_behind_a_failure_counts_as_failed() {
        let o = outcome(
            &plan(),
            Sw::Stalled,
            &tasks(&[S::Failed, S::Pending, S::Merged]),
            &BTreeMap::new(),
            |_| false,
        )
        .expect("over");
        assert_eq!((o.failed, o.code()), (2, exit::FAILURE));
    }

    #[test]
    fn held_conflict_and_escalation_wait_on_the_operator() {
        let o = outcome(
            &plan(),
            Sw::Stalled,
            &tasks(&[S::Escalated, S::Pending, S::Conflict]),
            &BTreeMap::new(),
            |_| false,
        )
        .expect("over");
        assert_eq!((o.waiting, o.code()), (3, exit::WAITING));
        assert_eq!(
            outcome(
                &plan(),
                Sw::Stalled,
                &tasks(&[S::Escalated, S::Pending, S::Merged]),
                &BTreeMap::new(),
                |_| true
            ),
            None
        );
    }
}

//! What each task was expected to take against what it took, and how far
//! off the expectations were across a swarm, for `describe swarm` and the
//! report (markdown, JSON and HTML alike).
//!
//! A task's time is its latest work attempt's, start to end, or so far
//! while it runs: what the scheduler learns durations from, so the two
//! compare like with like. An expectation that is only a guess (nothing
//! was known) is shown, but neither compared nor summed: it would say how
//! wrong a default was, not how wrong the estimates were.

use serde::Serialize;

use crate::TaskView;
use crate::text::duration_text;

/// A task that took more than this many times what was expected ran far
/// over, and is marked.
pub const FAR_OVER: f64 = 2.0;

/// Where the expectation came from when nothing was known.
const GUESS: &str = "guess";

/// Task states whose work succeeded: their time is final.
const FINISHED: [&str; 6] = ["SUCCEEDED", "MERGING", "MERGED", "REVIEW", "CONFLICT", "REJECTED"];

/// One task's expected and actual time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timing {
    pub task: String,
    /// 0 with an empty source: nothing expected (the scheduler said none).
    pub expected_ms: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub expected_source: String,
    /// What its latest work attempt took, or has taken so far while it
    /// runs; absent before it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual_ms: Option<u64>,
    pub running: bool,
    /// actual / expected, once it finished or while it runs, when the
    /// expectation was more than a guess.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// It took (or has taken so far) more than `FAR_OVER` × expected.
    pub far_over: bool,
}

/// Every task's `Timing` and the swarm's in sum: what its finished tasks
/// with a known expectation were expected to take and took.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timings {
    /// Finished tasks compared (their expectation was more than a guess).
    pub compared: usize,
    pub expected_ms: u64,
    pub actual_ms: u64,
    /// The median of their actual / expected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_ratio: Option<f64>,
    /// Tasks that ran far over, finished or still running.
    pub far_over: Vec<String>,
    pub tasks: Vec<Timing>,
}

impl Timing {
    /// `t`'s timing at `now` (unix ms).
    pub fn of(t: &TaskView, now: i64) -> Timing {
        let (start, end) = (t.work_started_at_unix_ms, t.work_ended_at_unix_ms);
        let running = t.state == "RUNNING" && start > 0 && end == 0;
        let actual_ms = match () {
            _ if start <= 0 => None,
            _ if end >= start => Some((end - start) as u64),
            _ if running => Some(now.saturating_sub(start).max(0) as u64),
            _ => None,
        };
        let known = t.expected_ms > 0 && !t.expected_source.is_empty() && t.expected_source != GUESS;
        let finished = FINISHED.contains(&t.state.as_str()) && end > 0;
        let ratio =
            actual_ms.filter(|_| known && (finished || running)).map(|ms| ms as f64 / t.expected_ms as f64);
        Timing {
            task: t.task.clone(),
            expected_ms: t.expected_ms,
            expected_source: t.expected_source.clone(),
            actual_ms,
            running,
            ratio,
            far_over: ratio.is_some_and(|r| r > FAR_OVER),
        }
    }

    /// `2m (estimate)`, or `-` when nothing was expected.
    pub fn expected_text(&self) -> String {
        if self.expected_source.is_empty() {
            return "-".into();
        }
        format!("{} ({})", duration_text(self.expected_ms), self.expected_source)
    }

    /// `3m`, `40s so far` while it runs, `-` before it started; with its
    /// ratio to the expectation (`1.5×`) and `far over` past `FAR_OVER`.
    pub fn actual_text(&self) -> String {
        let Some(ms) = self.actual_ms else { return "-".into() };
        let mut out = duration_text(ms);
        if self.running {
            out.push_str(" so far");
        }
        if let Some(r) = self.ratio {
            out.push_str(&format!(" ({})", ratio_text(r)));
        }
        if self.far_over {
            out.push_str(" ⚠ far over");
        }
        out
    }
}

impl Timings {
    /// The timings of a swarm's `tasks` at `now` (unix ms), in their order.
    pub fn of(tasks: &[TaskView], now: i64) -> Timings {
        let tasks: Vec<Timing> = tasks.iter().map(|t| Timing::of(t, now)).collect();
        let compared: Vec<&Timing> = tasks.iter().filter(|t| t.ratio.is_some() && !t.running).collect();
        let mut ratios: Vec<f64> = compared.iter().filter_map(|t| t.ratio).collect();
        ratios.sort_by(f64::total_cmp);
        Timings {
            compared: compared.len(),
            expected_ms: compared.iter().map(|t| t.expected_ms).sum(),
            actual_ms: compared.iter().filter_map(|t| t.actual_ms).sum(),
            median_ratio: median(&ratios),
            far_over: tasks.iter().filter(|t| t.far_over).map(|t| t.task.clone()).collect(),
            tasks,
        }
    }

    /// One line: the finished tasks' expected and actual time in sum, how
    /// far off the expectations were, and which tasks ran far over.
    pub fn line(&self) -> String {
        let mut out = match self.compared {
            0 => "no finished task with a known expectation yet".to_string(),
            n => format!(
                "{n} finished {} expected {}, took {}",
                if n == 1 { "task" } else { "tasks" },
                duration_text(self.expected_ms),
                duration_text(self.actual_ms)
            ),
        };
        if let Some(r) = self.median_ratio {
            out.push_str(&format!("; actual/expected median {}", ratio_text(r)));
        }
        if !self.far_over.is_empty() {
            out.push_str(&format!("; far over (>{FAR_OVER}×): {}", self.far_over.join(", ")));
        }
        out
    }
}

/// `1.5×`; two decimals below 0.1, and `<0.01×` below that, so a tiny
/// ratio does not read as none.
pub fn ratio_text(r: f64) -> String {
    match r {
        _ if r < 0.01 => "<0.01×".into(),
        _ if r < 0.1 => format!("{r:.2}×"),
        _ => format!("{r:.1}×"),
    }
}

/// The median of sorted `values` (the mean of the middle two of an even count).
fn median(values: &[f64]) -> Option<f64> {
    let mid = values.len() / 2;
    match values.len() {
        0 => None,
        n if n % 2 == 1 => values.get(mid).copied(),
        _ => Some((values.get(mid - 1)? + values.get(mid)?) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, state: &str, expected: (u64, &str), work: (i64, i64)) -> TaskView {
        let wire = swarm_proto::v1::Task { swarm_id: "s".into(), id: id.into(), ..Default::default() };
        let mut t = TaskView::from(&wire);
        t.state = state.into();
        (t.expected_ms, t.expected_source) = (expected.0, expected.1.into());
        (t.work_started_at_unix_ms, t.work_ended_at_unix_ms) = work;
        t
    }

    const NOW: i64 = 1_000_000;

    #[test]
    fn each_task_is_set_against_its_expectation_and_its_source() {
        let estimated = Timing::of(&task("a", "MERGED", (60_000, "estimate"), (1_000, 91_000)), NOW);
        assert_eq!(
            (estimated.actual_ms, estimated.ratio, estimated.far_over),
            (Some(90_000), Some(1.5), false)
        );
        assert_eq!(estimated.expected_text(), "60s (estimate)");
        assert_eq!(estimated.actual_text(), "90s (1.5×)");

        let learned = Timing::of(&task("b", "SUCCEEDED", (10_000, "directory"), (1_000, 6_000)), NOW);
        assert_eq!((learned.ratio, learned.expected_text()), (Some(0.5), "10s (directory)".to_string()));

        let guessed = Timing::of(&task("c", "MERGED", (1_000, "guess"), (1_000, 9_000)), NOW);
        assert_eq!((guessed.actual_ms, guessed.ratio, guessed.far_over), (Some(8_000), None, false));
        assert_eq!(guessed.actual_text(), "8.0s", "a guess is shown, never compared");

        let nothing = Timing::of(&task("d", "PENDING", (0, ""), (0, 0)), NOW);
        assert_eq!((nothing.expected_text(), nothing.actual_text()), ("-".to_string(), "-".to_string()));

        let over = Timing::of(&task("e", "RUNNING", (100_000, "swarm median"), (NOW - 250_000, 0)), NOW);
        assert!(over.running && over.far_over, "{over:?}");
        assert_eq!(over.actual_text(), "4m so far (2.5×) ⚠ far over");

        // A failed attempt's time is shown, but it is not what was expected of the work.
        let failed = Timing::of(&task("f", "FAILED", (10_000, "estimate"), (1_000, 2_000)), NOW);
        assert_eq!((failed.actual_ms, failed.ratio), (Some(1_000), None));
    }

    #[test]
    fn a_swarm_sums_its_finished_tasks_and_takes_the_median_ratio() {
        let tasks = vec![
            task("a", "MERGED", (60_000, "estimate"), (1_000, 91_000)),
            task("b", "MERGED", (10_000, "directory"), (1_000, 6_000)),
            task("c", "MERGED", (10_000, "attempts"), (1_000, 31_000)),
            task("g", "MERGED", (1_000, "guess"), (1_000, 9_000)),
            task("e", "RUNNING", (100_000, "swarm median"), (NOW - 250_000, 0)),
        ];
        let t = Timings::of(&tasks, NOW);
        assert_eq!((t.compared, t.expected_ms, t.actual_ms), (3, 80_000, 125_000));
        assert_eq!(t.median_ratio, Some(1.5));
        assert_eq!(t.far_over, vec!["c", "e"]);
        assert_eq!(
            t.line(),
            "3 finished tasks expected 80s, took 2m; actual/expected median 1.5×; far over (>2×): c, e"
        );
        let none = Timings::of(&tasks[3..4], NOW);
        assert_eq!((none.compared, none.median_ratio), (0, None));
        assert_eq!(none.line(), "no finished task with a known expectation yet");
        assert_eq!(median(&[1.0, 2.0, 4.0, 8.0]), Some(3.0));
        assert_eq!((ratio_text(0.04), ratio_text(0.003)), ("0.04×".to_string(), "<0.01×".to_string()));
    }
}

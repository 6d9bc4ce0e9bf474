//! A dollar budget holds while one agent process runs: the real Claude Code
//! CLI (one process, stream-json in and out) against the scripted Messages
//! API, whose every call reports the tokens of a big prompt. Claude Code
//! names its cost only in each turn's `result`, which this long turn never
//! reaches; the sidecar prices each call from its usage as it arrives, and
//! the controller stops the attempt at `budget_usd` within a call.
//!
//! Where the CLI cannot be installed the test prints why and returns.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use serde_json::json;
use swarm_proto::v1::{AttemptState, TaskState};
use swarm_tests::messages_api::{Script, Step, Tokens};
use swarm_tests::{RealClaude, TempRepo, attempts, claude_task, create_swarm, wait_task_state};

/// The model the plan names, priced at $3 in and $15 out per million
/// tokens in the built-in table (as by the CLI itself).
const MODEL: &str = "claude-sonnet-4-5";
/// Each call: a 180k-token prompt and a short answer, $0.5415.
const CALL: Tokens = Tokens { input: 180_000, output: 100, cache_read: 0, cache_creation: 0 };
const CALL_USD: f64 = (180_000.0 * 3.0 + 100.0 * 15.0) / 1e6;
const CALLS: usize = 8;
const BUDGET_USD: f64 = 2.0;

/// Eight calls of one turn, each writing a file, then the turn's end: $4.33
/// in all, more than twice the budget.
fn script() -> Script {
    let mut steps: Vec<Step> = (0..CALLS)
        .map(|n| {
            Step::dynamic(move |r| {
                let input =
                    json!({"file_path": r.abs(&format!("src/step{n}.txt")), "content": format!("{n}\n")});
                Step::tool("Write", input).usage(CALL)
            })
        })
        .collect();
    steps.push(Step::text("All eight written.").usage(CALL));
    Script::new("dollars", steps)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_single_claude_process_is_stopped_at_budget_usd_within_one_call() {
    let name = "a_single_claude_process_is_stopped_at_budget_usd_within_one_call";
    let Some(claude) = RealClaude::start(name, vec![script()]) else { return };
    let repo = TempRepo::with_files(&[]);
    let plan = claude
        .plan("usd")
        .default("model", &format!("{MODEL:?}"))
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "deny" }"#)
        .task(
            claude_task("t", &["src/**"], "dollars", "Write the eight files.")
                .set("budget_usd", &BUDGET_USD.to_string()),
        )
        .build();
    let cluster = claude.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let t = wait_task_state(&url, "usd", "t", TaskState::Blocked).await;
    assert!(t.reason.starts_with("budget: task spent $"), "{}", t.reason);
    let all = attempts(&url, "usd/t").await;
    assert_eq!(all.len(), 1, "{all:?}");
    let a = &all[0];
    assert_eq!(a.state, AttemptState::Checkpointed as i32, "stopped with its work kept: {a:?}");

    // The call that crossed the cap is the first whose running total
    // reached it; at most one more may have been answered meanwhile.
    let crossing = (BUDGET_USD / CALL_USD).ceil() as usize;
    let served = claude.api.requests_of("dollars").len();
    assert!(
        (crossing..=crossing + 1).contains(&served),
        "{served} calls served; the cap was crossed by call {crossing}:\n{}",
        claude.api.summary()
    );
    let cost = a.usage.as_ref().map(|u| u.cost_usd).unwrap_or_default();
    eprintln!("{served} calls served, ${cost:.4} recorded, the cap crossed by call {crossing}");
    assert!(
        (BUDGET_USD..=(crossing + 1) as f64 * CALL_USD + 0.01).contains(&cost),
        "recorded ${cost:.4} for {served} calls of ${CALL_USD}: more than a call past the one that crossed ${BUDGET_USD}"
    );
    assert!(
        (cost - served as f64 * CALL_USD).abs() < 0.05,
        "the recorded ${cost:.4} is what the {served} calls served cost"
    );
}

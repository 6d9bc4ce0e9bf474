//! A task's review gate: who decides whether its succeeded result merges.
//!
//! `review = "operator"`, `review = { command = "…" }` or
//! `review = { agent = "claude", prompt = "…" }`, in a task or in
//! `[defaults]`; a task's own value wins, and `review = "none"` opts a task
//! out of the defaults' gate.

use serde::Deserialize;

use super::MAX_PROMPT_BYTES;
use super::agent::{AgentKind, AgentSpec, PermissionPolicy};
use super::error::{PlanError, err};
use super::fields::Command;
use crate::names::check_text;

/// Where a reviewer leaves its decision, relative to its worktree.
pub const DECISION_FILE: &str = ".swarm/review.json";

/// Who reviews a task's succeeded result before it goes to the merge path.
#[derive(Debug, Clone, PartialEq)]
pub enum ReviewSpec {
    /// Only the operator decides (`swarmctl review`).
    Operator,
    /// A reviewer attempt runs this argv in a worktree at the result.
    Command(Vec<String>),
    /// A reviewer attempt runs this coding agent, with `prompt` as its
    /// instructions above the task and its diff.
    Agent { spec: Box<AgentSpec>, prompt: String },
}

impl ReviewSpec {
    /// What the views call it: `operator`, `command` or the agent's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            ReviewSpec::Operator => "operator",
            ReviewSpec::Command(_) => "command",
            ReviewSpec::Agent { spec, .. } => spec.kind.as_str(),
        }
    }

    /// Whether a reviewer attempt (rather than only the operator) decides.
    pub fn has_reviewer(&self) -> bool {
        !matches!(self, ReviewSpec::Operator)
    }
}

/// The review value as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum RawReview {
    Word(String),
    Table(RawReviewTable),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReviewTable {
    command: Option<Command>,
    agent: Option<AgentKind>,
    agent_path: Option<String>,
    model: Option<String>,
    prompt: Option<String>,
}

/// One written review value; `None` for `"none"`.
pub(super) fn parse(at: &str, raw: &RawReview) -> Result<Option<ReviewSpec>, PlanError> {
    let table = match raw {
        RawReview::Word(w) if w == "operator" => return Ok(Some(ReviewSpec::Operator)),
        RawReview::Word(w) if w == "none" => return Ok(None),
        RawReview::Word(w) => {
            return Err(err(
                at,
                format!(
                    "{w:?} is not a review: write \"operator\", \"none\", {{ command = \"…\" }} or {{ agent = \"claude\", prompt = \"…\" }}"
                ),
            ));
        }
        RawReview::Table(t) => t,
    };
    let field = |f: &str| format!("{at}.{f}");
    match (&table.command, table.agent) {
        (Some(_), Some(_)) => Err(err(field("agent"), "set command or agent, not both")),
        (None, None) => Err(err(at, "a review table needs command or agent")),
        (Some(command), None) => {
            for f in ["agent_path", "model", "prompt"] {
                let set = match f {
                    "agent_path" => table.agent_path.is_some(),
                    "model" => table.model.is_some(),
                    _ => table.prompt.is_some(),
                };
                if set {
                    return Err(err(
                        field(f),
                        "is for agent reviewers; a command reviewer reads its task text",
                    ));
                }
            }
            let empty = match command {
                Command::Shell(line) => line.trim().is_empty(),
                Command::Argv(argv) => argv.first().is_none_or(|a| a.trim().is_empty()),
            };
            let argv = command.clone().into_argv();
            if empty {
                return Err(err(field("command"), "must not be empty"));
            }
            if argv.iter().any(|a| a.contains('\0')) {
                return Err(err(field("command"), "must not contain NUL"));
            }
            Ok(Some(ReviewSpec::Command(argv)))
        }
        (None, Some(AgentKind::Acp)) => Err(err(
            field("agent"),
            "a reviewer agent is \"claude\" or \"codex\"; run an ACP agent as a review command instead",
        )),
        (None, Some(kind)) => {
            let prompt = table.prompt.clone().unwrap_or_default();
            if prompt.trim().is_empty() {
                return Err(err(field("prompt"), "an agent reviewer needs a prompt saying what to check"));
            }
            check_text(&prompt, MAX_PROMPT_BYTES).map_err(|rule| err(field("prompt"), rule))?;
            if let Some(p) = &table.agent_path
                && (p.trim().is_empty() || p.contains('\0'))
            {
                return Err(err(field("agent_path"), "must be a non-empty path without NUL"));
            }
            if let Some(m) = &table.model
                && (m.is_empty() || m.len() > 128 || m.chars().any(|c| c.is_whitespace() || c.is_control()))
            {
                return Err(err(field("model"), "must be 1-128 characters without spaces"));
            }
            let spec = AgentSpec {
                kind,
                path: table.agent_path.clone(),
                model: table.model.clone(),
                max_turns: None,
                max_budget_usd: None,
                allowed_tools: Vec::new(),
                permission_mode: None,
                append_system_prompt: None,
                extra_args: Vec::new(),
                // Its prompt says all a reviewer needs; the worker's note would mislead it.
                instructions: super::agent::AgentInstructions::Off,
                // A reviewer reads and writes its decision, nothing else.
                permissions: PermissionPolicy {
                    allow: vec![super::agent::PermissionRule {
                        tool: "Write".into(),
                        specifier: Some(DECISION_FILE.into()),
                    }],
                    deny: Vec::new(),
                    otherwise: super::agent::Otherwise::Deny,
                },
            };
            Ok(Some(ReviewSpec::Agent { spec: Box::new(spec), prompt }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Plan;
    use super::*;

    fn plan(defaults: &str, task: &str) -> Result<Plan, PlanError> {
        Plan::parse(&format!(
            "name = \"s\"\n[defaults]\ncommand = \"true\"\n{defaults}\n[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n{task}\n[[tasks]]\nid = \"b\"\nfiles = [\"b\"]\n"
        ))
    }

    #[test]
    fn each_reviewer_form_parses() {
        let p = plan("", "review = \"operator\"").expect("operator");
        assert_eq!(p.tasks[0].review.as_deref(), Some(&ReviewSpec::Operator));
        assert_eq!(p.tasks[1].review, None, "no review unless asked");
        let p = plan("", "review = { command = \"./review.sh\" }").expect("command");
        assert_eq!(
            p.tasks[0].review.as_deref(),
            Some(&ReviewSpec::Command(vec!["sh".into(), "-c".into(), "./review.sh".into()]))
        );
        let p = plan("", "review = { agent = \"claude\", prompt = \"check the tests\", model = \"opus\" }")
            .expect("agent");
        let Some(ReviewSpec::Agent { spec, prompt }) = p.tasks[0].review.as_deref() else {
            panic!("an agent reviewer: {:?}", p.tasks[0].review)
        };
        assert_eq!((spec.kind, prompt.as_str()), (AgentKind::Claude, "check the tests"));
        assert_eq!(spec.model.as_deref(), Some("opus"));
    }

    #[test]
    fn a_tasks_own_review_wins_over_the_defaults_and_none_opts_out() {
        let p = plan("review = \"operator\"", "review = { command = [\"review\", \"--strict\"] }")
            .expect("valid");
        assert_eq!(
            p.tasks[0].review.as_deref(),
            Some(&ReviewSpec::Command(vec!["review".into(), "--strict".into()]))
        );
        assert_eq!(p.tasks[1].review.as_deref(), Some(&ReviewSpec::Operator), "b takes the defaults'");
        let p = plan("review = \"operator\"", "review = \"none\"").expect("valid");
        assert_eq!(p.tasks[0].review, None);
        assert_eq!(p.tasks[1].review.as_deref(), Some(&ReviewSpec::Operator));
    }

    #[test]
    fn bad_reviews_name_the_field_and_the_rule() {
        let cases = [
            ("", "review = \"maybe\"", "tasks[0].review", "is not a review"),
            ("", "review = {}", "tasks[0].review", "needs command or agent"),
            ("", "review = { command = \"x\", agent = \"claude\" }", "tasks[0].review.agent", "not both"),
            ("", "review = { agent = \"claude\" }", "tasks[0].review.prompt", "needs a prompt"),
            (
                "",
                "review = { agent = \"claude\", prompt = \"  \" }",
                "tasks[0].review.prompt",
                "needs a prompt",
            ),
            ("", "review = { command = \"x\", prompt = \"p\" }", "tasks[0].review.prompt", "agent reviewers"),
            ("", "review = { command = \"\" }", "tasks[0].review.command", "must not be empty"),
            ("", "review = { command = [] }", "tasks[0].review.command", "must not be empty"),
            ("review = \"sometimes\"", "", "defaults.review", "is not a review"),
        ];
        for (defaults, task, path, rule) in cases {
            let e = plan(defaults, task).expect_err(task);
            assert_eq!(e.path, path, "{defaults} {task}: {e}");
            assert!(e.rule.contains(rule), "{defaults} {task}: {e}");
        }
        let e = plan("", "review = { command = \"x\", timeout = 3 }").expect_err("unknown key");
        assert!(e.path.starts_with("tasks[0].review") || e.path.starts_with("tasks[0]"), "{e}");
    }
}

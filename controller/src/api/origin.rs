//! A swarm's origin (`CreateSwarmRequest.origin`) checked as it comes off
//! the wire, and handed back on `Swarm.origin`.
//!
//! Anyone allowed to create a swarm can send one, and its text is printed
//! on operators' terminals (`describe swarm`), in reports and on the
//! dashboard, so it is held to caps and to printable text: an escape
//! sequence in a goal would rewrite what an operator reads.

use std::sync::Arc;

use swarm_proto::FieldError;
use swarm_proto::convert::{session_id_from_wire, usage_from_wire};
use swarm_proto::v1;

use crate::scheduler::Origin;

/// A goal can be long (`swarmctl plan --from FILE`), but it is a goal, not
/// a document.
pub const MAX_GOAL: usize = 64 * 1024;
/// A planning agent's name: `claude`, `codex`, `acp` and the like.
pub const MAX_AGENT: usize = 64;
pub const MAX_ISSUE_URL: usize = 2048;

/// The origin to keep, `None` for a plan written by hand; otherwise
/// `INVALID_ARGUMENT` naming the field (`origin.goal`, …) and the rule.
pub fn from_wire(o: Option<&v1::SwarmOrigin>) -> Result<Option<Arc<Origin>>, FieldError> {
    let Some(o) = o else { return Ok(None) };
    if o.goal.trim().is_empty() {
        return Err(FieldError::new("origin.goal", "must not be empty"));
    }
    text("origin.goal", &o.goal, MAX_GOAL, true)?;
    let agent_ok = o.planner_agent.len() <= MAX_AGENT
        && o.planner_agent.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !agent_ok {
        return Err(FieldError::new(
            "origin.planner_agent",
            format!("must be at most {MAX_AGENT} of [A-Za-z0-9._-]"),
        ));
    }
    let planner_session = session_id_from_wire("origin.planner_session", &o.planner_session)?;
    let planner_usage = usage_from_wire("origin.planner_usage", o.planner_usage.as_ref())?;
    if !o.issue_url.is_empty() {
        text("origin.issue_url", &o.issue_url, MAX_ISSUE_URL, false)?;
        let scheme = o.issue_url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("http" | "https")) || o.issue_url.contains(char::is_whitespace) {
            return Err(FieldError::new("origin.issue_url", "must be an http(s) URL with no spaces"));
        }
    }
    Ok(Some(Arc::new(Origin {
        goal: o.goal.clone(),
        planner_agent: o.planner_agent.clone(),
        planner_session,
        planner_usage,
        issue_url: o.issue_url.clone(),
    })))
}

/// Bounded and printable: no control character but, in multi-line text,
/// newlines and tabs.
fn text(field: &str, s: &str, max: usize, lines: bool) -> Result<(), FieldError> {
    if s.len() > max {
        return Err(FieldError::new(field, format!("must be at most {max} bytes (got {})", s.len())));
    }
    let allowed = |c: char| lines && matches!(c, '\n' | '\t');
    if let Some(c) = s.chars().find(|c| c.is_control() && !allowed(*c)) {
        let rule = format!("must not contain control characters (found U+{:04X})", c as u32);
        return Err(FieldError::new(field, rule));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> v1::SwarmOrigin {
        v1::SwarmOrigin {
            goal: "add a --json flag\n\tand document it".into(),
            planner_agent: "claude".into(),
            planner_session: "5f0c-aa_1.2".into(),
            planner_usage: Some(v1::Usage { input_tokens: 100, cost_usd: 0.12, ..Default::default() }),
            issue_url: "https://github.com/o/r/issues/46".into(),
        }
    }

    fn refused(o: v1::SwarmOrigin) -> String {
        from_wire(Some(&o)).expect_err("refused").to_string()
    }

    #[test]
    fn a_good_origin_is_kept_whole_and_none_is_none() {
        assert!(from_wire(None).expect("none").is_none());
        let kept = from_wire(Some(&good())).expect("good").expect("some");
        assert_eq!(v1::SwarmOrigin::from(crate::scheduler::views::origin_view(&kept)), good());
    }

    #[test]
    fn each_bad_field_is_refused_by_name() {
        let cases = [
            (v1::SwarmOrigin { goal: "x".repeat(MAX_GOAL + 1), ..good() }, "origin.goal: must be at most"),
            (v1::SwarmOrigin { goal: "  \n".into(), ..good() }, "origin.goal: must not be empty"),
            (v1::SwarmOrigin { goal: "red\x1b[31m".into(), ..good() }, "origin.goal: must not contain"),
            (v1::SwarmOrigin { planner_agent: "cl aude".into(), ..good() }, "origin.planner_agent: "),
            (v1::SwarmOrigin { planner_session: "a;b".into(), ..good() }, "origin.planner_session: "),
            (
                v1::SwarmOrigin {
                    planner_usage: Some(v1::Usage { cost_usd: f64::NAN, ..Default::default() }),
                    ..good()
                },
                "origin.planner_usage: ",
            ),
            (v1::SwarmOrigin { issue_url: "file:///etc/passwd".into(), ..good() }, "origin.issue_url: "),
            (v1::SwarmOrigin { issue_url: "https://x/\n".into(), ..good() }, "origin.issue_url: "),
        ];
        for (o, want) in cases {
            let got = refused(o);
            assert!(got.contains(want), "{got:?} does not contain {want:?}");
        }
    }
}

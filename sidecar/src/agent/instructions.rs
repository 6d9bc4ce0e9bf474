//! What an agent is told about working inside swarm: where its task is,
//! which files it owns, how to ask the operator, how to say it is blocked,
//! and what becomes of its work. Without it a model does not know that
//! `.swarm/` exists, that edits outside its files are refused, or that it
//! must not commit or push itself.
//!
//! The note is versioned (its first line names the version) so that a
//! transcript shows which one a session was given. A plan replaces it
//! (`agent_instructions = "..."`) or turns it off (`= false`). It is kept
//! short on purpose: it is sent with every API call of every turn.

use super::AgentConfig;

/// Bumped whenever the text below changes meaning.
pub const VERSION: u32 = 2;

/// Whether the agent gets the built-in note, the plan's own, or none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Instructions {
    #[default]
    BuiltIn,
    Custom(String),
    Off,
}

impl Instructions {
    /// The wire form: unset is the built-in note, empty is off.
    pub fn from_wire(v: Option<&str>) -> Instructions {
        match v {
            None => Instructions::BuiltIn,
            Some("") => Instructions::Off,
            Some(text) => Instructions::Custom(text.to_string()),
        }
    }
}

/// The note for an attempt whose task owns `owned_globs`; None when off.
pub fn note(cfg: &AgentConfig, owned_globs: &[String]) -> Option<String> {
    match &cfg.instructions {
        Instructions::Off => None,
        Instructions::Custom(text) => Some(text.clone()),
        Instructions::BuiltIn => Some(built_in(owned_globs, cfg.mcp.is_some())),
    }
}

fn built_in(owned_globs: &[String], tools: bool) -> String {
    let owned = if owned_globs.is_empty() { "none".to_string() } else { owned_globs.join(", ") };
    let ask = if tools {
        "- swarm's tools (server swarm): progress to report, ask to ask the operator (it returns the answer), \
         escalate if the task cannot be done as written, checkpoint to stop and resume later, context for the task."
    } else {
        "- To ask the operator, use your AskUserQuestion tool and wait for the answer. If you cannot go on, write \
         .swarm/status.json as {\"status\": \"blocked\", \"message\": \"why\"} and end your turn."
    };
    format!(
        "# Working in swarm (instructions v{VERSION})
You are one of several agents working in parallel, each in its own git worktree, coordinated by swarm.
- Your task is in .swarm/task.md (with answers and messages added as they come).
- You may change only files matching: {owned}. Edits elsewhere are refused; if the task needs them, say so.
- Do not commit, push or switch branches: when you finish, swarm commits your changes, runs the task's checks and merges them.
{ask}
- If you are stopped, your work so far is kept and this session resumes later.
- End with a short summary of what you changed and anything left open."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_names_the_owned_files_and_its_version() {
        let text = built_in(&["src/api/**".into(), "docs/api.md".into()], false);
        assert!(text.contains("src/api/**, docs/api.md"), "{text}");
        assert!(text.starts_with(&format!("# Working in swarm (instructions v{VERSION})")));
        assert!(text.contains(".swarm/status.json") && text.contains("AskUserQuestion"));
        // Sent with every API call: keep it near a hundred tokens (~4 bytes each).
        assert!(text.len() < 1000, "{} bytes", text.len());
        assert!(built_in(&[], false).contains("matching: none."));
        let with_tools = built_in(&[], true);
        assert!(with_tools.contains("ask to ask the operator") && with_tools.contains("checkpoint"));
        assert!(with_tools.len() < 1000, "{} bytes", with_tools.len());
    }

    #[test]
    fn plans_replace_or_turn_off_the_note() {
        assert_eq!(Instructions::from_wire(None), Instructions::BuiltIn);
        assert_eq!(Instructions::from_wire(Some("")), Instructions::Off);
        assert_eq!(Instructions::from_wire(Some("Be terse.")), Instructions::Custom("Be terse.".into()));
    }
}

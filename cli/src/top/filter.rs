//! The operator's filter: `swarm:S`, `state:RUNNING,FAILED` and free
//! words, typed after `/` and applied to every pane.

use swarm_proto::v1;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub swarm: Option<String>,
    /// Upper-case state names without their prefix, e.g. `RUNNING`.
    pub states: Vec<String>,
    /// Lower-case words that must all appear in a row's text.
    pub words: Vec<String>,
}

impl Filter {
    /// Parses the filter line. An unknown state is refused, naming it and
    /// the states there are, so a typo does not silently hide everything.
    pub fn parse(line: &str) -> Result<Filter, String> {
        let mut f = Filter::default();
        for token in line.split_whitespace() {
            if let Some(s) = token.strip_prefix("swarm:") {
                if s.is_empty() {
                    return Err("swarm: needs a swarm id, e.g. swarm:auth".into());
                }
                f.swarm = Some(s.to_string());
            } else if let Some(list) = token.strip_prefix("state:") {
                for s in list.split(',').filter(|s| !s.is_empty()) {
                    let name = s.to_ascii_uppercase();
                    if v1::TaskState::from_str_name(&format!("TASK_STATE_{name}")).is_none() {
                        return Err(format!("state: unknown {s:?} (one of {})", state_names().join(", ")));
                    }
                    f.states.push(name);
                }
            } else {
                f.words.push(token.to_lowercase());
            }
        }
        Ok(f)
    }

    pub fn is_empty(&self) -> bool {
        *self == Filter::default()
    }

    pub fn swarm_matches(&self, swarm: &str) -> bool {
        self.swarm.as_deref().is_none_or(|s| s == swarm)
    }

    pub fn state_matches(&self, state: &str) -> bool {
        self.states.is_empty() || self.states.iter().any(|s| s == state)
    }

    /// Whether every word appears in one of `fields` (case-insensitively).
    pub fn words_match(&self, fields: &[&str]) -> bool {
        self.words.iter().all(|w| fields.iter().any(|f| f.to_lowercase().contains(w.as_str())))
    }
}

fn state_names() -> Vec<&'static str> {
    (1..)
        .map_while(|n| v1::TaskState::try_from(n).ok())
        .map(|s| s.as_str_name().trim_start_matches("TASK_STATE_"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_swarm_states_and_words() {
        let f = Filter::parse("swarm:auth state:running,Failed  Login").unwrap_or_default();
        assert_eq!(f.swarm.as_deref(), Some("auth"));
        assert_eq!(f.states, ["RUNNING", "FAILED"]);
        assert_eq!(f.words, ["login"]);
        assert!(f.state_matches("FAILED") && !f.state_matches("MERGED"));
        assert!(f.words_match(&["auth/api", "Login endpoint"]));
        assert!(Filter::parse("   ").is_ok_and(|f| f.is_empty()));
    }

    #[test]
    fn an_unknown_state_is_refused_by_name() {
        let err = Filter::parse("state:runing").err().unwrap_or_default();
        assert!(err.contains("\"runing\"") && err.contains("RUNNING"), "{err}");
        assert!(Filter::parse("swarm:").is_err());
    }
}

//! Enum values as people and scripts read them: the wire name without its
//! type prefix (`TASK_STATE_MERGED` → `MERGED`). A value this build does not
//! know (a newer controller's) reads `UNKNOWN(n)` rather than failing.

use swarm_proto::v1;

pub fn task_state(state: i32) -> String {
    enum_name(v1::TaskState::try_from(state).map(|s| s.as_str_name()), "TASK_STATE_", state)
}

pub fn attempt_state(state: i32) -> String {
    enum_name(v1::AttemptState::try_from(state).map(|s| s.as_str_name()), "ATTEMPT_STATE_", state)
}

pub fn swarm_state(state: i32) -> String {
    enum_name(v1::SwarmState::try_from(state).map(|s| s.as_str_name()), "SWARM_STATE_", state)
}

/// An attempt's outcome; empty while it has none.
pub fn outcome(o: i32) -> String {
    match v1::Outcome::try_from(o) {
        Ok(v1::Outcome::Unspecified) => String::new(),
        named => enum_name(named.map(|s| s.as_str_name()), "OUTCOME_", o),
    }
}

fn enum_name<E>(name: Result<&'static str, E>, prefix: &str, raw: i32) -> String {
    match name {
        Ok(n) => n.strip_prefix(prefix).unwrap_or(n).to_string(),
        Err(_) => format!("UNKNOWN({raw})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lose_their_prefix_and_unknown_values_say_which() {
        assert_eq!(task_state(v1::TaskState::Merged as i32), "MERGED");
        assert_eq!(task_state(99), "UNKNOWN(99)");
        assert_eq!(outcome(v1::Outcome::Checkpoint as i32), "CHECKPOINT");
        assert_eq!(outcome(v1::Outcome::Unspecified as i32), "");
        assert_eq!(swarm_state(v1::SwarmState::Stalled as i32), "STALLED");
    }
}

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

/// The wire number of a name `enum_name` made: `MERGED` → the value of
/// `TASK_STATE_MERGED`, `UNKNOWN(n)` → n, anything else → 0 (unspecified).
pub fn state_number(name: &str, prefix: &str, lookup: impl Fn(&str) -> Option<i32>) -> i32 {
    if let Some(n) = name.strip_prefix("UNKNOWN(").and_then(|r| r.strip_suffix(')')) {
        return n.parse().unwrap_or(0);
    }
    lookup(&format!("{prefix}{name}")).unwrap_or(0)
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

    #[test]
    fn a_name_reads_back_as_its_number() {
        let task = |n: &str| v1::TaskState::from_str_name(n).map(|s| s as i32);
        for s in [v1::TaskState::Merged as i32, v1::TaskState::Pending as i32, 99] {
            assert_eq!(state_number(&task_state(s), "TASK_STATE_", task), s);
        }
        assert_eq!(state_number("", "TASK_STATE_", task), 0);
    }
}

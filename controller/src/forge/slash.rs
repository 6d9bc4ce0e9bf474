//! `/swarm` commands in a pull request's comments: `/swarm retry TASK`,
//! `/swarm cancel`, `/swarm approve TASK`. Parsing only; who may run them
//! and what they do is `conversation.rs`'s.

/// A command a comment gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slash {
    /// Another attempt for the task (a merged task is reopened with the
    /// comment as its feedback).
    Retry(String),
    /// Cancel the swarm.
    Cancel,
    /// Approve a task waiting in review.
    Approve(String),
}

pub const USAGE: &str = "`/swarm retry TASK`, `/swarm cancel` or `/swarm approve TASK`";

/// The first `/swarm` line of `body`: `None` when there is none, the rule
/// broken when it does not parse.
pub fn parse(body: &str) -> Option<Result<Slash, String>> {
    let line = body.lines().map(str::trim).find(|l| *l == "/swarm" || l.starts_with("/swarm "))?;
    let words: Vec<&str> = line.split_whitespace().skip(1).collect();
    let task = |w: Option<&&str>| match w {
        Some(t) if swarm_core::names::check_id(t).is_ok() => Ok(t.to_string()),
        Some(t) => Err(format!("`{}` is not a task id", shown(t))),
        None => Err("name the task".to_string()),
    };
    Some(match words.first().copied() {
        Some("retry") if words.len() <= 2 => task(words.get(1)).map(Slash::Retry),
        Some("approve") if words.len() <= 2 => task(words.get(1)).map(Slash::Approve),
        Some("cancel") if words.len() == 1 => Ok(Slash::Cancel),
        _ => Err(format!("not a command; try {USAGE}")),
    })
}

/// A word as a reply may quote it.
fn shown(word: &str) -> String {
    swarm_forge::text::shown(word, 64).replace('`', "'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_read_from_their_own_line() {
        assert_eq!(parse("LGTM but\n/swarm retry api\nthanks"), Some(Ok(Slash::Retry("api".into()))));
        assert_eq!(parse("/swarm cancel"), Some(Ok(Slash::Cancel)));
        assert_eq!(parse("  /swarm approve ui  "), Some(Ok(Slash::Approve("ui".into()))));
        assert_eq!(parse("no command here; /swarm retry api is mid-line"), None);
        assert_eq!(parse("/swarmy retry api"), None);
    }

    #[test]
    fn a_bad_command_says_the_rule() {
        for (body, rule) in [
            ("/swarm", "not a command"),
            ("/swarm merge now", "not a command"),
            ("/swarm retry", "name the task"),
            ("/swarm retry ../../x", "is not a task id"),
            ("/swarm cancel everything", "not a command"),
            ("/swarm retry a b", "not a command"),
        ] {
            let e = parse(body).and_then(Result::err).unwrap_or_default();
            assert!(e.contains(rule), "{body}: {e}");
        }
    }
}

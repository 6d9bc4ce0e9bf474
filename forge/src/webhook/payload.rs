//! The payloads of the events swarm reads, with only the fields it uses;
//! the objects inside (pull request, check run, comment, review) are the
//! REST API's and convert through the same code (`github::types`).

use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};

use super::{Inbound, Meta, WebhookError};
use crate::github::types::{
    CheckRun, IssueComment, Pull, PullComment, PullNumber, PullReview, Status, User, check_run_state, login,
    name, sha,
};
use crate::text;

#[derive(Deserialize)]
struct Repository {
    full_name: String,
}

/// The fields every event has.
#[derive(Deserialize)]
struct Envelope {
    repository: Option<Repository>,
    sender: Option<User>,
}

#[derive(Deserialize)]
struct CheckRunEvent {
    action: String,
    check_run: CheckRun,
}

#[derive(Deserialize)]
struct CheckSuite {
    head_branch: Option<String>,
    head_sha: String,
    status: Option<String>,
    conclusion: Option<String>,
    #[serde(default)]
    pull_requests: Vec<PullNumber>,
}

#[derive(Deserialize)]
struct CheckSuiteEvent {
    action: String,
    check_suite: CheckSuite,
}

#[derive(Deserialize)]
struct StatusEvent {
    sha: String,
    #[serde(flatten)]
    status: Status,
}

#[derive(Deserialize)]
struct PullRequestEvent {
    action: String,
    pull_request: Pull,
}

#[derive(Deserialize)]
struct Issue {
    number: u64,
    /// Present (an object) when the issue is a pull request.
    pull_request: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct IssueCommentEvent {
    action: String,
    issue: Issue,
    comment: IssueComment,
}

#[derive(Deserialize)]
struct ReviewEvent {
    action: String,
    review: PullReview,
    pull_request: PullNumber,
}

#[derive(Deserialize)]
struct ReviewCommentEvent {
    action: String,
    comment: PullComment,
    pull_request: PullNumber,
}

pub(super) fn parse(event: &str, delivery: &str, body: &[u8]) -> Result<Inbound, WebhookError> {
    let bad = |message: String| WebhookError::Malformed { event: event.to_string(), message };
    // An event swarm does not read need not even be JSON; a known one is
    // parsed whole below, and fails there if it is not.
    let envelope = serde_json::from_slice::<Envelope>(body).ok();
    let (repository, sender) = envelope.map(|e| (e.repository, e.sender)).unwrap_or_default();
    let meta = Meta {
        delivery: delivery.to_string(),
        repository: repository.map(|r| name(&r.full_name)),
        sender: sender.map(|u| login(Some(u))),
    };
    Ok(match event {
        "check_run" => {
            let CheckRunEvent { action, mut check_run } = json(event, body)?;
            let head_sha =
                check_run.head_sha.take().ok_or_else(|| bad("check_run.head_sha is missing".into()))?;
            let head_sha = sha(head_sha, "check_run.head_sha").map_err(bad)?;
            let pulls = std::mem::take(&mut check_run.pull_requests).into_iter().map(|p| p.number).collect();
            Inbound::CheckRun { meta, action: word(&action), head_sha, check: check_run.into_domain(), pulls }
        }
        "check_suite" => {
            let CheckSuiteEvent { action, check_suite: s } = json(event, body)?;
            Inbound::CheckSuite {
                meta,
                action: word(&action),
                head_sha: sha(s.head_sha, "check_suite.head_sha").map_err(bad)?,
                head_branch: s.head_branch.map(|b| name(&b)),
                state: check_run_state(s.status.as_deref().unwrap_or("completed"), s.conclusion.as_deref()),
                pulls: s.pull_requests.into_iter().map(|p| p.number).collect(),
            }
        }
        "status" => {
            let StatusEvent { sha: commit, status } = json(event, body)?;
            Inbound::Status { meta, sha: sha(commit, "sha").map_err(bad)?, check: status.into_domain() }
        }
        "pull_request" => {
            let PullRequestEvent { action, pull_request } = json(event, body)?;
            Inbound::PullRequest {
                meta,
                action: word(&action),
                pull: pull_request.into_domain().map_err(bad)?,
            }
        }
        "issue_comment" => {
            let IssueCommentEvent { action, issue, comment } = json(event, body)?;
            Inbound::IssueComment {
                meta,
                action: word(&action),
                number: issue.number,
                on_pull: issue.pull_request.is_some(),
                comment: comment.into_domain().map_err(bad)?,
            }
        }
        "pull_request_review" => {
            let ReviewEvent { action, review, pull_request } = json(event, body)?;
            Inbound::Review {
                meta,
                action: word(&action),
                number: pull_request.number,
                review: review.into_domain().map_err(bad)?,
            }
        }
        "pull_request_review_comment" => {
            let ReviewCommentEvent { action, comment, pull_request } = json(event, body)?;
            Inbound::ReviewComment {
                meta,
                action: word(&action),
                number: pull_request.number,
                comment: comment.into_domain().map_err(bad)?,
            }
        }
        other => Inbound::Ignored { meta, event: other.to_string() },
    })
}

fn json<T: DeserializeOwned>(event: &str, body: &[u8]) -> Result<T, WebhookError> {
    serde_json::from_slice(body).map_err(|e| WebhookError::Malformed {
        event: event.to_string(),
        message: text::shown(&e.to_string(), 512),
    })
}

/// An action name (`created`, `completed`, ...), kept short and plain.
fn word(action: &str) -> String {
    text::shown(action, 64)
}

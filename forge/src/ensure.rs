//! `ensure_pull`: "there is an open pull request for this branch, and it
//! says this", made true in as few calls as possible and safe to repeat.
//!
//! A controller that restarts between pushing a branch and recording the
//! pull request's number calls this again; it must find the one it opened
//! rather than open a second, and must not touch a pull request that
//! already says what it wants (no edit noise in the timeline, no
//! notification to reviewers).

use crate::error::ForgeError;
use crate::provider::{Forge, NewPull, PullRequest, PullState, PullUpdate};
use crate::text;

/// The longest title and body kept from the forge. GitHub caps titles at
/// 256 characters and bodies at 65,536; a character is up to 4 bytes.
pub const PULL_TITLE_MAX: usize = 1024;
pub const PULL_BODY_MAX: usize = 256 * 1024;

/// What [`ensure_pull`] had to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    Opened,
    Updated,
    Unchanged,
}

/// A title as it reads back from the forge: controls stripped, clipped,
/// and trimmed (GitHub trims titles). The same function cleans what the
/// forge sent and what we want, so the two compare equal when they are.
pub(crate) fn clean_title(title: &str) -> String {
    text::shown(title, PULL_TITLE_MAX).trim().to_string()
}

/// A body as it reads back from the forge (see [`clean_title`]); `\r` is
/// among the controls stripped, so CRLF and LF bodies compare equal.
pub(crate) fn clean_body(body: &str) -> String {
    text::shown(body, PULL_BODY_MAX)
}

/// Makes sure an open pull request from `want.head` exists and has
/// `want`'s title, body and draft state; returns it and what was done.
///
/// Finds by head first and opens only if none is open. If the forge says
/// one already exists (another caller won a race), finds again. Updates
/// only the fields that differ; a draft is marked ready (or an open pull
/// request turned back into a draft) only when `want.draft` says so.
/// The base is not changed on an existing pull request.
pub async fn ensure_pull(forge: &dyn Forge, want: &NewPull) -> Result<(PullRequest, Ensured), ForgeError> {
    let open = |pr: Option<PullRequest>| pr.filter(|p| p.state == PullState::Open);
    let pr = match open(forge.find_pull(&want.head).await?) {
        Some(pr) => pr,
        None => match forge.open_pull(want).await {
            Ok(pr) => return Ok((pr, Ensured::Opened)),
            Err(ForgeError::Invalid { what, message }) if message.contains("already exists") => {
                tracing::debug!(head = %want.head, "a pull request appeared while opening one; finding it");
                match open(forge.find_pull(&want.head).await?) {
                    Some(pr) => pr,
                    None => return Err(ForgeError::Invalid { what, message }),
                }
            }
            Err(e) => return Err(e),
        },
    };
    let update = differences(&pr, want);
    if update.is_empty() {
        return Ok((pr, Ensured::Unchanged));
    }
    let pr = forge.update_pull(pr.number, &update).await?;
    Ok((pr, Ensured::Updated))
}

/// The update that makes `pr` say what `want` says.
fn differences(pr: &PullRequest, want: &NewPull) -> PullUpdate {
    PullUpdate {
        title: (clean_title(&pr.title) != clean_title(&want.title)).then(|| want.title.clone()),
        body: (clean_body(&pr.body) != clean_body(&want.body)).then(|| want.body.clone()),
        ready_for_review: (pr.draft != want.draft).then_some(!want.draft),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr(title: &str, body: &str, draft: bool) -> PullRequest {
        PullRequest {
            number: 7,
            node_id: "PR_x".into(),
            state: PullState::Open,
            draft,
            title: title.into(),
            body: body.into(),
            head: "swarm/a".into(),
            head_sha: "0".repeat(40),
            base: "main".into(),
            url: String::new(),
            merge_commit_sha: None,
            updated_at: None,
        }
    }

    fn want(title: &str, body: &str, draft: bool) -> NewPull {
        NewPull { title: title.into(), body: body.into(), head: "swarm/a".into(), base: "main".into(), draft }
    }

    #[test]
    fn only_the_fields_that_differ_are_updated() {
        assert!(differences(&pr("t", "b\n", false), &want("t ", "b\r\n", false)).is_empty());
        let u = differences(&pr("t", "b", true), &want("t", "new", false));
        assert_eq!(u, PullUpdate { title: None, body: Some("new".into()), ready_for_review: Some(true) });
        let u = differences(&pr("t", "b", false), &want("T", "b", true));
        assert_eq!(u, PullUpdate { title: Some("T".into()), body: None, ready_for_review: Some(false) });
    }
}

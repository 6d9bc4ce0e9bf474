//! The [`Forge`] methods as GitHub REST (and, for the draft flag, GraphQL)
//! calls. Arguments are checked before anything is sent; answers are
//! converted through `types`, and a malformed one is an error naming the
//! request.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use reqwest::{Method, Url};
use serde_json::json;

use super::GitHub;
use super::http::{JSON_CAP, LOG_CAP, parse, what};
use super::types::{
    CheckRunsPage, CollaboratorPermission, CombinedStatus, IssueComment, MergeResult, Pull, PullComment,
    PullReview, Status, is_sha,
};
use crate::error::ForgeError;
use crate::provider::{
    Check, Comment, Forge, ForgeFuture, MergeMethod, MergeOutcome, NewPull, Permission, PullRequest,
    PullState, PullUpdate, Review, ReviewComment,
};
use crate::refname::check_branch;
use crate::remote::check_owner;
use crate::text;
use crate::time::{format_rfc3339, unix_seconds};

/// Longest comment swarm posts; GitHub's own limit is 65,536 characters.
const POST_MAX: usize = 65_536;

fn malformed(what: &str) -> impl FnOnce(String) -> ForgeError + '_ {
    move |message| ForgeError::Malformed { what: what.to_string(), message }
}

fn branch(name: &str) -> Result<(), ForgeError> {
    check_branch(name).map_err(|message| ForgeError::InvalidInput { what: "branch name", message })
}

fn commit(sha: &str) -> Result<(), ForgeError> {
    if is_sha(sha) {
        Ok(())
    } else {
        Err(ForgeError::InvalidInput {
            what: "commit",
            message: "not a 40- or 64-digit lowercase hex SHA".into(),
        })
    }
}

fn comment_body(body: &str) -> Result<(), ForgeError> {
    if body.trim().is_empty() || body.chars().count() > POST_MAX {
        return Err(ForgeError::InvalidInput {
            what: "comment body",
            message: format!("a comment is 1 to {POST_MAX} characters"),
        });
    }
    Ok(())
}

impl GitHub {
    /// A request whose answer is one JSON object of type `T`.
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<serde_json::Value>,
    ) -> Result<T, ForgeError> {
        let what = what(&method, &url);
        let reply = self.http.send(method, url, body.as_ref(), None, JSON_CAP).await?;
        if !(200..300).contains(&reply.status) {
            return Err(ForgeError::Status {
                what,
                status: reply.status,
                message: "expected a 2xx answer with a JSON body".into(),
            });
        }
        parse(&what, &reply.body)
    }

    async fn pull(
        &self,
        method: Method,
        url: Url,
        body: Option<serde_json::Value>,
    ) -> Result<PullRequest, ForgeError> {
        let what = what(&method, &url);
        self.call::<Pull>(method, url, body).await?.into_domain().map_err(malformed(&what))
    }

    async fn find(&self, head: &str) -> Result<Option<PullRequest>, ForgeError> {
        branch(head)?;
        let head_filter = format!("{}:{head}", self.owner);
        let url = self.list_url(
            &["pulls"],
            &[("state", "all"), ("head", &head_filter), ("sort", "created"), ("direction", "desc")],
        );
        let what = what(&Method::GET, &url);
        let pulls = self.http.get_all(url, |page: Vec<Pull>| page).await?;
        let mut found = Vec::new();
        for p in pulls {
            // The filter is the server's to apply; a stray answer is not ours.
            if p.head.name == head {
                found.push(p.into_domain().map_err(malformed(&what))?);
            }
        }
        // Open first (there is at most one per head and base), else the
        // newest closed or merged one.
        found.sort_by_key(|p| (p.state != PullState::Open, std::cmp::Reverse(p.number)));
        Ok(found.into_iter().next())
    }

    /// Marks a draft ready for review (or converts back to a draft): REST
    /// cannot change the draft flag, GraphQL can. Returns the new flag.
    async fn set_draft(&self, node_id: &str, draft: bool) -> Result<bool, ForgeError> {
        let mutation = if draft { "convertPullRequestToDraft" } else { "markPullRequestReadyForReview" };
        let query = format!(
            "mutation($id: ID!) {{ {mutation}(input: {{pullRequestId: $id}}) {{ pullRequest {{ isDraft }} }} }}"
        );
        let what = format!("GraphQL {mutation}");
        let answer: serde_json::Value = self
            .call(
                Method::POST,
                self.graphql.clone(),
                Some(json!({ "query": query, "variables": { "id": node_id } })),
            )
            .await?;
        if let Some(errors) = answer.get("errors").and_then(|e| e.as_array()).filter(|e| !e.is_empty()) {
            let message = errors
                .iter()
                .map(|e| e.get("message").and_then(|m| m.as_str()).unwrap_or("error"))
                .collect::<Vec<_>>()
                .join("; ");
            return Err(ForgeError::Invalid { what, message: self.http.scrub(&message) });
        }
        answer.pointer(&format!("/data/{mutation}/pullRequest/isDraft")).and_then(|d| d.as_bool()).ok_or_else(
            || ForgeError::Malformed { what, message: "no pullRequest.isDraft in the answer".into() },
        )
    }

    async fn update(&self, number: u64, update: &PullUpdate) -> Result<PullRequest, ForgeError> {
        let url = self.repo_url(&["pulls", &number.to_string()]);
        let mut pr = if update.title.is_some() || update.body.is_some() {
            let mut fields = serde_json::Map::new();
            if let Some(t) = &update.title {
                fields.insert("title".into(), t.clone().into());
            }
            if let Some(b) = &update.body {
                fields.insert("body".into(), b.clone().into());
            }
            self.pull(Method::PATCH, url, Some(fields.into())).await?
        } else {
            self.pull(Method::GET, url, None).await?
        };
        if let Some(ready) = update.ready_for_review
            && pr.draft == ready
        {
            pr.draft = self.set_draft(&pr.node_id, !ready).await?;
        }
        Ok(pr)
    }

    async fn all_checks(&self, sha: &str) -> Result<Vec<Check>, ForgeError> {
        commit(sha)?;
        let runs = self.list_url(&["commits", sha, "check-runs"], &[]);
        let runs = self.http.get_all(runs, |p: CheckRunsPage| p.check_runs);
        let statuses = self.list_url(&["commits", sha, "status"], &[]);
        let statuses = self.http.get_all(statuses, |p: CombinedStatus| p.statuses);
        let (runs, statuses) = futures::try_join!(runs, statuses)?;
        let mut checks: Vec<Check> = runs.into_iter().map(|r| r.into_domain()).collect();
        checks.extend(statuses.into_iter().map(Status::into_domain));
        checks.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(checks)
    }

    /// The job's log: the API answers 302 with a short-lived storage URL,
    /// followed once by hand (only to http(s), without the token: the
    /// storage host is not GitHub's API and must not see it).
    async fn job_log(&self, job: u64) -> Result<String, ForgeError> {
        let url = self.repo_url(&["actions", "jobs", &job.to_string(), "logs"]);
        let what = what(&Method::GET, &url);
        let reply = self.http.send(Method::GET, url.clone(), None, None, LOG_CAP).await?;
        let bytes = match reply.status {
            200 => reply.body,
            301 | 302 | 303 | 307 | 308 => {
                let location =
                    reply.headers.get(reqwest::header::LOCATION).and_then(|l| l.to_str().ok()).ok_or_else(
                        || ForgeError::Malformed {
                            what: what.clone(),
                            message: "a redirect without a Location".into(),
                        },
                    )?;
                let target = url.join(location).map_err(|e| ForgeError::Malformed {
                    what: what.clone(),
                    message: format!("a redirect to something that is not a URL: {e}"),
                })?;
                if !matches!(target.scheme(), "http" | "https") {
                    return Err(ForgeError::Malformed {
                        what,
                        message: "a redirect to a scheme other than http(s)".into(),
                    });
                }
                self.http.fetch_plain(target, LOG_CAP, self.log_timeout).await?
            }
            status => {
                return Err(ForgeError::Status {
                    what,
                    status,
                    message: "expected a redirect to the log".into(),
                });
            }
        };
        Ok(text::strip_controls(&String::from_utf8_lossy(&bytes)))
    }

    async fn merge(&self, number: u64, sha: &str, method: MergeMethod) -> Result<MergeOutcome, ForgeError> {
        commit(sha)?;
        let url = self.repo_url(&["pulls", &number.to_string(), "merge"]);
        let what = what(&Method::PUT, &url);
        let body = json!({ "sha": sha, "merge_method": method.as_str() });
        match self.call::<MergeResult>(Method::PUT, url, Some(body)).await {
            Ok(MergeResult { merged: true, sha: Some(sha), .. }) if is_sha(&sha) => {
                Ok(MergeOutcome::Merged { sha })
            }
            Ok(r) => Ok(MergeOutcome::Refused {
                status: 200,
                message: self.http.scrub(r.message.as_deref().unwrap_or("not merged")),
            }),
            Err(ForgeError::Status { status: 405, message, .. }) => {
                Ok(MergeOutcome::Refused { status: 405, message })
            }
            Err(ForgeError::Conflict { message, .. }) => Ok(MergeOutcome::Refused { status: 409, message }),
            Err(ForgeError::Invalid { message, .. }) => Ok(MergeOutcome::Refused { status: 422, message }),
            Err(e) => Err(e),
        }
        .inspect(|o| tracing::debug!(%what, outcome = ?o, "merge"))
    }
}

impl Forge for GitHub {
    fn find_pull<'a>(&'a self, head_branch: &'a str) -> ForgeFuture<'a, Option<PullRequest>> {
        self.find(head_branch).boxed()
    }

    fn open_pull<'a>(&'a self, new: &'a NewPull) -> ForgeFuture<'a, PullRequest> {
        async move {
            branch(&new.head)?;
            branch(&new.base)?;
            let body = json!({
                "title": new.title, "body": new.body, "head": new.head, "base": new.base, "draft": new.draft,
            });
            self.pull(Method::POST, self.repo_url(&["pulls"]), Some(body)).await
        }
        .boxed()
    }

    fn update_pull<'a>(&'a self, number: u64, update: &'a PullUpdate) -> ForgeFuture<'a, PullRequest> {
        self.update(number, update).boxed()
    }

    fn get_pull(&self, number: u64) -> ForgeFuture<'_, PullRequest> {
        async move {
            let url = self.repo_url(&["pulls", &number.to_string()]);
            let what = what(&Method::GET, &url);
            let (pull, _) = self.http.get_json::<Pull>(url).await?;
            pull.into_domain().map_err(malformed(&what))
        }
        .boxed()
    }

    fn checks<'a>(&'a self, sha: &'a str) -> ForgeFuture<'a, Vec<Check>> {
        self.all_checks(sha).boxed()
    }

    fn check_log<'a>(&'a self, check: &'a Check) -> ForgeFuture<'a, String> {
        async move {
            let Some(job) = check.job_id else { return Ok(check.output.clone()) };
            match self.job_log(job).await {
                // Logs expire (90 days by default); the output is what is left.
                Err(ForgeError::NotFound { .. }) => Ok(check.output.clone()),
                other => other,
            }
        }
        .boxed()
    }

    fn issue_comments(&self, number: u64, since: Option<SystemTime>) -> ForgeFuture<'_, Vec<Comment>> {
        async move {
            let since_text = since.map(format_rfc3339);
            let query: Vec<(&str, &str)> = since_text.iter().map(|s| ("since", s.as_str())).collect();
            let url = self.list_url(&["issues", &number.to_string(), "comments"], &query);
            let what = what(&Method::GET, &url);
            let page = self.http.get_all(url, |p: Vec<IssueComment>| p).await?;
            let comments: Vec<Comment> = page
                .into_iter()
                .map(|c| c.into_domain().map_err(malformed(&what)))
                .collect::<Result<_, _>>()?;
            // `since` is sent so the forge sends less, and applied here too
            // (to the second; the query has whole seconds) so that an
            // answer that ignores it cannot replay old comments.
            let floor = since.map(|s| UNIX_EPOCH + Duration::from_secs(unix_seconds(s)));
            Ok(comments
                .into_iter()
                .filter(|c| match (floor, c.updated_at.or(c.created_at)) {
                    (Some(floor), Some(t)) => t >= floor,
                    _ => true,
                })
                .collect())
        }
        .boxed()
    }

    fn review_comments(&self, number: u64) -> ForgeFuture<'_, Vec<ReviewComment>> {
        async move {
            let url = self.list_url(&["pulls", &number.to_string(), "comments"], &[]);
            let what = what(&Method::GET, &url);
            let page = self.http.get_all(url, |p: Vec<PullComment>| p).await?;
            page.into_iter().map(|c| c.into_domain().map_err(malformed(&what))).collect()
        }
        .boxed()
    }

    fn reviews(&self, number: u64) -> ForgeFuture<'_, Vec<Review>> {
        async move {
            let url = self.list_url(&["pulls", &number.to_string(), "reviews"], &[]);
            let what = what(&Method::GET, &url);
            let page = self.http.get_all(url, |p: Vec<PullReview>| p).await?;
            page.into_iter().map(|r| r.into_domain().map_err(malformed(&what))).collect()
        }
        .boxed()
    }

    fn post_comment<'a>(&'a self, number: u64, body: &'a str) -> ForgeFuture<'a, Comment> {
        async move {
            comment_body(body)?;
            let url = self.repo_url(&["issues", &number.to_string(), "comments"]);
            let what = what(&Method::POST, &url);
            let c: IssueComment = self.call(Method::POST, url, Some(json!({ "body": body }))).await?;
            c.into_domain().map_err(malformed(&what))
        }
        .boxed()
    }

    fn reply_review_comment<'a>(
        &'a self,
        number: u64,
        comment_id: u64,
        body: &'a str,
    ) -> ForgeFuture<'a, ReviewComment> {
        async move {
            comment_body(body)?;
            let url = self.repo_url(&[
                "pulls",
                &number.to_string(),
                "comments",
                &comment_id.to_string(),
                "replies",
            ]);
            let what = what(&Method::POST, &url);
            let c: PullComment = self.call(Method::POST, url, Some(json!({ "body": body }))).await?;
            c.into_domain().map_err(malformed(&what))
        }
        .boxed()
    }

    fn permission<'a>(&'a self, login: &'a str) -> ForgeFuture<'a, Permission> {
        async move {
            // Apps act as `name[bot]`; they are never collaborators.
            if login.strip_suffix("[bot]").is_some_and(|name| check_owner(name).is_ok()) {
                return Ok(Permission::None);
            }
            check_owner(login).map_err(|message| ForgeError::InvalidInput { what: "login", message })?;
            let url = self.repo_url(&["collaborators", login, "permission"]);
            let what = what(&Method::GET, &url);
            match self.http.get_json::<CollaboratorPermission>(url).await {
                Ok((p, _)) => p.into_domain().map_err(malformed(&what)),
                // GitHub answers 404 for a user who is not a collaborator.
                Err(ForgeError::NotFound { .. }) => Ok(Permission::None),
                Err(e) => Err(e),
            }
        }
        .boxed()
    }

    fn merge_pull<'a>(
        &'a self,
        number: u64,
        sha: &'a str,
        method: MergeMethod,
    ) -> ForgeFuture<'a, MergeOutcome> {
        self.merge(number, sha, method).boxed()
    }
}

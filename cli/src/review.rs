//! `swarmctl review TASK approve | request-changes | reject [message]` and
//! the branch report `describe task` shows.

use serde::Serialize;
use swarm_proto::v1;

use crate::client::{self, connect};
use crate::output::{TaskView, print_one, short_commit};

/// The operator's decision on a task in REVIEW. The word is checked by the
/// controller (INVALID_ARGUMENT naming `decision`), so a script sees the
/// same error whichever client it uses.
pub async fn run(
    url: &client::Target,
    task: &str,
    decision: &str,
    message: &[String],
    format: crate::cli::Format,
) -> anyhow::Result<()> {
    let task_id = client::task_id(task)?;
    let mut c = connect(url).await?;
    let req = v1::ReviewTaskRequest { task_id, decision: decision.to_string(), message: message.join(" ") };
    let resp = c.review_task(req).await?.into_inner();
    print_one(&TaskView::from(&resp.task.unwrap_or_default()), format)
}

#[derive(Debug, Serialize)]
pub struct ReviewView {
    pub decision: String,
    pub message: String,
    pub by: String,
    pub commit: String,
    pub at_unix_ms: i64,
}

/// What a task's branch holds and whether it should merge.
#[derive(Debug, Serialize)]
pub struct BranchReportView {
    pub branch: String,
    /// `ready`, `needs_review` or `blocked`; empty while the task works.
    pub recommendation: String,
    pub reason: String,
    pub commit: String,
    pub base_commit: String,
    pub files_changed: Vec<String>,
    pub reviewer: String,
    pub reviews: Vec<ReviewView>,
}

impl From<&v1::BranchReport> for BranchReportView {
    fn from(r: &v1::BranchReport) -> Self {
        BranchReportView {
            branch: r.branch.clone(),
            recommendation: r.recommendation.clone(),
            reason: r.reason.clone(),
            commit: r.commit.clone(),
            base_commit: r.base_commit.clone(),
            files_changed: r.files_changed.clone(),
            reviewer: r.reviewer.clone(),
            reviews: r
                .reviews
                .iter()
                .map(|x| ReviewView {
                    decision: x.decision.clone(),
                    message: x.message.clone(),
                    by: x.by.clone(),
                    commit: x.commit.clone(),
                    at_unix_ms: x.at_unix_ms,
                })
                .collect(),
        }
    }
}

impl BranchReportView {
    /// The `Branch report:` section of `describe task`.
    pub fn text(&self) -> String {
        let mut out = String::from("Branch report:\n");
        let rec = if self.recommendation.is_empty() { "- (still working)" } else { &self.recommendation };
        out.push_str(&format!("  {:<16}{}\n", "Branch:", self.branch));
        out.push_str(&format!("  {:<16}{rec}\n", "Recommendation:"));
        if !self.reason.is_empty() {
            out.push_str(&format!("  {:<16}{}\n", "Why:", self.reason));
        }
        if !self.commit.is_empty() {
            out.push_str(&format!(
                "  {:<16}{} (base {})\n",
                "Commit:",
                short_commit(&self.commit),
                short_commit(&self.base_commit)
            ));
        }
        if !self.files_changed.is_empty() {
            out.push_str(&format!("  {:<16}{}\n", "Files changed:", self.files_changed.join(", ")));
        }
        if !self.reviewer.is_empty() {
            out.push_str(&format!("  {:<16}{}\n", "Reviewer:", self.reviewer));
        }
        for r in &self.reviews {
            let message = if r.message.is_empty() { String::new() } else { format!(": {}", r.message) };
            out.push_str(&format!(
                "  - {} by {} of {}{message}\n",
                r.decision,
                r.by,
                short_commit(&r.commit)
            ));
        }
        out
    }
}

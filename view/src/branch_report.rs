//! The branch report `describe task` shows: what a task's branch holds,
//! the reviews of it, and whether it should merge.
//!
//! The controller's scheduler builds `BranchReportView` itself;
//! `From<BranchReportView> for v1::BranchReport` puts it on the wire and
//! `From<&v1::BranchReport>` reads it back.

use serde::Serialize;
use swarm_proto::v1;

use crate::text::short_commit;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReviewView {
    pub decision: String,
    pub message: String,
    pub by: String,
    pub commit: String,
    pub at_unix_ms: i64,
}

/// What a task's branch holds and whether it should merge.
#[derive(Debug, Clone, PartialEq, Serialize)]
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

impl From<BranchReportView> for v1::BranchReport {
    fn from(r: BranchReportView) -> Self {
        v1::BranchReport {
            branch: r.branch,
            recommendation: r.recommendation,
            reason: r.reason,
            commit: r.commit,
            base_commit: r.base_commit,
            files_changed: r.files_changed,
            reviewer: r.reviewer,
            reviews: r
                .reviews
                .into_iter()
                .map(|x| v1::ReviewRecord {
                    decision: x.decision,
                    message: x.message,
                    by: x.by,
                    commit: x.commit,
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

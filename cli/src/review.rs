//! `swarmctl review TASK approve | request-changes | reject [message]`.

use swarm_proto::v1;

use crate::client::{self, connect};
use crate::output::{TaskView, print_one};

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

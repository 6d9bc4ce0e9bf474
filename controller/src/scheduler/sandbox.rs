//! The `attempt.sandbox` event: what the sidecar's kernel enforced for an
//! attempt's worker, so that an operator reading `describe task` sees what
//! a worker could reach, and an opted-out task (`sandbox = "off"`) is on
//! the record as such.

use super::Effects;
use super::command::{ReportedAttempt, SandboxReported};

pub(super) fn sandbox_event(
    fx: &mut Effects,
    attempt: &ReportedAttempt,
    worker_id: &str,
    s: SandboxReported,
) {
    let mut message = format!("sandbox {}", s.mode);
    if !s.enforced.is_empty() {
        message.push_str(&format!(": enforced {}", s.enforced.join(", ")));
    }
    if !s.missing.is_empty() {
        message.push_str(&format!("; not enforced: {}", s.missing.join("; ")));
    }
    fx.task_event(
        &attempt.task,
        attempt.number,
        worker_id,
        "attempt.sandbox",
        message,
        serde_json::json!({ "mode": s.mode, "enforced": s.enforced, "missing": s.missing }),
    );
}

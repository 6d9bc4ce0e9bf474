//! One view of what the controller holds, made from the Operator API's
//! messages. `swarmctl get`/`describe`/`report` print it, the dashboard
//! serves it as JSON and the MCP tools return it, so the three cannot drift
//! apart: a field added here shows everywhere, with the same name.
//!
//! Prost types end at this crate's `From` impls. Enum values become their
//! plain names (`"MERGED"`, not `TASK_STATE_MERGED` or 7), ids are whole
//! (`swarm/task`, with the parts beside them), and times are unix ms.

mod attempt;
mod branch_report;
mod event;
pub mod names;
pub mod origin;
pub mod report;
mod swarm;
mod task;
pub mod text;
pub mod timeline;
pub mod timeline_html;
pub mod timeline_svg;
pub mod timing;
mod usage;
mod worker;

pub use attempt::AttemptView;
pub use branch_report::{BranchReportView, ReviewView};
pub use event::EventView;
pub use origin::OriginView;
pub use report::{Health, Report};
pub use swarm::{ForgeView, SwarmView};
pub use task::{TaskDetailView, TaskView};
pub use timing::{Timing, Timings};
pub use usage::UsageView;
pub use worker::WorkerView;

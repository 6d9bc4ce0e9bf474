//! swarm's domain, shared by the controller, the sidecar and the CLI.
//!
//! Nothing here knows about gRPC, SQLite or git: the wire types are converted
//! into these at the edge (`swarm-proto`), and the stores persist them.

pub mod globs;
pub mod ids;
pub mod names;
pub mod outcome;
pub mod plan;
pub mod state;
pub mod usage;

pub use ids::{AttemptId, SwarmId, TaskId, TaskKey};
pub use outcome::{Outcome, TierOutcome};
pub use state::{AttemptState, IllegalTransition, TaskState};
pub use usage::Usage;

//! The MCP tools an orchestrating agent drives swarm with: check and create
//! plans, read reports, wait for what changes, answer, review, message,
//! cancel, retry and land — the operator's verbs, for a model.
//!
//! The tools speak only the Operator API, through an [`Operator`] client:
//! `swarmctl mcp` gives them one over the network with the user's
//! credentials, the controller's `/mcp` endpoint an in-process one that
//! carries the HTTP caller's identity. Either way the Operator API's own
//! validation and its one authorization table decide what a call may do.
//! What the tools return is `swarm_view`'s JSON, the same `swarmctl -o json`
//! prints.

mod args;
mod channel;
mod checks;
mod pages;
mod tools;
mod wait;

pub use channel::{GrpcChannel, Operator, operator};
pub use tools::{SwarmTools, TOOL_NAMES, check_arguments};

//! The forge as a peer of the controller: pull requests, checks, reviews
//! and pushes, behind one provider trait.
//!
//! The crate knows nothing of the scheduler, gRPC or the store. It speaks
//! the forge's own protocols (REST, GraphQL, git's smart HTTP, webhooks)
//! and treats everything the forge sends as hostile input: bodies are read
//! under a cap, JSON is parsed into typed fields, text that will be shown
//! is stripped of control characters and clipped, and the token never
//! appears in a `Debug`, a `Display` or an error.
//!
//! - [`remote`]: a git remote URL → host, owner, repo; the API URLs.
//! - [`provider`]: the [`Forge`] trait and its types; [`ensure_pull`]
//!   (in `ensure`) makes "an open PR for this branch saying this" true,
//!   idempotently.
//! - [`github`]: GitHub REST v3 + GraphQL behind [`Forge`].
//! - [`push`]: `git push` without force, credentials through the
//!   environment, outcomes typed.
//! - [`webhook`]: `X-Hub-Signature-256` checked, payloads typed.
//! - [`text`]: clip, strip controls, redact.

mod ensure;
mod error;
pub mod github;
pub mod https;
pub mod provider;
pub mod push;
pub mod refname;
pub mod remote;
pub mod text;
pub mod time;
mod token;
pub mod webhook;

pub use ensure::{Ensured, PULL_BODY_MAX, PULL_TITLE_MAX, ensure_pull};
pub use error::{ForgeError, PushError, Rejection, RemoteError, WebhookError};
pub use github::{GitHub, GitHubConfig, Quota};
pub use provider::{
    Check, CheckSource, CheckState, Comment, Forge, ForgeFuture, MergeMethod, MergeOutcome, NewPull,
    Permission, PullRequest, PullState, PullUpdate, Review, ReviewComment, ReviewState,
};
pub use push::{PushOutcome, push};
pub use remote::Remote;
pub use token::Token;
pub use webhook::Inbound;

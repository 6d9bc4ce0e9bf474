//! The `--notify*` flags, shared by `swarm-controller` and `swarmctl run`
//! (whose embedded controller notifies the same way), so both take the
//! same names, help, environment variables and checks.

use std::path::PathBuf;

use super::{NotifyConfig, NotifyConfigError};

#[derive(Debug, Clone, Default, clap::Args)]
pub struct NotifyArgs {
    /// POST a JSON notification (Slack- and Discord-compatible) to URL when
    /// something waits for the operator; repeat for more endpoints (see
    /// README "Notifications").
    #[arg(long = "notify", value_name = "URL", env = "SWARM_NOTIFY", value_delimiter = ',')]
    pub notify: Vec<String>,
    /// Which notifications to send, comma-separated: names such as
    /// task.question or swarm.completed, a prefix such as swarm.*, or all.
    #[arg(long, value_name = "EVENTS", env = "SWARM_NOTIFY_EVENTS", default_value = "all")]
    pub notify_events: String,
    /// A file holding the secret that signs each notification
    /// (X-Swarm-Signature, HMAC-SHA256 over the timestamp and the body).
    #[arg(long, value_name = "PATH", env = "SWARM_NOTIFY_SECRET_FILE")]
    pub notify_secret_file: Option<PathBuf>,
}

impl NotifyArgs {
    /// The webhooks these flags ask for, checked.
    pub fn config(&self) -> Result<NotifyConfig, NotifyConfigError> {
        NotifyConfig::from_flags(&self.notify, Some(&self.notify_events), self.notify_secret_file.as_deref())
    }
}

//! `swarmctl run --forge`: the plan's `[forge]` from flags, and after a
//! completed swarm, waiting for the embedded controller to push and open
//! its pull request before the run stops it.

use std::time::Duration;

use swarm_proto::v1;

use crate::cli::RunArgs;
use crate::client::Client;
use crate::exit::Usage;

/// How long a run waits for its push and pull request after the swarm
/// completed; the forge may be slow or rate-limited, and a later run (or a
/// standalone controller) picks up where this one stopped.
const FORGE_WAIT: Duration = Duration::from_secs(120);

/// The plan text with a `[forge]` table made from `--forge`, when given.
pub fn with_flags(text: String, has_forge: bool, args: &RunArgs) -> anyhow::Result<String> {
    let Some(provider) = &args.forge else { return Ok(text) };
    if has_forge {
        return Err(
            Usage("--forge: the plan has a [forge] table already; give one or the other".into()).into()
        );
    }
    // JSON's string escapes are a subset of TOML's basic strings'.
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut table = format!("\n[forge]\nprovider = {}\nremote = {}\n", quote(provider), quote(&args.remote));
    if provider == "github" {
        table.push_str(&format!("token = {{ env = {} }}\n", quote(&args.forge_token_env)));
    }
    Ok(format!("{text}{table}"))
}

/// Waits until the completed swarm's head is pushed and, on a forge, its
/// pull request is shown; prints where. `Err` with the forge's last error
/// when it did not happen in time.
pub async fn wait(client: &mut Client, swarm_id: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + FORGE_WAIT;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut last_error = String::new();
    loop {
        tick.tick().await;
        let swarm =
            client.get_swarm(v1::GetSwarmRequest { swarm_id: swarm_id.to_string() }).await?.into_inner();
        let Some(forge) = swarm.forge else { return Ok(()) };
        let pushed = !forge.pushed.is_empty() && forge.pushed == swarm.integration_head;
        let shown = forge.provider == "git" || (forge.pull_number > 0 && forge.pull_state == "open");
        if pushed && shown {
            if forge.pull_number > 0 {
                eprintln!("pull request #{}: {}", forge.pull_number, forge.pull_url);
            } else {
                eprintln!("pushed {} to {}", crate::output::short_commit(&forge.pushed), forge.remote_branch);
            }
            return Ok(());
        }
        if !forge.error.is_empty() && forge.retry_at_unix_ms == 0 {
            // Refused, not failed: waiting changes nothing.
            anyhow::bail!(
                "swarm {swarm_id} completed but its branch did not reach the forge: {}",
                forge.error
            );
        }
        if !forge.error.is_empty() && forge.error != last_error {
            eprintln!("forge: {} (retrying)", forge.error);
            last_error = forge.error.clone();
        }
        if tokio::time::Instant::now() > deadline {
            let why = if last_error.is_empty() { "no answer from the forge".to_string() } else { last_error };
            anyhow::bail!(
                "swarm {swarm_id} completed but its branch did not reach the forge within {}s: {why}; \
                 run again to retry",
                FORGE_WAIT.as_secs()
            );
        }
    }
}

//! `logs TASK --worker-output`: what an attempt's worker wrote, read by the
//! controller from the sidecar that ran it (which may be on another
//! machine), printed as it arrives.

use std::io::Write as _;
use std::time::Duration;

use futures::StreamExt as _;
use serde::Serialize;
use swarm_proto::v1;

use crate::cli::{Format, LogsArgs};
use crate::client::{self, connect};

#[derive(Serialize)]
struct ChunkView<'a> {
    attempt: u32,
    worker: &'a str,
    offset: u64,
    /// The bytes as text; a byte that is not UTF-8 becomes U+FFFD.
    data: String,
}

/// First wait before a follower reconnects; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Where a read stands: the attempt it settled on and the next byte.
#[derive(Default)]
struct Position {
    attempt: u32,
    next: Option<u64>,
}

/// Prints the attempt's log (its last MiB); with `-f`, keeps printing what
/// the worker writes until the attempt ends, and when the controller goes
/// away meanwhile, reconnects with backoff and resumes at the next byte of
/// the same attempt (no gap, no repeat). On a table, the bytes go to stdout
/// unchanged; with `-o json|yaml`, one record per chunk.
pub async fn print(url: &client::Target, args: &LogsArgs) -> anyhow::Result<()> {
    let task_id = client::task_id(&args.task)?;
    let mut at = Position { attempt: args.attempt.unwrap_or(0), next: None };
    let mut backoff = FIRST_BACKOFF;
    loop {
        let error = match read_once(url, args, &task_id, &mut at, &mut backoff).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        // Only a follower that got somewhere retries: the first call's
        // error (no such attempt, a sidecar that is gone) is the answer.
        if !args.follow || at.next.is_none() || !client::retryable(&error) {
            return Err(error);
        }
        eprintln!(
            "logs: {error:#}; reconnecting in {} ms (at byte {} of attempt {})",
            backoff.as_millis(),
            at.next.unwrap_or_default(),
            at.attempt
        );
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn read_once(
    url: &client::Target,
    args: &LogsArgs,
    task_id: &str,
    at: &mut Position,
    backoff: &mut Duration,
) -> anyhow::Result<()> {
    let mut c = connect(url).await?;
    let req = v1::ReadAttemptLogRequest {
        task_id: task_id.to_string(),
        attempt: at.attempt,
        follow: args.follow,
        tail_bytes: 0,
        offset: at.next,
    };
    let mut stream = c.read_attempt_log(req).await?.into_inner();
    *backoff = FIRST_BACKOFF;
    let mut stdout = std::io::stdout().lock();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if chunk.skipped > 0 {
            eprintln!(
                "logs: attempt {} on {}: the first {} bytes are left out (only the log's tail is sent)",
                chunk.attempt, chunk.worker_id, chunk.skipped
            );
        }
        at.attempt = chunk.attempt;
        at.next = Some(chunk.offset + chunk.data.len() as u64);
        match args.out.output {
            Format::Table => stdout.write_all(&chunk.data)?,
            Format::Json | Format::Yaml => {
                let view = ChunkView {
                    attempt: chunk.attempt,
                    worker: &chunk.worker_id,
                    offset: chunk.offset,
                    data: String::from_utf8_lossy(&chunk.data).into_owned(),
                };
                let line = if args.out.output == Format::Json {
                    serde_json::to_string(&view)?
                } else {
                    format!("---\n{}", serde_yaml::to_string(&view)?)
                };
                writeln!(stdout, "{line}")?;
            }
        }
        stdout.flush()?;
    }
    Ok(())
}

//! `logs TASK --worker-output`: what an attempt's worker wrote, read by the
//! controller from the sidecar that ran it (which may be on another
//! machine), printed as it arrives.

use std::io::Write as _;

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

/// Prints the attempt's log (its last MiB); with `-f`, keeps printing what
/// the worker writes until the attempt ends. On a table, the bytes go to
/// stdout unchanged; with `-o json|yaml`, one record per chunk.
pub async fn print(url: &client::Target, args: &LogsArgs) -> anyhow::Result<()> {
    let task_id = client::task_id(&args.task)?;
    let mut c = connect(url).await?;
    let req = v1::ReadAttemptLogRequest {
        task_id,
        attempt: args.attempt.unwrap_or(0),
        follow: args.follow,
        tail_bytes: 0,
    };
    let mut stream = c.read_attempt_log(req).await?.into_inner();
    let mut stdout = std::io::stdout().lock();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if chunk.skipped > 0 {
            eprintln!(
                "logs: attempt {} on {}: the first {} bytes are left out (only the log's tail is sent)",
                chunk.attempt, chunk.worker_id, chunk.skipped
            );
        }
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

//! An agent process: its own process group (stopped with the runner's
//! SIGINT → SIGTERM → SIGKILL escalation), stdin kept open for messages,
//! stdout read as JSON lines of up to [`MAX_AGENT_LINE`] bytes, stderr as
//! text lines for the log.
//!
//! Agents are not run under the `__supervise` supervisor: their stdin must
//! stay a pipe to this process, so an agent cannot outlive its sidecar in a
//! useful way. A restarted sidecar therefore does not re-adopt it; it
//! checkpoints the worktree and hands back the session id so that the next
//! attempt resumes the conversation (see `attempt::checkpoint_lost`).

use std::process::Stdio;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::ChildStdin;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{AgentError, MAX_AGENT_LINE};
use crate::runner::{ExitInfo, Group, SpawnSpec};

/// One line of agent output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Stdout(String),
    /// A stdout line longer than the limit, skipped; its length.
    Oversized(usize),
    Stderr(String),
}

pub struct AgentProcess {
    pub group: Group,
    stdin: Option<ChildStdin>,
    pub output: mpsc::Receiver<Output>,
    readers: Vec<JoinHandle<()>>,
}

impl AgentProcess {
    pub fn spawn(spec: &SpawnSpec) -> Result<AgentProcess, AgentError> {
        let program = spec.argv.first().cloned().unwrap_or_default();
        let mut cmd = spec.command().map_err(|e| AgentError::Spawn {
            program: program.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()),
        })?;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|source| AgentError::Spawn { program, source })?;
        let (tx, output) = mpsc::channel(1024);
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(tokio::spawn(read_stdout(BufReader::new(out), tx.clone())));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(tokio::spawn(read_stderr(BufReader::new(err), tx)));
        }
        let stdin = child.stdin.take();
        Ok(AgentProcess { group: Group::from_child(child), stdin, output, readers })
    }

    pub fn pid(&self) -> u32 {
        self.group.pid()
    }

    pub fn stdin_open(&self) -> bool {
        self.stdin.is_some()
    }

    /// Writes to stdin; a closed stdin (the agent exited) is an error the
    /// caller logs: the agent's exit is noticed through `wait`.
    pub async fn write(&mut self, text: &str) -> Result<(), AgentError> {
        let stdin = self.stdin.as_mut().ok_or_else(|| {
            AgentError::Stdin(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdin is closed"))
        })?;
        let r = async {
            stdin.write_all(text.as_bytes()).await?;
            stdin.flush().await
        }
        .await;
        if r.is_err() {
            self.stdin = None;
        }
        r.map_err(AgentError::Stdin)
    }

    /// Closes stdin: the agent's cue that no more messages come.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub async fn wait(&mut self) -> ExitInfo {
        self.group.wait().await
    }

    /// The output still buffered after exit, bounded in time (a killed
    /// group may leave a pipe open).
    pub async fn drain(&mut self, max_wait: std::time::Duration) -> Vec<Output> {
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + max_wait;
        while let Ok(Some(o)) = tokio::time::timeout_at(deadline, self.output.recv()).await {
            out.push(o);
        }
        out
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        for r in &self.readers {
            r.abort();
        }
    }
}

/// Reads newline-terminated lines without ever holding more than
/// [`MAX_AGENT_LINE`] bytes of one: the rest of an oversized line is
/// skipped as it streams by.
async fn read_stdout<R: AsyncBufRead + Unpin>(mut r: R, tx: mpsc::Sender<Output>) {
    let mut line: Vec<u8> = Vec::new();
    let mut skipped: Option<usize> = None;
    loop {
        let (consumed, ended) = match r.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buf) => match buf.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    take(&mut line, &mut skipped, &buf[..i]);
                    (i + 1, true)
                }
                None => {
                    take(&mut line, &mut skipped, buf);
                    (buf.len(), false)
                }
            },
        };
        r.consume(consumed);
        if ended && !emit(&tx, &mut line, &mut skipped).await {
            return;
        }
    }
    if !line.is_empty() || skipped.is_some() {
        emit(&tx, &mut line, &mut skipped).await;
    }
}

fn take(line: &mut Vec<u8>, skipped: &mut Option<usize>, chunk: &[u8]) {
    if let Some(n) = skipped {
        *n += chunk.len();
    } else if line.len() + chunk.len() > MAX_AGENT_LINE {
        *skipped = Some(line.len() + chunk.len());
        *line = Vec::new();
    } else {
        line.extend_from_slice(chunk);
    }
}

async fn emit(tx: &mpsc::Sender<Output>, line: &mut Vec<u8>, skipped: &mut Option<usize>) -> bool {
    let o = match skipped.take() {
        Some(n) => Output::Oversized(n),
        None => {
            while line.last() == Some(&b'\r') {
                line.pop();
            }
            Output::Stdout(String::from_utf8_lossy(line).into_owned())
        }
    };
    line.clear();
    tx.send(o).await.is_ok()
}

async fn read_stderr<R: AsyncBufRead + Unpin>(r: R, tx: mpsc::Sender<Output>) {
    let mut r = r;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        // Bounded like a plain worker's output: stderr is only for the log.
        match (&mut r).take(crate::runner::MAX_LINE as u64).read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    buf.pop();
                }
                if tx.send(Output::Stderr(String::from_utf8_lossy(&buf).into_owned())).await.is_err() {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn long_lines_are_skipped_and_reading_goes_on() {
        let big = vec![b'x'; MAX_AGENT_LINE + 10];
        let mut input = b"{\"a\":1}\r\n".to_vec();
        input.extend_from_slice(&big);
        input.extend_from_slice(b"\nlast");
        let (tx, mut rx) = mpsc::channel(16);
        read_stdout(BufReader::with_capacity(4096, &input[..]), tx).await;
        assert_eq!(rx.recv().await, Some(Output::Stdout("{\"a\":1}".into())));
        assert_eq!(rx.recv().await, Some(Output::Oversized(MAX_AGENT_LINE + 10)));
        assert_eq!(rx.recv().await, Some(Output::Stdout("last".into())));
        assert_eq!(rx.recv().await, None);
    }
}

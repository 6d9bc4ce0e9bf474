//! swarm's tools for the agent of one attempt, as an MCP server named
//! `swarm`: `progress`, `ask`, `escalate`, `checkpoint`, `context`, `spawn`,
//! `wait_children` and `reply`.
//!
//! The agent starts MCP servers itself, as child processes speaking MCP
//! on stdio, and it runs inside the sandbox, where no TCP port of the
//! sidecar's may be reached. So the server the agent starts is the
//! sidecar's own binary as a byte pipe ([`bridge`]) to a Unix socket the
//! sidecar listens on for this attempt only; the MCP session itself is
//! served here, in the sidecar, which owns the attempt. Landlock does not
//! govern connecting to a socket by path, so the socket alone would let
//! any local process in: the bridge first presents the attempt's token,
//! a random secret that reaches only the agent's own configuration, and a
//! connection without it is closed before a byte of MCP is read.
//!
//! A tool call becomes a [`ToolCall`] for the attempt's driver, which
//! journals what it reports exactly as its other reports (so nothing is
//! lost while the controller is away) and answers the call.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::Rng as _;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

pub mod bridge;
mod tools;

pub use bridge::ARG as BRIDGE_ARG;
pub use tools::{TOOL_NAMES, request_for};

/// The name the agent knows the server by: its tools are
/// `mcp__swarm__<tool>` to Claude Code.
pub const SERVER_NAME: &str = "swarm";
/// The environment the bridge reads its socket and token from.
pub const SOCKET_ENV: &str = "SWARM_MCP_SOCKET";
pub const TOKEN_ENV: &str = "SWARM_MCP_TOKEN";
/// A connection must present its token this fast.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest path a Unix socket address holds (`sun_path`, with its NUL).
const MAX_SOCKET_PATH: usize = 107;
/// Calls the driver has not taken yet; a model calling tools in a loop
/// waits for it instead of growing a queue.
const CALL_QUEUE: usize = 16;

/// What the agent asked for through a tool, checked.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolRequest {
    Progress {
        step: String,
        percent: Option<u32>,
        note: String,
    },
    Ask {
        question: String,
        choices: Vec<String>,
    },
    Escalate {
        category: String,
        detail: String,
    },
    Checkpoint {
        summary: String,
        next_action: String,
    },
    Context,
    /// TOML holding only `[[tasks]]`.
    Spawn {
        plan_toml: String,
    },
    WaitChildren {
        timeout: std::time::Duration,
    },
    /// An answer on the pull request thread `thread` (`KIND:ID`, checked).
    Reply {
        thread: String,
        text: String,
    },
}

/// One call, answered by the driver: the tool's JSON, or why it did nothing.
#[derive(Debug)]
pub struct ToolCall {
    pub request: ToolRequest,
    pub reply: oneshot::Sender<Result<serde_json::Value, String>>,
}

/// How an agent starts the server: an MCP stdio server definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioServer {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// The attempt's server: listening until dropped.
pub struct ToolServer {
    pub stdio: StdioServer,
    pub calls: mpsc::Receiver<ToolCall>,
    socket: PathBuf,
    /// A directory made for the socket when the attempt's own was too deep.
    own_dir: Option<PathBuf>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = std::fs::remove_file(&self.socket);
        if let Some(dir) = &self.own_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Starts the attempt's server with its socket in `dir` (the attempt's
/// private directory), or in a private directory of its own under the
/// system's temporary directory when that path is too long for a socket.
/// `exe` is the sidecar's binary, which the agent runs as the bridge.
/// With a worker user (`owner`) the socket and its own directory are that
/// user's: connecting takes write permission on the socket.
pub fn start(
    dir: &Path,
    exe: &Path,
    owner: Option<&crate::sandbox::worker_user::Ids>,
) -> std::io::Result<ToolServer> {
    let token = token();
    let (socket, own_dir) = socket_path(dir)?;
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket)?;
    if let Some(ids) = owner {
        for path in own_dir.iter().chain([&socket]) {
            std::os::unix::fs::lchown(path, Some(ids.uid), Some(ids.gid))?;
        }
    }
    let (tx, calls) = mpsc::channel(CALL_QUEUE);
    let accept = tokio::spawn(accept(listener, token.clone(), tx));
    let stdio = StdioServer {
        command: exe.to_string_lossy().into_owned(),
        args: vec![BRIDGE_ARG.to_string()],
        env: vec![
            (SOCKET_ENV.to_string(), socket.to_string_lossy().into_owned()),
            (TOKEN_ENV.to_string(), token),
        ],
    };
    Ok(ToolServer { stdio, calls, socket, own_dir, accept })
}

fn token() -> String {
    let bytes: [u8; 24] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn socket_path(dir: &Path) -> std::io::Result<(PathBuf, Option<PathBuf>)> {
    let socket = dir.join("swarm-mcp.sock");
    if socket.as_os_str().len() <= MAX_SOCKET_PATH {
        return Ok((socket, None));
    }
    use std::os::unix::fs::DirBuilderExt as _;
    let own = std::env::temp_dir().join(format!("swarm-mcp-{}", token().get(..16).unwrap_or("x")));
    std::fs::DirBuilder::new().mode(0o700).create(&own)?;
    Ok((own.join("s"), Some(own)))
}

async fn accept(listener: UnixListener, token: String, calls: mpsc::Sender<ToolCall>) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "the agent's tool socket stopped accepting");
                return;
            }
        };
        let (token, calls) = (token.clone(), calls.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HELLO_TIMEOUT, hello(stream, &token)).await {
                Ok(Ok(stream)) => tools::serve(stream, calls).await,
                Ok(Err(why)) => tracing::warn!(%why, "refused a connection to the agent's tools"),
                Err(_) => tracing::warn!("refused a connection to the agent's tools: no token in time"),
            }
        });
    }
}

/// Reads the bridge's first line, `SWARM-MCP <token>`, and gives back the
/// stream for MCP when it matches.
async fn hello(stream: UnixStream, token: &str) -> Result<BufReader<UnixStream>, String> {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    // The limit keeps a peer from making the sidecar buffer without end.
    let mut limited = (&mut reader).take(256);
    limited.read_until(b'\n', &mut line).await.map_err(|e| format!("reading the token: {e}"))?;
    let presented = line.strip_prefix(bridge::HELLO).unwrap_or_default().trim_ascii();
    if !same(presented, token.as_bytes()) {
        return Err("wrong or missing token".into());
    }
    Ok(reader)
}

/// Compares without stopping at the first difference, so the time taken
/// says nothing of how much of a guess was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The server as the agents' adapters' tests give it to an agent.
#[cfg(test)]
pub(crate) fn sample_stdio() -> StdioServer {
    StdioServer {
        command: "/usr/bin/swarm-sidecar".into(),
        args: vec![BRIDGE_ARG.into()],
        env: vec![(TOKEN_ENV.into(), "t0k".into())],
    }
}

#[cfg(test)]
mod tests;

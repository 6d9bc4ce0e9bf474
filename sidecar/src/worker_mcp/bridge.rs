//! `<exe> __mcp-bridge`: the MCP server an agent starts for swarm's tools.
//! It presents the attempt's token on the sidecar's socket and then copies
//! bytes both ways between its stdio and the socket, so the agent speaks
//! MCP with the sidecar itself. It runs confined, as the agent's child, and
//! holds nothing but what its environment gave it.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use super::{SOCKET_ENV, TOKEN_ENV};

/// The hidden first argument that selects the bridge.
pub const ARG: &str = "__mcp-bridge";
/// What the bridge writes first, before its token and a newline.
pub const HELLO: &[u8] = b"SWARM-MCP ";

/// Runs the bridge when `argv[1]` is [`ARG`]; returns its exit code.
pub fn main_if_requested() -> Option<i32> {
    if std::env::args_os().nth(1).is_none_or(|a| a != ARG) {
        return None;
    }
    Some(match run() {
        Ok(()) => 0,
        Err(e) => {
            // The agent shows a server's stderr to its user: say what to do.
            eprintln!("swarm tools: {e}; report through .swarm/status.json instead");
            1
        }
    })
}

fn run() -> Result<(), String> {
    let var = |k: &str| std::env::var(k).map_err(|_| format!("{k} is not set (start me only through swarm)"));
    let (socket, token) = (var(SOCKET_ENV)?, var(TOKEN_ENV)?);
    let mut stream =
        UnixStream::connect(&socket).map_err(|e| format!("cannot reach the sidecar at {socket}: {e}"))?;
    let mut hello = HELLO.to_vec();
    hello.extend_from_slice(token.as_bytes());
    hello.push(b'\n');
    stream.write_all(&hello).map_err(|e| format!("cannot reach the sidecar: {e}"))?;
    let mut upstream = stream.try_clone().map_err(|e| e.to_string())?;
    // stdin → socket on its own thread; when the agent closes stdin the
    // sidecar sees end of input and closes its side, which ends the copy below.
    std::thread::spawn(move || {
        let _ = copy(&mut std::io::stdin().lock(), &mut upstream);
        let _ = upstream.shutdown(std::net::Shutdown::Write);
    });
    copy(&mut stream, &mut std::io::stdout().lock()).map_err(|e| format!("relaying to the agent: {e}"))
}

/// Copies until end of input, flushing each read: MCP messages are lines
/// that the other side waits for.
fn copy(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        to.flush()?;
    }
}

//! Running a program to its end under a time limit, and its failure as a
//! message: what installing and probing the CLIs under test is made of.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Runs `cmd` to its end, killing it after `limit`.
pub(crate) fn run(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.map_err(|e| e.to_string()),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            Err(format!("{:?} did not finish within {limit:?}", cmd.get_program()))
        }
    }
}

/// `out`'s failure, with the last lines of its stderr, as an error naming `what`.
pub(crate) fn check(what: &str, out: &Output) -> Result<(), String> {
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = err.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect();
    Err(format!("{what} failed ({}): {}", out.status, tail.join(" | ")))
}

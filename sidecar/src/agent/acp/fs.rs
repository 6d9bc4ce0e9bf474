//! `fs/read_text_file` and `fs/write_text_file`, served by the sidecar —
//! which is not confined — for a confined agent. So every request is
//! checked as if hostile: the path must lie inside the worktree (also
//! after symlinks are resolved: the file actually opened is checked
//! through `/proc/self/fd`), the policy's deny rules apply to reads and
//! writes, and a write must be to a file the task owns. A refusal is a
//! JSON-RPC error whose message says why.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1 as schema;
use serde_json::{Value, json};

use crate::agent::jsonrpc::{INVALID_PARAMS, error_reply, reply};
use crate::agent::policy::{Decision, Policy};
use crate::agent::{AgentEvent, clip};

/// The largest file served whole; a larger one is refused (an agent can
/// ask for lines of it).
const MAX_READ: u64 = 8 << 20;
/// ACP's "resource not found".
const NOT_FOUND: i32 = -32002;
/// JSON-RPC's "internal error": the request was fine, the file system was not.
const INTERNAL: i32 = -32603;

/// A refusal: the JSON-RPC error code and its message.
type Refusal = (i32, String);

pub(super) fn read(worktree: &Path, policy: &Policy, id: &Value, params: &Value) -> AgentEvent {
    let req = match serde_json::from_value::<schema::ReadTextFileRequest>(params.clone()) {
        Ok(r) => r,
        Err(e) => return invalid(id, "fs/read_text_file", &e),
    };
    let result = checked(worktree, policy, "Read", &req.path).and_then(|(rel, real_wt)| {
        let text = read_inside(&worktree.join(&rel), &real_wt, &rel)?;
        tracing::debug!(path = %rel, bytes = text.len(), "acp fs/read_text_file");
        Ok(lines(&text, req.line, req.limit))
    });
    match result {
        Ok(content) => reply(id, json!({"content": content})),
        Err((code, why)) => error_reply(id, code, &format!("fs/read_text_file: {why}")),
    }
}

/// The reply, and the worktree-relative path when the file was written.
pub(super) fn write(
    worktree: &Path,
    policy: &Policy,
    id: &Value,
    params: &Value,
) -> (AgentEvent, Option<String>) {
    let req = match serde_json::from_value::<schema::WriteTextFileRequest>(params.clone()) {
        Ok(r) => r,
        Err(e) => return (invalid(id, "fs/write_text_file", &e), None),
    };
    let result = checked(worktree, policy, "Write", &req.path).and_then(|(rel, real_wt)| {
        write_inside(&worktree.join(&rel), &real_wt, &rel, req.content.as_bytes())?;
        tracing::info!(path = %rel, bytes = req.content.len(), "acp fs/write_text_file");
        Ok(rel)
    });
    match result {
        Ok(rel) => (reply(id, json!({})), Some(rel)),
        Err((code, why)) => (error_reply(id, code, &format!("fs/write_text_file: {why}")), None),
    }
}

fn invalid(id: &Value, method: &str, e: &serde_json::Error) -> AgentEvent {
    error_reply(id, INVALID_PARAMS, &format!("{method}: {}", clip(&e.to_string(), 300)))
}

/// The worktree-relative path and the worktree's real path, once the path
/// is inside it and the policy does not refuse `tool` on it. A write is
/// also refused outside the task's owned files (the policy's first rule
/// for an edit). What the policy would ask about was asked, if at all,
/// when the agent requested permission for its tool call.
fn checked(worktree: &Path, policy: &Policy, tool: &str, path: &Path) -> Result<(String, PathBuf), Refusal> {
    let path = path.to_str().ok_or((INVALID_PARAMS, "the path is not UTF-8".to_string()))?;
    let rel = policy.relative(path).map_err(|e| (INVALID_PARAMS, e))?;
    if let Decision::Deny { why } = policy.decide(tool, &json!({"file_path": rel})) {
        return Err((INVALID_PARAMS, format!("refused: {why}")));
    }
    let real = worktree.canonicalize().map_err(|e| (INTERNAL, format!("the worktree: {e}")))?;
    Ok((rel, real))
}

/// Refuses a file whose real path (after every link) is not inside the
/// worktree: the check made on the path could have been raced by a link
/// the agent planted since.
fn inside(file: &File, real_wt: &Path, rel: &str) -> Result<(), Refusal> {
    let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|e| (INTERNAL, format!("cannot tell where {} is: {e}", clip(rel, 200))))?;
    if !real.starts_with(real_wt) {
        return Err((
            INVALID_PARAMS,
            format!("{} is outside the worktree (through a symlink)", clip(rel, 200)),
        ));
    }
    let meta = file.metadata().map_err(|e| (INTERNAL, e.to_string()))?;
    if !meta.is_file() {
        return Err((INVALID_PARAMS, format!("{} is not a regular file", clip(rel, 200))));
    }
    Ok(())
}

fn read_inside(full: &Path, real_wt: &Path, rel: &str) -> Result<String, Refusal> {
    let file = File::open(full).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => (NOT_FOUND, format!("{} does not exist", clip(rel, 200))),
        _ => (INTERNAL, format!("{}: {e}", clip(rel, 200))),
    })?;
    inside(&file, real_wt, rel)?;
    let mut bytes = Vec::new();
    file.take(MAX_READ + 1).read_to_end(&mut bytes).map_err(|e| (INTERNAL, e.to_string()))?;
    if bytes.len() as u64 > MAX_READ {
        return Err((INVALID_PARAMS, format!("{} is larger than {} MiB", clip(rel, 200), MAX_READ >> 20)));
    }
    String::from_utf8(bytes).map_err(|_| (INVALID_PARAMS, format!("{} is not UTF-8 text", clip(rel, 200))))
}

fn write_inside(full: &Path, real_wt: &Path, rel: &str, content: &[u8]) -> Result<(), Refusal> {
    let io = |e: std::io::Error| (INTERNAL, format!("{}: {e}", clip(rel, 200)));
    if let Some(parent) = full.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    // Not truncated on open: the file is emptied only once it is known to
    // be inside the worktree. A link as the last component is not followed.
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(full)
        .map_err(|e| match e.raw_os_error() {
            Some(nix::libc::ELOOP) => (INVALID_PARAMS, format!("{} is a symlink", clip(rel, 200))),
            _ => io(e),
        })?;
    inside(&file, real_wt, rel)?;
    file.set_len(0).map_err(io)?;
    file.write_all(content).map_err(io)?;
    file.flush().map_err(io)
}

/// `limit` lines from the 1-based `line` on (ACP's optional window).
fn lines(text: &str, line: Option<u32>, limit: Option<u32>) -> String {
    if line.is_none() && limit.is_none() {
        return text.to_string();
    }
    let skip = line.map_or(0, |l| l.saturating_sub(1) as usize);
    let take = limit.map_or(usize::MAX, |l| l as usize);
    text.split_inclusive('\n').skip(skip).take(take).collect()
}

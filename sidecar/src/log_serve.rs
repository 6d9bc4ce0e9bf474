//! Serves pieces of this sidecar's attempt logs to the controller, which
//! cannot read them itself when the sidecar runs on another machine
//! (`swarmctl logs TASK --output`).
//!
//! The attempt named in a request comes from the network. The file is found
//! only by building its name from the validated ids inside this worktree's
//! log directory (the one place this sidecar writes its attempts' logs), and
//! opened without following a symbolic link, so no request reaches a file
//! outside that directory, even one a worker linked there.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use swarm_proto::convert::AttemptRef;
use swarm_proto::v1;

use crate::swarm_files::SwarmFiles;

/// The most one answer carries; the controller asks again for more.
pub const MAX_CHUNK: usize = 64 << 10;

#[derive(Debug, thiserror::Error)]
enum ServeError {
    #[error("attempt.{0}")]
    Invalid(swarm_proto::FieldError),
    #[error("no log for attempt {0} on this sidecar")]
    NotFound(String),
    #[error("{path}: {rule}")]
    Refused { path: PathBuf, rule: &'static str },
    #[error("reading {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// Answers one log request; errors are answers too, so the operator's call
/// ends with the reason instead of waiting.
pub async fn answer(worktree: &Path, request: v1::LogRequest) -> v1::SidecarMessage {
    let id = request.request_id;
    let wt = worktree.to_path_buf();
    let span = tracing::info_span!("log.serve", request = id, attempt = ?request.attempt);
    let read = tokio::task::spawn_blocking(move || span.in_scope(|| read(&wt, &request))).await;
    let chunk = match read {
        Ok(Ok(chunk)) => chunk,
        Ok(Err(e)) => {
            tracing::debug!(request = id, error = %e, "log request refused");
            v1::LogChunk {
                not_found: matches!(e, ServeError::NotFound(_)),
                error: e.to_string(),
                ..Default::default()
            }
        }
        Err(e) => v1::LogChunk { error: format!("log reader: {e}"), ..Default::default() },
    };
    let body = v1::sidecar_message::Body::LogChunk(v1::LogChunk { request_id: id, ..chunk });
    v1::SidecarMessage { seq: 0, body: Some(body) }
}

fn read(worktree: &Path, request: &v1::LogRequest) -> Result<v1::LogChunk, ServeError> {
    let wire = request.attempt.clone().unwrap_or_default();
    let attempt = AttemptRef::try_from(&wire).map_err(ServeError::Invalid)?;
    let label = attempt.task.attempt(attempt.number).to_string();
    let path = log_path(worktree, &attempt)?;
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ServeError::NotFound(label)),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(ServeError::Refused {
                path,
                rule: "is a symbolic link; only regular log files are served",
            });
        }
        Err(source) => return Err(ServeError::Io { path, source }),
    };
    let meta = file.metadata().map_err(|source| ServeError::Io { path: path.clone(), source })?;
    if !meta.is_file() {
        return Err(ServeError::Refused { path, rule: "is not a regular file" });
    }
    let size = meta.len();
    let start = if request.tail_bytes > 0 {
        size.saturating_sub(request.tail_bytes)
    } else {
        request.offset.min(size)
    };
    let want = match request.max_bytes {
        0 => MAX_CHUNK,
        n => (n as usize).min(MAX_CHUNK),
    };
    let want = want.min(usize::try_from(size - start).unwrap_or(usize::MAX));
    let data = read_at(&mut file, start, want).map_err(|source| ServeError::Io { path, source })?;
    Ok(v1::LogChunk { offset: start, data, size, ..Default::default() })
}

/// The attempt's log file, named as the attempt driver names it; the ids
/// were checked against the id pattern (no `.`, and no `/` but between a
/// nested swarm's components, which the name spells as `.`), and the
/// directories on the way must be real directories, not links. A log
/// written before names carried the swarm id is found under its old name.
fn log_path(worktree: &Path, attempt: &AttemptRef) -> Result<PathBuf, ServeError> {
    let files = SwarmFiles::new(worktree);
    for dir in [&files.dir, &files.logs] {
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(ServeError::Refused { path: dir.clone(), rule: "is not a directory" }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ServeError::NotFound(attempt.task.attempt(attempt.number).to_string()));
            }
            Err(source) => return Err(ServeError::Io { path: dir.clone(), source }),
        }
    }
    let path = files.log_of(attempt);
    let old = files.unqualified_log_of(attempt);
    let missing =
        |p: &Path| matches!(std::fs::symlink_metadata(p), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
    Ok(if missing(&path) && !missing(&old) { old } else { path })
}

fn read_at(file: &mut File, start: u64, want: usize) -> std::io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(start))?;
    let mut data = Vec::with_capacity(want);
    file.take(want as u64).read_to_end(&mut data)?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(task: &str, tail: u64, offset: u64) -> v1::LogRequest {
        request_in("s", task, tail, offset)
    }

    fn request_in(swarm: &str, task: &str, tail: u64, offset: u64) -> v1::LogRequest {
        v1::LogRequest {
            request_id: 7,
            attempt: Some(v1::AttemptRef {
                swarm_id: swarm.into(),
                task_id: task.into(),
                attempt: 1,
                fencing_token: 1,
            }),
            offset,
            tail_bytes: tail,
            max_bytes: 0,
        }
    }

    fn chunk(m: v1::SidecarMessage) -> v1::LogChunk {
        match m.body {
            Some(v1::sidecar_message::Body::LogChunk(c)) => c,
            other => panic!("not a log chunk: {other:?}"),
        }
    }

    #[tokio::test]
    async fn serves_a_range_and_a_tail_of_the_attempts_log() {
        let wt = tempfile::tempdir().expect("tempdir");
        let logs = SwarmFiles::new(wt.path()).logs;
        std::fs::create_dir_all(&logs).expect("mkdir");
        std::fs::write(logs.join("s.api-1.log"), b"hello world\n").expect("write");
        let c = chunk(answer(wt.path(), request("api", 0, 6)).await);
        assert_eq!((c.request_id, c.offset, c.size, c.data.as_slice()), (7, 6, 12, &b"world\n"[..]));
        let c = chunk(answer(wt.path(), request("api", 3, 0)).await);
        assert_eq!((c.offset, c.data.as_slice()), (9, &b"ld\n"[..]));
        let c = chunk(answer(wt.path(), request("api", 0, 99)).await);
        assert_eq!((c.offset, c.data.len(), c.error.as_str()), (12, 0, ""));
    }

    #[tokio::test]
    async fn refuses_hostile_names_links_and_missing_logs() {
        let wt = tempfile::tempdir().expect("tempdir");
        let logs = SwarmFiles::new(wt.path()).logs;
        std::fs::create_dir_all(&logs).expect("mkdir");
        for hostile in ["../../etc/passwd", "a/b", "..", ""] {
            let c = chunk(answer(wt.path(), request(hostile, 0, 0)).await);
            assert!(c.error.starts_with("attempt.task_id"), "{hostile:?}: {}", c.error);
            assert!(c.data.is_empty());
        }
        let secret = wt.path().join("secret");
        std::fs::write(&secret, b"secret").expect("write");
        std::os::unix::fs::symlink(&secret, logs.join("s.link-1.log")).expect("symlink");
        let c = chunk(answer(wt.path(), request("link", 0, 0)).await);
        assert!(c.error.contains("symbolic link") && c.data.is_empty(), "{}", c.error);
        let c = chunk(answer(wt.path(), request("gone", 0, 0)).await);
        assert!(c.not_found && c.error.contains("no log for attempt s/gone#1"), "{}", c.error);
    }

    #[tokio::test]
    async fn swarms_sharing_a_task_id_have_their_own_logs_and_an_old_log_is_still_found() {
        let wt = tempfile::tempdir().expect("tempdir");
        let files = SwarmFiles::new(wt.path());
        std::fs::create_dir_all(&files.logs).expect("mkdir");
        for swarm in ["app", "app/auth", "app-auth"] {
            let wire = request_in(swarm, "api", 0, 0).attempt.expect("attempt");
            let attempt = AttemptRef::try_from(&wire).expect("attempt");
            std::fs::write(files.log_of(&attempt), swarm).expect("write");
        }
        for swarm in ["app", "app/auth", "app-auth"] {
            let c = chunk(answer(wt.path(), request_in(swarm, "api", 0, 0)).await);
            assert_eq!(c.data, swarm.as_bytes(), "{swarm}: {}", c.error);
        }
        // Written under the name without the swarm, by an older sidecar.
        std::fs::write(files.logs.join("old-1.log"), b"old\n").expect("write");
        let c = chunk(answer(wt.path(), request_in("app", "old", 0, 0)).await);
        assert_eq!(c.data, b"old\n", "{}", c.error);
    }
}

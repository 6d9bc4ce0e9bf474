//! Files the sidecar reads and writes where the worker can write too: the
//! worktree's `.swarm/` (task, status, answers, logs, exit file, review
//! decision, agent session). The sidecar and the worker's supervisor run
//! unconfined, so a link the worker planted there must never be followed:
//! `status.json` pointing at `/dev/zero` or a FIFO would stall the sidecar,
//! `task.md` or a log pointing at `~/.bashrc` would have the sidecar write
//! through it. Every such file is opened without following a final link,
//! read only when it is a regular file and only up to a bound, and created
//! anew rather than opened in place; directories that turned into links
//! are made directories again before the sidecar writes below them.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

fn nofollow() -> i32 {
    nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC
}

/// Reads `path` when it is a regular file of at most `max` bytes.
pub fn read(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        // Non-blocking: a FIFO must not hold the reader; no effect on a file.
        .custom_flags(nofollow() | nix::libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > max {
        return Err(std::io::Error::other(format!("larger than {max} bytes")));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(std::io::Error::other(format!("larger than {max} bytes")));
    }
    Ok(out)
}

/// The last `max` bytes of `path` when it is a regular file, however long
/// it is (a log read for what its worker said last).
pub fn tail(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Seek as _;
    let mut file =
        std::fs::OpenOptions::new().read(true).custom_flags(nofollow() | nix::libc::O_NONBLOCK).open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    file.seek(std::io::SeekFrom::Start(meta.len().saturating_sub(max)))?;
    let mut out = Vec::new();
    file.take(max).read_to_end(&mut out)?;
    Ok(out)
}

/// Makes `dir` a real directory: whatever else is there (a link, a file)
/// is removed first; an existing directory is kept as it is.
pub fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => std::fs::remove_file(dir)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir(dir)
}

/// Replaces whatever is at `path` (a file, a link) with a new file holding
/// `bytes`.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = create(path)?;
    f.write_all(bytes)
}

/// A new, empty file at `path`, whatever was there before.
pub fn create(path: &Path) -> std::io::Result<std::fs::File> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path)?,
        Ok(_) => std::fs::remove_file(path)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    // `create_new` fails rather than follows a link raced into its place.
    std::fs::OpenOptions::new().write(true).create_new(true).custom_flags(nofollow()).open(path)
}

/// Opens `path` for appending (created when missing), refusing a link.
pub fn append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().create(true).append(true).custom_flags(nofollow()).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_fifos_and_devices_are_not_followed_or_read() {
        let dir = tempfile::tempdir().expect("dir");
        let outside = dir.path().join("outside.txt");
        std::fs::write(&outside, "keep").expect("write");
        let link = dir.path().join("status.json");
        std::os::unix::fs::symlink(&outside, &link).expect("link");
        assert!(read(&link, 100).is_err(), "a link is not read");
        assert!(append(&link).is_err(), "a link is not appended to");
        assert!(tail(&link, 100).is_err(), "a link is not read for its tail");
        write(&link, b"new").expect("replaces the link");
        assert_eq!(std::fs::read_to_string(&outside).expect("read"), "keep");
        assert_eq!(read(&link, 100).expect("a file now"), b"new");
        std::fs::write(dir.path().join("log"), "first\nsecond\n").expect("log");
        assert_eq!(tail(&dir.path().join("log"), 7).expect("tail"), b"second\n");
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("link");
        assert!(read(&zero, 100).is_err());
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let e = read(&fifo, 100).expect_err("a fifo is not a file");
        assert_eq!(e.to_string(), "not a regular file");
        assert!(read(&link, 2).is_err(), "bounded");
    }

    #[test]
    fn a_directory_that_became_a_link_is_a_directory_again() {
        let dir = tempfile::tempdir().expect("dir");
        let elsewhere = tempfile::tempdir().expect("elsewhere");
        let logs = dir.path().join("logs");
        std::os::unix::fs::symlink(elsewhere.path(), &logs).expect("link");
        ensure_dir(&logs).expect("dir");
        assert!(std::fs::symlink_metadata(&logs).expect("stat").is_dir());
        write(&logs.join("a.log"), b"x").expect("write");
        assert!(!elsewhere.path().join("a.log").exists());
    }
}

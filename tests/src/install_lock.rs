//! One test process at a time installs or builds a prerequisite that test
//! processes share (a venv under `target/`, a Docker image): a runner that
//! starts each test in its own process (cargo-nextest) would otherwise run
//! two installs into the same place at once.

use std::fs::{File, TryLockError};
use std::path::Path;
use std::time::{Duration, Instant};

/// Held while installing; the lock is released when it drops (or when the
/// process dies, so a killed install never blocks the next run).
pub struct InstallLock {
    _file: File,
}

/// Takes the exclusive lock on `path` (created if missing), waiting at most
/// `limit` for another process's install to finish.
pub fn install_lock(path: &Path, limit: Duration) -> Result<InstallLock, String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    let deadline = Instant::now() + limit;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(InstallLock { _file: file }),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(format!("locking {}: {e}", path.display())),
        }
    }
}

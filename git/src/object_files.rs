//! Loose objects written into files created ahead of time.
//!
//! Creating a file on ext4 costs an inode allocation, ~200 µs when the file system has freed inodes
//! recently, and a merge writes one loose object (its commit) or a few. A thread makes the 256
//! fan-out directories of `objects/` once and keeps a few empty files ready in
//! `<git dir>/swarm-object-files/<pid>-<n>@<host>/`, so a merge only opens one, writes the
//! compressed object into it and renames it into `objects/` (no-replace: an object already there is
//! kept). With none ready (or on an OS without `renameat2`) the object is written by gix as before.
//! What a killed process leaves in its directory is removed by the next `Integrator` on the same
//! host that finds the process gone.

use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};

use crate::error::GitError;

/// Files kept ready: as many as a merge batch writes loose (below `PACK_MIN_OBJECTS` it is not
/// packed).
const READY: usize = 64;
/// Not under `.git/swarm/` with the controller's store and logs: that directory may be another
/// file system (a volume, a tmpfs), and a ready file must be renamed into `objects/`.
const POOL_DIR: &str = "swarm-object-files";

static INSTANCES: AtomicU64 = AtomicU64::new(0);

/// Empty files to write loose objects into, created by a thread that stops with this value.
pub(crate) struct ObjectFiles {
    ready: Receiver<PathBuf>,
    objects: PathBuf,
    dir: PathBuf,
}

impl ObjectFiles {
    /// `None` if the directory cannot be made (a read-only repository): objects go through gix.
    pub(crate) fn start(common_dir: &Path) -> Option<ObjectFiles> {
        let root = common_dir.join(POOL_DIR);
        remove_abandoned(&root);
        let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("{}-{n}@{}", std::process::id(), host()));
        if let Err(e) = std::fs::create_dir_all(&dir) {
            tracing::debug!(dir = %dir.display(), error = %e, "no ready object files");
            return None;
        }
        let (tx, ready) = sync_channel(READY);
        let objects = common_dir.join("objects");
        let (thread_dir, thread_objects) = (dir.clone(), objects.clone());
        let spawned = std::thread::Builder::new()
            .name("swarm-object-files".into())
            .spawn(move || keep_ready(&thread_dir, &thread_objects, &tx));
        if spawned.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
            return None;
        }
        Some(ObjectFiles { ready, objects, dir })
    }

    /// Writes the loose object `id` (`kind`, `data`) through a ready file. `Ok(false)`: no file was
    /// ready, and the caller writes it another way.
    pub(crate) fn write(
        &self,
        id: &gix::oid,
        kind: gix::object::Kind,
        data: &[u8],
    ) -> Result<bool, GitError> {
        let path = match self.ready.try_recv() {
            Ok(path) => path,
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => return Ok(false),
        };
        let file = match OpenOptions::new().write(true).open(&path) {
            Ok(file) => file,
            // Removed under us (another process cleaning up): let the caller write it.
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(source) => return Err(GitError::Io { op: "open object file", source }),
        };
        let mut zlib = gix::zlib::stream::deflate::Write::new(file, gix::zlib::Compression::BEST_SPEED);
        zlib.write_all(&gix::objs::encode::loose_header(kind, data.len() as u64))
            .and_then(|()| zlib.write_all(data))
            .and_then(|()| zlib.flush())
            .map_err(GitError::io("write loose object"))?;
        let file = zlib.into_inner();
        // Read-only, as git makes its objects.
        file.set_permissions(std::fs::Permissions::from_mode(0o444))
            .map_err(GitError::io("write loose object"))?;
        drop(file);
        let hex = id.to_hex().to_string();
        let target = self.objects.join(&hex[..2]).join(&hex[2..]);
        let mut installed = crate::swap_file::rename_no_replace(&path, &target);
        if matches!(&installed, Err(e) if e.kind() == ErrorKind::NotFound) {
            // The thread makes every fan-out directory at start, but `git prune` removes empty ones.
            if let Some(dir) = target.parent() {
                std::fs::create_dir_all(dir).map_err(GitError::io("create object directory"))?;
            }
            installed = crate::swap_file::rename_no_replace(&path, &target);
        }
        match installed {
            Ok(true) => {}
            // Never renamed over: an object file is never rewritten in place of one a reader may map.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let _ = std::fs::remove_file(&path);
            }
            // No renameat2 here (or another file system): the caller writes it.
            Ok(false) => {
                let _ = std::fs::remove_file(&path);
                return Ok(false);
            }
            Err(source) => return Err(GitError::Io { op: "install loose object", source }),
        }
        Ok(true)
    }
}

impl Drop for ObjectFiles {
    fn drop(&mut self) {
        // The thread ends when its next send fails; the files are removed with the directory.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn keep_ready(dir: &Path, objects: &Path, tx: &SyncSender<PathBuf>) {
    // A new fan-out directory costs a merge as much as a new file (git makes them on first use).
    for prefix in 0..=255u8 {
        let _ = std::fs::create_dir(objects.join(format!("{prefix:02x}")));
    }
    for n in 0u64.. {
        let path = dir.join(n.to_string());
        if let Err(e) = OpenOptions::new().write(true).create_new(true).mode(0o644).open(&path) {
            tracing::debug!(path = %path.display(), error = %e, "object files: no more");
            return;
        }
        if tx.send(path.clone()).is_err() {
            let _ = std::fs::remove_file(&path);
            return;
        }
    }
}

/// Removes the directories of this host's processes that are gone (`/proc/<pid>`; without
/// `/proc`, none). Controllers on other hosts (or in other containers) may share the repository
/// on a volume; their pids mean nothing here, so their directories are theirs to clean.
fn remove_abandoned(root: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root) else { return };
    let here = host();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((pid, host)) = name.to_str().and_then(|n| n.split_once('@')) else { continue };
        let Some(pid) = pid.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if host == here && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// This host's name, as a file name's part (anything but `[A-Za-z0-9.-]` becomes `_`).
fn host() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name: String = name
        .trim()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
        .collect();
    if name.is_empty() { "localhost".into() } else { name }
}

//! An ext4 file system made and loop-mounted for one measurement.
//!
//! Benchmarks that create and delete tens of thousands of files measure the
//! disk's history as much as the program on a shared file system: ext4's
//! inode allocator skips inodes freed in the last minute, and every run
//! frees 100,000 of them, so the same binary measured 0.3× to 2.2× of
//! itself between runs. A file system made for each measurement starts
//! every one from the same state. Needs root and a loop device; [`make`]
//! says why it cannot, and the bench then measures where it is.
//!
//! `swarm-bench` includes this file by `#[path]` (a release binary does
//! not depend on the test crate), so it uses `std` only.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted file system; unmounted, and its image deleted, when dropped.
pub struct FreshFs {
    image: PathBuf,
    mount: PathBuf,
}

impl FreshFs {
    /// Makes a `bytes`-sized ext4 image at `<under>/<name>.img` and mounts
    /// it at `<under>/<name>`.
    pub fn make(under: &Path, name: &str, bytes: u64) -> Result<FreshFs, String> {
        let image = under.join(format!("{name}.img"));
        let mount = under.join(name);
        std::fs::create_dir_all(&mount).map_err(|e| format!("{}: {e}", mount.display()))?;
        let file = std::fs::File::create(&image).map_err(|e| format!("{}: {e}", image.display()))?;
        file.set_len(bytes).map_err(|e| format!("{}: {e}", image.display()))?;
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image))?;
        run(Command::new("mount").args(["-o", "loop"]).arg(&image).arg(&mount))?;
        Ok(FreshFs { image, mount })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }
}

impl Drop for FreshFs {
    fn drop(&mut self) {
        // Lazily if something still has it open (a straggling worker):
        // the image's blocks go when that lets go.
        let unmounted = Command::new("umount").arg(&self.mount).stderr(std::process::Stdio::null()).status();
        if !unmounted.is_ok_and(|s| s.success()) {
            let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        }
        let _ = std::fs::remove_file(&self.image);
    }
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

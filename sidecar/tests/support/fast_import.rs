//! Large test repositories made fast: a `git fast-import` stream written
//! in one go, its pack optionally unpacked into loose objects (as `git add`
//! leaves them). Shared by the sidecar's integration tests and benches.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// Imports `stream` into the repository at `repo` (already initialised).
pub fn import(repo: &Path, stream: &str) {
    let mut fi = Command::new("git")
        .args(["fast-import", "--quiet"])
        .current_dir(repo)
        .stdin(Stdio::piped())
        .spawn()
        .expect("fast-import");
    fi.stdin.take().expect("stdin").write_all(stream.as_bytes()).expect("write stream");
    assert!(fi.wait().expect("wait").success(), "fast-import failed");
}

/// Replaces every pack of `repo` by its objects, one file each.
pub fn unpack_to_loose(repo: &Path) {
    let packs = repo.join(".git/objects/pack");
    for e in std::fs::read_dir(&packs).expect("packs") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "pack") {
            let moved = repo.join("fast-import.pack");
            std::fs::rename(&p, &moved).expect("move pack");
            std::fs::remove_file(p.with_extension("idx")).expect("remove idx");
            let pack = std::fs::File::open(&moved).expect("open pack");
            let ok = Command::new("git")
                .args(["unpack-objects", "-q"])
                .current_dir(repo)
                .stdin(pack)
                .status()
                .expect("unpack-objects");
            assert!(ok.success(), "unpack-objects failed");
            std::fs::remove_file(&moved).expect("remove pack");
        }
    }
}

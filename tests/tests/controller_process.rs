//! What the controller process sets up for itself, read from the kernel.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use swarm_tests::{TempRepo, spawn_controller};

/// mimalloc asks for huge pages on its arenas and purges what it frees, so
/// every reuse zeroed a whole 2 MiB page: the controller turns transparent
/// huge pages off for itself, and the kernel reports that per process.
#[test]
#[cfg(target_os = "linux")]
fn the_controller_runs_without_transparent_huge_pages() {
    let repo = TempRepo::with_files(&[("README.md", "x\n")]);
    let controller = spawn_controller(repo.path(), &[]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", controller.proc.pid())).unwrap();
    let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) else {
        // Kernels before 5.0 do not report it; nothing to read there.
        return swarm_tests::skip_for(
            "the_controller_runs_without_transparent_huge_pages",
            swarm_tests::Needs::Kernel,
            "this kernel's /proc/PID/status has no THP_enabled line",
        );
    };
    assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
}

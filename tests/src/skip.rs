//! Tests that cannot run here say so, by name, and are counted; none
//! passes green without running where it could have run.
//!
//! A skip is printed on stderr and appended to `skipped-tests.log` in the
//! target profile directory (`target/debug/`), which `.ci/run` empties
//! before the tests and prints after them: a test runner shows a skipped
//! test as passed, and this list is what tells them apart.
//!
//! Under CI (`CI` set, as CI services set it) a skip fails the test when the
//! machine is known to have what the test needs: the binaries are there but
//! the thing does not work, which is a fault to see, not a reason to skip.
//! What CI machines are not promised (a kernel feature, a pseudo-terminal)
//! skips under CI too, still counted, and `.ci/test` then fails the run
//! unless `.ci/allowed-skips` names the test and its reason
//! (`.ci/check-skips`): a skip CI accepts is one written down with why.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a test needs that not every machine has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// PostgreSQL's server binaries (`initdb`, `postgres`, …).
    Postgres,
    /// A Docker Engine (and root, the first time, to debootstrap the base image).
    Docker,
    /// Root: network namespaces, tmpfs mounts, installing packages.
    Root,
    /// A Chromium to drive (installed from Debian's packages as root).
    Chromium,
    /// Packages from PyPI (the Claude Code CLI, ACP agents, validators).
    PyPi,
    /// A program on PATH (`kubectl`, `curl`, `docker-compose`).
    Program(&'static str),
    /// Something of the kernel or terminal that no machine is promised.
    Kernel,
}

impl Needs {
    /// Whether this machine has the prerequisite, so that a test needing it
    /// must run under CI.
    pub fn known_here(self) -> bool {
        match self {
            Needs::Postgres => crate::postgres::installed(),
            Needs::Docker => on_path("docker"),
            Needs::Root | Needs::Chromium => is_root(),
            Needs::PyPi => on_path("python3"),
            Needs::Program(name) => on_path(name),
            Needs::Kernel => false,
        }
    }
}

/// Whether the tests run under CI.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// Reports that `test` is skipped because it lacks what `needs` names
/// (`why` says what was found); records it in the skip log. Under CI on a
/// machine known to have the prerequisite, it fails instead.
pub fn skip_for(test: &str, needs: Needs, why: &str) {
    assert!(
        !(in_ci() && needs.known_here()),
        "{test} cannot run ({why}), though CI is set and this machine has {needs:?}"
    );
    record(test, why);
}

/// [`skip_for`] a prerequisite every CI machine has (PostgreSQL, Docker,
/// root, PyPI): under CI a skip always fails.
pub fn skip(test: &str, why: &str) {
    assert!(!in_ci(), "{test} cannot run, and CI is set: {why}");
    record(test, why);
}

/// The running test's name: the test harness names each test's thread
/// after it (the whole path, `module::test`).
pub fn current_test() -> String {
    std::thread::current().name().unwrap_or("an unnamed test").to_string()
}

/// Says that `test` is skipped, on stderr and in the skip log (a log that
/// cannot be written leaves it on stderr only).
fn record(test: &str, why: &str) {
    eprintln!("SKIPPED {test}: {why}");
    let Some(path) = skip_log() else { return };
    let line = format!("{test}\t{}\n", why.replace(['\n', '\t'], " "));
    // One short write with O_APPEND: lines of concurrent test processes
    // do not interleave.
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(line.as_bytes());
    }
}

/// `target/<profile>/skipped-tests.log`, beside the test executable's `deps/`.
pub fn skip_log() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.join("skipped-tests.log"))
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| is_executable(&d.join(program))))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

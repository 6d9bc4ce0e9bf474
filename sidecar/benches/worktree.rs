//! Worktree preparation on a 10,000-file repository, against `git worktree
//! add` in the same run.
//!
//! ```text
//! cargo bench -p swarm-sidecar --bench worktree [-- --files N --rounds N --dir PATH --loose --shared-fs]
//! ```
//!
//! Measures: the first worktree (`prepare` creating it) vs `git worktree
//! add`; and moving an existing worktree to the next task's branch when the
//! bases differ by a few files (median over the rounds). Bounded in count.
//!
//! Each first worktree, ours and the CLI's, is made in a copy of the
//! repository on an ext4 file system made for that one round and side
//! (a loop device; needs root, and says so when it falls back). On a
//! shared disk the figure is decided by the file system's history: ext4's
//! inode allocator skips inodes freed in the last minute, and every bench
//! run frees 100,000 of them, so the same two programs measured 0.3× to
//! 2.2× of each other between runs. `--shared-fs` measures there anyway.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use swarm_sidecar::{changes, worktree};
use swarm_tests::fresh_fs::FreshFs;

#[path = "../tests/support/fast_import.rs"]
mod fast_import;

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git").args(args).current_dir(repo).output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Two commits: `c1` with `files` files, `c2` changing 5 of them; packed,
/// or with `loose` one file per object.
fn build_repo(repo: &Path, files: usize, loose: bool) -> (String, String) {
    git(repo, &["init", "-q", "-b", "main"]);
    let mut s = String::new();
    for (mark, n, msg) in [(0usize, files, "one"), (1, 5, "two")] {
        s.push_str(&format!(
            "commit refs/heads/main\nmark :{}\ncommitter b <b@example.com> 1700000000 +0000\ndata {}\n{msg}\n",
            mark + 1,
            msg.len() + 1
        ));
        if mark == 1 {
            s.push_str("from :1\n");
        }
        for i in 0..n {
            let body = format!("file {i} version {mark}\n");
            s.push_str(&format!("M 100644 inline src/d{}/f{i}.txt\ndata {}\n{body}\n", i % 100, body.len()));
        }
    }
    fast_import::import(repo, &s);
    if loose {
        // As `git add` leaves them (the e2e bench's repository): one file per object.
        fast_import::unpack_to_loose(repo);
    }
    (git(repo, &["rev-parse", "main~1"]), git(repo, &["rev-parse", "main"]))
}

/// First worktrees of each side, alternated.
const FIRST_ROUNDS: usize = 5;

/// A fresh file system with a copy of the bench's repository on it.
fn fresh_copy(under: &Path, name: &str, repo: &Path) -> Result<(FreshFs, PathBuf), String> {
    let fs = FreshFs::make(under, name, FRESH_FS_BYTES)?;
    let copy = fs.path().join("repo");
    let ok = Command::new("cp").arg("-a").arg(repo).arg(&copy).status().map_err(|e| e.to_string())?;
    if !ok.success() {
        return Err(format!("copying {} failed", repo.display()));
    }
    Ok((fs, copy))
}

/// Room for the repository and one worktree of 10,000 small files.
const FRESH_FS_BYTES: u64 = 1 << 30;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let files = arg("--files", 10_000);
    let rounds = arg("--rounds", 20).max(1);
    let root = match args.iter().position(|a| a == "--dir").and_then(|i| args.get(i + 1)) {
        Some(d) => tempfile::tempdir_in(d).expect("tempdir"),
        None => tempfile::tempdir().expect("tempdir"),
    };
    let repo = root.path().join("repo");
    std::fs::create_dir_all(&repo).expect("mkdir");
    let loose = args.iter().any(|a| a == "--loose");
    let (c1, c2) = build_repo(&repo, files, loose);

    // First worktrees, alternating which goes first so neither always pays
    // for a cold page cache. Each starts on a settled disk: a `sync` first,
    // so neither pays for writing back the other's 10,000 files (that
    // writeback made the same command 0.4 s in one round and 1.2 s in the
    // next). Ratios are per round, ours over the CLI's of the same round.
    let settle = || assert!(Command::new("sync").status().expect("sync runs").success());
    let fresh = !args.iter().any(|a| a == "--shared-fs")
        && match fresh_copy(root.path(), "probe", &repo) {
            Ok(_) => true,
            Err(e) => {
                println!("(first worktrees on the shared disk: no fresh file system could be made: {e})");
                false
            }
        };
    let first = |cli: bool, round: usize| {
        let name = format!("{}{round}", if cli { "cli" } else { "first" });
        let fs = fresh.then(|| fresh_copy(root.path(), &name, &repo).expect("fresh file system"));
        let (repo, dir) = match &fs {
            Some((fs, copy)) => (copy.clone(), fs.path().join("cli-wt")),
            None => (repo.clone(), root.path().join(format!("cli-wt{round}"))),
        };
        settle();
        let t = Instant::now();
        if cli {
            git(&repo, &["worktree", "add", "-q", "--detach", dir.to_str().expect("utf8"), &c1]);
        } else {
            let p =
                worktree::prepare(&ws(&repo), &name, &format!("swarm/b/{name}"), &c1).expect("first prepare");
            assert!(p.created);
        }
        t.elapsed()
    };
    let mut cli_adds = Vec::new();
    let mut firsts = Vec::new();
    for round in 0..FIRST_ROUNDS {
        if round % 2 == 0 {
            cli_adds.push(first(true, round));
            firsts.push(first(false, round));
        } else {
            firsts.push(first(false, round));
            cli_adds.push(first(true, round));
        }
    }
    let rounds_ms: Vec<String> = firsts
        .iter()
        .zip(&cli_adds)
        .map(|(ours, cli)| format!("{:.0}/{:.0}", ours.as_secs_f64() * 1e3, cli.as_secs_f64() * 1e3))
        .collect();
    let mut ratios: Vec<f64> =
        firsts.iter().zip(&cli_adds).map(|(ours, cli)| ours.as_secs_f64() / cli.as_secs_f64()).collect();
    ratios.sort_by(f64::total_cmp);
    let cli_add = median(cli_adds);
    let first_prepare = median(firsts);
    worktree::prepare(&ws(&repo), "bench", "swarm/b/t0", &c1).expect("bench worktree");

    let mut moves = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let base = if i % 2 == 0 { &c2 } else { &c1 };
        let t = Instant::now();
        worktree::prepare(&ws(&repo), "bench", &format!("swarm/b/t{}", i + 1), base).expect("move");
        moves.push(t.elapsed());
    }
    let next = median(moves);
    let objects = if loose { "loose objects" } else { "packed" };
    let place = if fresh { "each on a fresh ext4" } else { "on the shared disk" };
    println!(
        "worktree bench: {files} files ({objects}), bases 5 files apart, {rounds} moves; first worktrees {place}"
    );
    println!(
        "  git worktree add (CLI, median of {FIRST_ROUNDS})        {:>9.1} ms",
        cli_add.as_secs_f64() * 1e3
    );
    println!(
        "  first prepare (new worktree, median of {FIRST_ROUNDS})  {:>9.1} ms  (per round: median {:.2}x, worst {:.2}x the CLI; aim <= 1.0x)",
        first_prepare.as_secs_f64() * 1e3,
        ratios[ratios.len() / 2],
        ratios[ratios.len() - 1]
    );
    println!("    rounds, ours/CLI ms: {}", rounds_ms.join(", "));
    println!(
        "  next task's prepare (median)              {:>9.1} ms  (aim <= 50 ms)",
        next.as_secs_f64() * 1e3
    );

    // The tracked path of an attempt (what the e2e run does per task): move
    // by the changed paths, the worker writes one file, the tracked commit,
    // the list of changed files.
    let tracked = worktree::prepare(&ws(&repo), "tracked", "swarm/b/r0", &c1).expect("tracked worktree");
    let mut tracker = changes::Tracker::start(&tracked.path).expect("tracker");
    let (mut moves, mut commits, mut lists) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        let base = if i % 2 == 0 { &c2 } else { &c1 };
        assert_eq!(tracker.take(), Some(Default::default()), "clean before the move");
        let t = Instant::now();
        let (wt, memo) = tracker.repo_and_memo().expect("the tracker's repository");
        changes::move_clean_in(wt, memo, &ws(&repo), "tracked", &format!("swarm/b/r{}", i + 1), base)
            .expect("move");
        moves.push(t.elapsed());
        assert_eq!(tracker.take().map(|s| s.is_empty()), Some(false), "the move is seen");
        std::fs::write(tracked.path.join(format!("src/d{}/new{i}.txt", i % 100)), "new\n").expect("write");
        let changed = tracker.take().expect("tracked");
        let t = Instant::now();
        let (wt, memo) = tracker.repo_and_memo().expect("the tracker's repository");
        let (oid, made) = changes::commit_paths_in(wt, memo, "bench", &changed).expect("commit");
        commits.push(t.elapsed());
        assert!(made);
        let t = Instant::now();
        let files = worktree::files_changed(&tracked.path, base, oid).expect("files changed");
        lists.push(t.elapsed());
        assert_eq!(files.len(), 1);
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("tracked attempts ({rounds}, medians; the e2e path):");
    println!("  move to the next base (changed paths)      {:>9.1} ms", ms(median(moves)));
    println!("  commit of the worker's changes             {:>9.1} ms", ms(median(commits)));
    println!("  files changed by the commit                {:>9.1} ms", ms(median(lists)));
}

/// The repository's own workspaces directory, `.git/workspaces/`.
fn ws(repo: &std::path::Path) -> worktree::Workspaces {
    worktree::Workspaces::in_repo(repo).expect("workspaces")
}

//! Integration benchmark: `cargo bench -p swarm-git` (release build; takes a minute or two).
//!
//! Builds a repository with 10,000 files and 1,000 commits of history (via `git fast-import`), then
//! measures (a) `Integrator::integrate` of a 3-commit task branch into a 3-commit integration branch,
//! (b) the git CLI sequence `merge-tree --write-tree` + `commit-tree` + `update-ref` doing the same,
//! and (c) a merge queue of 1,000 non-conflicting task branches landed one after another.
//! Every loop is bounded in iterations and in time. Optional arguments: `--quick` (fewer iterations),
//! `--dir PATH` (where to create the repository, default the system temp dir; the integrator is
//! bound by file creation — 4 loose objects and a ref lock per merge — so compare a disk with tmpfs:
//! `cargo bench -p swarm-git --bench integrate -- --dir /dev/shm`).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use swarm_git::{Integrator, MergeRequest, MergeStrategy};

const DIRS: usize = 100;
const FILES_PER_DIR: usize = 100;
const HISTORY_COMMITS: usize = 1_000;
const QUEUE_BRANCHES: usize = 1_000;

struct Config {
    integrate_runs: usize,
    cli_runs: usize,
    budget: Duration,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quick = std::env::args().any(|a| a == "--quick");
    let config = if quick {
        Config { integrate_runs: 50, cli_runs: 10, budget: Duration::from_secs(10) }
    } else {
        Config { integrate_runs: 300, cli_runs: 50, budget: Duration::from_secs(30) }
    };
    let args: Vec<String> = std::env::args().collect();
    let parent = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(&parent)?;
    let repo_path = dir.path();

    let started = Instant::now();
    build_repository(repo_path)?;
    let build_time = started.elapsed();
    let git2_repo = git2::Repository::open(repo_path)?;
    let head_of = |branch: &str| -> Result<String, git2::Error> {
        Ok(git2_repo.refname_to_id(&format!("refs/heads/{branch}"))?.to_string())
    };
    let integ_head = head_of("integ")?;
    let task_head = head_of("task")?;
    let reset = |branch: &str, id: &str| -> Result<(), git2::Error> {
        git2_repo.reference(
            &format!("refs/heads/{branch}"),
            git2::Oid::from_str(id)?,
            true,
            "bench reset",
        )?;
        Ok(())
    };

    let integrator = Integrator::open(repo_path)?;
    let request = |expected: &str, task: &str, label: String| MergeRequest {
        integration_branch: "integ".into(),
        expected_head: expected.to_string(),
        task_commit: task.to_string(),
        strategy: MergeStrategy::Merge,
        attempt_label: label,
        title: "bench".into(),
        summary: "bench merge".into(),
    };

    // (a) Integrator::integrate, ref reset between runs.
    let mut integrate_times = Vec::new();
    let deadline = Instant::now() + config.budget;
    for i in 0..config.integrate_runs {
        if Instant::now() > deadline {
            break;
        }
        reset("integ", &integ_head)?;
        let t = Instant::now();
        let report = integrator.integrate(&request(&integ_head, &task_head, format!("bench/a#{i}")))?;
        integrate_times.push(t.elapsed());
        assert_eq!(report.files_changed.len(), 3, "task branch changes three files");
    }

    // (b) git CLI: merge-tree, commit-tree, update-ref (CAS), ref reset between runs (not timed).
    let mut cli_times = Vec::new();
    let deadline = Instant::now() + config.budget;
    for i in 0..config.cli_runs {
        if Instant::now() > deadline {
            break;
        }
        reset("integ", &integ_head)?;
        let t = Instant::now();
        let tree = git(repo_path, &["merge-tree", "--write-tree", "integ", "task"])?;
        let message = format!("bench cli {i}");
        let commit =
            git(repo_path, &["commit-tree", &tree, "-p", &integ_head, "-p", &task_head, "-m", &message])?;
        git(repo_path, &["update-ref", "refs/heads/integ", &commit, &integ_head])?;
        cli_times.push(t.elapsed());
    }
    reset("integ", &integ_head)?;

    // (c) Merge queue: QUEUE_BRANCHES task branches, each adding its own file, landed in order.
    let mut current = head_of("queue")?;
    let queue_start = Instant::now();
    let deadline = queue_start + config.budget * 2;
    let mut landed = 0usize;
    for i in 0..QUEUE_BRANCHES {
        if Instant::now() > deadline {
            break;
        }
        let task = head_of(&format!("q/t{i}"))?;
        let mut req = request(&current, &task, format!("bench/q{i}#1"));
        req.integration_branch = "queue".into();
        current = integrator.integrate(&req)?.result;
        landed += 1;
    }
    let queue_time = queue_start.elapsed();
    let tree = git2_repo.find_commit(git2::Oid::from_str(&current)?)?.tree()?;
    let mut files = 0usize;
    tree.walk(git2::TreeWalkMode::PreOrder, |_, e| {
        if e.kind() == Some(git2::ObjectType::Blob) {
            files += 1;
        }
        git2::TreeWalkResult::Ok
    })?;
    assert_eq!(files, DIRS * FILES_PER_DIR + 1 + landed, "every queued file landed");

    let integrate_median = median(&mut integrate_times);
    let cli_median = median(&mut cli_times);
    let rate = landed as f64 / queue_time.as_secs_f64();
    println!();
    println!("location: {}", parent.display());
    println!(
        "repository: {} files, {} commits of history (built in {:.1?})",
        files - landed,
        HISTORY_COMMITS + 1,
        build_time
    );
    println!("{:<46} {:>6} {:>12}", "measurement", "runs", "result");
    println!("{:-<46} {:->6} {:->12}", "", "", "");
    println!(
        "{:<46} {:>6} {:>9.3} ms",
        "(a) Integrator::integrate, median",
        integrate_times.len(),
        ms(integrate_median)
    );
    println!(
        "{:<46} {:>6} {:>9.3} ms",
        "(b) merge-tree+commit-tree+update-ref, median",
        cli_times.len(),
        ms(cli_median)
    );
    println!(
        "{:<46} {:>6} {:>10.1} x",
        "    speed-up (b)/(a) [target >= 10x]",
        "",
        ms(cli_median) / ms(integrate_median)
    );
    println!("{:<46} {:>6} {:>6.0} br/s", "(c) merge queue [target >= 500 br/s]", landed, rate);
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

fn git(repo: &Path, args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let out = Command::new("git").args(args).current_dir(repo).output()?;
    if !out.status.success() {
        return Err(format!("git {args:?} failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

fn file_path(n: usize) -> String {
    format!("src/m{:03}/f{:03}.txt", n / FILES_PER_DIR, n % FILES_PER_DIR)
}

/// Writes the whole history as one `git fast-import` stream.
fn build_repository(path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    git(path, &["init", "-q", "-b", "main"])?;
    let mut child = Command::new("git")
        .args(["fast-import", "--quiet"])
        .current_dir(path)
        .stdin(Stdio::piped())
        .spawn()?;
    let stdin = child.stdin.take().ok_or("no stdin")?;
    let mut s = std::io::BufWriter::new(stdin);
    let mut time = 1_700_000_000u64;
    let mut mark = 0usize;
    let mut commit = |s: &mut dyn Write,
                      branch: &str,
                      from: Option<usize>,
                      msg: &str,
                      files: &[(String, String)]| {
        mark += 1;
        time += 1;
        let mut text = format!(
            "commit refs/heads/{branch}\nmark :{mark}\ncommitter Bench <bench@example.com> {time} +0000\ndata {}\n{msg}\n",
            msg.len()
        );
        if let Some(from) = from {
            text.push_str(&format!("from :{from}\n"));
        }
        for (p, content) in files {
            text.push_str(&format!("M 100644 inline {p}\ndata {}\n{content}\n", content.len()));
        }
        s.write_all(text.as_bytes()).map(|()| mark)
    };

    let all: Vec<(String, String)> = (0..DIRS * FILES_PER_DIR)
        .map(|n| (file_path(n), format!("file {n}\nsecond line\nthird line of file {n}\n")))
        .collect();
    let mut tip = commit(&mut s, "main", None, "initial: 10k files", &all)?;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for c in 0..HISTORY_COMMITS {
        let files: Vec<(String, String)> = (0..3)
            .map(|_| {
                let n = (next() % (DIRS * FILES_PER_DIR) as u64) as usize;
                (file_path(n), format!("file {n}\nrevision {c}\nthird line of file {n}\n"))
            })
            .collect();
        tip = commit(&mut s, "main", Some(tip), &format!("history {c}"), &files)?;
    }
    let base = tip;
    // (a)/(b): the integration branch edits files in src/m000, the task branch in src/m001.
    let mut integ = base;
    let mut task = base;
    for k in 0..3 {
        let f = vec![(file_path(k), format!("integration edit {k}\n"))];
        integ = commit(&mut s, "integ", Some(integ), &format!("integ {k}"), &f)?;
        let f = vec![(file_path(FILES_PER_DIR + k), format!("task edit {k}\n"))];
        task = commit(&mut s, "task", Some(task), &format!("task {k}"), &f)?;
    }
    // (c): the queue's integration branch plus one branch per task, each adding its own file.
    commit(&mut s, "queue", Some(base), "queue start", &[("QUEUE".into(), "queue\n".into())])?;
    for i in 0..QUEUE_BRANCHES {
        let f = vec![(format!("src/m{:03}/task{i}.txt", i % DIRS), format!("task {i}\n"))];
        commit(&mut s, &format!("q/t{i}"), Some(base), &format!("task {i}"), &f)?;
    }
    s.flush()?;
    drop(s);
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("git fast-import failed: {status}").into());
    }
    Ok(())
}

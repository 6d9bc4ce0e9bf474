//! Integration benchmark: `cargo bench -p swarm-git` (release build; takes a minute or two).
//!
//! Builds a repository with 10,000 files and 1,000 commits of history (via `git fast-import`), then
//! measures (a) `Integrator::integrate` of a 3-commit task branch into a 3-commit integration branch,
//! (b) the git CLI sequence `merge-tree --write-tree` + `commit-tree` + `update-ref` doing the same
//! (interleaved rounds on the same repository, warm-up first; the ratio's min and median over rounds),
//! and (c) a merge queue of 1,000 non-conflicting task branches landed in order, one `integrate` each
//! and with `integrate_batch` in batches of 10 and 100 (one pack and one ref update per batch).
//! Every loop is bounded in iterations and in time. Optional arguments: `--quick` (fewer iterations),
//! `--no-queue` (only (a) and (b), e.g. under `perf record`),
//! `--shared-fs` (in the system temp dir rather than on an ext4 made for the run),
//! `--dir PATH` (where to create the repository, default an ext4 made for the run; the integrator is
//! bound by file creation — 4 loose objects and a ref lock per merge — so compare a disk with tmpfs:
//! `cargo bench -p swarm-git --bench integrate -- --dir /dev/shm`).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use swarm_git::{Integrator, MergeRequest, MergeStrategy};
use swarm_tests::fresh_fs::FreshFs;

const DIRS: usize = 100;
const FILES_PER_DIR: usize = 100;
const HISTORY_COMMITS: usize = 1_000;
const QUEUE_BRANCHES: usize = 1_000;

/// Batch sizes of the merge queue passes (1: one `integrate` per branch).
const QUEUE_BATCHES: [usize; 3] = [1, 10, 100];

struct Config {
    /// Interleaved rounds of (a) and (b).
    rounds: usize,
    /// Timed runs of each side per round.
    runs: usize,
    budget: Duration,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quick = std::env::args().any(|a| a == "--quick");
    let config = if quick {
        Config { rounds: 3, runs: 10, budget: Duration::from_secs(10) }
    } else {
        Config { rounds: 7, runs: 20, budget: Duration::from_secs(30) }
    };
    let args: Vec<String> = std::env::args().collect();
    let parent = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let scratch = tempfile::tempdir_in(&parent)?;
    // On a shared disk the figure is the disk's history: every merge creates
    // files, and ext4 creates them slowly for a minute after many were
    // deleted (a test run, the last bench's clean-up), which made min ratios
    // of 6.4x and 13.3x minutes apart with one binary. Both sides run on a
    // file system made for this run unless `--dir` or `--shared-fs` says
    // where (or this machine cannot mount one: no root, no loop device).
    let fresh = if args.iter().any(|a| a == "--dir" || a == "--shared-fs") {
        None
    } else {
        match FreshFs::make(scratch.path(), "fs", 2 << 30) {
            Ok(fs) => Some(fs),
            Err(e) => {
                println!("(on the shared disk: no fresh file system could be made: {e})");
                None
            }
        }
    };
    let dir = match &fresh {
        Some(fs) => tempfile::tempdir_in(fs.path())?,
        None => tempfile::tempdir_in(scratch.path())?,
    };
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
    // Its start-up work (the object fan-out directories, files made ahead for loose objects) runs on
    // a thread of its own and is over long before a controller's first merge; let it finish here too.
    std::thread::sleep(Duration::from_secs(1));
    let rss_open = rss_kib();
    let request = |expected: &str, task: &str, label: String| MergeRequest {
        integration_branch: "integ".into(),
        expected_head: expected.to_string(),
        task_commit: task.to_string(),
        strategy: MergeStrategy::Merge,
        attempt_label: label,
        title: "bench".into(),
        summary: "bench merge".into(),
    };

    // (a) vs (b), in interleaved rounds on the same repository: each round times `runs` integrations
    // and `runs` CLI sequences (which one goes first alternates), after one untimed warm-up of each,
    // so both sides see the same caches and the same disk. The ratio is per round: min and median.
    let mut rounds = Vec::new();
    let deadline = Instant::now() + config.budget;
    for round in 0..config.rounds {
        if Instant::now() > deadline && rounds.len() >= 3 {
            break;
        }
        let ours = || -> Result<Vec<Duration>, Box<dyn std::error::Error>> {
            let mut times = Vec::new();
            for i in 0..=config.runs {
                reset("integ", &integ_head)?;
                let t = Instant::now();
                let report =
                    integrator.integrate(&request(&integ_head, &task_head, format!("bench/a{round}#{i}")))?;
                if i > 0 {
                    times.push(t.elapsed());
                }
                assert_eq!(report.files_changed.len(), 3, "task branch changes three files");
            }
            Ok(times)
        };
        let cli = || -> Result<Vec<Duration>, Box<dyn std::error::Error>> {
            let mut times = Vec::new();
            for i in 0..=config.runs {
                reset("integ", &integ_head)?;
                let t = Instant::now();
                let tree = git(repo_path, &["merge-tree", "--write-tree", "integ", "task"])?;
                let message = format!("bench cli {round}.{i}");
                let commit = git(
                    repo_path,
                    &["commit-tree", &tree, "-p", &integ_head, "-p", &task_head, "-m", &message],
                )?;
                git(repo_path, &["update-ref", "refs/heads/integ", &commit, &integ_head])?;
                if i > 0 {
                    times.push(t.elapsed());
                }
            }
            Ok(times)
        };
        let (mut a, mut b) = if round % 2 == 0 {
            let a = ours()?;
            (a, cli()?)
        } else {
            let b = cli()?;
            (ours()?, b)
        };
        rounds.push((median(&mut a), median(&mut b)));
    }
    reset("integ", &integ_head)?;
    let rss_rounds = rss_kib();
    let mut ratios: Vec<f64> = rounds.iter().map(|(a, b)| ms(*b) / ms(*a)).collect();
    let each: Vec<String> = ratios.iter().map(|r| format!("{r:.1}x")).collect();
    println!("speed-up per round, in order: {}", each.join(" "));
    ratios.sort_by(f64::total_cmp);
    let mut a_all: Vec<Duration> = rounds.iter().map(|r| r.0).collect();
    let mut b_all: Vec<Duration> = rounds.iter().map(|r| r.1).collect();

    // (c) Merge queue: QUEUE_BRANCHES task branches, each adding its own file, landed in order; one
    // pass per batch size (1 = one `integrate` per branch), each with its own branches and queue.
    let mut queue_rates = Vec::new();
    let skip_queue = std::env::args().any(|a| a == "--no-queue");
    for (pass, &batch) in QUEUE_BATCHES.iter().enumerate().filter(|_| !skip_queue) {
        let start = head_of(&format!("queue{pass}"))?;
        let mut current = start.clone();
        let tasks: Vec<String> =
            (0..QUEUE_BRANCHES).map(|i| head_of(&format!("q{pass}/t{i}"))).collect::<Result<_, _>>()?;
        let queue_start = Instant::now();
        let deadline = queue_start + config.budget * 2;
        let mut landed = 0usize;
        for chunk in tasks.chunks(batch) {
            if Instant::now() > deadline {
                break;
            }
            let reqs: Vec<MergeRequest> = chunk
                .iter()
                .enumerate()
                .map(|(k, task)| {
                    let mut req = request(&current, task, format!("bench/q{pass}-{}#1", landed + k));
                    req.integration_branch = format!("queue{pass}");
                    req
                })
                .collect();
            if batch == 1 {
                current = integrator.integrate(&reqs[0])?.result;
            } else {
                let report = integrator.integrate_batch(&reqs)?;
                for r in &report.results {
                    if let Err(e) = r {
                        return Err(format!("queue merge failed: {e}").into());
                    }
                }
                current = report.head;
            }
            landed += chunk.len();
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
        queue_rates.push((batch, landed, landed as f64 / queue_time.as_secs_f64()));
    }

    let rss_queue = rss_kib();

    println!();
    match &fresh {
        Some(_) => println!("location: an ext4 made for this run"),
        None => println!("location: {}", parent.display()),
    }
    println!(
        "repository: {} files, {} commits of history (built in {:.1?})",
        DIRS * FILES_PER_DIR + 1,
        HISTORY_COMMITS + 1,
        build_time
    );
    println!("{:<52} {:>6} {:>12}", "measurement", "runs", "result");
    println!("{:-<52} {:->6} {:->12}", "", "", "");
    println!(
        "{:<52} {:>6} {:>9.3} ms",
        "(a) Integrator::integrate, median of round medians",
        rounds.len() * config.runs,
        ms(median(&mut a_all))
    );
    println!(
        "{:<52} {:>6} {:>9.3} ms",
        "(b) merge-tree+commit-tree+update-ref, same",
        rounds.len() * config.runs,
        ms(median(&mut b_all))
    );
    println!(
        "{:<52} {:>6} {:>10.1} x",
        "    speed-up (b)/(a) per round, min [target >= 10x]",
        rounds.len(),
        ratios.first().copied().unwrap_or_default()
    );
    println!(
        "{:<52} {:>6} {:>10.1} x",
        "    speed-up (b)/(a) per round, median",
        rounds.len(),
        ratios[ratios.len() / 2]
    );
    for (batch, landed, rate) in queue_rates {
        println!(
            "{:<52} {:>6} {:>6.0} br/s",
            format!("(c) merge queue, batches of {batch} [target >= 500 br/s]"),
            landed,
            rate
        );
    }
    println!(
        "process RSS: {rss_open} KiB after opening the integrator, {rss_rounds} KiB after (a)/(b), {rss_queue} KiB after (c)"
    );
    Ok(())
}

/// This process's resident set (`VmRSS`), 0 where `/proc` is missing.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
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
    for pass in 0..QUEUE_BATCHES.len() {
        let start = vec![("QUEUE".into(), format!("queue {pass}\n"))];
        commit(&mut s, &format!("queue{pass}"), Some(base), "queue start", &start)?;
        for i in 0..QUEUE_BRANCHES {
            let f = vec![(format!("src/m{:03}/task{i}.txt", i % DIRS), format!("pass {pass} task {i}\n"))];
            commit(&mut s, &format!("q{pass}/t{i}"), Some(base), &format!("task {i}"), &f)?;
        }
    }
    s.flush()?;
    drop(s);
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("git fast-import failed: {status}").into());
    }
    Ok(())
}

//! Chaos: a 100-task DAG of real git work (each task applies a patch that
//! only applies on top of its dependency's result) while the controller is
//! killed with -9 at random moments and sidecars too, each restarted, with
//! stale git locks left behind on purpose; and the same DAG on three
//! remote sidecar hosts (network namespaces, root) whose links a seeded
//! schedule cuts and heals; and on PostgreSQL with three controllers whose
//! leader is killed again and again, and once stopped past its lease and
//! woken. The result must equal an undisturbed run's tree, with every task
//! merged exactly once and no retry spent (and, on PostgreSQL, event ids
//! unique and without a gap).
//!
//! Seeded: set `SWARM_CHAOS_SEED` to replay a run; the seed is printed.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use swarm_tests::{
    Cluster, FAST_LEASES, PlanBuilder, TempRepo, create_swarm, merges_of, spawn_sidecar, task,
    wait_all_merged,
};

const TASKS: usize = 100;
const CHAINS: usize = 10;
const SIDECARS: usize = 4;
const CONTROLLER_KILLS: usize = 10;
const SIDECAR_KILLS: usize = 6;

/// splitmix64: reproducible from the seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The run's seed (`SWARM_CHAOS_SEED`, else the clock), printed for a replay.
fn seeded(run: &str) -> (u64, Rng) {
    let seed = std::env::var("SWARM_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("{run} seed {seed}; replay with SWARM_CHAOS_SEED={seed}");
    (seed, Rng(seed))
}

fn task_id(i: usize) -> String {
    format!("t{i:03}")
}

fn chain_file(i: usize) -> String {
    format!("chains/c{}.txt", i % CHAINS)
}

/// The repository: one file per chain, and per task a patch that adds its
/// line to its chain's file. A patch's context is the whole file as its
/// dependency left it, so it applies only in DAG order, and only once.
fn workload() -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut chains: Vec<Vec<String>> = (0..CHAINS).map(|c| vec![format!("chain {c}")]).collect();
    for (c, lines) in chains.iter().enumerate() {
        files.push((format!("chains/c{c}.txt"), format!("{}\n", lines.join("\n"))));
    }
    for i in 0..TASKS {
        let path = chain_file(i);
        let lines = &mut chains[i % CHAINS];
        let mut patch = format!(
            "diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,{n} +1,{m} @@\n",
            n = lines.len(),
            m = lines.len() + 1
        );
        for l in lines.iter() {
            let _ = writeln!(patch, " {l}");
        }
        let line = format!("{} was here", task_id(i));
        let _ = writeln!(patch, "+{line}");
        lines.push(line);
        files.push((format!("patches/{}.patch", task_id(i)), patch));
    }
    files
}

fn plan(name: &str) -> String {
    plan_taking(name, "0.1")
}

/// The plan with each task taking `secs` before its patch.
fn plan_taking(name: &str, secs: &str) -> String {
    let command = format!(
        r#"["sh", "-c", "sleep {secs} && git apply --whitespace=nowarn patches/$SWARM_TASK_ID.patch"]"#
    );
    let mut p = PlanBuilder::new(name).default("command", &command).default("retries", "0");
    for i in 0..TASKS {
        let mut t = task(&task_id(i)).files(&[&chain_file(i)]);
        if i >= CHAINS {
            t = t.deps(&[&task_id(i - CHAINS)]);
        }
        p = p.task(t);
    }
    p.build()
}

fn new_repo() -> TempRepo {
    let files = workload();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    TempRepo::with_files(&refs)
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    let rt = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| rt.block_on(f))
}

fn undisturbed_tree() -> BTreeMap<String, String> {
    let repo = new_repo();
    let cluster = Cluster::start(&repo, SIDECARS, FAST_LEASES);
    let url = cluster.url();
    block_on(async {
        create_swarm(&url, &plan("c")).await;
        wait_all_merged(&url, "c").await;
    });
    repo.tree("swarm/c/integration")
}

/// Leaves a lock file behind as a crash at the worst moment would.
fn plant(path: &std::path::Path) {
    if let Some(dir) = path.parent()
        && dir.is_dir()
    {
        let _ = std::fs::write(path, b"");
    }
}

async fn run_chaos(plant_locks: bool) {
    let (seed, mut rng) = seeded(&format!("chaos (plant_locks: {plant_locks})"));
    let expected = undisturbed_tree();

    let repo = new_repo();
    let mut cluster = Cluster::start(&repo, SIDECARS, FAST_LEASES);
    let url = cluster.url();
    create_swarm(&url, &plan("c")).await;
    let integration_lock = repo.path().join(".git/refs/heads/swarm/c/integration.lock");

    let (mut controller_kills, mut sidecar_kills) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(240);
    while controller_kills < CONTROLLER_KILLS || sidecar_kills < SIDECAR_KILLS {
        assert!(Instant::now() < deadline, "seed {seed}: chaos phase did not finish in time");
        tokio::time::sleep(Duration::from_millis(200 + rng.below(800))).await;
        // Kills go on to their full count even once every task has merged:
        // a restart over a finished swarm must not disturb it either.
        let controller_turn = sidecar_kills >= SIDECAR_KILLS
            || (controller_kills < CONTROLLER_KILLS
                && rng.below(CONTROLLER_KILLS as u64 + SIDECAR_KILLS as u64) < CONTROLLER_KILLS as u64);
        if controller_turn {
            cluster.controller.proc.kill9();
            if plant_locks {
                plant(&integration_lock);
            }
            cluster.controller.restart_after_kill9();
            controller_kills += 1;
        } else {
            let n = rng.below(SIDECARS as u64) as usize;
            let worker = format!("w{}", n + 1);
            cluster.sidecars[n].kill9();
            if plant_locks {
                plant(&repo.path().join(format!(".git/worktrees/{worker}/index.lock")));
            }
            cluster.sidecars[n] = spawn_sidecar(&url, repo.path(), &worker, &[]);
            sidecar_kills += 1;
        }
    }
    eprintln!("seed {seed}: {controller_kills} controller and {sidecar_kills} sidecar kills");
    assert!(controller_kills >= CONTROLLER_KILLS && sidecar_kills >= SIDECAR_KILLS);
    let done = wait_all_merged(&url, "c").await;
    assert_undisturbed(seed, &repo, &expected, |id| {
        (u64::from(done[id].retries_used), done[id].reason.clone())
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn chaos_kill9_of_controller_and_sidecars_gives_the_undisturbed_tree_with_every_task_merged_once() {
    run_chaos(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn chaos_with_stale_git_locks_left_behind_still_finishes() {
    run_chaos(true).await;
}

/// Where every chaos run must end: the undisturbed run's tree, every task
/// merged exactly once, no retry spent (`retries` gives a task's retries
/// used and what to say about it).
fn assert_undisturbed(
    seed: u64,
    repo: &TempRepo,
    expected: &BTreeMap<String, String>,
    retries: impl Fn(&str) -> (u64, String),
) {
    assert_eq!(
        &repo.tree("swarm/c/integration"),
        expected,
        "seed {seed}: the tree differs from an undisturbed run's"
    );
    for i in 0..TASKS {
        let id = task_id(i);
        assert_eq!(
            merges_of(repo, "swarm/c/integration", "c", &id),
            1,
            "seed {seed}: {id} merged exactly once"
        );
        let (used, about) = retries(&id);
        assert_eq!(used, 0, "seed {seed}: {id} used a retry: {about}");
    }
}

/// The partition schedule's cuts, each of one sidecar host's link.
const CUTS: usize = 8;
const PARTITION_LEASES: &[&str] =
    &["--heartbeat-interval-ms=200", "--lease-ttl-ms=1500", "--lost-grace-ms=100"];

/// Every task of `swarm` as `swarmctl get tasks -o json` gives it, by id.
fn tasks_in(ns: &str, url: &str, auth: &[String], swarm: &str) -> BTreeMap<String, serde_json::Value> {
    let out = swarm_tests::swarmctl_in(ns, url, auth, &["get", "tasks", "--swarm", swarm, "-o", "json"]);
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    list.into_iter().map(|t| (t["task"].as_str().unwrap_or_default().to_string(), t)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn chaos_partitions_of_remote_sidecar_hosts_give_the_undisturbed_tree_with_no_retry_spent() {
    let test = "chaos_partitions_of_remote_sidecar_hosts_give_the_undisturbed_tree_with_no_retry_spent";
    if let Some(why) = swarm_tests::netns_unavailable() {
        return swarm_tests::skip_for(test, swarm_tests::Needs::Root, why);
    }
    let hosts = ["s1", "s2", "s3"];
    let net = match swarm_tests::Net::create(&["ctl", "s1", "s2", "s3"]) {
        Ok(n) => n,
        Err(e) => {
            let why = format!("cannot set up network namespaces: {e}");
            return swarm_tests::skip_for(test, swarm_tests::Needs::Root, &why);
        }
    };
    let (seed, mut rng) = seeded("partition");
    let expected = undisturbed_tree();
    let one_way = swarm_tests::nft_available();
    if !one_way {
        eprintln!("{test}: `nft` is missing, so every cut is both ways (no half-open links)");
    }

    let dir = tempfile::tempdir().unwrap();
    let pki = swarm_tests::Pki::init(&dir.path().join("pki"));
    let repo = new_repo();
    let (_controller, url) =
        swarm_tests::spawn_controller_in(&net.ns("ctl"), repo.path(), &pki, PARTITION_LEASES, dir.path());
    let _sidecars: Vec<swarm_tests::Killed> = hosts
        .iter()
        .map(|h| swarm_tests::spawn_remote_sidecar_in(&net.ns(h), h, repo.path(), &url, &pki, dir.path()))
        .collect();
    let (ns, auth) = (net.ns("ctl"), pki.client_args("admin"));
    let plan_path = dir.path().join("plan.toml");
    // Slower tasks than the kill chaos's: the cuts must come while work is left.
    std::fs::write(&plan_path, plan_taking("c", "0.5")).unwrap();
    let out = swarm_tests::swarmctl_in(&ns, &url, &auth, &["create", plan_path.to_str().unwrap()]);
    assert!(out.status.success(), "create: {}", swarm_tests::stderr(&out));

    // Seeded cuts of one host at a time, shorter and longer than the lease,
    // while the DAG runs; each heals before the next.
    let mut during_work = 0;
    for n in 0..CUTS {
        let merged = tasks_in(&ns, &url, &auth, "c").values().filter(|t| t["state"] == "MERGED").count();
        during_work += usize::from(merged < TASKS);
        let host = hosts[rng.below(hosts.len() as u64) as usize];
        let down = Duration::from_millis(if rng.below(2) == 0 { 700 } else { 2_500 + rng.below(1_500) });
        // Both ways, or one way only: a half-open link on which one side
        // still hears the other.
        let way = match rng.below(3) {
            1 if one_way => Some(swarm_tests::Way::ToNode),
            2 if one_way => Some(swarm_tests::Way::FromNode),
            _ => None,
        };
        eprintln!(
            "seed {seed}: cut {n}: {host} for {} ms, {}",
            down.as_millis(),
            way.map_or("both ways".into(), |w| format!("{w:?} only"))
        );
        match way {
            None => net.cut(host),
            Some(way) => net.cut_one_way(host, way),
        }
        tokio::time::sleep(down).await;
        net.heal(host);
        tokio::time::sleep(Duration::from_millis(300 + rng.below(700))).await;
    }
    // Else the schedule met a finished swarm and proves little.
    assert!(during_work >= CUTS / 2, "seed {seed}: only {during_work} cuts came while tasks were left");
    let deadline = Instant::now() + Duration::from_secs(240);
    let done = loop {
        let tasks = tasks_in(&ns, &url, &auth, "c");
        let merged = tasks.values().filter(|t| t["state"] == "MERGED").count();
        if merged == TASKS {
            break tasks;
        }
        for t in tasks.values() {
            assert_ne!(t["state"], "FAILED", "seed {seed}: {t:#}");
        }
        assert!(Instant::now() < deadline, "seed {seed}: {merged}/{TASKS} merged in time");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_undisturbed(seed, &repo, &expected, |id| {
        (done[id]["retries_used"].as_u64().unwrap_or(u64::MAX), done[id].to_string())
    });
}

/// Leader kills of the PostgreSQL chaos run, and the leader's lease.
const FAILOVERS: usize = 5;
const LEADER_LEASE_MS: u64 = 1500;

async fn serving(url: &str) -> bool {
    let Some(mut op) = swarm_tests::try_operator(url).await else { return false };
    op.list_swarms(swarm_proto::v1::ListSwarmsRequest::default()).await.is_ok()
}

/// How many tasks of swarm `c` the controller at `url` has MERGED (0 when
/// it does not answer).
async fn merged_count(url: &str) -> usize {
    let Some(mut op) = swarm_tests::try_operator(url).await else { return 0 };
    let req = swarm_proto::v1::GetSwarmRequest { swarm_id: "c".into() };
    let Ok(s) = op.get_swarm(req).await else { return 0 };
    s.into_inner().tasks_by_state.get("MERGED").copied().unwrap_or(0) as usize
}

/// The index of the controller that serves as leader now.
async fn leader_of(controllers: &[swarm_tests::ControllerProc]) -> usize {
    swarm_tests::poll("a leader to serve", swarm_tests::WAIT, || async {
        for (i, c) in controllers.iter().enumerate() {
            if serving(&c.url()).await {
                return Some(i);
            }
        }
        None
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn chaos_leader_failovers_on_postgresql_give_the_undisturbed_tree_and_gap_free_events() {
    let test = "chaos_leader_failovers_on_postgresql_give_the_undisturbed_tree_and_gap_free_events";
    let Some(db) = swarm_tests::postgres::database(test) else { return };
    let (seed, mut rng) = seeded("failover");
    let expected = undisturbed_tree();

    let repo = new_repo();
    let store = format!("--store={}", db.url);
    let lease = format!("--leader-lease-ms={LEADER_LEASE_MS}");
    let args: Vec<&str> =
        [store.as_str(), lease.as_str()].into_iter().chain(FAST_LEASES.iter().copied()).collect();
    let mut controllers = vec![swarm_tests::spawn_controller(repo.path(), &args)];
    leader_of(&controllers).await;
    controllers.push(swarm_tests::spawn_controller(repo.path(), &args));
    controllers.push(swarm_tests::spawn_controller(repo.path(), &args));
    let urls: Vec<String> = controllers.iter().map(|c| c.url()).collect();
    let _sidecars: Vec<_> =
        (1..=SIDECARS).map(|n| spawn_sidecar(&urls.join(","), repo.path(), &format!("w{n}"), &[])).collect();
    // Tasks long enough that every failover comes while work is left, on a
    // fast machine too.
    create_swarm(&controllers[0].url(), &plan_taking("c", "0.5")).await;

    // The leader killed again and again (and brought back as a standby);
    // once, in the middle, stopped past its lease and then let go on: the
    // deposed leader wakes with work in hand that a successor now owns.
    let mut during_work = 0;
    for n in 0..FAILOVERS {
        tokio::time::sleep(Duration::from_millis(1_000 + rng.below(2_000))).await;
        let leader = leader_of(&controllers).await;
        during_work += usize::from(merged_count(&controllers[leader].url()).await < TASKS);
        let pid = controllers[leader].proc.pid().to_string();
        if n == FAILOVERS / 2 {
            eprintln!("seed {seed}: failover {n}: SIGSTOP controller {leader} past its lease");
            assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
            tokio::time::sleep(Duration::from_millis(LEADER_LEASE_MS * 3)).await;
            assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
        } else {
            eprintln!("seed {seed}: failover {n}: kill -9 controller {leader}");
            controllers[leader].proc.kill9();
            tokio::time::sleep(Duration::from_millis(rng.below(1_000))).await;
            controllers[leader].restart_after_kill9();
        }
    }
    assert!(
        during_work > FAILOVERS / 2,
        "seed {seed}: only {during_work} failovers came while tasks were left"
    );
    let leader = leader_of(&controllers).await;
    let done = wait_all_merged(&controllers[leader].url(), "c").await;
    assert_undisturbed(seed, &repo, &expected, |id| {
        (u64::from(done[id].retries_used), done[id].reason.clone())
    });
    let ids = db
        .sql("SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || min(id) || ' ' || max(id) FROM events");
    let n: Vec<i64> = ids.split(' ').map(|v| v.parse().unwrap()).collect();
    assert_eq!(n[0], n[1], "seed {seed}: event ids unique ({ids})");
    assert_eq!((n[2], n[3]), (1, n[0]), "seed {seed}: event ids 1..=count, no gap ({ids})");
    let epoch: i64 = db.sql("SELECT epoch FROM swarm_leader").parse().unwrap();
    assert!(epoch > FAILOVERS as i64, "seed {seed}: every failover made a new leader (epoch {epoch})");
}

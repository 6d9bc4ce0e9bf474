//! The processes below a process, found through `/proc`, and their end.
//!
//! A worker's descendants can leave its process group (`setsid`,
//! `setpgid`), and a signal to the group then misses them. The supervisor
//! is a child subreaper (`PR_SET_CHILD_SUBREAPER`): whatever the worker
//! orphans (a double fork, a daemon) is reparented to the supervisor
//! instead of to init, so every process the worker started stays below it.
//! [`kill_descendants`] walks the parent links of `/proc/<pid>/stat` down
//! from a root and SIGKILLs every live process below it, walking again
//! until a walk finds none it has not killed: a process forked between a
//! walk and the kill of its parent is found by the next walk (a parent with
//! SIGKILL pending forks no more), under the subreaper once its parent is
//! gone. A process is known by its pid and start time, so a reused pid is
//! a new process.
//!
//! Where the attempt has a cgroup, `cgroup.kill` ends it in one step
//! (`sandbox/cgroup.rs`); this walk is what works everywhere else, and for
//! a command worker also where a cgroup exists.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long [`kill_descendants`] keeps walking a tree that keeps growing.
const MAX_WALKING: Duration = Duration::from_secs(10);

/// A process as one walk saw it: its pid and start time (in clock ticks
/// since boot), so that a reused pid is not taken for the process it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Seen {
    pid: u32,
    start: u64,
}

/// The live (not zombie) processes below `root`, from one walk of `/proc`.
pub fn descendants(root: u32) -> Vec<u32> {
    walk(root).into_iter().map(|s| s.pid).collect()
}

fn walk(root: u32) -> Vec<Seen> {
    let mut children: HashMap<u32, Vec<Seen>> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some(s) = parse_stat(&stat) else { continue };
        // A zombie has no children left (they were reparented when it died).
        if !matches!(s.state, "Z" | "X") {
            children.entry(s.ppid).or_default().push(Seen { pid, start: s.start });
        }
    }
    let mut out = Vec::new();
    let mut visited = HashSet::from([root]);
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        for &child in children.get(&p).into_iter().flatten() {
            if visited.insert(child.pid) {
                out.push(child);
                stack.push(child.pid);
            }
        }
    }
    out
}

/// The fields of a `/proc/<pid>/stat` line that the walk needs.
struct Stat<'a> {
    state: &'a str,
    ppid: u32,
    start: u64,
}

/// `pid (comm) state ppid ...`: the command may hold spaces and
/// parentheses, so the fields are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<Stat<'_>> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    // starttime is field 22 of the line; ppid was field 4.
    let start = fields.nth(17)?.parse().ok()?;
    Some(Stat { state, ppid, start })
}

/// SIGKILLs every process below `root` (not `root` itself), walking again
/// until a walk finds no process it has not killed, for at most 10 s.
/// Returns how many processes it killed.
pub fn kill_descendants(root: u32) -> usize {
    let started = Instant::now();
    let mut killed: HashSet<Seen> = HashSet::new();
    loop {
        let fresh: Vec<Seen> = walk(root).into_iter().filter(|s| !killed.contains(s)).collect();
        if fresh.is_empty() {
            break;
        }
        for s in fresh {
            let _ = kill(Pid::from_raw(s.pid as i32), Signal::SIGKILL);
            killed.insert(s);
        }
        if started.elapsed() > MAX_WALKING {
            tracing::warn!(
                root,
                killed = killed.len(),
                "processes kept appearing below the worker; stopped walking"
            );
            break;
        }
    }
    killed.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_past_a_command_with_parentheses() {
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100";
        let s = parse_stat(line).expect("parsed");
        assert_eq!((s.state, s.ppid, s.start), ("S", 17, 987654));
        assert!(parse_stat("1 (x) S").is_none());
    }

    #[test]
    fn the_walk_finds_a_grandchild_and_kill_descendants_ends_it() {
        // sh starts a grandchild that leaves the session, then waits.
        let mut child =
            std::process::Command::new("sh").args(["-c", "setsid sleep 300 & wait"]).spawn().expect("sh");
        let deadline = Instant::now() + Duration::from_secs(10);
        let below_sh = loop {
            let below = descendants(child.id());
            if !below.is_empty() {
                break below;
            }
            assert!(Instant::now() < deadline, "sh's sleep was never seen");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(below_sh.len(), 1, "the sleep, below sh");
        assert!(kill_descendants(child.id()) >= 1);
        // Its sleep gone, sh's wait returns.
        let status = child.wait().expect("wait");
        assert!(status.success(), "{status:?}");
        let gone = |pid: u32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| parse_stat(&s).map(|s| s.state == "Z"))
                .unwrap_or(true)
        };
        assert!(below_sh.iter().all(|p| gone(*p)), "the sleep was killed");
    }
}

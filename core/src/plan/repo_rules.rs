//! Rules a plan must meet against the repository it will run on, beyond
//! what [`Plan::parse`] can know from the text alone: its owned globs name
//! paths that exist (or new files under a directory that does), tasks that
//! may run at once own disjoint files, shared files (lockfiles, changelogs,
//! module registries) have one owner that comes after the tasks touching
//! them, tasks verify their work when the repository has tests, and no task
//! owns most of the tree. Pure: the caller gathers [`RepoFacts`].
//!
//! The scheduler already serializes tasks whose globs overlap, so an
//! overlap is not fatal at run time; it is an error here because the plan
//! then runs slower than it reads and its tasks' merges conflict.

use std::collections::HashSet;
use std::fmt;

use crate::globs::OwnedGlobs;
use crate::plan::{Plan, PlanError, TaskSpec};

/// What is known of the repository the plan will run on.
#[derive(Debug, Clone, Default)]
pub struct RepoFacts {
    /// Repo-relative paths at HEAD, `/`-separated.
    pub files: Vec<String>,
    /// The repository has a test command (a Cargo.toml, a package.json
    /// with a test script, ...): tasks should verify their work with it.
    pub has_test_command: bool,
}

#[derive(Debug, Clone)]
pub struct RuleConfig {
    /// A task may own at most this share of the tree's files.
    pub max_share: f64,
    /// A planner wrote the plan: every task needs an estimate.
    pub planned: bool,
}

impl Default for RuleConfig {
    fn default() -> Self {
        RuleConfig { max_share: 0.5, planned: false }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// The field, e.g. `tasks[2].files[0]`.
    pub path: String,
    pub rule: String,
    pub severity: Severity,
}

impl Finding {
    pub fn error(path: impl Into<String>, rule: impl Into<String>) -> Finding {
        Finding { path: path.into(), rule: rule.into(), severity: Severity::Error }
    }

    pub fn warning(path: impl Into<String>, rule: impl Into<String>) -> Finding {
        Finding { path: path.into(), rule: rule.into(), severity: Severity::Warning }
    }
}

impl From<&PlanError> for Finding {
    fn from(e: &PlanError) -> Finding {
        Finding::error(e.path.clone(), e.rule.clone())
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.severity, self.rule)
        } else {
            write!(f, "{}: {}: {}", self.severity, self.path, self.rule)
        }
    }
}

/// Above this many tasks the pairwise rules (overlap, shared files) are
/// skipped: they compare every pair, and the check must stay bounded.
pub const MAX_PAIRWISE_TASKS: usize = 2_000;

/// Below this many files a task's share of the tree says nothing.
const MIN_FILES_FOR_SHARE: usize = 10;

/// Lockfiles and changelogs: every task that changes dependencies or
/// notes its change touches them.
const SHARED_FILES: [&str; 6] =
    ["Cargo.lock", "package-lock.json", "yarn.lock", "poetry.lock", "go.sum", "CHANGELOG.md"];
/// Module registries: a task adding a file beside one registers it there.
const REGISTRIES: [&str; 4] = ["mod.rs", "lib.rs", "index.ts", "__init__.py"];

const WILDCARDS: [char; 4] = ['*', '?', '[', '{'];

/// Checks `plan` against what is known of its repository; an empty result
/// means the plan passes every rule. Only the root plan's tasks are
/// checked: a sub-plan's tasks own parts of their parent's files.
pub fn check_against_repo(plan: &Plan, repo: &RepoFacts, cfg: &RuleConfig) -> Vec<Finding> {
    let tasks = &plan.tasks;
    let owned: Vec<OwnedGlobs> = tasks
        .iter()
        .map(|t| OwnedGlobs::new(&t.files).unwrap_or_else(|_| OwnedGlobs::everything()))
        .collect();
    // The repository's files each task owns, as indexes into `repo.files`.
    let matched: Vec<Vec<usize>> = owned
        .iter()
        .map(|o| repo.files.iter().enumerate().filter(|(_, f)| o.matches(f)).map(|(i, _)| i).collect())
        .collect();
    let mut out = Vec::new();
    globs_exist(tasks, repo, &mut out);
    if tasks.len() > MAX_PAIRWISE_TASKS {
        out.push(Finding::warning(
            "tasks",
            format!(
                "{} tasks are more than the {MAX_PAIRWISE_TASKS} compared pairwise; \
                 overlapping and shared files were not checked",
                tasks.len()
            ),
        ));
    } else {
        let order = Order::new(plan);
        overlaps(tasks, repo, &owned, &matched, &order, &mut out);
        shared_files(tasks, repo, &owned, &order, &mut out);
    }
    for (i, task) in tasks.iter().enumerate() {
        if repo.has_test_command && task.subplan.is_none() && task.verify.is_empty() {
            out.push(Finding::error(
                format!("tasks[{i}].verify"),
                "the repository has a test command but this task verifies nothing; give it \
                 verify tiers (verify = [{ name = \"test\", command = \"...\" }], here or in [defaults])",
            ));
        }
        if cfg.planned && task.estimate_ms.is_none() {
            out.push(Finding::error(
                format!("tasks[{i}].estimate"),
                "a planned task needs an estimate (e.g. estimate = \"20m\")",
            ));
        }
    }
    share(tasks, repo, &matched, cfg, &mut out);
    out
}

/// `docs/` is a directory: everything below it.
fn pattern(glob: &str) -> String {
    if glob.ends_with('/') { format!("{glob}**") } else { glob.to_string() }
}

/// The directory a glob's files go in, as far as it is written out
/// (`src/new` for `src/new/*.rs`, `` for `*.rs`).
fn literal_dir(glob: &str) -> &str {
    let literal = match glob.find(WILDCARDS) {
        Some(at) => &glob[..at],
        None => glob,
    };
    literal.rfind('/').map_or("", |at| &literal[..at])
}

fn parent(path: &str) -> &str {
    path.rfind('/').map_or("", |at| &path[..at])
}

fn file_name(path: &str) -> &str {
    path.rfind('/').map_or(path, |at| &path[at + 1..])
}

/// Every owned glob matches an existing path, or names new files under a
/// directory whose first component exists. Skipped for an empty tree,
/// where every file is new.
fn globs_exist(tasks: &[std::sync::Arc<TaskSpec>], repo: &RepoFacts, out: &mut Vec<Finding>) {
    if repo.files.is_empty() {
        return;
    }
    let top_dirs: HashSet<&str> =
        repo.files.iter().filter_map(|f| f.split_once('/').map(|(dir, _)| dir)).collect();
    for (i, task) in tasks.iter().enumerate() {
        for (j, glob) in task.files.iter().enumerate() {
            let one =
                OwnedGlobs::new(std::slice::from_ref(glob)).unwrap_or_else(|_| OwnedGlobs::everything());
            if repo.files.iter().any(|f| one.matches(f)) {
                continue;
            }
            let pattern = pattern(glob);
            let first = literal_dir(&pattern).split('/').next().unwrap_or("");
            if first.is_empty() || top_dirs.contains(first) {
                continue;
            }
            out.push(Finding::error(
                format!("tasks[{i}].files[{j}]"),
                format!(
                    "owned glob {glob:?} matches no file, and its directory {first:?} does not exist \
                     in the repository; new files must go under an existing directory"
                ),
            ));
        }
    }
}

/// Which tasks come after which: `after[i]` holds every task `i` depends
/// on, transitively, as a bitset.
struct Order {
    after: Vec<Vec<u64>>,
}

impl Order {
    fn new(plan: &Plan) -> Order {
        let n = plan.tasks.len();
        let words = n.div_ceil(64);
        let index: std::collections::HashMap<&str, usize> =
            plan.tasks.iter().enumerate().map(|(i, t)| (t.id.as_str(), i)).collect();
        let deps: Vec<Vec<usize>> = plan
            .tasks
            .iter()
            .map(|t| t.deps.iter().filter_map(|d| index.get(d.as_str()).copied()).collect())
            .collect();
        // The parser refused cycles, so a depth-first post-order exists;
        // iterative, since a chain of thousands of tasks is a valid plan.
        let mut after = vec![vec![0u64; words]; n];
        let mut done = vec![false; n];
        for root in 0..n {
            let mut stack = vec![(root, 0usize)];
            while let Some(&mut (node, ref mut next)) = stack.last_mut() {
                if done[node] {
                    stack.pop();
                    continue;
                }
                if let Some(&d) = deps[node].get(*next) {
                    *next += 1;
                    if !done[d] {
                        stack.push((d, 0));
                    }
                    continue;
                }
                let mut set = vec![0u64; words];
                for &d in &deps[node] {
                    set[d / 64] |= 1 << (d % 64);
                    for (w, bits) in set.iter_mut().zip(&after[d]) {
                        *w |= bits;
                    }
                }
                after[node] = set;
                done[node] = true;
                stack.pop();
            }
        }
        Order { after }
    }

    /// Whether `a` depends on `b`, transitively.
    fn depends(&self, a: usize, b: usize) -> bool {
        self.after[a].get(b / 64).is_some_and(|w| w & (1 << (b % 64)) != 0)
    }

    /// Neither depends on the other: they may run at once.
    fn concurrent(&self, a: usize, b: usize) -> bool {
        a != b && !self.depends(a, b) && !self.depends(b, a)
    }
}

fn is_shared(path: &str) -> bool {
    let name = file_name(path);
    SHARED_FILES.contains(&name) || REGISTRIES.contains(&name)
}

/// The first of a task's globs that owns `path`, for the finding's field.
fn glob_owning(task: &TaskSpec, path: &str) -> usize {
    task.files
        .iter()
        .position(|g| OwnedGlobs::new(std::slice::from_ref(g)).is_ok_and(|o| o.matches(path)))
        .unwrap_or(0)
}

/// Concurrent tasks own disjoint files. Common files that are all shared
/// files are left to [`shared_files`], which says what to do with them.
fn overlaps(
    tasks: &[std::sync::Arc<TaskSpec>],
    repo: &RepoFacts,
    owned: &[OwnedGlobs],
    matched: &[Vec<usize>],
    order: &Order,
    out: &mut Vec<Finding>,
) {
    for a in 0..tasks.len() {
        for b in a + 1..tasks.len() {
            if !order.concurrent(a, b) || !owned[a].overlaps(&owned[b]) {
                continue;
            }
            let theirs: HashSet<usize> = matched[b].iter().copied().collect();
            let common: Vec<&str> =
                matched[a].iter().filter(|f| theirs.contains(f)).map(|&f| repo.files[f].as_str()).collect();
            let new_literal = owned[a]
                .literals()
                .iter()
                .find(|l| owned[b].matches(l))
                .or_else(|| owned[b].literals().iter().find(|l| owned[a].matches(l)))
                .map(String::as_str);
            let example =
                common.iter().copied().find(|f| !is_shared(f)).or(new_literal.filter(|l| !is_shared(l)));
            let (ta, tb) = (&tasks[a], &tasks[b]);
            if let Some(file) = example {
                out.push(Finding::error(
                    format!("tasks[{a}].files[{}]", glob_owning(ta, file)),
                    format!(
                        "tasks {:?} and {:?} may run at once (neither depends on the other) but both own \
                         {file:?} (tasks[{b}].files[{}]); make one depend on the other, or split the files",
                        ta.id.as_str(),
                        tb.id.as_str(),
                        glob_owning(tb, file),
                    ),
                ));
                continue;
            }
            if !common.is_empty() || new_literal.is_some() {
                continue; // only shared files in common
            }
            // No file either owns today: their globs may still both match
            // a new one (`src/**` and `src/api/*.rs`), or only seem to
            // (`src/*.rs` and `src/*.md`); either way the scheduler will not
            // run them at once.
            let covered = ta.files.iter().enumerate().find_map(|(j, g)| {
                tb.files
                    .iter()
                    .enumerate()
                    .find(|(_, h)| owned[a].covers(h) || owned[b].covers(g))
                    .map(|(k, h)| (j, k, h))
            });
            let (j, k, what, severity) = match covered {
                Some((j, k, h)) => (j, k, format!("new files matching {h:?}"), Severity::Error),
                None => {
                    let (j, k) = first_prefix_overlap(ta, tb).unwrap_or((0, 0));
                    (
                        j,
                        k,
                        format!("new files under {:?}", literal_dir(&pattern(&tb.files[k]))),
                        Severity::Warning,
                    )
                }
            };
            out.push(Finding {
                path: format!("tasks[{a}].files[{j}]"),
                rule: format!(
                    "tasks {:?} and {:?} may run at once (neither depends on the other) but both may own \
                     {what} (tasks[{b}].files[{k}]); the scheduler will run them one after the other",
                    ta.id.as_str(),
                    tb.id.as_str(),
                ),
                severity,
            });
        }
    }
}

/// The first pair of globs whose literal prefixes nest.
fn first_prefix_overlap(a: &TaskSpec, b: &TaskSpec) -> Option<(usize, usize)> {
    let prefix = |g: &str| {
        let p = pattern(g);
        p.find(WILDCARDS).map_or(p.clone(), |at| p[..at].to_string())
    };
    a.files.iter().enumerate().find_map(|(j, g)| {
        let pa = prefix(g);
        b.files
            .iter()
            .position(|h| {
                let pb = prefix(h);
                pa.starts_with(&pb) || pb.starts_with(&pa)
            })
            .map(|k| (j, k))
    })
}

/// The glob of `task` through which it adds files in `dir`: a plain path
/// not in the tree, or a wildcard glob written out down to `dir`.
fn adds_in(task: &TaskSpec, dir: &str, tree: &HashSet<&str>) -> Option<usize> {
    task.files.iter().position(|g| {
        let p = pattern(g);
        if p.contains(WILDCARDS) {
            literal_dir(&p) == dir
        } else {
            !tree.contains(p.as_str()) && parent(&p) == dir
        }
    })
}

/// Shared files that concurrent tasks will both change: a lockfile,
/// changelog or registry both own, or a registry in a directory where
/// one adds files. Accepted when a later task, depending on both, owns it.
fn shared_files(
    tasks: &[std::sync::Arc<TaskSpec>],
    repo: &RepoFacts,
    owned: &[OwnedGlobs],
    order: &Order,
    out: &mut Vec<Finding>,
) {
    let tree: HashSet<&str> = repo.files.iter().map(String::as_str).collect();
    let mut candidates: Vec<&str> = repo.files.iter().map(String::as_str).filter(|f| is_shared(f)).collect();
    for o in owned {
        for l in o.literals() {
            if is_shared(l) && !tree.contains(l.as_str()) && !candidates.contains(&l.as_str()) {
                candidates.push(l);
            }
        }
    }
    for file in candidates {
        let registry = REGISTRIES.contains(&file_name(file));
        // (task, its field, whether it owns the file or adds beside it)
        let mut involved: Vec<(usize, usize, bool)> = Vec::new();
        for (t, task) in tasks.iter().enumerate() {
            if owned[t].matches(file) {
                involved.push((t, glob_owning(task, file), true));
            } else if registry && let Some(j) = adds_in(task, parent(file), &tree) {
                involved.push((t, j, false));
            }
        }
        let pair = involved.iter().enumerate().find_map(|(x, &(a, ja, owns_a))| {
            involved[x + 1..].iter().find_map(|&(b, _, owns_b)| {
                let later = (0..tasks.len())
                    .any(|c| owned[c].matches(file) && order.depends(c, a) && order.depends(c, b));
                (order.concurrent(a, b) && !later).then_some((a, ja, owns_a, b, owns_b))
            })
        });
        let Some((a, ja, owns_a, b, owns_b)) = pair else { continue };
        let how = |owns: bool| if owns { "owns it" } else { "adds files beside it" };
        let kind = if registry { "a module registry" } else { "a lockfile or changelog" };
        out.push(Finding::warning(
            format!("tasks[{a}].files[{ja}]"),
            format!(
                "{file:?} is {kind} that tasks {:?} ({}) and {:?} ({}) will both change while they may run \
                 at once, and their merges will conflict over it; give it to a later task that depends \
                 on both",
                tasks[a].id.as_str(),
                how(owns_a),
                tasks[b].id.as_str(),
                how(owns_b),
            ),
        ));
    }
}

/// No task owns more than `cfg.max_share` of the tree.
fn share(
    tasks: &[std::sync::Arc<TaskSpec>],
    repo: &RepoFacts,
    matched: &[Vec<usize>],
    cfg: &RuleConfig,
    out: &mut Vec<Finding>,
) {
    let total = repo.files.len();
    if total < MIN_FILES_FOR_SHARE {
        return;
    }
    for (i, files) in matched.iter().enumerate() {
        let share = files.len() as f64 / total as f64;
        if share > cfg.max_share {
            out.push(Finding::error(
                format!("tasks[{i}].files"),
                format!(
                    "task {:?} owns {} of the repository's {total} files ({:.0}%), more than the {:.0}% \
                     one task may own; split it into smaller tasks",
                    tasks[i].id.as_str(),
                    files.len(),
                    share * 100.0,
                    cfg.max_share * 100.0,
                ),
            ));
        }
    }
}

#[cfg(test)]
#[path = "repo_rules_tests.rs"]
mod tests;

//! The bare repositories behind the server, through the git CLI: created
//! with receive-pack on, fast-forwards only and a `pre-receive` hook that
//! refuses protected branches as GitHub does (GH006); refs read; commits
//! written without a work tree; pull requests merged (merge, squash or
//! rebase) with `git merge-tree --write-tree` and `commit-tree`.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// The identity of the merges the server makes, as GitHub's web-flow.
const COMMITTER: (&str, &str) = ("GitHub", "noreply@github.com");

/// What a git command left: exit code (-1 when killed), stdout, stderr.
pub(super) struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn ok(&self) -> bool {
        self.code == 0
    }
}

/// The environment every git the server runs gets: only the repository's
/// own config applies, whatever the machine's.
pub(super) fn isolate(cmd: &mut Command) -> &mut Command {
    cmd.env("GIT_CONFIG_NOSYSTEM", "1").env("GIT_CONFIG_GLOBAL", "/dev/null").env("GIT_TERMINAL_PROMPT", "0")
}

pub(super) fn run(dir: &Path, args: &[&str], env: &[(&str, &str)], stdin: Option<&[u8]>) -> Out {
    let mut cmd = Command::new("git");
    isolate(&mut cmd).arg("-C").arg(dir).args(args).envs(env.iter().copied());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Out { code: -1, stdout: String::new(), stderr: format!("running git: {e}") },
    };
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let _ = pipe.write_all(input);
    }
    match child.wait_with_output() {
        Ok(o) => Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        },
        Err(e) => Out { code: -1, stdout: String::new(), stderr: format!("waiting for git: {e}") },
    }
}

/// Runs git and returns its trimmed stdout, or what it said on failure.
fn git(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let out = run(dir, args, env, None);
    if out.ok() {
        Ok(out.stdout.trim().to_string())
    } else {
        Err(format!("git {}: {}", args.join(" "), out.stderr.trim()))
    }
}

/// A bare repository at `path`, its HEAD on `default_branch`, set up as
/// GitHub's are: pushes over smart HTTP, no non-fast-forward updates, and
/// a pre-receive hook refusing the refs listed in `protected-refs`.
pub(super) fn init_bare(path: &Path, default_branch: &str) -> Result<(), String> {
    std::fs::create_dir_all(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    let head = format!("--initial-branch={default_branch}");
    git(path, &["init", "--quiet", "--bare", &head], &[])?;
    for (k, v) in [
        ("http.receivepack", "true"),
        ("receive.denyNonFastForwards", "true"),
        ("uploadpack.allowFilter", "true"),
        ("core.logAllRefUpdates", "false"),
    ] {
        git(path, &["config", k, v], &[])?;
    }
    write_protected(path, &[])?;
    let list = path.join("protected-refs");
    let hook = format!(
        "#!/bin/sh\n\
         # Protected branches, as the scripted GitHub's protect_branch listed them.\n\
         status=0\n\
         while read old new ref; do\n\
         \x20 if grep -qxF \"$ref\" '{}'; then\n\
         \x20   echo \"error: GH006: Protected branch update failed for $ref.\" >&2\n\
         \x20   echo \"error: Changes must be made through a pull request.\" >&2\n\
         \x20   status=1\n\
         \x20 fi\n\
         done\n\
         exit $status\n",
        list.display()
    );
    let hook_path = path.join("hooks").join("pre-receive");
    std::fs::write(&hook_path, hook).map_err(|e| format!("writing the pre-receive hook: {e}"))?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&hook_path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("making the pre-receive hook executable: {e}"))
}

/// Lists `branches` as protected for the pre-receive hook.
pub(super) fn write_protected(path: &Path, branches: &[&str]) -> Result<(), String> {
    let lines: String = branches.iter().map(|b| format!("refs/heads/{b}\n")).collect();
    std::fs::write(path.join("protected-refs"), lines).map_err(|e| format!("writing protected-refs: {e}"))
}

/// Every branch and the commit it points at.
pub(super) fn branches(path: &Path) -> BTreeMap<String, String> {
    let out =
        run(path, &["for-each-ref", "--format=%(objectname) %(refname:lstrip=2)", "refs/heads"], &[], None);
    out.stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(sha, name)| (name.to_string(), sha.to_string()))
        .collect()
}

/// The commit `rev` names, when it names one.
pub(super) fn resolve(path: &Path, rev: &str) -> Option<String> {
    if rev.starts_with('-') || rev.is_empty() {
        return None;
    }
    let spec = format!("{rev}^{{commit}}");
    git(path, &["rev-parse", "--verify", "--quiet", &spec], &[]).ok()
}

pub(super) fn set_ref(path: &Path, name: &str, sha: &str) -> Result<(), String> {
    git(path, &["update-ref", name, sha], &[]).map(|_| ())
}

/// How many commits `head` has that `base` lacks.
pub(super) fn ahead(path: &Path, base: &str, head: &str) -> usize {
    let range = format!("{base}..{head}");
    git(path, &["rev-list", "--count", &range], &[]).ok().and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Whether `head` merges into `base` without conflicts.
pub(super) fn mergeable(path: &Path, base: &str, head: &str) -> bool {
    run(path, &["merge-tree", "--write-tree", "--no-messages", base, head], &[], None).ok()
}

/// A commit of `files` (path, content) over `parent` (none: a root
/// commit), written without a work tree.
pub(super) fn commit_files(
    path: &Path,
    parent: Option<&str>,
    files: &[(&str, &str)],
    message: &str,
    author: (&str, &str),
) -> Result<String, String> {
    let index = tempfile::NamedTempFile::new().map_err(|e| format!("temp index: {e}"))?;
    let index_path = index.path().to_string_lossy().into_owned();
    // git refuses an index file that exists but is empty.
    let _ = std::fs::remove_file(&index_path);
    let env = [("GIT_INDEX_FILE", index_path.as_str())];
    if let Some(p) = parent {
        git(path, &["read-tree", p], &env)?;
    }
    for (file, content) in files {
        let out = run(path, &["hash-object", "-w", "--stdin"], &[], Some(content.as_bytes()));
        if !out.ok() {
            return Err(format!("hash-object: {}", out.stderr.trim()));
        }
        let info = format!("100644,{},{file}", out.stdout.trim());
        git(path, &["update-index", "--add", "--cacheinfo", &info], &env)?;
    }
    let tree = git(path, &["write-tree"], &env)?;
    let _ = std::fs::remove_file(&index_path);
    commit_tree(path, &tree, &parent.into_iter().collect::<Vec<_>>(), message, author, None)
}

fn commit_tree(
    path: &Path,
    tree: &str,
    parents: &[&str],
    message: &str,
    author: (&str, &str),
    author_date: Option<&str>,
) -> Result<String, String> {
    let mut args = vec!["commit-tree", tree];
    for p in parents {
        args.extend(["-p", p]);
    }
    let mut env = vec![
        ("GIT_AUTHOR_NAME", author.0),
        ("GIT_AUTHOR_EMAIL", author.1),
        ("GIT_COMMITTER_NAME", COMMITTER.0),
        ("GIT_COMMITTER_EMAIL", COMMITTER.1),
    ];
    if let Some(d) = author_date {
        env.push(("GIT_AUTHOR_DATE", d));
    }
    let mut cmd = Command::new("git");
    isolate(&mut cmd).arg("-C").arg(path).args(&args).envs(env);
    let out = run_with_message(cmd, message)?;
    Ok(out.trim().to_string())
}

fn run_with_message(mut cmd: Command, message: &str) -> Result<String, String> {
    cmd.arg("-F").arg("-").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("running git commit-tree: {e}"))?;
    if let Some(mut pipe) = child.stdin.take() {
        let _ = pipe.write_all(message.as_bytes());
    }
    let o = child.wait_with_output().map_err(|e| format!("waiting for git commit-tree: {e}"))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(format!("git commit-tree: {}", String::from_utf8_lossy(&o.stderr).trim()))
    }
}

/// Why a merge did not happen.
#[derive(Debug)]
pub(super) enum MergeFail {
    Conflict,
    BaseMoved,
    Git(String),
}

/// Merges `head` into the branch `base` (at `base_sha`) as GitHub's merge
/// button does, moving the branch by compare-and-swap; the new tip.
pub(super) fn merge(
    path: &Path,
    base: &str,
    base_sha: &str,
    head_sha: &str,
    method: &str,
    message: &str,
    author: (&str, &str),
) -> Result<String, MergeFail> {
    let tip = match method {
        "rebase" => rebase(path, base_sha, head_sha)?,
        _ => {
            let out = run(path, &["merge-tree", "--write-tree", base_sha, head_sha], &[], None);
            match out.code {
                0 => {}
                1 => return Err(MergeFail::Conflict),
                _ => return Err(MergeFail::Git(out.stderr)),
            }
            let tree = out.stdout.lines().next().unwrap_or_default().to_string();
            let parents: Vec<&str> =
                if method == "squash" { vec![base_sha] } else { vec![base_sha, head_sha] };
            commit_tree(path, &tree, &parents, message, author, None).map_err(MergeFail::Git)?
        }
    };
    let name = format!("refs/heads/{base}");
    git(path, &["update-ref", &name, &tip, base_sha], &[]).map_err(|_| MergeFail::BaseMoved)?;
    Ok(tip)
}

/// Replays `base..head` onto `base`, commit by commit, keeping each
/// commit's author and message.
fn rebase(path: &Path, base: &str, head: &str) -> Result<String, MergeFail> {
    let range = format!("{base}..{head}");
    let list = git(path, &["rev-list", "--reverse", "--topo-order", "--no-merges", &range], &[])
        .map_err(MergeFail::Git)?;
    let mut tip = base.to_string();
    for c in list.lines() {
        let merge_base = format!("--merge-base={c}^");
        let out = run(path, &["merge-tree", "--write-tree", &merge_base, &tip, c], &[], None);
        match out.code {
            0 => {}
            1 => return Err(MergeFail::Conflict),
            _ => return Err(MergeFail::Git(out.stderr)),
        }
        let tree = out.stdout.lines().next().unwrap_or_default().to_string();
        let who = git(path, &["log", "-1", "--format=%an%x00%ae%x00%ad", "--date=raw", c], &[])
            .map_err(MergeFail::Git)?;
        let mut parts = who.split('\0');
        let (name, email, date) =
            (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let message = git(path, &["log", "-1", "--format=%B", c], &[]).map_err(MergeFail::Git)?;
        tip =
            commit_tree(path, &tree, &[&tip], &message, (name, email), Some(date)).map_err(MergeFail::Git)?;
    }
    Ok(tip)
}

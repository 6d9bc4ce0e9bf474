//! Pushing a branch to the forge with the git CLI, never forcing.
//!
//! The refspec has no `+`, so the remote only moves by fast-forward; a
//! refusal comes back as [`PushError::Rejected`] with git's reason and the
//! remote's own lines (GH006 protected branch, a pre-receive hook).
//!
//! The token reaches git through the environment, never argv (argv is
//! world-readable in `/proc`): `GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n` set an
//! `Authorization: Basic` extra header scoped to the remote URL (so a
//! `url.*.insteadOf` that rewrites the URL to another host does not get
//! it), empty `credential.helper` (no helper on the host is asked or told
//! anything), turn off redirects, hooks (`--no-verify` and
//! `core.hooksPath=/dev/null`: a hook would inherit the token) and
//! prompts. Tracing variables that would print the header are removed.
//! Whatever git prints is stripped, clipped and redacted before it is
//! kept in an error.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use crate::error::{PushError, Rejection};
use crate::refname::check_branch;
use crate::text;
use crate::token::Token;

/// How long a push may take, connect to last byte, unless told otherwise.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(300);

/// Most output kept from git (each of stdout and stderr); the rest is read
/// and dropped, so a chatty remote can neither block git nor fill memory.
const OUTPUT_CAP: usize = 256 * 1024;
/// Longest reason kept in an error.
const REASON_MAX: usize = 4096;

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushOutcome {
    /// The branch moved from `old` (`None`: it was created) to `new`.
    Updated { old: Option<String>, new: String },
    /// The branch already pointed at the commit.
    UpToDate,
}

/// Pushes `local_ref` (a ref or commit in `repo_dir`) to branch
/// `remote_branch` of `remote_url`, fast-forward only, within
/// [`PUSH_TIMEOUT`]. `auth` is sent as HTTP Basic credentials
/// (`x-access-token`:token), as GitHub expects for app and personal tokens.
pub async fn push(
    repo_dir: &Path,
    remote_url: &str,
    local_ref: &str,
    remote_branch: &str,
    auth: Option<&Token>,
) -> Result<PushOutcome, PushError> {
    push_with_timeout(repo_dir, remote_url, local_ref, remote_branch, auth, PUSH_TIMEOUT).await
}

/// [`push`] with its own time bound; at the bound, git and its transport
/// helper are killed and the push is [`PushError::Unavailable`].
pub async fn push_with_timeout(
    repo_dir: &Path,
    remote_url: &str,
    local_ref: &str,
    remote_branch: &str,
    auth: Option<&Token>,
    timeout: Duration,
) -> Result<PushOutcome, PushError> {
    check_branch(remote_branch)
        .map_err(|message| PushError::InvalidInput { what: "branch name", message })?;
    check_local_ref(local_ref).map_err(|message| PushError::InvalidInput { what: "local ref", message })?;
    let http = check_url(remote_url, auth.is_some())
        .map_err(|message| PushError::InvalidInput { what: "remote URL", message })?;
    let basic = auth
        .map(|t| base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{}", t.expose())));
    let secrets: Vec<&str> = auth.map(Token::expose).into_iter().chain(basic.as_deref()).collect();

    let new = rev_parse(repo_dir, &format!("{local_ref}^{{commit}}")).await?.ok_or_else(|| {
        PushError::InvalidInput { what: "local ref", message: format!("{local_ref:?} is not a commit") }
    })?;
    let target = format!("refs/heads/{remote_branch}");

    let mut config: Vec<(String, String)> = vec![
        ("credential.helper".into(), String::new()),
        ("core.hooksPath".into(), "/dev/null".into()),
        ("http.followRedirects".into(), "false".into()),
    ];
    if let Some(b) = &basic
        && http
    {
        config.push((format!("http.{remote_url}.extraHeader"), format!("Authorization: Basic {b}")));
    }
    let mut cmd = git(repo_dir);
    cmd.env("GIT_CONFIG_COUNT", config.len().to_string());
    for (i, (k, v)) in config.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{i}"), k).env(format!("GIT_CONFIG_VALUE_{i}"), v);
    }
    cmd.args(["push", "--porcelain", "--no-verify", "--", remote_url, &format!("{new}:{target}")]);

    let run = run_bounded(cmd, timeout).await;
    let (status, stdout, stderr) = match run {
        Ok(out) => out,
        Err(RunError::Spawn(e)) => return Err(PushError::Git { message: format!("running git: {e}") }),
        Err(RunError::TimedOut) => {
            return Err(PushError::Unavailable { message: format!("git push timed out after {timeout:?}") });
        }
    };
    let scrub = |s: &str| text::redact(&text::shown(s, REASON_MAX), &secrets);
    match ref_status(&stdout, &target) {
        Some(RefStatus::Updated { old_abbrev }) => {
            // The old tip of a fast-forward is an ancestor of the new one,
            // so it is here to expand.
            let old = match old_abbrev {
                Some(a) => Some(rev_parse(repo_dir, &format!("{a}^{{commit}}")).await?.unwrap_or(a)),
                None => None,
            };
            Ok(PushOutcome::Updated { old, new })
        }
        Some(RefStatus::UpToDate) => Ok(PushOutcome::UpToDate),
        Some(RefStatus::Rejected { summary }) => {
            let kind = rejection(&summary);
            let remote = remote_lines(&stderr);
            let reason =
                if remote.is_empty() { summary } else { format!("{summary}: {}", remote.join(" | ")) };
            Err(PushError::Rejected { kind, reason: scrub(&reason) })
        }
        None => {
            let message = scrub(stderr.trim());
            Err(match failure(&stderr) {
                Failure::Auth => PushError::Unauthorized { message },
                Failure::Network => PushError::Unavailable { message },
                Failure::Other => PushError::Git {
                    message: format!(
                        "git push exited with {status} and reported no status for {target}: {message}"
                    ),
                },
            })
        }
    }
}

/// `git` in `repo_dir` with an environment that cannot prompt, trace,
/// or be pointed at another repository by the caller's environment.
fn git(repo_dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(repo_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Its own process group, so a timeout kills git's transport helper too.
    cmd.process_group(0);
    for var in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_TRACE",
        "GIT_TRACE_PACKET",
        "GIT_TRACE_CURL",
        "GIT_TRACE_CURL_NO_DATA",
        "GIT_TRACE2",
        "GIT_TRACE2_EVENT",
        "GIT_TRACE2_PERF",
        "GIT_CURL_VERBOSE",
        "SSH_ASKPASS",
    ] {
        cmd.env_remove(var);
    }
    // An empty GIT_ASKPASS ends git's askpass search (core.askpass and
    // SSH_ASKPASS are not consulted); prompts are off.
    cmd.env("GIT_ASKPASS", "")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ALLOW_PROTOCOL", "http:https:ssh:file")
        .env("LC_ALL", "C")
        .env("LANGUAGE", "C");
    cmd
}

/// The full object id `spec` names in `repo_dir`, or `None` if it names
/// none.
async fn rev_parse(repo_dir: &Path, spec: &str) -> Result<Option<String>, PushError> {
    let mut cmd = git(repo_dir);
    cmd.args(["rev-parse", "--verify", "--quiet", "--end-of-options", spec]);
    let (status, stdout, stderr) =
        run_bounded(cmd, Duration::from_secs(30)).await.map_err(|e| PushError::Git {
            message: match e {
                RunError::Spawn(e) => format!("running git rev-parse: {e}"),
                RunError::TimedOut => "git rev-parse timed out".into(),
            },
        })?;
    if status.success() {
        return Ok(Some(stdout.trim().to_string()));
    }
    if status.code() == Some(1) {
        return Ok(None);
    }
    Err(PushError::Git {
        message: format!("git rev-parse {spec}: {}", text::shown(stderr.trim(), REASON_MAX)),
    })
}

enum RunError {
    Spawn(std::io::Error),
    TimedOut,
}

/// Runs `cmd` to completion within `timeout`, reading at most
/// [`OUTPUT_CAP`] of each stream. On timeout the child's process group is
/// killed (git's transport helper with it).
async fn run_bounded(
    mut cmd: Command,
    timeout: Duration,
) -> Result<(std::process::ExitStatus, String, String), RunError> {
    let mut child = cmd.spawn().map_err(RunError::Spawn)?;
    let pid = child.id();
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let all = async {
        let (out, err, status) = tokio::join!(read_capped(out), read_capped(err), child.wait());
        (status, out, err)
    };
    match tokio::time::timeout(timeout, all).await {
        Ok((Ok(status), out, err)) => Ok((status, out, err)),
        Ok((Err(e), _, _)) => Err(RunError::Spawn(e)),
        Err(_) => {
            if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                // The group is the child's own (see `git`).
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Err(RunError::TimedOut)
        }
    }
}

async fn read_capped(stream: Option<impl AsyncRead + Unpin>) -> String {
    let Some(mut stream) = stream else { return String::new() };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// A ref or commit to push from: letters, digits, `-_./`, not starting
/// with `-`, no `..`; or `HEAD`.
fn check_local_ref(r: &str) -> Result<(), String> {
    if r == "HEAD" {
        return Ok(());
    }
    if r.is_empty() || r.len() > 255 || r.starts_with(['-', '/']) || r.contains("..") {
        return Err("a ref is 1 to 255 bytes, not starting with '-' or '/', without '..'".into());
    }
    if !r.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b)) {
        return Err("a ref may hold only letters, digits and '-', '_', '.', '/'".into());
    }
    Ok(())
}

/// Whether `url` is a remote git may be given: http(s) (plain http with a
/// token only to loopback), ssh (`ssh://` or `user@host:path`) or an
/// absolute path, and nothing git would read as an option or a transport
/// helper (`ext::`). Returns whether it is http(s).
fn check_url(url: &str, with_token: bool) -> Result<bool, String> {
    if url.is_empty() || url.len() > 2048 || url.starts_with('-') || url.contains("::") {
        return Err("not a remote URL (empty, too long, an option, or a transport helper)".into());
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("whitespace or control characters".into());
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        let parsed = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
        if parsed.password().is_some() {
            return Err("credentials do not belong in the URL; pass a token".into());
        }
        let loopback = match parsed.host_str() {
            Some("localhost") => true,
            Some(h) => {
                h.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
            }
            None => false,
        };
        if with_token && parsed.scheme() == "http" && !loopback {
            return Err("a token is sent over plain http only to a loopback address".into());
        }
        return Ok(true);
    }
    if with_token {
        return Err("a token is for http(s) remotes".into());
    }
    if url.starts_with("ssh://") || url.starts_with('/') || url.starts_with("file:///") {
        return Ok(false);
    }
    match url.split_once(':') {
        Some((authority, path))
            if authority.contains('@') && !authority.contains('/') && !path.is_empty() =>
        {
            Ok(false)
        }
        _ => Err("the scheme must be https, http, ssh or a local path".into()),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum RefStatus {
    Updated { old_abbrev: Option<String> },
    UpToDate,
    Rejected { summary: String },
}

/// The porcelain status line for `target`:
/// `<flag>\t<from>:<to>\t<summary>`, flag one of ` +-*!=`.
fn ref_status(stdout: &str, target: &str) -> Option<RefStatus> {
    stdout.lines().find_map(|line| {
        let mut parts = line.splitn(3, '\t');
        let (flag, refs, summary) = (parts.next()?, parts.next()?, parts.next().unwrap_or(""));
        let (_, to) = refs.split_once(':')?;
        if to != target {
            return None;
        }
        match flag {
            " " | "+" => Some(RefStatus::Updated {
                old_abbrev: summary
                    .split_once("..")
                    .map(|(old, _)| old.to_string())
                    .filter(|o| !o.is_empty() && o.bytes().all(|b| b.is_ascii_hexdigit())),
            }),
            "*" => Some(RefStatus::Updated { old_abbrev: None }),
            "=" => Some(RefStatus::UpToDate),
            "!" => Some(RefStatus::Rejected { summary: summary.trim().to_string() }),
            _ => None,
        }
    })
}

fn rejection(summary: &str) -> Rejection {
    if summary.contains("non-fast-forward") || summary.contains("fetch first") {
        Rejection::NonFastForward
    } else if summary.contains("[remote rejected]") || summary.contains("[remote failure]") {
        Rejection::Remote
    } else {
        Rejection::Other
    }
}

/// The remote's own words: `remote: ` lines of stderr, without the prefix
/// and without the blank and progress ones.
fn remote_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("remote:"))
        .map(|l| text::strip_controls(l).trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with("Resolving deltas") && !l.contains("objects:"))
        .collect()
}

enum Failure {
    Auth,
    Network,
    Other,
}

/// What a push that reported no ref status failed on, read from git's
/// (C-locale) messages.
fn failure(stderr: &str) -> Failure {
    const AUTH: &[&str] = &[
        "Authentication failed",
        "could not read Username",
        "could not read Password",
        "terminal prompts disabled",
        "Invalid username or password",
        "HTTP Basic: Access denied",
        "returned error: 401",
        "returned error: 403",
        "Permission denied (publickey",
        "Write access to repository not granted",
        "Permission to",
    ];
    const NETWORK: &[&str] = &[
        "Could not resolve host",
        "Failed to connect",
        "Connection refused",
        "Connection timed out",
        "Operation timed out",
        "Connection reset",
        "returned error: 5",
        "RPC failed",
        "remote end hung up unexpectedly",
        "early EOF",
        "Could not read from remote repository",
    ];
    if AUTH.iter().any(|p| stderr.contains(p)) {
        Failure::Auth
    } else if NETWORK.iter().any(|p| stderr.contains(p)) {
        Failure::Network
    } else {
        Failure::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn porcelain_lines_give_the_status_of_the_pushed_ref() {
        let t = "refs/heads/b";
        let out = "To http://h/o/r.git\n \tabc:refs/heads/b\t1a2b3c4..5d6e7f8\nDone\n";
        assert_eq!(ref_status(out, t), Some(RefStatus::Updated { old_abbrev: Some("1a2b3c4".into()) }));
        let out = "To x\n*\tabc:refs/heads/b\t[new branch]\nDone\n";
        assert_eq!(ref_status(out, t), Some(RefStatus::Updated { old_abbrev: None }));
        let out = "To x\n=\tabc:refs/heads/b\t[up to date]\nDone\n";
        assert_eq!(ref_status(out, t), Some(RefStatus::UpToDate));
        let out = "To x\n!\tabc:refs/heads/b\t[rejected] (non-fast-forward)\nDone\n";
        assert_eq!(
            ref_status(out, t),
            Some(RefStatus::Rejected { summary: "[rejected] (non-fast-forward)".into() })
        );
        assert_eq!(ref_status("!\tabc:refs/heads/other\t[rejected] (x)\n", t), None);
        assert_eq!(ref_status("", t), None);
        assert_eq!(rejection("[rejected] (fetch first)"), Rejection::NonFastForward);
        assert_eq!(rejection("[remote rejected] (pre-receive hook declined)"), Rejection::Remote);
        assert_eq!(rejection("[rejected] (stale info)"), Rejection::Other);
    }

    #[test]
    fn remote_lines_keep_the_remotes_reason_without_noise() {
        let stderr = "remote: \nremote: error: GH006: Protected branch update failed for refs/heads/main.\u{1b}[K\nremote: Resolving deltas: 100% (1/1)\nTo http://x\n";
        assert_eq!(
            remote_lines(stderr),
            vec!["error: GH006: Protected branch update failed for refs/heads/main."]
        );
    }

    #[test]
    fn urls_and_refs_are_checked_before_git_sees_them() {
        assert_eq!(check_url("https://github.com/o/r.git", true), Ok(true));
        assert_eq!(check_url("http://127.0.0.1:9/o/r.git", true), Ok(true));
        assert!(check_url("http://example.com/o/r.git", true).is_err());
        assert_eq!(check_url("http://example.com/o/r.git", false), Ok(true));
        assert_eq!(check_url("git@github.com:o/r.git", false), Ok(false));
        assert!(check_url("git@github.com:o/r.git", true).is_err());
        assert_eq!(check_url("/srv/git/r.git", false), Ok(false));
        for bad in ["--upload-pack=x", "ext::sh -c x", "https://u:p@github.com/o/r", "relative/path", "a b"] {
            assert!(check_url(bad, false).is_err(), "{bad}");
        }
        assert!(check_local_ref("HEAD").is_ok());
        assert!(check_local_ref("refs/heads/x").is_ok());
        assert!(check_local_ref("0123abcd").is_ok());
        for bad in ["", "-x", "a..b", "a:b", "a b", "HEAD~1", "@{u}"] {
            assert!(check_local_ref(bad).is_err(), "{bad}");
        }
    }
}

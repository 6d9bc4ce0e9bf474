//! The plan's tables as serde reads them, before any check: `[defaults]`,
//! `[[tasks]]` and a task's `subplan`.
//!
//! `[defaults]` and `[[tasks]]` both carry the agent settings, read into
//! one [`RawAgentFields`]. serde's `flatten` would do that, but it cannot
//! deny unknown keys with their list of expected ones, and it buffers the
//! values, which loses the error's field path and byte offset. So
//! [`agent_table!`] writes the agent keys into each table's serde shape in
//! their place among the table's own keys, and moves them into the shared
//! struct once read: the TOML and every error read as before.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::agent::{AgentKind, RawAgentFields, RawInstructions, RawPermissions};
use super::budget::OnUsageLimit;
use super::fields::{Command, RawTier};
use super::spec::{ConflictPolicy, MergeStrategy, OnEmpty, OwnershipPolicy, SetupOn};
use super::{limits, review, sandbox, secrets};

/// Declares a table holding `agent: RawAgentFields`, read through a serde
/// shape (`via`, named again in the caller's `#[serde(from)]`) whose keys
/// are the table's own with the agent keys spliced in at `..agent`.
macro_rules! agent_table {
    (
        $(#[$meta:meta])*
        struct $name:ident via $wire:ident {
            $( $(#[$hm:meta])* $h:ident : $ht:ty, )*
            ..agent,
            $( $(#[$tm:meta])* $t:ident : $tt:ty, )*
        }
    ) => {
        $(#[$meta])*
        pub(super) struct $name {
            $( $(#[$hm])* pub $h: $ht, )*
            pub agent: RawAgentFields,
            $( $(#[$tm])* pub $t: $tt, )*
        }

        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct $wire {
            $( $(#[$hm])* $h: $ht, )*
            agent: Option<AgentKind>,
            agent_path: Option<String>,
            agent_command: Option<Vec<String>>,
            model: Option<String>,
            max_turns: Option<u32>,
            max_budget_usd: Option<f64>,
            allowed_tools: Option<Vec<String>>,
            permission_mode: Option<String>,
            append_system_prompt: Option<String>,
            agent_instructions: Option<RawInstructions>,
            extra_args: Option<Vec<String>>,
            permissions: Option<RawPermissions>,
            $( $(#[$tm])* $t: $tt, )*
        }

        impl From<$wire> for $name {
            fn from(w: $wire) -> Self {
                $name {
                    $( $h: w.$h, )*
                    agent: RawAgentFields {
                        agent: w.agent,
                        agent_path: w.agent_path,
                        agent_command: w.agent_command,
                        model: w.model,
                        max_turns: w.max_turns,
                        max_budget_usd: w.max_budget_usd,
                        allowed_tools: w.allowed_tools,
                        permission_mode: w.permission_mode,
                        append_system_prompt: w.append_system_prompt,
                        agent_instructions: w.agent_instructions,
                        extra_args: w.extra_args,
                        permissions: w.permissions,
                    },
                    $( $t: w.$t, )*
                }
            }
        }
    };
}

agent_table! {
    /// `[defaults]` (or a sub-plan's own).
    #[derive(Debug, Clone, Deserialize, Default)]
    #[serde(from = "DefaultsToml")]
    struct RawDefaults via DefaultsToml {
        command: Option<Command>,
        retries: Option<u32>,
        backoff_initial_ms: Option<u64>,
        backoff_multiplier: Option<f64>,
        backoff_max_ms: Option<u64>,
        idle_timeout_secs: Option<u32>,
        max_restarts: Option<u32>,
        #[serde(default)]
        labels: BTreeMap<String, String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        verify: Option<Vec<RawTier>>,
        strategy: Option<MergeStrategy>,
        on_conflict: Option<ConflictPolicy>,
        ownership: Option<OwnershipPolicy>,
        #[serde(default)]
        setup: Vec<String>,
        setup_on: Option<SetupOn>,
        on_empty: Option<OnEmpty>,
        ..agent,
        review: Option<review::RawReview>,
        sandbox: Option<sandbox::RawSandbox>,
        limits: Option<limits::RawLimits>,
        secrets: Option<BTreeMap<String, secrets::RawSecret>>,
        budget_usd: Option<f64>,
        budget_tokens: Option<u64>,
        on_usage_limit: Option<OnUsageLimit>,
    }
}

agent_table! {
        /// One `[[tasks]]` entry.
    #[derive(Debug, Clone, Deserialize)]
    #[serde(from = "TaskToml")]
    struct RawTask via TaskToml {
        id: String,
        title: Option<String>,
        #[serde(default)]
        prompt: String,
        #[serde(default)]
        context: String,
        #[serde(default)]
        acceptance: Vec<String>,
        #[serde(default)]
        deps: Vec<String>,
        #[serde(default)]
        files: Vec<String>,
        verify: Option<Vec<RawTier>>,
        retries: Option<u32>,
        #[serde(default)]
        labels: BTreeMap<String, String>,
        command: Option<Command>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        idle_timeout_secs: Option<u32>,
        max_restarts: Option<u32>,
        strategy: Option<MergeStrategy>,
        on_conflict: Option<ConflictPolicy>,
        ownership: Option<OwnershipPolicy>,
        setup: Option<Vec<String>>,
        setup_on: Option<SetupOn>,
        on_empty: Option<OnEmpty>,
        ..agent,
        /// A sub-plan file, relative to this plan's file: swarmctl inlines it
        /// as `subplan` before it submits the plan.
        plan: Option<String>,
        /// An inline sub-plan whose tasks share this plan's defaults.
        subtasks: Option<Vec<RawTask>>,
        /// A sub-plan with defaults of its own (an inlined `plan` file).
        subplan: Option<RawSubPlan>,
        /// Set by swarm, not by hand: the sub-plan's tasks were spawned by the
        /// agent running this task (see `plan/spawn.rs`).
        #[serde(default)]
        spawned: bool,
        /// Overrides the defaults' review; `"none"` opts out of it.
        review: Option<review::RawReview>,
        /// Overrides the defaults' sandbox, field by field.
        sandbox: Option<sandbox::RawSandbox>,
        /// Overrides the defaults' limits, field by field.
        limits: Option<limits::RawLimits>,
        /// Added to the defaults' secrets.
        secrets: Option<BTreeMap<String, secrets::RawSecret>>,
        budget_usd: Option<f64>,
        budget_tokens: Option<u64>,
        on_usage_limit: Option<OnUsageLimit>,
        priority: Option<i64>,
        estimate: Option<String>,
    }
}

/// A sub-plan with its own defaults: what a `plan = "..."` file becomes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSubPlan {
    /// The sub-plan file's own name, if it has one; the child swarm is
    /// named by its task all the same.
    #[allow(dead_code)]
    name: Option<String>,
    /// Replaces the enclosing plan's defaults when given.
    pub defaults: Option<RawDefaults>,
    #[serde(default)]
    pub tasks: Vec<RawTask>,
}

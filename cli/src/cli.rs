//! The command line: clap definitions only.

use std::path::PathBuf;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use clap_complete::Shell;

const EXIT_CODES: &str = "\
Exit codes:
  0    success (`run`/`demo`: every task MERGED)
  1    error; `run`: some task FAILED or CANCELLED
  2    `run`: stopped waiting on the operator (BLOCKED, ESCALATED, CONFLICT on hold)
  3    usage or plan error; the controller rejected an argument (InvalidArgument)
  4    not found (NotFound)
  5    not possible in the current state (FailedPrecondition, AlreadyExists, Aborted)
  69   controller unavailable (Unavailable)
  130  interrupted (Ctrl-C)";

/// Operate swarms of coding agents: run a plan locally, or talk to a controller.
#[derive(Debug, Parser)]
#[command(name = "swarmctl", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// The controller's Operator API; several URLs, comma-separated, for a
    /// leader and its standbys (the one that answers as leader is used).
    #[arg(long, global = true, env = "SWARM_CONTROLLER", default_value = "http://127.0.0.1:7420")]
    pub controller: String,
    /// CA (PEM) that signed the controller's certificate; for https:// URLs.
    #[arg(long, global = true, env = "SWARM_CA")]
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM) for mTLS.
    #[arg(long, global = true, env = "SWARM_CERT")]
    pub cert: Option<PathBuf>,
    /// Client private key (PEM) for mTLS.
    #[arg(long, global = true, env = "SWARM_KEY")]
    pub key: Option<PathBuf>,
    /// Bearer token (role operator or admin).
    #[arg(long, global = true, env = "SWARM_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// File whose first line is the bearer token (`swarmctl run` writes one
    /// for its embedded controller and prints where: a directory only you
    /// can enter, under `$XDG_RUNTIME_DIR/swarm/` or `/tmp/swarm-<uid>/`).
    #[arg(long, global = true, env = "SWARM_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    pub fn target(&self) -> crate::client::Target {
        crate::client::Target {
            url: self.controller.clone(),
            auth: swarm_proto::client::ClientAuth {
                ca: self.ca.clone(),
                cert: self.cert.clone(),
                key: self.key.clone(),
                token: self.token.clone(),
                token_file: self.token_file.clone(),
            },
        }
    }
}

// Parsed once per process: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a plan locally: an embedded controller plus N local sidecars.
    ///
    /// Running it again with the same plan resumes the swarm.
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),
    /// Run a scripted demo swarm in a throwaway repository (under a minute).
    Demo(DemoArgs),
    /// Plan a swarm from a goal: a planning agent reads the repository
    /// (read-only, sandboxed) and writes a plan that passes `swarmctl check`.
    Plan(PlanArgs),
    /// Submit a plan file to the controller (idempotent for the same plan).
    Create {
        plan: PathBuf,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// List swarms, tasks or workers.
    Get {
        #[command(subcommand)]
        what: GetWhat,
    },
    /// Show one object in detail.
    Describe {
        #[command(subcommand)]
        what: DescribeWhat,
    },
    /// Show a task's events; -f follows new ones.
    Logs(LogsArgs),
    /// Stream events, replaying from an event id.
    Watch(WatchArgs),
    /// A full-screen live view: swarms, tasks, workers, questions and
    /// events, with keys to answer, retry, cancel and drain.
    Top(TopArgs),
    /// Serve swarm's MCP tools on stdin/stdout, for an orchestrating agent
    /// (`claude mcp add swarm -- swarmctl mcp`): plan, create, report, wait,
    /// answer, review, message, cancel, retry and land, with this
    /// command's controller and credentials.
    Mcp,
    /// Cancel a task (SWARM/TASK) or a whole swarm (--swarm S).
    Cancel {
        #[arg(required_unless_present = "swarm", conflicts_with = "swarm")]
        task: Option<String>,
        #[arg(long)]
        swarm: Option<String>,
        #[arg(long, default_value = "cancelled by the operator")]
        reason: String,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Start a new attempt of a FAILED, BLOCKED, CONFLICT, REJECTED or CANCELLED task.
    Retry {
        task: String,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Decide on a task in REVIEW: approve (it merges), request-changes (a
    /// new attempt with the message in its task text) or reject (REJECTED,
    /// its branch kept).
    Review {
        task: String,
        /// approve, request-changes or reject.
        decision: String,
        /// Why; the rest of the line.
        message: Vec<String>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Answer a task's pending question.
    Answer {
        task: String,
        text: String,
        /// The question's id; defaults to the task's pending question.
        #[arg(long)]
        question: Option<String>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Send a message to a RUNNING task's worker (an agent gets it as its
    /// next message; any worker finds it in .swarm/messages/ and task.md).
    Message {
        task: String,
        text: String,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// A progress report: the swarm, each task's branch with status,
    /// progress and health (green/yellow/red), checklists, and the
    /// integration queue. Markdown by default; `-o json` for scripts.
    Report {
        swarm: String,
        /// Write one self-contained HTML page instead: the report and each
        /// swarm's timeline (where its time went), to FILE, or to stdout
        /// when FILE is `-` or left out.
        #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
        html: Option<std::path::PathBuf>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Set a swarm's (SWARM) or a task's (SWARM/TASK) budget, across all
    /// its agent attempts; tasks stopped at the old one resume. 0 removes a cap.
    Budget {
        target: String,
        /// Dollars.
        #[arg(long = "set", value_name = "USD")]
        usd: Option<f64>,
        /// Tokens of every kind.
        #[arg(long)]
        tokens: Option<u64>,
        /// The swarm's burn-rate breaker, in dollars per hour.
        #[arg(long)]
        max_usd_per_hour: Option<f64>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Start no new attempt of a swarm (PAUSED); running ones finish, or
    /// with --stop checkpoint (WIP commit, agent session kept).
    Pause {
        swarm: String,
        #[arg(long)]
        stop: bool,
        #[arg(long, default_value = "")]
        reason: String,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Let a PAUSED swarm start attempts again.
    Resume {
        swarm: String,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Stop assigning new tasks to a worker.
    Drain {
        worker: String,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Move the target branch to the swarm's integration head (never forced).
    Land {
        swarm: String,
        #[arg(long)]
        target: Option<String>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Print a shell completion script.
    Completions { shell: Shell },
    /// Check a plan offline against the repository it will run on: the
    /// controller's parser, then owned globs that exist, disjoint files for
    /// tasks that may run at once, shared lockfiles and registries, verify
    /// tiers when the repository has tests. Exit 0 with warnings only, 1
    /// with an error, 3 when the plan does not parse.
    Check(CheckArgs),
    /// The worker sandbox: `sandbox check PLAN`.
    Sandbox {
        #[command(subcommand)]
        what: SandboxCommand,
    },
    /// Create certificates for TLS and mTLS.
    Certs(CertsArgs),
    /// Create bearer tokens for the controller's tokens file.
    Token(TokenArgs),
}

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Run each task's setup and verify commands once, confined as its
    /// workers would be, in a scratch worktree at the plan's base; print
    /// what the sandbox denied them and the setting that would allow it.
    /// Exit 1 if anything was denied. The tasks' secrets are not read.
    Check(SandboxCheckArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The plan file (TOML).
    pub plan: PathBuf,
    /// The git repository the plan runs in.
    #[arg(long, env = "SWARM_REPO", default_value = ".")]
    pub repo: PathBuf,
    /// The most of the repository's files one task may own (0 to 1).
    #[arg(long, value_name = "F", default_value_t = 0.5)]
    pub max_share: f64,
    /// A planner wrote the plan: every task needs an `estimate`.
    #[arg(long)]
    pub planned: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Args)]
pub struct SandboxCheckArgs {
    /// The plan file (TOML).
    pub plan: PathBuf,
    /// The git repository the plan runs in.
    #[arg(long, env = "SWARM_REPO", default_value = ".")]
    pub repo: PathBuf,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Args)]
pub struct CertsArgs {
    #[command(subcommand)]
    pub command: CertsCommand,
}

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Write a CA and controller, sidecar and operator certificates into DIR.
    ///
    /// Files: ca.pem, ca.key, controller.pem/.key, sidecar.pem/.key,
    /// operator.pem/.key, admin.pem/.key (keys mode 0600). Existing files
    /// are never overwritten.
    Init {
        dir: PathBuf,
        /// Extra DNS name or IP address for the controller certificate
        /// (it always has localhost, 127.0.0.1 and ::1); repeatable.
        #[arg(long = "san")]
        sans: Vec<String>,
        /// Worker ids the sidecar certificate may claim (a glob).
        #[arg(long, default_value = "*")]
        workers: String,
        /// Days the certificates are valid.
        #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=3650))]
        days: u32,
    },
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a new random token, and the entry to add to the controller's tokens file.
    Create {
        /// sidecar | operator | admin
        #[arg(long, value_parser = ["sidecar", "operator", "admin"])]
        role: String,
        /// For role sidecar: the worker ids it may claim (a glob, e.g. "build-*").
        #[arg(long)]
        workers: Option<String>,
        /// A name for the token (shown in logs and audit).
        #[arg(long)]
        name: String,
    },
}

/// Turns a planner may take unless told otherwise.
pub const PLANNER_TURNS: u32 = 40;

/// `swarmctl plan`'s arguments (also built by `run --goal`).
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// What the swarm should achieve, in your words.
    #[arg(required_unless_present_any = ["from", "issue"])]
    pub goal: Option<String>,
    /// Read the goal from this file instead.
    #[arg(long, value_name = "FILE", conflicts_with = "goal")]
    pub from: Option<PathBuf>,
    /// The goal is this GitHub issue's title and body (OWNER/REPO#N); the
    /// plan's goal comment names the issue.
    #[arg(long, value_name = "OWNER/REPO#N", conflicts_with_all = ["goal", "from"])]
    pub issue: Option<String>,
    /// With --issue: GitHub's REST API (GitHub Enterprise: https://HOST/api/v3).
    #[arg(long, env = "GITHUB_API_URL", default_value = "https://api.github.com")]
    pub forge_api_url: String,
    /// With --issue: the variable holding the token, as `run --forge` takes it.
    #[arg(long, env = "SWARM_FORGE_TOKEN_ENV", default_value = "GITHUB_TOKEN")]
    pub forge_token_env: String,
    /// Write the plan here (stdout shows the task graph); without it the
    /// plan goes to stdout and the graph to stderr.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The repository to plan for.
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    #[command(flatten)]
    pub planner: PlannerAgentArgs,
    /// Turns the planner may take.
    #[arg(long, default_value_t = PLANNER_TURNS)]
    pub max_turns: u32,
    /// Instructions to use instead of swarm's.
    #[arg(long, value_name = "FILE")]
    pub planner_instructions: Option<PathBuf>,
    /// The largest share of the repository's files one task may own.
    #[arg(long, default_value_t = 0.5)]
    pub max_share: f64,
}

/// The planning agent, with the settings a task's agent takes.
#[derive(Debug, Clone, Args)]
pub struct PlannerAgentArgs {
    /// The planning agent: claude (Claude Code), codex (`codex app-server`,
    /// or `codex exec` for an older CLI) or acp (any Agent Client Protocol
    /// server, named by --agent-path).
    #[arg(long, default_value = "claude", value_parser = ["claude", "codex", "acp"])]
    pub agent: String,
    /// Its executable (default: `claude` or `codex` on PATH; acp needs one).
    #[arg(long, value_name = "PATH")]
    pub agent_path: Option<String>,
    /// Its model.
    #[arg(long)]
    pub model: Option<String>,
    /// One more argument for its command line, as a task's `extra_args`
    /// (repeatable; `--extra-arg=-c --extra-arg=key=value`).
    #[arg(long = "extra-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub extra_args: Vec<String>,
    /// A path its sandbox also lets it read, as a plan's `sandbox.read`
    /// (an ACP server's install; repeatable).
    #[arg(long = "sandbox-read", value_name = "PATH")]
    pub sandbox_read: Vec<String>,
    /// A path its sandbox also lets it write, as a plan's `sandbox.write`
    /// (an ACP server's own state; repeatable). The repository never is.
    #[arg(long = "sandbox-write", value_name = "PATH")]
    pub sandbox_write: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The plan file (TOML).
    #[arg(required_unless_present = "goal", default_value = "plan.toml", hide_default_value = true)]
    pub plan: PathBuf,
    /// Plan the swarm from this goal first (as `swarmctl plan` does), show
    /// the plan and ask to run it.
    #[arg(long, conflicts_with = "plan")]
    pub goal: Option<String>,
    /// Run the planned swarm without asking.
    #[arg(long, requires = "goal")]
    pub yes: bool,
    /// With --goal: the planning agent, as `swarmctl plan` takes it.
    #[command(flatten, next_help_heading = "Planner (with --goal)")]
    pub planner: PlannerAgentArgs,
    /// How many local sidecars (workers) to start.
    #[arg(long, short = 'w', env = "SWARM_WORKERS", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// The git repository to work in.
    #[arg(long, env = "SWARM_REPO", default_value = ".")]
    pub repo: PathBuf,
    /// A label for every local sidecar (repeatable): tasks that require
    /// labels run only on sidecars that carry them.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Print one line per event even on a terminal.
    #[arg(long)]
    pub plain: bool,
    /// Run the workers as this user (a name or a numeric uid, never root),
    /// with the directories they write handed to it: for `swarmctl run` as
    /// root, which alone may switch users.
    #[arg(long, env = "SWARM_WORKER_USER", value_name = "USER")]
    pub worker_user: Option<swarm_sidecar::sandbox::WorkerUser>,
    /// Serve the embedded controller's Prometheus metrics here (GET /metrics).
    #[arg(long, env = "SWARM_METRICS_LISTEN")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Serve the embedded controller's web dashboard (see README
    /// "Dashboard") at a loopback ADDR, by default a free port on
    /// 127.0.0.1; its address and login link are printed at start.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:0")]
    pub ui: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub notify: swarm_controller::notify::NotifyArgs,
    /// Where the finished work goes, for a plan without `[forge]`: `github`
    /// (push, then one pull request) or `git` (push only).
    #[arg(long, env = "SWARM_FORGE", value_parser = ["github", "git"])]
    pub forge: Option<String>,
    /// With --forge: the repository's remote (a name or a URL).
    #[arg(long, env = "SWARM_REMOTE", default_value = "origin", requires = "forge")]
    pub remote: String,
    /// With --forge github: the variable holding the token.
    #[arg(long, env = "SWARM_FORGE_TOKEN_ENV", default_value = "GITHUB_TOKEN", requires = "forge")]
    pub forge_token_env: String,
    /// Not an argument: set by --goal once planned (the goal, the planner's
    /// session and cost), and recorded on the swarm.
    #[arg(skip)]
    pub origin: Option<Box<swarm_proto::v1::SwarmOrigin>>,
}

fn parse_label(raw: &str) -> Result<(String, String), String> {
    let (k, v) = raw.split_once('=').ok_or_else(|| format!("{raw:?} must have the form KEY=VALUE"))?;
    swarm_core::plan::check_label(k, v)?;
    if k == swarm_core::plan::sandbox::SANDBOX_LABEL {
        return Err(format!("{raw:?}: the {k} label is set by each sidecar from what its kernel enforces"));
    }
    Ok((k.to_string(), v.to_string()))
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to create the demo repository (default: a new temporary directory, kept).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// How many local sidecars to start.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub workers: u32,
    /// Print one line per event even on a terminal.
    #[arg(long)]
    pub plain: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// SWARM/TASK
    pub task: String,
    /// Keep following new events (with --worker-output: the worker's output
    /// until the attempt ends).
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Show what the attempt's worker wrote (its last MiB), fetched from the
    /// sidecar that ran it, instead of the task's events.
    #[arg(long, short = 'w')]
    pub worker_output: bool,
    /// With --worker-output: this attempt (default: the latest).
    #[arg(long, requires = "worker_output", value_parser = clap::value_parser!(u32).range(1..))]
    pub attempt: Option<u32>,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Replay events after this id (0: from the beginning). An id beyond
    /// the controller's newest event (a store restored from a backup) is
    /// an error naming the newest, unless --wait-for-after.
    #[arg(long, visible_alias = "after", default_value_t = 0, conflicts_with = "from_now")]
    pub since: u64,
    /// Replay nothing: only the events committed from now on.
    #[arg(long)]
    pub from_now: bool,
    /// With --since beyond the controller's newest event: wait for the
    /// events after it instead of failing.
    #[arg(long, conflicts_with = "from_now")]
    pub wait_for_after: bool,
    /// Only this swarm's events.
    #[arg(long)]
    pub swarm: Option<String>,
    /// Stop after this many events (for scripts).
    #[arg(long)]
    pub limit: Option<u64>,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Only this swarm.
    #[arg(long)]
    pub swarm: Option<String>,
    /// Fill the events pane with the events after this id (0: from the beginning).
    #[arg(long, default_value_t = 0)]
    pub since: u64,
    /// Start with this filter, as typed after `/`: `swarm:S state:A,B words`.
    #[arg(long)]
    pub filter: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum GetWhat {
    /// Every swarm.
    Swarms {
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Tasks, of one swarm or of all.
    Tasks {
        #[arg(long)]
        swarm: Option<String>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Connected and known workers.
    Workers {
        #[command(flatten)]
        out: OutputArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum DescribeWhat {
    /// A task with its attempts and events: SWARM/TASK.
    Task {
        task: String,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// A swarm.
    Swarm {
        swarm: String,
        #[command(flatten)]
        out: OutputArgs,
    },
}

#[derive(Debug, Clone, Copy, Args)]
pub struct OutputArgs {
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

pub fn print_completions(shell: Shell) {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "swarmctl", &mut std::io::stdout());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}

//! `swarmctl`: the operator's tool for swarm, and the all-in-one local mode.
//!
//! `main` parses the command line, runs one command and maps whatever it
//! came to onto an exit code that scripts can trust (see [`exit`]).

mod attempt_log;
mod auth;
mod budget;
mod check;
mod cli;
mod client;
mod demo;
mod exit;
mod local;
mod mcp;
mod ops;
mod output;
mod plan;
mod report;
mod review;
mod sandbox_check;
mod subplan;
mod top;
mod transport;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::exit::Failure;

fn main() -> ExitCode {
    // Local sidecars re-execute this binary as their workers' supervisor
    // and as the sandbox that confines each worker.
    if let Some(code) = swarm_sidecar::main_if_helper() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == local::sidecar_mode::ARG) {
        return local::sidecar_mode::main();
    }
    // The planning agent starts this binary as its tool server.
    if std::env::args_os().nth(1).is_some_and(|a| a == plan::tools::ARG) {
        return plan::tools::main();
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help and version on stdout and exits 0 for them;
            // every other parse error is a usage error (exit 3, not clap's 2,
            // which `run` reserves for "waiting on the operator").
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(exit::USAGE) } else { ExitCode::SUCCESS };
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let failure = Failure::from_error(&e);
            eprintln!("error: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// Runs one command; `Ok` carries the exit code of a command that finished
/// the way it meant to (`run` reports task outcomes through it).
async fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    let target = cli.target();
    match cli.command {
        Command::Run(args) => local::run(plan::goal::resolve(args).await?).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Plan(args) => plan::run(args).await,
        Command::Completions { shell } => {
            cli::print_completions(shell);
            Ok(exit::SUCCESS)
        }
        Command::Certs(args) => auth::certs(args).map(|()| exit::SUCCESS),
        Command::Token(args) => auth::token(args).map(|()| exit::SUCCESS),
        Command::Sandbox { what: cli::SandboxCommand::Check(args) } => sandbox_check::run(args).await,
        Command::Check(args) => check::run(args),
        command => match command {
            Command::Watch(args) => watch::watch(&target, args).await,
            Command::Top(args) => top::run(&target, args).await,
            Command::Logs(args) => watch::logs(&target, args).await,
            Command::Mcp => mcp::serve_stdio(&target).await,
            other => ops::run(&target, other).await,
        }
        .map(|()| exit::SUCCESS),
    }
}

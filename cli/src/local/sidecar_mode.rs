//! `swarmctl __sidecar ...`: swarmctl re-executed as a local sidecar.
//!
//! Local mode runs its sidecars as child processes of swarmctl's own binary,
//! so `cargo run -p swarmctl -- demo` and a lone installed `swarmctl` need
//! no `swarm-sidecar` next to them; the flags are swarm-sidecar's.

use std::process::ExitCode;

use clap::Parser as _;
use tokio_util::sync::CancellationToken;

/// The hidden first argument that selects sidecar mode.
pub const ARG: &str = "__sidecar";

pub fn main() -> ExitCode {
    swarm_sidecar::harden_process();
    // argv: swarmctl __sidecar <swarm-sidecar flags>
    let args = std::env::args_os().enumerate().filter(|(i, _)| *i != 1).map(|(_, a)| a);
    let config = swarm_sidecar::Config::parse_from(args);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        // Inside the runtime: the OTLP exporter's channel lives on it.
        let telemetry = swarm_telemetry::init("swarm-sidecar", false).map_err(anyhow::Error::msg)?;
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        let signals = tokio::spawn(async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            token.cancel();
        });
        let result = swarm_sidecar::run(config, shutdown).await;
        signals.abort();
        let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        result.map_err(anyhow::Error::from)
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

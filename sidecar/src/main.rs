use clap::Parser;
use swarm_sidecar::Config;
use swarm_sidecar::config::LogFormat;
use tokio_util::sync::CancellationToken;

fn main() -> anyhow::Result<()> {
    // Before any parsing: the binary re-executes itself as a worker's
    // supervisor and as the sandbox that confines a worker.
    if let Some(code) = swarm_sidecar::main_if_helper() {
        std::process::exit(code);
    }
    sidecar()
}

#[tokio::main]
async fn sidecar() -> anyhow::Result<()> {
    swarm_sidecar::harden_process();
    let config = Config::parse();
    let telemetry = swarm_telemetry::init("swarm-sidecar", matches!(config.log_format, LogFormat::Json))
        .map_err(anyhow::Error::msg)?;
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let signals = tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        token.cancel();
    });
    let result = swarm_sidecar::run(config, shutdown).await;
    signals.abort();
    // Export the last spans; the exporter needs the runtime, so not on it.
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    result?;
    Ok(())
}

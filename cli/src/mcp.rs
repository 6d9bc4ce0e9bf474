//! `swarmctl mcp`: swarm's MCP tools over stdio, for an agent that starts
//! swarmctl as its MCP server. The tools call the controller this command
//! would (`--controller`, leader discovery) with its credentials, so the
//! controller's authorization decides what the agent may do.

use rmcp::ServiceExt as _;

use crate::client::{self, Target};

pub async fn serve_stdio(target: &Target) -> anyhow::Result<()> {
    let channel = client::connect_channel(target).await?;
    let tools = swarm_mcp::SwarmTools::new(swarm_mcp::operator(channel));
    let _span = tracing::info_span!("mcp.stdio", controller = %target.url).entered();
    let running = tools.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

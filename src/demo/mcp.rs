//! The MCP server a demo's agent set takes its tools from: the bundled seed 002 server
//! ([`crate::mock::mcp_server`]), started beside the mock model — in process over a pipe on the
//! accelerated clock, over Streamable HTTP on loopback at real pace — and connected through the
//! same hub `baton serve` uses.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::args::DemoError;
use crate::agents::Registry;
use crate::mcp::{Hub, ServerSpec};
use crate::mock::mcp_server::{SERVER_NAME, SupportDesk, in_process, serve_http};

/// The bundled server, running for one call.
pub struct Bundled {
    pub hub: Arc<Hub>,
    stop: CancellationToken,
}

impl Bundled {
    /// Closes the session and stops the server.
    pub async fn stop(self) {
        self.hub.shutdown().await;
        self.stop.cancel();
    }
}

/// Starts the bundled server for `reg` (if its agents name MCP servers) and binds the set to it.
pub async fn start(reg: &mut Registry, realtime: bool) -> Result<Option<Bundled>, DemoError> {
    let servers = reg.mcp_servers();
    if servers.is_empty() {
        return Ok(None);
    }
    if let Some(other) = servers.iter().find(|s| s.as_str() != SERVER_NAME) {
        return Err(DemoError::Agents(format!(
            "the agent set names MCP server '{other}'; the demo starts only the bundled '{SERVER_NAME}' \
             server (seed 002): run the set with `baton serve` and an [mcp.{other}] table"
        )));
    }
    let stop = CancellationToken::new();
    let desk = SupportDesk::default();
    let hub = if realtime {
        let addr = serve_http(desk, "127.0.0.1:0", stop.clone())
            .await
            .map_err(|e| DemoError::Mock(format!("MCP server: {e}")))?;
        let url = url::Url::parse(&format!("http://{addr}/mcp"))
            .map_err(|e| DemoError::Mock(format!("MCP server: {e}")))?;
        Hub::start(vec![ServerSpec::http(SERVER_NAME, url)])
    } else {
        let spec = ServerSpec::http(
            SERVER_NAME,
            url::Url::parse("http://in-process/mcp").map_err(|e| DemoError::Mock(e.to_string()))?,
        );
        Hub::start_with(vec![(spec, in_process(desk))])
    };
    hub.ready(Duration::from_secs(10)).await;
    reg.bind_mcp(hub.catalog())
        .map_err(|missing| DemoError::Agents(format!("MCP servers missing: {missing:?}")))?;
    Ok(Some(Bundled { hub, stop }))
}

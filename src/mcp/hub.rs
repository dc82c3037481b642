//! A daemon's MCP servers: one supervisor task per server keeps one client session open (connect,
//! fetch the tools, refetch on `notifications/tools/list_changed`, reconnect with back-off when it
//! closes — for stdio a fresh child — until shutdown), and publishes what calls read without
//! locks: the server's [`Link`] (the live session, if any) and its tools in the [`Catalog`].
//!
//! A server that is down never stops the daemon: its status says why, its tools stay declared
//! from the last list (calls get an error response until it is back), and the supervisor keeps
//! trying. Tools whose schemas cannot be declared are refused at load with the server, the tool
//! and the keyword named ([`Refusal`]), logged, and listed in the status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::{ArcSwap, ArcSwapOption};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::call::McpTool;
use super::client::{self, Handler, Session};
use super::config::ServerSpec;
pub use super::link::{Conn, Link, Refusal, ServerStatus, State};

/// First wait before reconnecting; doubled per failure up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between reconnects.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A session that lasted this long resets the back-off.
const STABLE: Duration = Duration::from_secs(30);

/// How long a shutdown waits for every server's supervisor to end (a stdio child stopped).
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// The tools a server offers now.
#[derive(Default)]
pub struct ToolSet {
    pub tools: Vec<Arc<McpTool>>,
}

/// One server in the catalog.
pub struct ServerEntry {
    pub spec: ServerSpec,
    pub link: Arc<Link>,
    pub tools: ArcSwap<ToolSet>,
}

/// Every configured server's tools, read by calls without locks.
#[derive(Default)]
pub struct Catalog {
    servers: BTreeMap<String, Arc<ServerEntry>>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("servers", &self.names())
            .finish()
    }
}

impl Catalog {
    /// The servers' names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.servers.keys().cloned().collect()
    }

    pub fn has(&self, name: &str) -> bool {
        self.servers.contains_key(name)
    }

    /// The tools `server` offers now (empty for an unknown server or before the first list).
    pub fn tools(&self, server: &str) -> Arc<ToolSet> {
        self.servers
            .get(server)
            .map(|e| e.tools.load_full())
            .unwrap_or_default()
    }

    /// Server `server`'s state in words (`connecting`, `down: why`) while it is not connected;
    /// `None` when it is, or when the catalog does not have it.
    pub fn unconnected(&self, server: &str) -> Option<String> {
        let link = &self.servers.get(server)?.link;
        (link.status.load().state != State::Connected).then(|| link.state_text())
    }

    /// A catalog of one server that is not connected, holding `tools` as its last list: agents
    /// see and may call them (each call answers that the server is unavailable). For checking a
    /// set's declarations without a server.
    pub fn offline(name: &str, tools: Vec<rmcp::model::Tool>) -> Arc<Catalog> {
        let spec = ServerSpec {
            name: name.to_owned(),
            transport: super::config::Transport::Stdio {
                command: "offline".into(),
                args: Vec::new(),
                env: BTreeMap::new(),
                cwd: None,
            },
            timeout: super::config::DEFAULT_TIMEOUT,
            timeouts: BTreeMap::new(),
            connect_timeout: super::config::DEFAULT_CONNECT_TIMEOUT,
        };
        let link = Arc::new(Link {
            conn: ArcSwapOption::empty(),
            slots: tokio::sync::Semaphore::new(1),
            status: ArcSwap::from_pointee(ServerStatus {
                name: spec.name.clone(),
                endpoint: "offline".into(),
                state: State::Down,
                tools: Vec::new(),
                refused: Vec::new(),
                error: Some("offline".into()),
                sessions: 0,
                tool_lists: 0,
            }),
        });
        let entry = ServerEntry {
            spec: spec.clone(),
            link,
            tools: ArcSwap::from_pointee(ToolSet::default()),
        };
        let (set, refused) = build_tools(&entry, tools);
        let names: Vec<String> = set.iter().map(|t| t.name.clone()).collect();
        entry.tools.store(Arc::new(ToolSet { tools: set }));
        entry.link.update(|s| {
            s.tools = names.clone();
            s.refused = refused.clone();
        });
        let mut servers = BTreeMap::new();
        servers.insert(spec.name.clone(), Arc::new(entry));
        Arc::new(Catalog { servers })
    }

    /// Every server's status.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.servers
            .values()
            .map(|e| (**e.link.status.load()).clone())
            .collect()
    }
}

/// How the supervisor reaches a server: by its config, or over an in-process pipe (the demo's
/// bundled server on a paused clock).
#[derive(Clone)]
pub enum Connector {
    Spec,
    /// Each connect calls this for a fresh byte stream to a server.
    InProcess(Arc<dyn Fn() -> tokio::io::DuplexStream + Send + Sync>),
}

/// A daemon's MCP servers and their supervisors.
pub struct Hub {
    catalog: Arc<Catalog>,
    shutdown: CancellationToken,
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Hub {
    /// Starts one supervisor per server (on the current tokio runtime) and returns at once; the
    /// servers connect in the background.
    pub fn start(specs: Vec<ServerSpec>) -> Arc<Hub> {
        Hub::start_with(specs.into_iter().map(|s| (s, Connector::Spec)).collect())
    }

    /// [`Hub::start`] with a connector per server.
    pub fn start_with(servers: Vec<(ServerSpec, Connector)>) -> Arc<Hub> {
        let shutdown = CancellationToken::new();
        let mut entries = BTreeMap::new();
        let mut work = Vec::new();
        for (spec, connector) in servers {
            let link = Arc::new(Link {
                conn: ArcSwapOption::empty(),
                slots: tokio::sync::Semaphore::new(slots(&spec)),
                status: ArcSwap::from_pointee(ServerStatus {
                    name: spec.name.clone(),
                    endpoint: match connector {
                        Connector::Spec => spec.endpoint(),
                        Connector::InProcess(_) => "in-process".into(),
                    },
                    state: State::Connecting,
                    tools: Vec::new(),
                    refused: Vec::new(),
                    error: None,
                    sessions: 0,
                    tool_lists: 0,
                }),
            });
            let entry = Arc::new(ServerEntry {
                spec: spec.clone(),
                link,
                tools: ArcSwap::from_pointee(ToolSet::default()),
            });
            entries.insert(spec.name.clone(), entry.clone());
            work.push((entry, connector));
        }
        let catalog = Arc::new(Catalog { servers: entries });
        let tasks = work
            .into_iter()
            .map(|(entry, connector)| {
                tokio::spawn(supervise(entry, connector, shutdown.child_token()))
            })
            .collect();
        Arc::new(Hub {
            catalog,
            shutdown,
            tasks: std::sync::Mutex::new(tasks),
        })
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.clone()
    }

    pub fn status(&self) -> Vec<ServerStatus> {
        self.catalog.status()
    }

    /// Waits until every server has been tried once (connected with its tools listed, or down),
    /// at most `within`.
    pub async fn ready(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.status().iter().all(|s| s.state != State::Connecting) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Closes every session (a stdio child is stopped) and ends the supervisors, all of them
    /// within [`SHUTDOWN_WAIT`] together.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        let tasks = self
            .tasks
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        let deadline = tokio::time::Instant::now() + SHUTDOWN_WAIT;
        for t in tasks {
            let _ = tokio::time::timeout_at(deadline, t).await;
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// How many calls may be in flight on a server's session at once.
fn slots(spec: &ServerSpec) -> usize {
    match &spec.transport {
        super::config::Transport::Http { max_concurrent, .. } => *max_concurrent,
        super::config::Transport::Stdio { .. } => 1024,
    }
}

/// Tries every server once (connect and list its tools, within its connect timeout) and says how
/// it went; for `check-config`.
pub async fn probe(specs: Vec<ServerSpec>) -> Vec<ServerStatus> {
    let within = specs
        .iter()
        .map(|s| s.connect_timeout)
        .max()
        .unwrap_or_default()
        + Duration::from_secs(1);
    let hub = Hub::start(specs);
    hub.ready(within).await;
    let status = hub.status();
    hub.shutdown().await;
    status
}

async fn connect(entry: &ServerEntry, connector: &Connector) -> Result<Session, String> {
    let handler = Handler::default();
    match connector {
        Connector::Spec => client::connect(&entry.spec, handler)
            .await
            .map_err(|e| e.to_string()),
        Connector::InProcess(make) => {
            use rmcp::ServiceExt;
            let (r, w) = tokio::io::split(make());
            handler
                .serve((r, w))
                .await
                .map_err(|e| format!("the MCP handshake failed: {}", client::plain_words(&e)))
        }
    }
}

/// Keeps one session with the server open until `stop`.
async fn supervise(entry: Arc<ServerEntry>, connector: Connector, stop: CancellationToken) {
    let name = entry.spec.name.clone();
    let link = entry.link.clone();
    let mut backoff = FIRST_BACKOFF;
    // The status starts `connecting`; once an attempt has failed it stays `down` (with the last
    // reason) through every retry until a session is open again, so a reader never sees a server
    // that is known to be unreachable as merely connecting.
    loop {
        let attempt = tokio::select! {
            r = connect(&entry, &connector) => r,
            _ = stop.cancelled() => return,
        };
        match attempt {
            Ok(session) => {
                let opened = Instant::now();
                link.update(|s| s.sessions += 1);
                let conn = Arc::new(Conn {
                    peer: session.peer().clone(),
                    handler: session.service().clone(),
                    lost: CancellationToken::new(),
                });
                let reason = match refresh(&entry, &conn).await {
                    Ok(()) => {
                        link.conn.store(Some(conn.clone()));
                        link.update(|s| {
                            s.state = State::Connected;
                            s.error = None;
                        });
                        tracing::info!(server = %name, "MCP server connected");
                        hold(&entry, &conn, session, &stop).await
                    }
                    Err(e) => {
                        let mut session = session;
                        let _ = session.close_with_timeout(Duration::from_secs(5)).await;
                        Some(e)
                    }
                };
                link.conn.store(None);
                let Some(reason) = reason else {
                    link.update(|s| s.state = State::Down);
                    return; // shutdown
                };
                let reason = without_query(&entry.spec, reason);
                tracing::warn!(server = %name, %reason, "MCP server session ended; reconnecting");
                link.update(|s| {
                    s.state = State::Down;
                    s.error = Some(reason.clone());
                });
                if opened.elapsed() >= STABLE {
                    backoff = FIRST_BACKOFF;
                }
            }
            Err(reason) => {
                let reason = without_query(&entry.spec, reason);
                tracing::warn!(server = %name, %reason, retry_in_ms = backoff.as_millis() as u64, "MCP server unavailable");
                link.update(|s| {
                    s.state = State::Down;
                    s.error = Some(reason.clone());
                });
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.cancelled() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// While the session is open: refetch the tools on every `list_changed`. Returns why it ended
/// (`None`: shutdown, after closing the session; a stdio child is stopped).
async fn hold(
    entry: &ServerEntry,
    conn: &Conn,
    session: Session,
    stop: &CancellationToken,
) -> Option<String> {
    let changed = conn.handler.tools_changed.clone();
    let close = session.cancellation_token();
    let mut ended = Box::pin(session.waiting());
    loop {
        tokio::select! {
            _ = stop.cancelled() => {
                close.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(5), &mut ended).await;
                return None;
            }
            _ = changed.notified() => {
                if let Err(e) = refresh(entry, conn).await {
                    close.cancel();
                    let _ = tokio::time::timeout(Duration::from_secs(5), &mut ended).await;
                    return Some(e);
                }
                tracing::info!(server = %entry.spec.name, "MCP tools list changed");
            }
            _ = conn.lost.cancelled() => {
                close.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(5), &mut ended).await;
                return Some("a tool call could not reach the server".into());
            }
            r = &mut ended => {
                return Some(match r {
                    Ok(reason) => format!("the session ended ({reason:?})"),
                    Err(e) => format!("the session task failed: {e}"),
                });
            }
        }
    }
}

/// `reason` with the server's URL, where the HTTP client quoted it, shown without its query or
/// user info (a token there must not reach `/healthz` or the log).
fn without_query(spec: &ServerSpec, reason: String) -> String {
    match &spec.transport {
        super::config::Transport::Http { url, .. } => {
            reason.replace(url.as_str(), &crate::secret::url_shown(url))
        }
        _ => reason,
    }
}

/// Lists the tools, translates them, and publishes the set.
async fn refresh(entry: &ServerEntry, conn: &Conn) -> Result<(), String> {
    let list = conn
        .peer
        .list_all_tools()
        .await
        .map_err(|e| format!("tools/list failed: {}", client::plain_words(&e)))?;
    let (tools, refused) = build_tools(entry, list);
    for r in &refused {
        tracing::warn!("{r}");
    }
    let names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
    entry.tools.store(Arc::new(ToolSet { tools }));
    entry.link.update(|s| {
        s.tools = names.clone();
        s.refused = refused.clone();
        s.tool_lists += 1;
    });
    Ok(())
}

/// Names baton generates for handoffs (the agents' transfer tools share this prefix).
pub const RESERVED_PREFIX: &str = "transfer_to_";

/// A function name both models accept.
fn declarable_name(name: &str) -> bool {
    name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The schema to declare for an MCP tool `t` of `server`, or why it is refused.
pub fn check_tool(server: &str, t: &rmcp::model::Tool) -> Result<Value, Refusal> {
    let name = t.name.to_string();
    let refuse = |keyword: &str, reason: String| Refusal {
        server: server.to_owned(),
        tool: name.clone(),
        keyword: keyword.to_owned(),
        reason,
    };
    if !declarable_name(&name) {
        return Err(refuse(
            "name",
            "not a function name the models accept (letters, digits, _ and -, at most 64)".into(),
        ));
    }
    if name.starts_with(RESERVED_PREFIX) {
        return Err(refuse(
            "name",
            "transfer_to_<agent> names are baton's handoff tools".into(),
        ));
    }
    let input_schema = Value::Object((*t.input_schema).clone());
    super::schema::translate(&input_schema).map_err(|e| {
        refuse(
            &e.keyword,
            format!("its input schema cannot be declared: {e}"),
        )
    })
}

fn build_tools(
    entry: &ServerEntry,
    list: Vec<rmcp::model::Tool>,
) -> (Vec<Arc<McpTool>>, Vec<Refusal>) {
    let server: Arc<str> = Arc::from(entry.spec.name.as_str());
    let mut tools = Vec::new();
    let mut refused = Vec::new();
    for t in list {
        match check_tool(&server, &t) {
            Ok(parameters) => {
                let name = t.name.to_string();
                tools.push(Arc::new(McpTool {
                    server: server.clone(),
                    description: t
                        .description
                        .as_deref()
                        .map(str::to_owned)
                        .or_else(|| t.title.clone())
                        .unwrap_or_else(|| name.clone()),
                    timeout: entry.spec.timeout_of(&name),
                    name,
                    parameters,
                    input_schema: Value::Object((*t.input_schema).clone()),
                    link: entry.link.clone(),
                }))
            }
            Err(r) => refused.push(r),
        }
    }
    (tools, refused)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::{Connector, Hub, without_query};
    use crate::mcp::config::ServerSpec;
    use crate::mcp::link::State;

    #[tokio::test(start_paused = true)]
    async fn a_server_that_failed_stays_down_while_it_is_retried() {
        // The first connect finds nobody at the other end; the retry finds a peer that never
        // answers the handshake, so the retry is still under way when the state is read.
        let tries = Arc::new(AtomicUsize::new(0));
        let silent = Arc::new(Mutex::new(Vec::new()));
        let connector = {
            let (tries, silent) = (tries.clone(), silent.clone());
            Connector::InProcess(Arc::new(move || {
                let (ours, theirs) = tokio::io::duplex(1024);
                if tries.fetch_add(1, Ordering::SeqCst) > 0 {
                    silent.lock().unwrap().push(theirs);
                }
                ours
            }))
        };
        let url = url::Url::parse("http://127.0.0.1:9/mcp").unwrap();
        let hub = Hub::start_with(vec![(ServerSpec::http("crm", url), connector)]);
        assert!(hub.ready(Duration::from_secs(1)).await);
        tokio::time::sleep(super::FIRST_BACKOFF * 2).await;
        assert_eq!(tries.load(Ordering::SeqCst), 2, "retried once");
        let status = &hub.status()[0];
        assert_eq!(status.state, State::Down, "{status:?}");
        assert!(status.error.as_ref().is_some_and(|e| !e.is_empty()));
        hub.shutdown().await;
    }

    #[test]
    fn a_token_in_the_server_url_is_not_repeated_in_its_state() {
        let url = url::Url::parse("http://127.0.0.1:9/mcp?token=s3cret").unwrap();
        let spec = ServerSpec::http("crm", url);
        let said = without_query(
            &spec,
            "error sending request for url (http://127.0.0.1:9/mcp?token=s3cret)".into(),
        );
        assert_eq!(
            said,
            "error sending request for url (http://127.0.0.1:9/mcp)"
        );
    }
}

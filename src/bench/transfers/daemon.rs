//! The daemon under test, in this process: `baton serve`'s state and HTTP/SIP service on the
//! embedded mock model, and a follower that subscribes to every call's feed as it appears and
//! keeps what the call's transfer reported.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::task::JoinHandle;

use super::TransfersError;
use crate::leg::sip::config::Transport;
use crate::server::{self, AppState};

/// The running daemon.
pub struct Daemon {
    pub app: Arc<AppState>,
    /// Its HTTP address (`/metrics`).
    pub http: SocketAddr,
    /// Its SIP address (UDP).
    pub sip: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Daemon {
    /// Starts the daemon of `config` (TOML text; `path` anchors its relative paths).
    pub async fn start(config: &str, path: &Path) -> Result<Daemon, TransfersError> {
        let mut loaded = crate::config::parse(config, path)
            .map_err(|e| TransfersError::Daemon(e.to_string()))?;
        let listener = tokio::net::TcpListener::bind(loaded.listen)
            .await
            .map_err(|e| TransfersError::Daemon(format!("cannot listen: {e}")))?;
        let http = listener
            .local_addr()
            .map_err(|e| TransfersError::Daemon(e.to_string()))?;
        loaded.listen = http;
        let app = server::state(loaded).map_err(|e| TransfersError::Daemon(e.to_string()))?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn({
            let app = app.clone();
            async move {
                let stopped = async {
                    let _ = rx.await;
                };
                if let Err(e) = server::serve(app, listener, stopped).await {
                    tracing::error!(error = %e, "the daemon under test stopped");
                }
            }
        });
        let mut sip = None;
        for _ in 0..250 {
            sip = app.sip.get().and_then(|s| s.addr(Transport::Udp));
            if sip.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let sip = sip.ok_or_else(|| {
            TransfersError::Daemon("its SIP listener did not bind within 5 s".into())
        })?;
        Ok(Daemon {
            app,
            http,
            sip,
            stop: Some(tx),
            task,
        })
    }

    /// Drains and stops it.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.task).await;
    }

    /// Follows every call that appears until `until` resolves; then waits (at most `grace`)
    /// for the calls still followed to end. Says how far it got every 10 s, out of `expected`.
    pub async fn follow_calls(
        &self,
        until: impl std::future::Future<Output = ()>,
        expected: usize,
        grace: Duration,
    ) -> Vec<CallSeen> {
        let mut seen = BTreeSet::new();
        let mut tasks: Vec<JoinHandle<CallSeen>> = Vec::new();
        tokio::pin!(until);
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let mut progress = tokio::time::interval(Duration::from_secs(10));
        progress.tick().await;
        loop {
            tokio::select! {
                _ = &mut until => break,
                _ = progress.tick() => {
                    let ended = tasks.iter().filter(|t| t.is_finished()).count();
                    eprintln!(
                        "bench transfers: {} of {expected} calls started, {ended} ended",
                        seen.len()
                    );
                }
                _ = tick.tick() => {
                    for call in self.app.calls.list() {
                        if seen.insert(call.id.clone()) {
                            let (history, rx) = call.subscribe();
                            tasks.push(tokio::spawn(follow(call.id.clone(), history, rx)));
                        }
                    }
                }
            }
        }
        let mut calls = Vec::new();
        let deadline = tokio::time::Instant::now() + grace;
        for t in tasks {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if let Ok(Ok(c)) = tokio::time::timeout(left, t).await {
                calls.push(c);
            }
        }
        calls
    }
}

/// One call's events as far as the benchmark reads them.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CallSeen {
    pub call_id: String,
    /// A `transfer_requested` event came.
    pub requested: bool,
    /// The stages in order.
    pub stages: Vec<String>,
    /// `outcome.kind` of the one `finished` event (`None`: no outcome came).
    pub outcome: Option<String>,
    /// How many `finished` events came (one per transfer).
    pub finished_events: usize,
    pub status: Option<u16>,
    pub setup_ms: Option<u64>,
    pub ring_ms: Option<u64>,
    pub total_ms: Option<u64>,
    /// Every `dead_air` window of the call (ms) and whether one was cut at the cap.
    pub dead_air_ms: Vec<u64>,
    pub dead_air_capped: bool,
    /// When the caller was bridged to the person (call clock, ms).
    pub bridged_at_ms: Option<u64>,
    /// The call ended (`call_end` came) and why.
    pub ended: bool,
    pub end_reason: Option<String>,
    /// The feed fell behind and lost this many events.
    pub lost_events: u64,
}

impl CallSeen {
    fn take(&mut self, e: &Value) {
        let u = |k: &str| e[k].as_u64();
        match e["type"].as_str() {
            Some("transfer_requested") => self.requested = true,
            Some("transfer") => match e["event"].as_str() {
                Some("stage") => {
                    if let Some(s) = e["stage"].as_str() {
                        if s == "bridged" {
                            self.bridged_at_ms = u("at_ms");
                        }
                        self.stages.push(s.to_owned());
                    }
                }
                Some("finished") => {
                    self.finished_events += 1;
                    self.outcome = e["outcome"]["kind"].as_str().map(str::to_owned);
                    self.status = u("status").and_then(|s| u16::try_from(s).ok());
                    self.setup_ms = u("setup_ms");
                    self.ring_ms = u("ring_ms");
                    self.total_ms = u("total_ms");
                }
                Some("dead_air") => {
                    self.dead_air_ms.extend(u("ms"));
                    self.dead_air_capped |= e["capped"].as_bool().unwrap_or(false);
                }
                _ => {}
            },
            Some("call_end") => {
                self.ended = true;
                self.end_reason = e["reason"].as_str().map(str::to_owned);
            }
            _ => {}
        }
    }
}

/// Reads one call's feed (its history, then live) until `call_end` or the feed closes.
async fn follow(
    call_id: String,
    history: Vec<Arc<str>>,
    mut rx: tokio::sync::broadcast::Receiver<Arc<str>>,
) -> CallSeen {
    use tokio::sync::broadcast::error::RecvError;
    let mut seen = CallSeen {
        call_id,
        ..CallSeen::default()
    };
    for line in &history {
        if let Ok(v) = serde_json::from_str::<Value>(line) {
            seen.take(&v);
        }
    }
    while !seen.ended {
        match rx.recv().await {
            Ok(line) => {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    seen.take(&v);
                }
            }
            Err(RecvError::Lagged(n)) => seen.lost_events += n,
            Err(RecvError::Closed) => break,
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfers_events_are_kept() {
        let mut c = CallSeen::default();
        for line in [
            r#"{"type":"transfer_requested","plan":"warm","at_ms":3000}"#,
            r#"{"type":"transfer","event":"stage","stage":"dialing","at_ms":3001}"#,
            r#"{"type":"transfer","event":"stage","stage":"bridged","at_ms":7000}"#,
            r#"{"type":"transfer","event":"dead_air","ms":20,"capped":false,"at_ms":7020}"#,
            r#"{"type":"transfer","event":"finished","outcome":{"kind":"connected"},"status":200,"setup_ms":40,"ring_ms":1000,"total_ms":4000,"at_ms":7000}"#,
            r#"{"type":"call_end","reason":"caller hung up","at_ms":15000}"#,
            r#"not json at all"#,
        ] {
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                c.take(&v);
            }
        }
        assert!(c.requested && c.ended);
        assert_eq!(c.stages, vec!["dialing", "bridged"]);
        assert_eq!(c.outcome.as_deref(), Some("connected"));
        assert_eq!(
            (c.setup_ms, c.ring_ms, c.status),
            (Some(40), Some(1000), Some(200))
        );
        assert_eq!(c.dead_air_ms, vec![20]);
        assert_eq!(c.bridged_at_ms, Some(7000));
        assert_eq!(c.finished_events, 1);
    }
}

//! The Asterisk AudioSocket listener: a raw TCP port (`[audiosocket] listen`) that `baton serve`
//! opens next to its HTTP one. Each connection is one call, admitted through the same call
//! registry as `/twilio` (capacity, drain, hang-up on the drain deadline), then run between an
//! AudioSocket leg and a fresh model session in tasks of its own. A connection beyond capacity,
//! or during a drain, is sent a hang-up at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::attach::{self, CallInfo, Ran, RunError};
use super::{AppState, ServeError};
use crate::call::CallReport;
use crate::leg::audiosocket::server::{self as leg, AudioSocketLegOptions};
use crate::leg::audiosocket::wire::HANGUP;

/// Binds the configured AudioSocket address (if any), records it in the state and spawns the
/// accept loop. `None` when no listener is configured.
pub async fn start(
    app: &Arc<AppState>,
    shards: Arc<super::shards::Shards>,
) -> Result<Option<JoinHandle<()>>, ServeError> {
    let Some(addr) = app.loaded.audiosocket_listen() else {
        return Ok(None);
    };
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::Bind {
            addr,
            reason: e.to_string(),
        })?;
    let bound = listener
        .local_addr()
        .map_err(|e| ServeError::Io(e.to_string()))?;
    let _ = app.audiosocket_addr.set(bound);
    tracing::info!(addr = %bound, "AudioSocket listening");
    Ok(Some(tokio::spawn(accept_loop(
        app.clone(),
        listener,
        shards,
    ))))
}

async fn accept_loop(
    app: Arc<AppState>,
    listener: TcpListener,
    shards: Arc<super::shards::Shards>,
) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and the like: try again shortly, never spin.
                tracing::warn!(error = %e, "AudioSocket accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // A 20 ms frame must not wait for the previous one's delayed ACK.
        let _ = tcp.set_nodelay(true);
        let span = tracing::info_span!("audiosocket", %peer);
        let app = app.clone();
        let moved = super::shards::hand_over(&shards, tcp, move |tcp| async move {
            serve_connection(app, tcp, peer).instrument(span).await;
        });
        if let Err(e) = moved {
            tracing::warn!(error = %e, "cannot move an AudioSocket connection to a shard; dropped");
        }
    }
}

/// One AudioSocket connection, start to end. Returns the call's report when a call ran.
pub async fn serve_connection<S>(
    app: Arc<AppState>,
    mut io: S,
    peer: SocketAddr,
) -> Option<CallReport>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let Some(slot) = app.calls.try_admit() else {
        let why = super::admission::count_refusal(&app, "audiosocket");
        tracing::debug!(%peer, "AudioSocket call hung up at once: {why}");
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            let _ = io.write_all(&HANGUP).await;
            let _ = io.shutdown().await;
        })
        .await;
        return None;
    };
    let (frames_in, frames_out) = app.metrics.frame_counters(LEG);
    let opts = AudioSocketLegOptions {
        frames_in,
        frames_out,
        ..Default::default()
    };
    let (leg, start, leg_task) = match leg::accept(io, opts).await {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "AudioSocket connection ended before the call began");
            return None;
        }
    };
    let mut slot = slot;
    // Listed for GET /calls, its event stream and the admin API; the caller is the UUID the
    // dialplan chose (its agent contexts follow it from call to call).
    let live = slot.go_live(LEG, None).ok();
    if let Some(l) = &live {
        l.publish(&serde_json::json!({
            "type": "call_start", "call_id": l.id, "leg": LEG,
            "uuid": start.uuid.to_string(), "started_unix_ms": l.started_unix_ms, "at_ms": 0,
        }));
    }
    let info = CallInfo {
        leg: LEG,
        caller: Some(start.uuid.to_string()),
    };
    let end = |reason: &str, figures| {
        if let Some(l) = &live {
            super::live::publish_end(l, reason, figures);
        }
    };
    let result = attach::run_call(&app, leg, info, live.clone(), slot.hangup.clone()).await;
    let stats = leg_stats(leg_task).await;
    let Ran {
        id,
        report,
        context_load_ms,
        ..
    } = match result {
        Ok(ran) => ran,
        Err(e) => {
            super::call_log::call_not_run(&app.metrics, LEG, &e);
            let reason = match &e {
                RunError::NoSession(e) => format!("no model session: {e}"),
                RunError::Failed(e) => format!("call failed: {e}"),
            };
            tracing::error!(uuid = %start.uuid, error = %e, "call did not run to its end");
            end(&reason, serde_json::Value::Null);
            return None;
        }
    };
    end(&report.end_reason, super::live::figures(&report));
    // Its frames are counted live, by the leg.
    super::call_log::call_ended(
        &app.metrics,
        LEG,
        &report,
        super::call_log::Extra {
            call: &id,
            uuid: Some(&start.uuid),
            context_load_ms,
            send_intervals: stats.as_ref().map(|s| &s.send_intervals),
            dtmf: stats.as_ref().map(|s| s.session.dtmf),
            ..Default::default()
        },
    );
    drop(slot);
    Some(report)
}

/// The leg kind label of this module's calls.
const LEG: &str = "audiosocket";

/// The leg's stats once its closing task ends; bounded, so a stuck peer cannot hold the call slot.
async fn leg_stats<T>(task: JoinHandle<T>) -> Option<T> {
    let abort = task.abort_handle();
    match tokio::time::timeout(Duration::from_secs(5), task).await {
        Ok(r) => r.ok(),
        Err(_) => {
            abort.abort();
            None
        }
    }
}

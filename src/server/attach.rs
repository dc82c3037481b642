//! What a call runs with beside its audio: the store (opened at `serve` start) and
//! [`run_call`], which a leg's handler uses to run one call with everything attached — the
//! caller's contexts loaded (bounded) while the model session opens, the event listeners (store
//! recorder, sidecars, the listed call's live feed), the command channel and live view the
//! admin API steers through, an optional recording — and recorded at its end.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use std::future::Future;

use super::live::{LiveCall, Steering};
use super::{AppState, ServeError};
use crate::call::tap::{Commands, EventSink};
use crate::call::{self, CallOptions, CallReport};
use crate::leg::{LegCommand, LegHandle};
use crate::store::recorder::{self, Recorder, SharedView};
use crate::store::{Store, StoreWriter, Write, new_id, now_ms};

/// The store as calls use it.
#[derive(Clone, Debug)]
pub struct StoreHandle {
    pub store: Store,
    pub writer: StoreWriter,
    pub read_timeout: Duration,
    pub recordings: Option<PathBuf>,
    /// The runtime the store's I/O runs on, when not the call's own (a call on a paused,
    /// accelerated clock must not time its database reads on that clock).
    pub io: Option<tokio::runtime::Handle>,
}

/// The store's URL from `[store]` (`url`, or the variable `url_env` names); empty: no store.
pub fn store_url(c: &crate::config::StoreConfig) -> Result<String, ServeError> {
    if c.url_env.is_empty() {
        return Ok(c.url.clone());
    }
    std::env::var(&c.url_env)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ServeError::MissingCredential {
            var: c.url_env.clone(),
            key: "store.url_env".into(),
        })
}

/// Opens `[store]` (when configured): the database, its writer (recording the calls it starts
/// as held by `instance`), the recordings folder.
pub async fn open_store(
    c: &crate::config::StoreConfig,
    instance: Option<&str>,
) -> Result<Option<StoreHandle>, ServeError> {
    let url = store_url(c)?;
    let recordings = (!c.recordings.is_empty()).then(|| PathBuf::from(&c.recordings));
    if url.is_empty() {
        if recordings.is_some() {
            tracing::warn!("store.recordings is set but no store.url: recordings are not written");
        }
        return Ok(None);
    }
    let store = Store::open(&url)
        .await
        .map_err(|e| ServeError::Store(e.to_string()))?;
    tracing::info!(store = %store.url(), "store open");
    let (writer, _task) =
        StoreWriter::spawn_as(store.clone(), c.queue, instance.map(str::to_owned));
    Ok(Some(StoreHandle {
        store,
        writer,
        read_timeout: Duration::from_millis(c.read_timeout_ms),
        recordings,
        io: None,
    }))
}

/// Retries opening the store every 5 s until it answers, then attaches it (calls started
/// meanwhile run without it); true once attached.
pub async fn reopen_store(app: &AppState) -> bool {
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if app.calls.draining() {
            return false;
        }
        match open_store(&app.loaded.config.store, Some(&app.instance_id)).await {
            Ok(Some(h)) => {
                tracing::info!(store = %h.store.url(), "store attached");
                let _ = app.store.set(h);
                return true;
            }
            Ok(None) => return false,
            Err(e) => tracing::debug!(error = %e, "store still unavailable"),
        }
    }
}

/// Who is calling, over what.
#[derive(Clone, Debug)]
pub struct CallInfo {
    /// `twilio`, `webrtc`, `fixture`, …
    pub leg: &'static str,
    pub caller: Option<String>,
}

/// A call's model session opened (with the agent set's driver), or why not.
pub type Opened = Result<
    (
        crate::model::handle::ModelSession,
        Option<crate::call::Agents>,
    ),
    crate::model::handle::OpenError,
>;

/// Why a call did not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The model session could not be opened; the leg was hung up.
    #[error(transparent)]
    NoSession(#[from] crate::model::handle::OpenError),
    #[error(transparent)]
    Failed(#[from] call::CallError),
}

/// A call's outcome for the leg's handler to log.
#[derive(Clone, Debug)]
pub struct Ran {
    pub id: String,
    pub report: CallReport,
    /// How long loading the caller's contexts took (ms).
    pub context_load_ms: Option<f64>,
    /// What happened to the caller's contexts.
    pub context_ops: Vec<crate::agents::contexts::ContextOp>,
    pub sidecars: Option<crate::agents::sidecar::SidecarReport>,
    pub recording: Option<call::recording::RecordingInfo>,
}

/// Runs one call of the daemon on `leg` with everything attached: the daemon's store, the
/// reconnect options, `hangup`, and `live` (the listed call, whose id the call takes).
pub async fn run_call(
    app: &AppState,
    leg: LegHandle,
    info: CallInfo,
    live: Option<Arc<LiveCall>>,
    hangup: tokio::sync::watch::Receiver<bool>,
) -> Result<Ran, RunError> {
    run_call_with_transfer(app, leg, info, live, hangup, None).await
}

/// [`run_call`] on a leg that takes blind transfers to a person on `transfer`.
pub async fn run_call_with_transfer(
    app: &AppState,
    leg: LegHandle,
    info: CallInfo,
    live: Option<Arc<LiveCall>>,
    hangup: tokio::sync::watch::Receiver<bool>,
    transfer: Option<crate::leg::sip::transfer::TransferPort>,
) -> Result<Ran, RunError> {
    // Keypad tones between the leg and the call (`[keypad]`).
    let hooks = super::keypad::Hooks {
        live: live.clone(),
        agents: app.agents.clone(),
        native: None,
    };
    let leg = super::keypad::tap(app, leg, hooks);
    let law = app.phone_law(&leg);
    run_call_transferable(
        app,
        Box::pin(app.open_call(law)),
        leg,
        info,
        live,
        hangup,
        transfer,
    )
    .await
}

/// [`run_call`] with the model session opened by `open` (which may tap the session first).
pub async fn run_call_opening(
    app: &AppState,
    open: impl Future<Output = Opened>,
    leg: LegHandle,
    info: CallInfo,
    live: Option<Arc<LiveCall>>,
    hangup: tokio::sync::watch::Receiver<bool>,
) -> Result<Ran, RunError> {
    run_call_transferable(app, open, leg, info, live, hangup, None).await
}

/// [`run_call_opening`] on a leg that takes blind transfers to a person (a SIP call's REFER).
pub async fn run_call_transferable(
    app: &AppState,
    open: impl Future<Output = Opened>,
    leg: LegHandle,
    info: CallInfo,
    live: Option<Arc<LiveCall>>,
    hangup: tokio::sync::watch::Receiver<bool>,
    transfer: Option<crate::leg::sip::transfer::TransferPort>,
) -> Result<Ran, RunError> {
    // The call ends when the server hangs every call up (a drain ran out) or an operator hangs
    // this one up (the admin API).
    let hangup = match &live {
        Some(l) => either(hangup, l.operator_hangup_signal()),
        None => hangup,
    };
    let attach = Attach {
        store: app.store.get().cloned(),
        live,
        opts: CallOptions {
            hangup: Some(hangup),
            transfer,
            ..app.call_options()
        },
    };
    // The leg is read while the session opens (its frames keep their arrival; a long setup
    // drops the oldest beyond `limits.leg_queue_frames`), and handed to the call afterwards.
    let cap = app.loaded.config.limits.leg_queue_frames;
    let slot = Arc::new(std::sync::Mutex::new(None));
    let filled = slot.clone();
    let open = async move {
        let (opened, leg, dropped) = leg.listen_while(open, cap).await;
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "caller frames dropped while the model session opened"
            );
        }
        if let Ok(mut s) = filled.lock() {
            *s = Some(leg);
        }
        opened
    };
    let leg = move || {
        slot.lock()
            .ok()
            .and_then(|mut s| s.take())
            .unwrap_or_else(|| unreachable!("the leg is put back before the session is used"))
    };
    run_attached(open, leg, info, attach).await
}

/// A signal that turns true when `a` or `b` does.
fn either(
    mut a: tokio::sync::watch::Receiver<bool>,
    mut b: tokio::sync::watch::Receiver<bool>,
) -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(*a.borrow() || *b.borrow());
    tokio::spawn(async move {
        // Ends with the call (its receiver dropped) at the latest.
        let fired = tokio::select! {
            r = a.wait_for(|v| *v) => r.is_ok(),
            r = b.wait_for(|v| *v) => r.is_ok(),
            _ = tx.closed() => false,
        };
        if fired {
            tx.send_replace(true);
        }
    });
    rx
}

/// What a call is run with besides its leg and model session.
pub struct Attach {
    pub store: Option<StoreHandle>,
    /// The listed call: its feed gets the call's events, the admin API its steering.
    pub live: Option<Arc<LiveCall>>,
    /// The call's own options (commands and recording are added here).
    pub opts: CallOptions,
}

/// Runs one call: `open` opens its model session (and, with an agent set, its orchestrator)
/// while the caller's contexts load; then `leg` gives the caller's leg (a leg already live waits
/// that long; a fixture starts then) and the call runs with its listeners attached.
pub async fn run_attached(
    open: impl Future<Output = Opened>,
    leg: impl FnOnce() -> LegHandle,
    info: CallInfo,
    attach: Attach,
) -> Result<Ran, RunError> {
    let Attach {
        store,
        live,
        opts: base_opts,
    } = attach;
    let id = live
        .as_ref()
        .map_or_else(|| new_id("call_"), |l| l.id.clone());
    let load = async {
        let (Some(s), Some(caller)) = (&store, &info.caller) else {
            return None;
        };
        match &s.io {
            None => Some(recorder::load_contexts(&s.store, caller, s.read_timeout).await),
            Some(io) => {
                let (st, c, limit) = (s.store.clone(), caller.clone(), s.read_timeout);
                io.spawn(async move { recorder::load_contexts(&st, &c, limit).await })
                    .await
                    .ok()
            }
        }
    };
    // The contexts load while the model session opens: neither waits for the other. Boxed:
    // inline, the two openings (and the session they hold when done) would size the call's
    // task for its whole life.
    let (opened, loaded) = Box::pin(async { tokio::join!(open, load) }).await;
    let (session, mut agents) = match opened {
        Ok(x) => x,
        Err(e) => {
            tracing::error!(call = %id, error = %e, "cannot open the model session; hanging up");
            let _ = leg().send(LegCommand::Hangup);
            return Err(RunError::NoSession(e));
        }
    };
    if let Some(agent) = agents
        .as_ref()
        .and_then(|a| a.orchestrator.history().last())
    {
        tracing::Span::current().record("agent", agent.agent.as_str());
    }
    tracing::info!(call = %id, "call started");
    let leg = leg();
    let contexts = loaded
        .as_ref()
        .map(|l| l.contexts.clone())
        .unwrap_or_default();
    let resumed_ids: Vec<String> = contexts.iter().map(|c| c.context_id.clone()).collect();
    let view = SharedView::default();
    // The admin API sees the lead agent from the moment the call runs, not only once the
    // observer has read its `agent_start` (which keeps it first, once).
    if let (Some(a), Ok(mut v)) = (agents.as_ref(), view.lock())
        && let Some(lead) = a.orchestrator.history().last()
    {
        v.active.push(lead.agent.clone());
    }
    let (commands, inbox) = Commands::channel(64);
    let mut sink = EventSink::new();
    let mut recorder_task = None;
    let mut sidecar_task = None;
    let mut feed_task = None;
    if let Some(a) = agents.as_mut() {
        let reg = a.orchestrator.registry().clone();
        a.orchestrator.resume_contexts(contexts.clone());
        let tracker =
            crate::agents::contexts::ContextTracker::new(&reg.agent(reg.primary).id, contexts);
        let rec = Recorder {
            call_id: id.clone(),
            caller: info.caller.clone(),
            writer: store.as_ref().map(|s| s.writer.clone()),
            tracker: Some(tracker),
            view: view.clone(),
        };
        recorder_task = Some(tokio::spawn(rec.run(sink.subscribe(1024))));
        if !reg.sidecars.is_empty() {
            sidecar_task = Some(tokio::spawn(crate::agents::sidecar::run(
                reg.sidecars.clone(),
                sink.subscribe(256),
                commands.clone(),
                id.clone(),
            )));
        }
        if let Some(l) = &live {
            let mut rx = sink.subscribe(1024);
            let l = l.clone();
            feed_task = Some(tokio::spawn(async move {
                while let Some(ev) = rx.recv().await {
                    l.publish_event(&ev);
                }
            }));
        }
        a.events = Some(sink);
    }
    let recording = store
        .as_ref()
        .and_then(|s| s.recordings.clone())
        .map(|dir| {
            let path = dir.join(format!("{id}.wav"));
            call::recording::spawn(&path, leg.rate, 1000)
        });
    let agent_set = agents
        .as_ref()
        .map(|a| a.orchestrator.registry().name.clone());
    if let Some(s) = &store {
        s.writer.write(Write::CallStarted {
            id: id.clone(),
            caller: info.caller.clone(),
            leg: info.leg.to_owned(),
            agent_set: agent_set.clone(),
            // The instant the call was listed, as the live view shows it: one start time.
            at: live.as_ref().map_or_else(now_ms, |l| {
                i64::try_from(l.started_unix_ms).unwrap_or(i64::MAX)
            }),
        });
    }
    if let Some(l) = &live {
        l.timed_from(leg.started_at);
        l.steer(Steering {
            caller: info.caller.clone(),
            agent_set,
            commands,
            view,
        });
    }
    let (tap, rec_task) = match recording {
        Some((t, task)) => (Some(t), Some(task)),
        None => (None, None),
    };
    let person_recording = store
        .as_ref()
        .and_then(|s| s.recordings.as_ref())
        .map(|dir| dir.join(format!("{id}.person.wav")));
    let opts = CallOptions {
        commands: Some(inbox),
        recording: tap,
        person_recording,
        ..base_opts
    };
    let result = Box::pin(call::run_with_agents(leg, session, opts, agents)).await;
    if let Some(t) = feed_task {
        // Ends when the call drops its event sink; bounded all the same.
        let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
    }
    let report = match result {
        // The call reads every hang-up signal as the server's; an operator's is said as such.
        Ok(mut r) => {
            if live.as_ref().is_some_and(|l| l.hung_up_by_operator()) {
                r.end_reason = super::live::OPERATOR_HANGUP.to_owned();
            }
            r
        }
        Err(e) => {
            tracing::error!(call = %id, error = %e, "call failed");
            return Err(RunError::Failed(e));
        }
    };
    let observed = match recorder_task {
        Some(t) => t.await.ok(),
        None => None,
    };
    let sidecars = match sidecar_task {
        Some(t) => t.await.ok(),
        None => None,
    };
    let recording = match rec_task {
        Some(t) => match t.await {
            Ok(Ok(info)) => Some(info),
            Ok(Err(e)) => {
                tracing::warn!(call = %id, error = %e, "recording failed");
                None
            }
            Err(_) => None,
        },
        None => None,
    };
    let context_load_ms = loaded.as_ref().map(|l| l.took.as_secs_f64() * 1000.0);
    if let Some(s) = &store {
        let extra = json!({
            "context_load_ms": context_load_ms,
            "context_load_timed_out": loaded.as_ref().map(|l| l.timed_out),
            "contexts_offered": resumed_ids,
            "context_ops": observed.as_ref().map(|o| o.context_ops.len()),
            "sidecars": &sidecars,
            "recording_dropped_frames": recording.as_ref().map(|r| r.dropped_frames),
            "recording_full": recording.as_ref().map(|r| r.full),
        });
        let figures = recorder::figures(&report, extra);
        s.writer.write(recorder::call_ended(&id, &report, figures));
        if let Some(r) = &recording {
            s.writer.write(Write::Recording {
                call_id: id.clone(),
                path: r.path.display().to_string(),
            });
        }
    }
    Ok(Ran {
        id,
        report,
        context_load_ms,
        context_ops: observed.map(|o| o.context_ops).unwrap_or_default(),
        sidecars,
        recording,
    })
}

//! The SIP listener (`[sip] listen`) that `baton serve` opens next to its HTTP one, and outbound
//! calls on a configured trunk (`POST /calls`, `baton call`). Each inbound INVITE is admitted
//! through the same call registry as every other leg (486 when full, 503 while draining), its
//! agent set chosen by the called user (`[sip.routes]`), then run between a SIP leg and a fresh
//! model session in tasks of its own, beside its dialog; trunks marked `register` are kept
//! registered. Every finished SIP call is reported with its media figures.

use crate::leg::sip::transfer::{BlindTransfer, TransferPort};
use crate::transfer::{Destination, Event as TransferEvent, Report, Settings as TransferSettings};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode as Http;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::attach::{self, CallInfo, RunError};
use super::calls::{CallSlot, FinishedCall, Unready};
use super::{AppState, ServeError};
use crate::leg::sip::call::{
    self, CallSettings, Connected, Dial, Ended, NotAnswered, Outcome, Parties,
};
use crate::leg::sip::config::{IpNet, SipConfig, Transport};
use crate::leg::sip::dtmf::Timing;
use crate::leg::sip::jitter::JitterConfig;
use crate::leg::sip::leg::Signal;
use crate::leg::sip::media::{MediaConfig, MediaStats};
use crate::leg::sip::register::{self, RegState};
use crate::leg::sip::ua::{self, UserAgent};
use crate::leg::sip::uas::{Capacity, DigestPolicy, Nonces, Policy};

/// The leg kind label of SIP calls.
const LEG: &str = "sip";

/// A finished SIP call, inbound or outbound, answered or not.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SipCallRecord {
    /// baton's call id, when the call ran.
    pub call_id: Option<String>,
    pub inbound: bool,
    pub parties: Parties,
    /// The final answer when baton refused (inbound) or the outcome (outbound).
    pub refused: Option<String>,
    pub outcome: Option<Outcome>,
    pub hung_up_by: Option<call::HungUpBy>,
    pub re_invites: u32,
    pub holds: u32,
    pub media: Option<MediaStats>,
    /// The call's end reason and turn count, when it ran.
    pub end_reason: Option<String>,
    pub turns: usize,
    pub underruns: u64,
}

struct Trunk {
    cfg: crate::leg::sip::config::TrunkConfig,
    uri: rsipstack::sip::Uri,
    credential: Option<rsipstack::dialog::authenticate::Credential>,
    registration: watch::Receiver<RegState>,
}

/// A running call's transfer port and its event feed.
type Transferable = (TransferPort, Option<Arc<super::live::LiveCall>>);

/// The daemon's SIP side.
pub struct SipService {
    pub ua: Arc<UserAgent>,
    pub(super) settings: CallSettings,
    policy: Policy,
    nonces: Mutex<Nonces>,
    routes: BTreeMap<String, Arc<crate::agents::Registry>>,
    trunks: BTreeMap<String, Trunk>,
    /// Running calls by baton's call id: their media's control (keys to press).
    controls: Mutex<HashMap<String, mpsc::Sender<Signal>>>,
    /// Running calls by baton's call id: where a blind transfer is asked, and the call's feed.
    transfers: Mutex<HashMap<String, Transferable>>,
    finished: broadcast::Sender<SipCallRecord>,
    cancel: CancellationToken,
    /// The trunks' registrations (they end on `cancel`, withdrawing themselves).
    registrations: Mutex<Vec<JoinHandle<()>>>,
    /// The stack's transports and the dispatch of incoming requests (they end at its shutdown).
    stack: Mutex<Vec<JoinHandle<()>>>,
}

impl SipService {
    /// The addresses SIP answers on.
    pub fn addrs(&self) -> Vec<(Transport, SocketAddr)> {
        self.ua.bound.clone()
    }

    /// The first address over `transport`.
    pub fn addr(&self, transport: Transport) -> Option<SocketAddr> {
        self.ua.addr(transport)
    }

    /// Every finished SIP call from now on.
    pub fn subscribe_finished(&self) -> broadcast::Receiver<SipCallRecord> {
        self.finished.subscribe()
    }

    /// Each trunk's registration state.
    pub fn registrations(&self) -> BTreeMap<String, RegState> {
        self.trunks
            .iter()
            .filter(|(_, t)| t.cfg.register)
            .map(|(n, t)| (n.clone(), t.registration.borrow().clone()))
            .collect()
    }

    /// Presses keys on a running SIP call (RFC 4733 events, or tones). The number of keys
    /// queued.
    pub async fn send_dtmf(
        &self,
        call_id: &str,
        digits: &str,
        timing: Option<Timing>,
    ) -> Result<usize, DtmfError> {
        let control = self
            .controls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(call_id)
            .cloned()
            .ok_or(DtmfError::NoCall)?;
        let (reply, rx) = oneshot::channel();
        control
            .send(Signal::SendDtmf {
                digits: digits.to_owned(),
                timing,
                reply,
            })
            .await
            .map_err(|_| DtmfError::NoCall)?;
        rx.await
            .map_err(|_| DtmfError::NoCall)?
            .map_err(DtmfError::NotAKey)
    }

    /// Hands the peer of a running SIP call to `to` by REFER (blind): waits for the outcome.
    /// Each event goes to the call's event feed as `{"type": "transfer", ...}`; on success
    /// baton has left the call, otherwise the call goes on as it was.
    pub async fn transfer(&self, call_id: &str, to: Destination) -> Result<Report, TransferError> {
        let (port, live) = self
            .transfers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(call_id)
            .cloned()
            .ok_or(TransferError::NoCall)?;
        let (events, mut rx) = crate::transfer::events::channel();
        // While another transfer of the call is under way this waits for room (bounded).
        port.send(BlindTransfer {
            target: to,
            settings: TransferSettings::default(),
            events,
        })
        .await
        .map_err(|_| TransferError::NoCall)?;
        while let Some(event) = rx.recv().await {
            if let Some(l) = &live {
                let mut v = serde_json::to_value(&event).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("type".into(), json!("transfer"));
                    o.insert("call_id".into(), json!(l.id));
                }
                l.publish(&v);
            }
            if let TransferEvent::Finished(report) = event {
                return Ok(report);
            }
        }
        Err(TransferError::Ended)
    }

    /// The INVITE of a call to `to` (a SIP URI, or a number or extension at the trunk's host) on
    /// trunk `trunk` (may be left out when only one is configured): the trunk's name, the
    /// target as text, and the dial.
    pub(super) fn trunk_dial(
        &self,
        to: &str,
        trunk: Option<&str>,
        from: Option<&str>,
        ring_timeout_s: Option<u64>,
    ) -> Result<(String, String, Dial), PlaceError> {
        let svc = self;
        let (name, trunk) = match trunk {
            Some(n) => (
                n.to_owned(),
                svc.trunks
                    .get(n)
                    .ok_or_else(|| PlaceError::NoTrunk(n.to_owned()))?,
            ),
            None if svc.trunks.len() == 1 => {
                let (n, t) = svc.trunks.iter().next().ok_or(PlaceError::NoSip)?;
                (n.clone(), t)
            }
            None if svc.trunks.is_empty() => {
                return Err(PlaceError::NeedTrunk(
                    "no SIP trunk is configured: add a [sip.trunks.<name>] table with the \
                     carrier's uri to place calls"
                        .into(),
                ));
            }
            None => {
                return Err(PlaceError::NeedTrunk(format!(
                    "name the trunk: {} are configured",
                    svc.trunks.keys().cloned().collect::<Vec<_>>().join(", ")
                )));
            }
        };
        let host = &trunk.uri.host_with_port;
        let target_text = if to.starts_with("sip:") || to.starts_with("sips:") {
            to.to_owned()
        } else if !to.is_empty()
            && to
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+*#-_.".contains(c))
        {
            format!("sip:{}@{host}", to)
        } else {
            return Err(PlaceError::BadTarget(to.to_owned()));
        };
        let mut target = rsipstack::sip::Uri::try_from(target_text.as_str())
            .map_err(|_| PlaceError::BadTarget(to.to_owned()))?;
        // A sips: target is TLS whatever the trunk says; otherwise the trunk's transport.
        let transport = if target_text.starts_with("sips:") {
            Transport::Tls
        } else {
            trunk.cfg.transport()
        };
        let stack_transport = match transport {
            Transport::Tcp => Some(rsipstack::sip::Transport::Tcp),
            Transport::Tls => Some(rsipstack::sip::Transport::Tls),
            Transport::Udp => None,
        };
        if let Some(t) = stack_transport
            && !target
                .params
                .iter()
                .any(|p| matches!(p, rsipstack::sip::Param::Transport(_)))
        {
            target.params.push(rsipstack::sip::Param::Transport(t));
        }
        let from_text = match (from, trunk.cfg.from.as_str(), &trunk.credential) {
            (Some(f), _, _) => f.to_owned(),
            (None, f, _) if !f.is_empty() => f.to_owned(),
            (None, _, Some(c)) => format!("sip:{}@{host}", c.username),
            (None, _, None) => format!("sip:baton@{host}"),
        };
        let lower = from_text.to_ascii_lowercase();
        if !(lower.starts_with("sip:") || lower.starts_with("sips:")) {
            return Err(PlaceError::BadFrom(from_text));
        }
        let from = rsipstack::sip::Uri::try_from(from_text.as_str())
            .map_err(|_| PlaceError::BadFrom(from_text.clone()))?;
        if let Some(r) = ring_timeout_s.filter(|r| !(1..=MAX_RING_S).contains(r)) {
            return Err(PlaceError::NoRing(r));
        }
        let dial = Dial {
            target,
            from,
            credential: trunk.credential.clone(),
            ring_timeout: Duration::from_secs(ring_timeout_s.unwrap_or(trunk.cfg.ring_timeout_s)),
            transport,
        };
        Ok((name, target_text, dial))
    }

    /// Stops registrations (withdrawing them, 3 s at most, all together) while outbound
    /// INVITEs given up on settle (their CANCELs, and the BYE of a 200 that crossed one:
    /// [`ua::SETTLE_LIMIT`] at most), then the stack: [`STOP_MAX`] in all.
    pub async fn stop(&self) {
        self.cancel.cancel();
        let take = |m: &Mutex<Vec<JoinHandle<()>>>| {
            std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner()))
        };
        let registrations = async {
            let deadline = tokio::time::Instant::now() + UNREGISTER_WAIT;
            for t in take(&self.registrations) {
                end_by(t, deadline).await;
            }
        };
        tokio::join!(registrations, self.ua.settled(ua::SETTLE_LIMIT));
        self.ua.shutdown();
        let deadline = tokio::time::Instant::now() + STACK_WAIT;
        for t in take(&self.stack) {
            end_by(t, deadline).await;
        }
    }
}

/// Waits until `deadline` for `task` to end, else aborts it.
async fn end_by(task: JoinHandle<()>, deadline: tokio::time::Instant) {
    let abort = task.abort_handle();
    if tokio::time::timeout_at(deadline, task).await.is_err() {
        abort.abort();
    }
}

/// How long a stop waits for the trunks' registrations to be withdrawn, all of them together.
const UNREGISTER_WAIT: Duration = Duration::from_secs(3);
/// How long a stop waits for the stack's own tasks once it is shut down.
const STACK_WAIT: Duration = Duration::from_secs(1);
/// The longest [`SipService::stop`] takes: the registrations withdrawn while what is on the
/// wire settles, then the stack.
pub const STOP_MAX: Duration = Duration::from_secs(
    if UNREGISTER_WAIT.as_secs() > ua::SETTLE_LIMIT.as_secs() {
        UNREGISTER_WAIT.as_secs()
    } else {
        ua::SETTLE_LIMIT.as_secs()
    } + STACK_WAIT.as_secs(),
);

/// Keys could not be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DtmfError {
    #[error("no SIP call with that id is running here")]
    NoCall,
    #[error("{0:?} is not a key (0-9, *, #, A-D; ',' pauses 500 ms, 'w' 1 s)")]
    NotAKey(char),
}

fn settings(app: &AppState, c: &SipConfig) -> CallSettings {
    CallSettings {
        ring: Duration::from_millis(c.ring_ms),
        media: MediaConfig {
            jitter: JitterConfig {
                rate: 8000,
                min_delay_ms: c.jitter_min_ms,
                max_delay_ms: c.jitter_max_ms,
            },
            symmetric: c.symmetric_rtp,
            rtp_timeout: Duration::from_secs(c.rtp_timeout_s),
            rtcp_interval: Duration::from_secs(5),
            cname: format!("baton@{}", app.instance_id),
            dtmf: Timing::default(),
        },
        codecs: c.codec_list(),
        rtp_ports: (c.rtp_port_min, c.rtp_port_max),
    }
}

/// Starts SIP when `[sip] listen` names an address: binds, registers trunks, and serves.
pub async fn start(app: &Arc<AppState>) -> Result<Option<Arc<SipService>>, ServeError> {
    let c = &app.loaded.config.sip;
    if c.listen.is_empty() {
        return Ok(None);
    }
    let tls = if c.listens().iter().any(|(t, _)| *t == Transport::Tls) {
        let read = |key: &str, file: &str| {
            std::fs::read(app.loaded.resolve(file))
                .map_err(|e| ServeError::Io(format!("{key} {file:?}: {e}")))
        };
        Some((
            read("sip.tls_cert", &c.tls_cert)?,
            read("sip.tls_key", &c.tls_key)?,
        ))
    } else {
        None
    };
    // Roots for the TLS connections baton opens (trunks reached over TLS): the configured CA
    // file, else the system's.
    let trusted = if !c.tls_ca_file.is_empty() {
        Some(
            std::fs::read(app.loaded.resolve(&c.tls_ca_file))
                .map_err(|e| ServeError::Io(format!("sip.tls_ca_file {:?}: {e}", c.tls_ca_file)))?,
        )
    } else if c.trunks.values().any(|t| t.transport() == Transport::Tls) {
        Some(ua::system_roots_pem())
    } else {
        None
    };
    let (ua, incoming) = UserAgent::start(c, tls, trusted)
        .await
        .map_err(|e| match e {
            ua::UaError::Bind { addr, reason, .. } => ServeError::Bind { addr, reason },
            other => ServeError::Io(other.to_string()),
        })?;
    let mut allow: Vec<IpNet> = c
        .allow_from
        .iter()
        .filter_map(|a| IpNet::parse(a))
        .collect();
    let mut trunks = BTreeMap::new();
    let cancel = CancellationToken::new();
    let mut tasks = Vec::new();
    for (name, t) in &c.trunks {
        allow.extend(t.allow_from.iter().filter_map(|a| IpNet::parse(a)));
        let uri = rsipstack::sip::Uri::try_from(t.uri.as_str())
            .map_err(|e| ServeError::Io(format!("sip.trunks.{name}.uri: {e}")))?;
        let credential = if t.username.is_empty() {
            None
        } else {
            let password = if t.password_env.is_empty() {
                String::new()
            } else {
                super::env_secret(&t.password_env, &format!("sip.trunks.{name}.password_env"))?
                    .expose()
                    .to_owned()
            };
            Some(rsipstack::dialog::authenticate::Credential {
                username: t.username.clone(),
                password,
                realm: None,
                auth_username: None,
            })
        };
        let (tx, rx) = watch::channel(RegState::Pending);
        if t.register
            && let Some(cred) = credential.clone()
        {
            tasks.push(tokio::spawn(register::keep_registered(
                ua.clone(),
                name.clone(),
                uri.clone(),
                cred,
                t.expires_s,
                tx,
                cancel.child_token(),
            )));
        }
        trunks.insert(
            name.clone(),
            Trunk {
                cfg: t.clone(),
                uri,
                credential,
                registration: rx,
            },
        );
    }
    let digest = if c.auth_user.is_empty() {
        None
    } else {
        Some(DigestPolicy {
            user: c.auth_user.clone(),
            password: super::env_secret(&c.auth_password_env, "sip.auth_password_env")?,
            realm: if c.auth_realm.is_empty() {
                "baton".into()
            } else {
                c.auth_realm.clone()
            },
        })
    };
    let mut routes = BTreeMap::new();
    for (user, set) in &c.routes {
        let mut reg = crate::agents::load(&app.loaded.resolve(set))
            .map_err(|e| ServeError::Agents(format!("sip.routes.{user}: {e}")))?;
        let catalog = app.mcp.as_ref().map(|h| h.catalog()).unwrap_or_default();
        reg.bind_mcp(catalog).map_err(|missing| {
            ServeError::Agents(format!(
                "sip.routes.{user}: the agents name MCP servers that are not configured: {}",
                missing.join(", ")
            ))
        })?;
        routes.insert(user.clone(), Arc::new(reg));
    }
    let (finished, _) = broadcast::channel(256);
    let svc = Arc::new(SipService {
        ua: ua.clone(),
        settings: settings(app, c),
        policy: Policy {
            allow,
            digest,
            codecs: c.codec_list(),
        },
        nonces: Mutex::new(Nonces::default()),
        routes,
        trunks,
        controls: Mutex::new(HashMap::new()),
        transfers: Mutex::new(HashMap::new()),
        finished,
        cancel,
        registrations: Mutex::new(tasks),
        stack: Mutex::new(Vec::new()),
    });
    let handler: Arc<dyn ua::Handler> = Arc::new(Handler { app: app.clone() });
    *svc.stack.lock().unwrap_or_else(|e| e.into_inner()) = vec![
        tokio::spawn(ua.clone().serve()),
        tokio::spawn(ua::dispatch(ua.clone(), incoming, handler)),
    ];
    for (t, a) in &ua.bound {
        tracing::info!(transport = %t, addr = %a, media_ip = %ua.media_ip, "SIP listening");
    }
    Ok(Some(svc))
}

struct Handler {
    app: Arc<AppState>,
}

impl ua::Handler for Handler {
    fn invite(&self, tx: rsipstack::transaction::transaction::Transaction) {
        let app = self.app.clone();
        let span = tracing::info_span!(
            "sip",
            call_id = %tx.original.call_id_header().map(|c| c.value().to_owned()).unwrap_or_default(),
            to = %ua::called_user(&tx.original),
        );
        tokio::spawn(inbound(app, tx).instrument(span));
    }

    fn taking_calls(&self) -> bool {
        self.app.calls.unready().is_none()
    }
}

use rsipstack::sip::prelude::*;

async fn inbound(app: Arc<AppState>, tx: rsipstack::transaction::transaction::Transaction) {
    let Some(svc) = app.sip.get().cloned() else {
        return;
    };
    let slot = app.calls.try_admit();
    let capacity = match (&slot, super::admission::refusal(&app)) {
        (Some(_), _) => Capacity::Open,
        (None, Some((Unready::Draining, why))) => Capacity::Draining(why),
        (None, Some((_, why))) => Capacity::Full(why),
        (None, None) => Capacity::Full("baton is at its call limit".into()),
    };
    let parties_hint = Parties {
        call_id: tx
            .original
            .call_id_header()
            .map(|c| c.value().to_owned())
            .unwrap_or_default(),
        to: ua::called_user(&tx.original),
        source: ua::source_ip(&tx.original),
        ..Parties::default()
    };
    let connected = call::answer(
        svc.ua.clone(),
        tx,
        &svc.policy,
        capacity,
        &svc.nonces,
        &svc.settings,
    )
    .await;
    match connected {
        Ok(c) => {
            let Some(slot) = slot else {
                return;
            };
            run(app, svc, slot, c, None).await;
        }
        Err(e) => {
            match &e {
                NotAnswered::Refused {
                    status: 486 | 503, ..
                } => {
                    super::admission::count_refusal(&app, LEG);
                }
                NotAnswered::Challenged => {
                    tracing::debug!("INVITE challenged for credentials");
                }
                other => tracing::info!(why = %other, "INVITE not answered"),
            }
            let _ = svc.finished.send(SipCallRecord {
                call_id: None,
                inbound: true,
                parties: parties_hint,
                refused: Some(e.to_string()),
                outcome: None,
                hung_up_by: None,
                re_invites: 0,
                holds: 0,
                media: None,
                end_reason: None,
                turns: 0,
                underruns: 0,
            });
        }
    }
}

/// The model session (and orchestrator) of a call routed to `set`, or the daemon's default.
async fn open_for(
    app: &AppState,
    set: Option<Arc<crate::agents::Registry>>,
) -> Result<
    (
        crate::model::handle::ModelSession,
        Option<crate::call::Agents>,
    ),
    crate::model::handle::OpenError,
> {
    let Some(reg) = set else {
        return app.open_call(None).await;
    };
    let mut cfg = app.session.clone();
    let agents = crate::call::Agents::start(reg, app.capabilities(), app.backend.clone(), &mut cfg);
    let session = app.backend.open(&cfg).await?;
    Ok((session, Some(agents)))
}

/// Runs one connected SIP call to its end. `placed` is the outcome of an outbound call.
async fn run(
    app: Arc<AppState>,
    svc: Arc<SipService>,
    mut slot: CallSlot,
    c: Connected,
    placed: Option<oneshot::Sender<String>>,
) {
    let Connected {
        leg,
        dialog,
        parties,
    } = c;
    let inbound = placed.is_none();
    let live = slot.go_live(LEG, None).ok();
    let call_id = live.as_ref().map(|l| l.id.clone());
    if let Some(l) = &live {
        l.publish(&json!({
            "type": "call_start", "call_id": l.id, "leg": LEG,
            "sip_call_id": parties.call_id, "from": parties.from, "to": parties.to,
            "direction": if inbound { "inbound" } else { "outbound" },
            "started_unix_ms": l.started_unix_ms, "at_ms": 0,
        }));
    }
    if let Some(id) = &call_id {
        svc.controls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.clone(), leg.control.clone());
        svc.transfers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.clone(), (dialog.transfers(), live.clone()));
    }
    // Told once the call takes keys and transfers: a request right after the answer finds it.
    if let (Some(tx), Some(id)) = (placed, &call_id) {
        let _ = tx.send(id.clone());
    }
    let info = CallInfo {
        leg: LEG,
        caller: (!parties.from.is_empty()).then(|| parties.from.clone()),
    };
    let set = svc.routes.get(&parties.to).cloned();
    // Keys the agent presses go out as RFC 4733 events (or tones, when the peer took none).
    let control = leg.control.clone();
    let native: super::keypad::NativeKeys = Arc::new(move |digits, timing| {
        let (reply, _) = oneshot::channel();
        let keys = Signal::SendDtmf {
            digits,
            timing: Some(timing),
            reply,
        };
        if let Err(mpsc::error::TrySendError::Full(_)) = control.try_send(keys) {
            tracing::warn!(
                "keys to press not sent: the SIP media has {} signals waiting",
                crate::leg::sip::leg::SIGNALS
            );
        }
    });
    let hooks = super::keypad::Hooks {
        live: live.clone(),
        agents: set.clone().or_else(|| app.agents.clone()),
        native: Some(native),
    };
    let handle = super::keypad::tap(&app, leg.handle, hooks);
    // The agents' transfers to a person go out on this call's own dialog.
    let transfers = dialog.transfers();
    let dialog_run = dialog.run(leg.control.clone(), leg.task);
    let call_run = attach::run_call_transferable(
        &app,
        Box::pin(open_for(&app, set)),
        handle,
        info,
        live.clone(),
        slot.hangup.clone(),
        Some(transfers),
    );
    let (ran, ended): (Result<attach::Ran, RunError>, Ended) = tokio::join!(call_run, dialog_run);
    if let Some(id) = &call_id {
        svc.controls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        svc.transfers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }
    let media = ended.media.as_ref().map(|o| o.stats.clone());
    let mut record = SipCallRecord {
        call_id: call_id.clone(),
        inbound,
        parties: parties.clone(),
        refused: None,
        outcome: (!inbound).then_some(Outcome::Answered),
        hung_up_by: Some(ended.by.clone()),
        re_invites: ended.re_invites,
        holds: ended.holds,
        media: media.clone(),
        end_reason: None,
        turns: 0,
        underruns: 0,
    };
    match ran {
        Ok(ran) => {
            let report = ran.report;
            let mut figures = super::live::figures(&report);
            if let (Some(obj), Some(m)) = (figures.as_object_mut(), &media) {
                obj.insert(
                    "sip_media".into(),
                    serde_json::to_value(m).unwrap_or_default(),
                );
            }
            if let Some(l) = &live {
                super::live::publish_end(l, &report.end_reason, figures);
            }
            super::call_log::call_ended(
                &app.metrics,
                LEG,
                &report,
                super::call_log::Extra {
                    call: &ran.id,
                    send_intervals: ended.media.as_ref().map(|o| &o.send_intervals),
                    sip: Some(super::call_log::SipEnd {
                        from: &parties.from,
                        to: &parties.to,
                        hung_up_by: &ended.by,
                        media: media.as_ref(),
                    }),
                    ..Default::default()
                },
            );
            record.end_reason = Some(report.end_reason.clone());
            record.turns = report.turns.len();
            record.underruns = report.underruns;
            app.calls.report_finished(FinishedCall {
                stream_sid: parties.call_id.clone(),
                outcome: Ok(Arc::new(report)),
            });
        }
        Err(e) => {
            super::call_log::call_not_run(&app.metrics, LEG, &e);
            tracing::error!(error = %e, "SIP call did not run to its end");
            if let Some(l) = &live {
                super::live::publish_end(l, &format!("call failed: {e}"), serde_json::Value::Null);
            }
            record.end_reason = Some(format!("call failed: {e}"));
            app.calls.report_finished(FinishedCall {
                stream_sid: parties.call_id.clone(),
                outcome: Err(e.to_string()),
            });
        }
    }
    let _ = svc.finished.send(record);
    drop(slot);
}

/// The longest ring a placed call may ask for, in seconds (an hour).
pub const MAX_RING_S: u64 = 3600;

/// Why an outbound call could not be placed at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    #[error("SIP is not configured ([sip] listen)")]
    NoSip,
    #[error("no trunk named {0:?} ([sip.trunks.<name>])")]
    NoTrunk(String),
    #[error("{0}")]
    NeedTrunk(String),
    #[error("{0:?} is not a SIP URI or a number")]
    BadTarget(String),
    #[error("from {0:?} is not a SIP URI (the caller ID, e.g. sip:+15550100@pbx.example.com)")]
    BadFrom(String),
    #[error(
        "ring_timeout_s {0} is outside 1-{MAX_RING_S} (0 could not be answered; the trunk's default is its ring_timeout_s)"
    )]
    NoRing(u64),
    #[error("{0}")]
    Unavailable(String),
}

/// An outbound call's request.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlaceRequest {
    /// A SIP URI (`sip:100@pbx.example.com`) or a number/extension dialled on the trunk.
    pub to: String,
    /// The trunk's name; may be left out when only one is configured.
    #[serde(default)]
    pub trunk: Option<String>,
    /// The caller ID (a SIP URI); default: the trunk's `from`.
    #[serde(default)]
    pub from: Option<String>,
    /// How long to ring before giving up, in seconds; default: the trunk's.
    #[serde(default)]
    pub ring_timeout_s: Option<u64>,
}

/// What an outbound call did: its outcome, and baton's call id when it was answered.
#[derive(Clone, Debug, serde::Serialize, Deserialize)]
pub struct Placed {
    #[serde(flatten)]
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

/// Places a call on a trunk and, once answered, runs it like an inbound one. Returns when the
/// call is answered or has failed.
pub async fn place(app: &Arc<AppState>, req: PlaceRequest) -> Result<Placed, PlaceError> {
    let svc = app.sip.get().cloned().ok_or(PlaceError::NoSip)?;
    let (name, target_text, dial) = svc.trunk_dial(
        &req.to,
        req.trunk.as_deref(),
        req.from.as_deref(),
        req.ring_timeout_s,
    )?;
    let Some(slot) = app.calls.try_admit() else {
        let why = super::admission::count_refusal(app, LEG);
        return Err(PlaceError::Unavailable(why));
    };
    tracing::info!(trunk = %name, to = %target_text, "placing a SIP call");
    match ring_unless_stopped(&svc, dial, slot.hangup.clone()).await {
        Ok(c) => {
            let (tx, rx) = oneshot::channel();
            let span = tracing::info_span!("sip", call_id = %c.parties.call_id, to = %target_text);
            tokio::spawn(run(app.clone(), svc.clone(), slot, c, Some(tx)).instrument(span));
            let call_id = rx.await.ok();
            Ok(Placed {
                outcome: Outcome::Answered,
                call_id,
            })
        }
        Err(outcome) => {
            tracing::info!(trunk = %name, to = %target_text, %outcome, "SIP call not answered");
            let _ = svc.finished.send(SipCallRecord {
                call_id: None,
                inbound: false,
                parties: Parties {
                    to: target_text,
                    ..Parties::default()
                },
                refused: None,
                outcome: Some(outcome.clone()),
                hung_up_by: None,
                re_invites: 0,
                holds: 0,
                media: None,
                end_reason: None,
                turns: 0,
                underruns: 0,
            });
            Ok(Placed {
                outcome,
                call_id: None,
            })
        }
    }
}

/// Places `dial`, cancelling the INVITE if the server ends every call (`hangup`: the drain's
/// deadline) while it rings, so that no phone rings on after baton is gone.
async fn ring_unless_stopped(
    svc: &SipService,
    dial: Dial,
    mut hangup: watch::Receiver<bool>,
) -> Result<Connected, Outcome> {
    let (cancel, cancelled) = oneshot::channel();
    let watch = call::Watch {
        progress: None,
        cancel: Some(cancelled),
    };
    let placing = call::place_watched(svc.ua.clone(), dial, &svc.settings, watch);
    tokio::pin!(placing);
    // Held until the placing ends: dropping it would cancel the INVITE too.
    let mut cancel = Some(cancel);
    loop {
        tokio::select! {
            r = &mut placing => return r,
            _ = hangup.wait_for(|&stop| stop), if cancel.is_some() => {
                tracing::info!("the server is ending every call: cancelling the INVITE");
                if let Some(c) = cancel.take() {
                    let _ = c.send(());
                }
            }
        }
    }
}

/// `POST /calls` (place an outbound call), `POST /calls/{id}/dtmf` (press keys on one) and
/// `POST /calls/{id}/transfer` (hand its peer to a person by REFER).
pub fn routes() -> axum::Router<Arc<AppState>> {
    axum::Router::new()
        .route("/calls", axum::routing::post(post_call))
        .route("/calls/{call}/dtmf", axum::routing::post(post_dtmf))
        .route("/calls/{call}/transfer", axum::routing::post(post_transfer))
}

fn problem(status: Http, message: String) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

async fn post_call(State(app): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    let req: PlaceRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return problem(
                Http::BAD_REQUEST,
                format!(
                    "the body is not a call request ({e}); send {{\"to\": \"sip:100@pbx\" or \"+15550100\", \"trunk\": \"name\"}}"
                ),
            );
        }
    };
    match place(&app, req).await {
        Ok(p) => {
            let status = if p.outcome == Outcome::Answered {
                Http::CREATED
            } else {
                Http::OK
            };
            (status, Json(p)).into_response()
        }
        Err(e @ (PlaceError::NoSip | PlaceError::NoTrunk(_) | PlaceError::NeedTrunk(_))) => {
            problem(Http::NOT_FOUND, e.to_string())
        }
        Err(e @ (PlaceError::BadTarget(_) | PlaceError::BadFrom(_) | PlaceError::NoRing(_))) => {
            problem(Http::BAD_REQUEST, e.to_string())
        }
        Err(e @ PlaceError::Unavailable(_)) => {
            let mut r = problem(Http::SERVICE_UNAVAILABLE, e.to_string());
            r.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(super::admission::RETRY_AFTER_S),
            );
            r
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DtmfRequest {
    digits: String,
    #[serde(default)]
    tone_ms: Option<u32>,
    #[serde(default)]
    gap_ms: Option<u32>,
}

async fn post_dtmf(
    State(app): State<Arc<AppState>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let Some(svc) = app.sip.get() else {
        return problem(Http::NOT_FOUND, PlaceError::NoSip.to_string());
    };
    let req: DtmfRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return problem(
                Http::BAD_REQUEST,
                format!("the body is not a key request ({e}); send {{\"digits\": \"1234#\"}}"),
            );
        }
    };
    let timing = (req.tone_ms.is_some() || req.gap_ms.is_some()).then(|| {
        let d = Timing::default();
        Timing {
            tone_ms: req.tone_ms.unwrap_or(d.tone_ms),
            gap_ms: req.gap_ms.unwrap_or(d.gap_ms),
        }
    });
    match svc.send_dtmf(&id, &req.digits, timing).await {
        Ok(n) => (Http::ACCEPTED, Json(json!({ "call_id": id, "keys": n }))).into_response(),
        Err(e @ DtmfError::NoCall) => problem(Http::NOT_FOUND, e.to_string()),
        Err(e) => problem(Http::BAD_REQUEST, e.to_string()),
    }
}

/// Why a blind transfer could not be asked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TransferError {
    #[error("no running SIP call with that id")]
    NoCall,
    #[error("the call ended before the transfer had an outcome")]
    Ended,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TransferRequest {
    to: String,
}

async fn post_transfer(
    State(app): State<Arc<AppState>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let Some(svc) = app.sip.get() else {
        return problem(Http::NOT_FOUND, PlaceError::NoSip.to_string());
    };
    let req: TransferRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return problem(
                Http::BAD_REQUEST,
                format!(
                    "the body is not a transfer request ({e}); send {{\"to\": \"sip:priya@pbx.example.com\" or \"+15550100\"}}"
                ),
            );
        }
    };
    let to = match Destination::parse(&req.to) {
        Ok(d) => d,
        Err(e) => return problem(Http::BAD_REQUEST, format!("to: {e}")),
    };
    match svc.transfer(&id, to).await {
        Ok(report) => {
            app.metrics.transfer(&report);
            (Http::OK, Json(report)).into_response()
        }
        Err(e) => problem(Http::NOT_FOUND, e.to_string()),
    }
}

//! One SIP call's signalling, start to end, over the stack's dialog: an inbound INVITE decided
//! ([`super::uas::decide`]) and answered (100, optionally 180 for `ring_ms`, 200 with the SDP
//! answer; a CANCEL before the answer ends it with 487), an outbound INVITE placed on a trunk
//! with its typed outcome, and then [`CallDialog::run`] beside the media: the peer's BYE, a
//! re-INVITE or UPDATE (hold, unhold, a new address or codec, answered from the current
//! offer), INFO digits, and baton's own BYE when the call or the media ends first.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rsipstack::dialog::dialog::{
    DialogState, DialogStateReceiver, TerminatedReason, TransactionHandle,
};
use rsipstack::dialog::invite_dialog::InviteDialog;
use rsipstack::sip::prelude::*;
use rsipstack::sip::{ContentType, Header, Method, StatusCode, StatusCodeKind};
use rsipstack::transaction::transaction::Transaction;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::config::Transport;
use super::leg::{self, LegEnd, LegOutcome, Signal, SipLeg};
use super::media::MediaConfig;
use super::sdp::{self, Codec, Direction, Local, Negotiated};
use super::transfer::{self, BlindTransfer, Running, Step, TransferPort};
use super::ua::{self, UserAgent};
use super::uas::{self, Capacity, Decision, InviteFacts, Nonces, Policy};
use crate::leg::StopReason;

/// How calls are answered and run.
#[derive(Clone, Debug)]
pub struct CallSettings {
    /// Ring this long (180) before answering.
    pub ring: Duration,
    pub media: MediaConfig,
    pub codecs: Vec<Codec>,
    pub rtp_ports: (u16, u16),
}

/// Who is calling whom.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Parties {
    pub call_id: String,
    /// The caller's user part (a number or extension), else its whole From URI.
    pub from: String,
    /// The called user part (Request-URI), which routes the call.
    pub to: String,
    pub source: Option<IpAddr>,
    pub transport: String,
}

/// An inbound INVITE that did not become a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAnswered {
    #[error("refused with {status}: {reason}")]
    Refused { status: u16, reason: String },
    #[error("challenged for credentials (401)")]
    Challenged,
    #[error("the caller cancelled before the answer")]
    Cancelled,
    #[error("could not answer: {0}")]
    Failed(String),
}

/// A call baton answered or placed: its media leg, and its dialog for [`CallDialog::run`].
pub struct Connected {
    pub leg: SipLeg,
    pub dialog: CallDialog,
    pub parties: Parties,
}

/// The dialog side of a running call.
pub struct CallDialog {
    ua: Arc<UserAgent>,
    dialog: InviteDialog,
    states: DialogStateReceiver,
    local: Local,
    codecs: Vec<Codec>,
    current: Negotiated,
    /// The INVITE's server transaction (inbound calls), run until ACK.
    invite: Option<JoinHandle<()>>,
    /// Blind transfers asked of this call ([`CallDialog::transfers`]).
    transfers: mpsc::Receiver<BlindTransfer>,
    transfer_tx: TransferPort,
}

/// How a call's signalling ended.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HungUpBy {
    /// The peer sent BYE (or the dialog ended on its side).
    Peer,
    /// baton sent BYE: the call ended (the agent, an operator, a drain).
    Baton,
    /// baton sent BYE because no RTP came.
    MediaTimeout,
    /// baton sent BYE after the peer was transferred (REFER, NOTIFY 2xx).
    Transferred,
}

impl HungUpBy {
    /// The name logs and the call record use (`peer`, `baton`, `media_timeout`, `transferred`).
    pub fn name(&self) -> &'static str {
        match self {
            HungUpBy::Peer => "peer",
            HungUpBy::Baton => "baton",
            HungUpBy::MediaTimeout => "media_timeout",
            HungUpBy::Transferred => "transferred",
        }
    }
}

/// What [`CallDialog::run`] reports.
#[derive(Clone, Debug)]
pub struct Ended {
    pub by: HungUpBy,
    pub media: Option<LegOutcome>,
    pub re_invites: u32,
    pub holds: u32,
}

fn facts_of(tx: &Transaction) -> (Option<IpAddr>, Option<String>, Option<String>) {
    let req = &tx.original;
    (
        ua::source_ip(req),
        req.header_value("Authorization"),
        req.header_value("Content-Type"),
    )
}

fn warning(reason: &str) -> Header {
    // RFC 3261 §20.43: 399 is "miscellaneous warning"; the text is quoted.
    let text: String = reason
        .chars()
        .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
        .take(200)
        .collect();
    Header::Other("Warning".into(), format!("399 baton \"{text}\""))
}

fn parties_of(tx: &Transaction) -> Parties {
    let req = &tx.original;
    let from = req
        .from_header()
        .ok()
        .and_then(|f| f.uri().ok())
        .map(|u| {
            u.auth
                .as_ref()
                .map(|a| a.user.clone())
                .unwrap_or_else(|| u.to_string())
        })
        .unwrap_or_default();
    Parties {
        call_id: req
            .call_id_header()
            .map(|c| c.value().to_owned())
            .unwrap_or_default(),
        from,
        to: ua::called_user(req),
        source: ua::source_ip(req),
        transport: ua::transport_of(tx).to_string(),
    }
}

/// Decides on a new INVITE and, when it is taken, answers it and starts its media.
/// `capacity` says whether a call slot was free.
pub async fn answer(
    ua: Arc<UserAgent>,
    mut tx: Transaction,
    policy: &Policy,
    capacity: Capacity,
    nonces: &Mutex<Nonces>,
    settings: &CallSettings,
) -> Result<Connected, NotAnswered> {
    let (source, authorization, content_type) = facts_of(&tx);
    let request_uri = tx.original.uri.to_string();
    let body = tx.original.body.clone();
    let decision = {
        let facts = InviteFacts {
            source,
            authorization: authorization.as_deref(),
            request_uri: &request_uri,
            content_type: content_type.as_deref(),
            body: &body,
        };
        let mut n = nonces.lock().unwrap_or_else(|e| e.into_inner());
        uas::decide(&facts, policy, &capacity, &mut n, Instant::now())
    };
    let (offer, negotiated) = match decision {
        Decision::Reject {
            status,
            reason,
            retry_after,
        } => {
            let mut headers = vec![warning(&reason)];
            if let Some(s) = retry_after {
                headers.push(Header::Other("Retry-After".into(), s.to_string()));
            }
            if status == 488 || status == 415 {
                headers.push(Header::Other("Accept".into(), "application/sdp".into()));
            }
            let _ = tx.reply_with(StatusCode::from(status), headers, None).await;
            return Err(NotAnswered::Refused { status, reason });
        }
        Decision::Challenge(www) => {
            let headers = vec![Header::Other("WWW-Authenticate".into(), www)];
            let _ = tx.reply_with(StatusCode::Unauthorized, headers, None).await;
            return Err(NotAnswered::Challenged);
        }
        Decision::Answer { offer, negotiated } => (offer, negotiated),
    };
    let parties = parties_of(&tx);
    let sockets =
        match leg::bind_pair(ua.rtp_bind_ip, settings.rtp_ports.0, settings.rtp_ports.1).await {
            Ok(s) => s,
            Err(e) => {
                let reason = format!("no RTP port: {e}");
                let _ = tx
                    .reply_with(StatusCode::ServiceUnavailable, vec![warning(&reason)], None)
                    .await;
                return Err(NotAnswered::Failed(reason));
            }
        };
    let (state_tx, mut states) = ua.dialogs.new_dialog_state_channel();
    let contact = ua.contact("baton", ua::transport_of(&tx));
    let dialog = match ua
        .dialogs
        .get_or_create_server_invite(&tx, state_tx, None, Some(contact))
    {
        Ok(d) => d,
        Err(e) => {
            let _ = tx.reply(StatusCode::ServerInternalError).await;
            return Err(NotAnswered::Failed(e.to_string()));
        }
    };
    let mut server = dialog.clone();
    let invite = tokio::spawn(async move {
        if let Err(e) = server.handle(&mut tx).await {
            tracing::debug!(error = %e, "INVITE transaction ended with an error");
        }
    });
    let cancelled = |states: &mut DialogStateReceiver| {
        while let Ok(s) = states.try_recv() {
            if matches!(s, DialogState::Terminated(..)) {
                return true;
            }
        }
        false
    };
    if !settings.ring.is_zero() {
        let _ = dialog.ringing(None, None);
        let until = Instant::now() + settings.ring;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break,
                s = states.recv() => match s {
                    Some(DialogState::Terminated(..)) | None => {
                        ua.dialogs.remove_dialog(&dialog.id());
                        return Err(NotAnswered::Cancelled);
                    }
                    Some(_) => {}
                },
            }
        }
    }
    if cancelled(&mut states) {
        ua.dialogs.remove_dialog(&dialog.id());
        return Err(NotAnswered::Cancelled);
    }
    let local = Local {
        ip: ua.media_ip,
        port: sockets.rtp_port(),
        session_id: u64::from(leg::random_start().ssrc),
        version: 1,
    };
    let body = sdp::answer(&local, &offer, &negotiated);
    if let Err(e) = dialog.accept(
        Some(vec![Header::ContentType(ContentType::new(
            "application/sdp",
        ))]),
        Some(body.into_bytes()),
    ) {
        ua.dialogs.remove_dialog(&dialog.id());
        return Err(NotAnswered::Failed(e.to_string()));
    }
    let leg = leg::start(settings.media.clone(), negotiated.clone(), sockets);
    let (transfer_tx, transfers) = mpsc::channel(transfer::REQUESTS);
    Ok(Connected {
        leg,
        dialog: CallDialog {
            ua,
            dialog,
            states,
            local,
            codecs: settings.codecs.clone(),
            current: negotiated,
            invite: Some(invite),
            transfers,
            transfer_tx,
        },
        parties,
    })
}

impl CallDialog {
    /// Where blind transfers of this call are asked for while it runs; one at a time (a
    /// request while one is under way waits for its outcome, [`transfer::REQUESTS`] at most).
    pub fn transfers(&self) -> TransferPort {
        self.transfer_tx.clone()
    }

    /// Runs the dialog beside the media until the media ends; sends BYE when baton ends the
    /// call or has transferred it. Returns how it ended and the media's figures.
    pub async fn run(
        mut self,
        control: mpsc::Sender<Signal>,
        mut media: JoinHandle<LegOutcome>,
    ) -> Ended {
        let mut peer_gone = false;
        let mut states_open = true;
        let mut re_invites = 0;
        let mut holds = 0;
        let mut transfer: Option<Running> = None;
        let mut transferred = false;
        let outcome = loop {
            let wake = transfer
                .as_ref()
                .and_then(Running::deadline)
                .map(Instant::from_std);
            let step = tokio::select! {
                r = &mut media => break r.ok(),
                req = self.transfers.recv(), if transfer.is_none() && !peer_gone && !transferred => {
                    let Some(req) = req else { continue };
                    let mut t = Running::start(req, std::time::Instant::now());
                    let step = t.begin(&self.dialog).await;
                    transfer = Some(t);
                    step
                }
                answer = refer_answer(&mut transfer) => match transfer.as_mut() {
                    Some(t) => t.refer_answered(&self.dialog, answer).await,
                    None => Step::Continue,
                },
                _ = sleep_until_some(wake), if wake.is_some() => match transfer.as_mut() {
                    Some(t) => t.timeout(&self.dialog).await,
                    None => Step::Continue,
                },
                s = self.states.recv(), if states_open => match s {
                    None => {
                        states_open = false;
                        Step::Continue
                    }
                    Some(DialogState::Terminated(_, reason)) => {
                        if !peer_gone {
                            tracing::info!(reason = ?reason, "SIP dialog ended");
                        }
                        peer_gone = true;
                        let why = if matches!(reason, TerminatedReason::Timeout) {
                            tracing::warn!("no ACK for baton's answer: the call is dropped");
                            StopReason::Failed(NO_ACK.into())
                        } else {
                            StopReason::HungUp
                        };
                        let _ = control.send(Signal::Hangup(why)).await;
                        if let Some(t) = transfer.as_mut() {
                            t.caller_hung_up();
                        }
                        Step::Continue
                    }
                    Some(DialogState::Updated(_, req, handle)) => {
                        re_invites += 1;
                        if let Some(n) = self.renegotiate(&req, handle).await {
                            if !n.sends() && self.current.sends() {
                                holds += 1;
                            }
                            self.current = n.clone();
                            let _ = control.send(Signal::Update(n)).await;
                        }
                        Step::Continue
                    }
                    Some(DialogState::Info(_, req, handle)) => {
                        let ct = req.header_value("Content-Type").unwrap_or_default();
                        match super::dtmf::parse_info(&ct, &req.body) {
                            Some(d) => {
                                let _ = control.send(Signal::Dtmf(d)).await;
                                let _ = handle.reply(StatusCode::OK).await;
                            }
                            None => {
                                let _ = handle.reply(StatusCode::UnsupportedMediaType).await;
                            }
                        }
                        Step::Continue
                    }
                    Some(DialogState::Options(_, _, handle)) => {
                        let _ = handle.reply(StatusCode::OK).await;
                        Step::Continue
                    }
                    Some(DialogState::Notify(_, req, handle)) => {
                        let event = req.header_value("Event").unwrap_or_default();
                        let refer = event.split(';').next().is_some_and(|e| e.trim().eq_ignore_ascii_case("refer"));
                        match transfer.as_mut() {
                            Some(t) if refer => {
                                let _ = handle.reply(StatusCode::OK).await;
                                t.notify(&self.dialog, &req.body).await
                            }
                            // RFC 6665 §4.1.3: a NOTIFY of no subscription of ours.
                            _ => {
                                let _ = handle.reply(StatusCode::CallTransactionDoesNotExist).await;
                                Step::Continue
                            }
                        }
                    }
                    Some(
                        DialogState::Refer(_, _, handle)
                        | DialogState::Message(_, _, handle)
                        | DialogState::Publish(_, _, handle),
                    ) => {
                        let _ = handle.reply(StatusCode::NotImplemented).await;
                        Step::Continue
                    }
                    Some(_) => Step::Continue,
                },
            };
            if transfer.as_ref().is_some_and(Running::finished) {
                transfer = None;
            }
            if step == Step::Leave && !transferred {
                // The peer is with the destination now: baton leaves the call, and its media
                // ends as on the peer's BYE.
                transferred = true;
                // The final NOTIFY's 200 goes out from the stack's transaction task; a beat
                // keeps the BYE from overtaking it (strict peers take that as out of order).
                tokio::time::sleep(NOTIFY_SETTLE).await;
                match tokio::time::timeout(Duration::from_secs(5), self.dialog.bye()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::debug!(error = %e, "BYE after the transfer failed"),
                    Err(_) => tracing::debug!("BYE after the transfer got no answer in 5 s"),
                }
                let _ = control.send(Signal::Hangup(StopReason::HungUp)).await;
            }
        };
        let by = match outcome.as_ref().map(|o| &o.end) {
            _ if transferred => HungUpBy::Transferred,
            Some(LegEnd::Media(_)) if !peer_gone => HungUpBy::MediaTimeout,
            Some(LegEnd::Call) if !peer_gone => HungUpBy::Baton,
            _ => HungUpBy::Peer,
        };
        if !matches!(by, HungUpBy::Peer | HungUpBy::Transferred) {
            match tokio::time::timeout(Duration::from_secs(5), self.dialog.bye()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(error = %e, "BYE failed"),
                Err(_) => tracing::debug!("BYE got no answer in 5 s"),
            }
        }
        self.ua.dialogs.remove_dialog(&self.dialog.id());
        if let Some(t) = self.invite.take() {
            // Done once the ACK (or its timeout) ended it.
            let abort = t.abort_handle();
            if tokio::time::timeout(Duration::from_secs(1), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        Ended {
            by,
            media: outcome,
            re_invites,
            holds,
        }
    }

    /// Answers a re-INVITE or UPDATE: the new media, or 488 (the old media stays).
    async fn renegotiate(
        &mut self,
        req: &rsipstack::sip::Request,
        handle: TransactionHandle,
    ) -> Option<Negotiated> {
        let sdp_ct = vec![Header::ContentType(ContentType::new("application/sdp"))];
        if req.body.is_empty() {
            // An offer is asked of baton (a session refresh): the current media, unchanged.
            let body = if req.method == Method::Invite {
                Some(sdp::offer_current(&self.local, &self.current).into_bytes())
            } else {
                None
            };
            let _ = handle.respond(StatusCode::OK, Some(sdp_ct), body).await;
            return None;
        }
        let rejecting = handle.clone();
        let reject = |reason: String| async move {
            let _ = rejecting
                .respond(
                    StatusCode::NotAcceptableHere,
                    Some(vec![warning(&reason)]),
                    None,
                )
                .await;
        };
        let offer = match sdp::parse(&req.body) {
            Ok(o) => o,
            Err(e) => {
                reject(e.to_string()).await;
                return None;
            }
        };
        let mut n = match sdp::negotiate(&offer, &self.codecs) {
            Ok(n) => n,
            Err(e) => {
                reject(e.to_string()).await;
                return None;
            }
        };
        // Keep the codec baton already sends when it is still offered on the same payload
        // type (with the event payload that goes with it); a re-offer without it changes codec.
        let still_offered = offer.formats.iter().any(|f| {
            f.pt == self.current.pt && sdp::Codec::from_name(&f.name) == Some(self.current.codec)
        });
        if n.codec != self.current.codec
            && still_offered
            && let Ok(kept) = sdp::negotiate(&offer, &[self.current.codec])
        {
            n = kept;
        }
        self.local.version += 1;
        let body = sdp::answer(&self.local, &offer, &n);
        let _ = handle
            .respond(StatusCode::OK, Some(sdp_ct), Some(body.into_bytes()))
            .await;
        tracing::info!(
            codec = %n.codec,
            direction = n.direction.attr(),
            to = %n.remote_rtp,
            "SIP media changed"
        );
        Some(n)
    }

    /// baton's current direction.
    pub fn direction(&self) -> Direction {
        self.current.direction
    }
}

/// The final answer of the REFER in flight, if any (pending forever otherwise).
async fn refer_answer(transfer: &mut Option<Running>) -> Result<u16, String> {
    match transfer {
        Some(t) => t.refer_answer().await,
        None => std::future::pending().await,
    }
}

/// How long the BYE that ends a transferred call waits for the final NOTIFY's 200 to leave.
const NOTIFY_SETTLE: Duration = Duration::from_millis(50);

/// Why a call whose answer was never acknowledged ends (the peer never took the call).
const NO_ACK: &str = "no ACK for baton's answer";

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// How an outbound call turned out.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Answered,
    Busy { status: u16 },
    NoAnswer { status: Option<u16> },
    Rejected { status: u16, reason: String },
    Failed { reason: String },
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Answered => f.write_str("answered"),
            Outcome::Busy { status } => write!(f, "busy ({status})"),
            Outcome::NoAnswer { status: Some(s) } => write!(f, "no answer ({s})"),
            Outcome::NoAnswer { status: None } => f.write_str("no answer (nobody picked up)"),
            Outcome::Rejected { status, reason } => write!(f, "rejected ({status} {reason})"),
            Outcome::Failed { reason } => write!(f, "failed: {reason}"),
        }
    }
}

/// A response's reason: its Reason header (RFC 3326) when it has one, else the status text.
pub fn reason_of(resp: &rsipstack::sip::Response) -> String {
    resp.reason_phrase()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| resp.status_code.text())
        .to_owned()
}

/// A 408 the stack made itself when a client transaction timed out (nothing answered): a
/// peer's final response carries a To tag (RFC 3261 8.2.6.2), the stack's copies the request's
/// To, which has none.
pub fn timed_out_here(resp: &rsipstack::sip::Response) -> bool {
    resp.status_code == StatusCode::RequestTimeout
        && resp
            .to_header()
            .ok()
            .and_then(|to| to.tag().ok())
            .is_some_and(|tag| tag.is_none())
}

/// The outcome a final response means.
pub fn outcome_of(status: u16, reason: &str) -> Outcome {
    match status {
        200..=299 => Outcome::Answered,
        486 | 600 => Outcome::Busy { status },
        408 | 480 | 487 => Outcome::NoAnswer {
            status: Some(status),
        },
        _ => Outcome::Rejected {
            status,
            reason: reason.to_owned(),
        },
    }
}

/// The outcome of an INVITE still unanswered after `waited` (the ring timeout): no answer when
/// the trunk said it was trying or ringing, failed when nothing came back at all (unreachable,
/// refused connection, wrong address).
pub fn unanswered(responded: bool, waited: Duration) -> Outcome {
    if responded {
        Outcome::NoAnswer { status: None }
    } else {
        Outcome::Failed {
            reason: format!(
                "no response from the trunk within {} s (is its address right and reachable?)",
                waited.as_secs()
            ),
        }
    }
}

/// Where and as whom to place an outbound call.
#[derive(Clone)]
pub struct Dial {
    pub target: rsipstack::sip::Uri,
    pub from: rsipstack::sip::Uri,
    pub credential: Option<rsipstack::dialog::authenticate::Credential>,
    pub ring_timeout: Duration,
    pub transport: Transport,
}

impl std::fmt::Debug for Dial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The credential's password never prints.
        f.debug_struct("Dial")
            .field("target", &self.target.to_string())
            .field("from", &self.from.to_string())
            .field("authenticated", &self.credential.is_some())
            .field("ring_timeout", &self.ring_timeout)
            .field("transport", &self.transport)
            .finish()
    }
}

/// What an outbound INVITE has heard so far, before its final answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// 180: the phone rings.
    Ringing,
    /// 183 (or a 18x with a body): early media — ringback, an announcement, music.
    EarlyMedia,
}

/// Who is told how an outbound INVITE progresses, and what cancels it.
#[derive(Default)]
pub struct Watch {
    /// The newest provisional answer: progress is state, so a newer answer replaces one not yet
    /// seen and a repeat of the value there (another 180) changes nothing. However many 18x a
    /// peer sends, this holds one value and the INVITE never waits on its reader.
    pub progress: Option<tokio::sync::watch::Sender<Option<Progress>>>,
    /// The INVITE is cancelled (CANCEL) when this fires or its sender is dropped.
    pub cancel: Option<tokio::sync::oneshot::Receiver<()>>,
}

/// Places a call: INVITE with baton's offer, digest answered when challenged, CANCEL after
/// `ring_timeout`; on 2xx the media starts. Early media is ignored.
pub async fn place(
    ua: Arc<UserAgent>,
    dial: Dial,
    settings: &CallSettings,
) -> Result<Connected, Outcome> {
    place_watched(ua, dial, settings, Watch::default()).await
}

/// [`place`], telling `watch.progress` the newest provisional answer and sending CANCEL as soon
/// as `watch.cancel` fires (the outcome is then no answer at once; a final status that crosses
/// the CANCEL is settled behind it: a 200 is answered with BYE). Early media is reported, never
/// played.
pub async fn place_watched(
    ua: Arc<UserAgent>,
    dial: Dial,
    settings: &CallSettings,
    watch: Watch,
) -> Result<Connected, Outcome> {
    let Watch { progress, cancel } = watch;
    let mut cancel = cancel;
    let sockets = leg::bind_pair(ua.rtp_bind_ip, settings.rtp_ports.0, settings.rtp_ports.1)
        .await
        .map_err(|e| Outcome::Failed {
            reason: format!("no RTP port: {e}"),
        })?;
    let local = Local {
        ip: ua.media_ip,
        port: sockets.rtp_port(),
        session_id: u64::from(leg::random_start().ssrc),
        version: 1,
    };
    let offer = sdp::offer(&local, &settings.codecs, Direction::SendRecv);
    let (state_tx, mut states) = ua.dialogs.new_dialog_state_channel();
    let opt = rsipstack::dialog::invitation::InviteOption {
        caller: dial.from.clone(),
        callee: dial.target.clone(),
        contact: ua.contact("baton", dial.transport),
        content_type: Some("application/sdp".into()),
        offer: Some(offer.into_bytes()),
        credential: dial.credential.clone(),
        ..Default::default()
    };
    let (dialog, task) =
        ua.dialogs
            .do_invite_async(opt, state_tx)
            .map_err(|e| Outcome::Failed {
                reason: e.to_string(),
            })?;
    let abort = task.abort_handle();
    let mut task = task;
    // Whether the trunk answered at all (100 or any provisional response): a ring timeout with
    // no answer of any kind is a failure to reach it, not a callee who did not pick up.
    let mut responded = false;
    // Provisional answers that changed nothing for `watch.progress` (repeats), counted for the log.
    let mut repeats = 0u32;
    let mut states_open = true;
    let started = Instant::now();
    // Given up on by baton (`watch.cancel`), not at the ring timeout.
    let mut called_off = false;
    let deadline = tokio::time::sleep(dial.ring_timeout);
    tokio::pin!(deadline);
    let finished = loop {
        tokio::select! {
            r = &mut task => break Some(r),
            s = states.recv(), if states_open => match s {
                Some(DialogState::Trying(_)) => responded = true,
                Some(DialogState::Early(_, resp)) => {
                    responded = true;
                    if let Some(tx) = &progress {
                        let early = u16::from(resp.status_code.clone()) == 183
                            || !resp.body.is_empty();
                        let p = if early { Progress::EarlyMedia } else { Progress::Ringing };
                        if !tx.send_if_modified(|now| now.replace(p) != Some(p)) {
                            repeats = repeats.saturating_add(1);
                        }
                    }
                }
                Some(_) => {}
                None => states_open = false,
            },
            _ = &mut deadline => break None,
            _ = cancelled(&mut cancel) => {
                called_off = true;
                break None;
            }
        }
    };
    if repeats > 0 {
        tracing::debug!(
            repeats,
            "repeated provisional answers folded into the one reported"
        );
    }
    let result = match finished {
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            return Err(Outcome::Failed {
                reason: ua::explain_tls(&e.to_string()),
            });
        }
        None => {
            // The outcome is known now, at the ring timeout (or the cancel): the CANCEL and
            // what may cross it go on behind the report, never delaying it, in a task of the
            // user agent's that its stop lets end first.
            ua.settle(cancel_invite(ua.clone(), dialog, task, abort));
            // Called off before any answer: nobody picked up, whatever the trunk had said so
            // far (not having heard from it for a ring timeout that never ran out).
            if called_off {
                return Err(Outcome::NoAnswer { status: None });
            }
            if !responded
                && dial.transport == Transport::Tls
                && let Some(reason) = ua.tls_problem(&dial.target).await
            {
                return Err(Outcome::Failed { reason });
            }
            return Err(unanswered(responded, dial.ring_timeout));
        }
    };
    let resp = match result {
        // Nothing came back before the INVITE transaction gave up (timer B, 32 s): its 408
        // is the stack's own, not the trunk's.
        Ok((_, Some(resp))) if !responded && timed_out_here(&resp) => {
            ua.dialogs.remove_dialog(&dialog.id());
            return Err(unanswered(false, started.elapsed()));
        }
        Ok((_, Some(resp))) => resp,
        Ok((_, None)) => {
            return Err(Outcome::Failed {
                reason: "the INVITE got no final response".into(),
            });
        }
        Err(e) => {
            return Err(Outcome::Failed {
                reason: ua::explain_tls(&e.to_string()),
            });
        }
    };
    let status = u16::from(resp.status_code.clone());
    if resp.status_code.kind() != StatusCodeKind::Successful {
        return Err(outcome_of(status, &reason_of(&resp)));
    }
    let negotiated = sdp::parse(&resp.body)
        .map_err(|e| e.to_string())
        .and_then(|a| sdp::accept_answer(&a, &settings.codecs).map_err(|e| e.to_string()));
    let negotiated = match negotiated {
        Ok(n) => n,
        Err(reason) => {
            let _ = dialog.bye().await;
            ua.dialogs.remove_dialog(&dialog.id());
            return Err(Outcome::Failed {
                reason: format!("the answer's SDP is unusable: {reason}"),
            });
        }
    };
    let leg = leg::start(settings.media.clone(), negotiated.clone(), sockets);
    let parties = Parties {
        call_id: dialog.id().call_id.clone(),
        from: dial.from.to_string(),
        to: dial.target.to_string(),
        source: None,
        transport: dial.transport.to_string(),
    };
    let (transfer_tx, transfers) = mpsc::channel(transfer::REQUESTS);
    Ok(Connected {
        leg,
        dialog: CallDialog {
            ua,
            dialog,
            states,
            local,
            codecs: settings.codecs.clone(),
            current: negotiated,
            invite: None,
            transfers,
            transfer_tx,
        },
        parties,
    })
}

/// How long the INVITE may take to end after its CANCEL (487), or to bring the 200 that
/// crossed it (then answered with BYE).
const CANCEL_SETTLE: Duration = Duration::from_secs(2);

/// How long the BYEs of a 200 that crossed the CANCEL (and of the extra dialogs of a forked
/// INVITE) may take to be answered.
const BYE_SETTLE: Duration = Duration::from_secs(5);

/// Cancels an INVITE given up on and lets it end: with 487 once the CANCEL lands, or with a
/// 200 that crossed the CANCEL, answered with ACK and BYE (the phone never stays up with nobody
/// on the line). The CANCEL's own answer and then the INVITE's end are each waited for at most
/// [`CANCEL_SETTLE`] (a trunk that answers nothing would hold the CANCEL for its 32 s timer),
/// and the answers to the BYEs at most [`BYE_SETTLE`], so the task ends within 9 s; it runs
/// under [`UserAgent::settle`], so a stop lets it finish. The BYEs waited for are the answered
/// dialog's and every other one of the call sent meanwhile (a forked INVITE's extra dialogs,
/// which share its Call-ID), each answer matched to its own BYE ([`ByesOfCall`]).
async fn cancel_invite(
    ua: Arc<UserAgent>,
    dialog: InviteDialog,
    mut task: JoinHandle<rsipstack::dialog::invitation::InviteAsyncResult>,
    abort: tokio::task::AbortHandle,
) {
    // Heard from before the 200 can come, so that no BYE of it, nor any answer, is missed.
    let mut byes = ua.byes();
    let _ = tokio::time::timeout(CANCEL_SETTLE, dialog.cancel()).await;
    match tokio::time::timeout(CANCEL_SETTLE, &mut task).await {
        Ok(Ok(Ok((_, Some(resp))))) if resp.status_code.kind() == StatusCodeKind::Successful => {
            tracing::info!("the callee answered as the INVITE was cancelled; hanging up");
            let mut call = ByesOfCall::new(&dialog.id().call_id, &dialog.id().local_tag, &resp);
            let hang_up = async {
                // The stack ends a 2xx to a cancelled INVITE with ACK and a BYE of its own, from
                // a task of its own (this one is then a no-op, the dialog being over), and
                // each forked 2xx likewise: their answers are what say the BYEs went through.
                if let Err(e) = dialog.bye().await {
                    tracing::debug!(error = %e, "BYE after the CANCEL failed");
                }
                // News missed (a reader this far behind) may have been a BYE sent: from then
                // on only the bound ends the wait.
                let mut missed = false;
                loop {
                    match byes.recv().await {
                        Ok(news) => {
                            if call.take(news) && !missed {
                                break;
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => missed = true,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    }
                }
            };
            if tokio::time::timeout(BYE_SETTLE, hang_up).await.is_err() {
                tracing::debug!("the BYEs after the CANCEL were not all seen answered in 5 s");
            }
        }
        Ok(_) => {}
        Err(_) => abort.abort(),
    }
    ua.dialogs.remove_dialog(&dialog.id());
}

/// The BYEs that end what a 2xx to a cancelled INVITE set up, and which of them are answered:
/// the BYE of the answered dialog (baton's From tag, the 2xx's To tag), and every other BYE of
/// the call (its Call-ID, baton's From tag) seen going out, such as the stack's BYE to each
/// extra dialog of a forked INVITE. An answer counts only for the BYE it answers (the same
/// transaction: top Via branch), so one dialog's answer never stands for another's.
struct ByesOfCall {
    call_id: String,
    local_tag: String,
    /// The To tag of the 2xx the INVITE ended with: its dialog's BYE must be answered.
    remote_tag: String,
    /// Branches of BYEs seen going out and not answered yet.
    unanswered: std::collections::HashSet<String>,
    /// Branches of BYEs answered (a resend of one told after its answer is not waited for).
    answered: std::collections::HashSet<String>,
    /// The answered dialog's BYE is answered.
    dialog_ended: bool,
}

impl ByesOfCall {
    fn new(call_id: &str, local_tag: &str, ok: &rsipstack::sip::Response) -> ByesOfCall {
        let remote_tag = ok
            .to_header()
            .ok()
            .and_then(|t| t.tag().ok().flatten())
            .map(|t| t.value().to_owned())
            .unwrap_or_default();
        ByesOfCall {
            call_id: call_id.to_owned(),
            local_tag: local_tag.to_owned(),
            remote_tag,
            unanswered: Default::default(),
            answered: Default::default(),
            dialog_ended: false,
        }
    }

    fn of_this_call(&self, id: &ua::ByeId) -> bool {
        id.call_id == self.call_id && id.from_tag == self.local_tag
    }

    /// Takes one piece of news about BYEs: whether every BYE is answered now.
    fn take(&mut self, news: ua::ByeNews) -> bool {
        match news {
            ua::ByeNews::Sent(id)
                if self.of_this_call(&id) && !self.answered.contains(&id.branch) =>
            {
                self.unanswered.insert(id.branch);
            }
            ua::ByeNews::Answered(id) if self.of_this_call(&id) => {
                self.dialog_ended |= id.to_tag == self.remote_tag;
                self.unanswered.remove(&id.branch);
                self.answered.insert(id.branch);
            }
            _ => {}
        }
        self.dialog_ended && self.unanswered.is_empty()
    }
}

/// What [`place_and_run`] reports, in order: provisional answers, then the answered media leg or
/// why there is none.
pub enum Placing {
    Progress(Progress),
    /// 200: the media leg (dropping it hangs up); the dialog runs to its end in the caller of
    /// [`place_and_run`].
    Answered(super::super::LegHandle),
    NotAnswered(Outcome),
}

/// Places a call as [`place_watched`] does (CANCEL when `cancel` fires or goes), telling `on`
/// every step (provisional answers as they change: a repeat, or one overtaken before `on` saw
/// it, is folded into the newest), and once answered runs its dialog until either side hangs up
/// (the peer's BYE, or the media leg dropped: BYE). Returns when the call is over.
pub async fn place_and_run(
    ua: Arc<UserAgent>,
    dial: Dial,
    settings: &CallSettings,
    cancel: tokio::sync::oneshot::Receiver<()>,
    mut on: impl FnMut(Placing),
) {
    let (ptx, mut prx) = tokio::sync::watch::channel(None);
    let watch = Watch {
        progress: Some(ptx),
        cancel: Some(cancel),
    };
    let placing = place_watched(ua, dial, settings, watch);
    tokio::pin!(placing);
    let placed = loop {
        tokio::select! {
            biased;
            Ok(()) = prx.changed() => {
                let newest = *prx.borrow_and_update();
                if let Some(p) = newest {
                    on(Placing::Progress(p));
                }
            }
            r = &mut placing => break r,
        }
    };
    // A provisional answer that came with the final one goes first.
    let unseen = {
        let newest = prx.borrow_and_update();
        newest.has_changed().then_some(*newest).flatten()
    };
    if let Some(p) = unseen {
        on(Placing::Progress(p));
    }
    match placed {
        Ok(c) => {
            let Connected { leg, dialog, .. } = c;
            let run = dialog.run(leg.control.clone(), leg.task);
            on(Placing::Answered(leg.handle));
            let ended = run.await;
            tracing::info!(hung_up_by = ?ended.by, "the placed call ended");
        }
        Err(outcome) => on(Placing::NotAnswered(outcome)),
    }
}

/// Resolves when `cancel` fires or its sender goes; never without one.
async fn cancelled(cancel: &mut Option<tokio::sync::oneshot::Receiver<()>>) {
    match cancel.as_mut() {
        Some(rx) => {
            let _ = rx.await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hang_up_has_one_name_in_logs_and_records() {
        for by in [
            HungUpBy::Peer,
            HungUpBy::Baton,
            HungUpBy::MediaTimeout,
            HungUpBy::Transferred,
        ] {
            assert_eq!(serde_json::to_value(&by).unwrap(), by.name(), "{by:?}");
        }
    }

    #[test]
    fn final_responses_are_typed() {
        assert_eq!(outcome_of(200, "OK"), Outcome::Answered);
        assert_eq!(outcome_of(486, "Busy Here"), Outcome::Busy { status: 486 });
        assert_eq!(
            outcome_of(480, "x"),
            Outcome::NoAnswer { status: Some(480) }
        );
        assert_eq!(
            outcome_of(404, "Not Found"),
            Outcome::Rejected {
                status: 404,
                reason: "Not Found".into()
            }
        );
        assert_eq!(
            serde_json::to_value(Outcome::Busy { status: 486 }).unwrap(),
            serde_json::json!({"outcome": "busy", "status": 486})
        );
    }

    #[test]
    fn silence_at_the_ring_timeout_is_a_failure_and_ringing_is_no_answer() {
        let t = Duration::from_secs(5);
        assert_eq!(unanswered(true, t), Outcome::NoAnswer { status: None });
        let Outcome::Failed { reason } = unanswered(false, t) else {
            panic!()
        };
        assert!(reason.contains("no response from the trunk within 5 s"));
    }

    fn response(status: &str, to_tag: &str) -> rsipstack::sip::Response {
        let raw = format!(
            "SIP/2.0 {status}\r\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-1\r\n\
             From: <sip:baton@127.0.0.1>;tag=1\r\nTo: <sip:pbx@127.0.0.1>{to_tag}\r\n\
             Call-ID: c1\r\nCSeq: 1 REGISTER\r\nContent-Length: 0\r\n\r\n"
        );
        match rsipstack::sip::SipMessage::try_from(raw.as_str()).unwrap() {
            rsipstack::sip::SipMessage::Response(r) => r,
            rsipstack::sip::SipMessage::Request(_) => panic!("a request"),
        }
    }

    #[test]
    fn a_408_of_the_stacks_own_is_told_from_a_peers() {
        // The stack's, at its transaction timeout: the request's To, untagged.
        assert!(timed_out_here(&response("408 Request Timeout", "")));
        // A peer's: tagged.
        assert!(!timed_out_here(&response("408 Request Timeout", ";tag=9")));
        assert!(!timed_out_here(&response(
            "480 Temporarily Unavailable",
            ""
        )));
    }

    #[test]
    fn each_bye_of_a_cancelled_invites_200s_waits_for_its_own_answer() {
        let bye = |to_tag: &str, branch: &str| ua::ByeId {
            call_id: "c1".into(),
            from_tag: "1".into(),
            to_tag: to_tag.into(),
            branch: branch.into(),
        };
        let (first, fork) = (bye("a", "z9hG4bK-a"), bye("b", "z9hG4bK-b"));
        let mut call = ByesOfCall::new("c1", "1", &response("200 OK", ";tag=a"));
        assert!(!call.take(ua::ByeNews::Sent(first.clone())));
        assert!(!call.take(ua::ByeNews::Sent(fork.clone())));
        // The extra dialog's answer does not stand for the answered dialog's...
        assert!(!call.take(ua::ByeNews::Answered(fork.clone())));
        // ...nor do the answers of other calls, or of BYEs from someone else's tag.
        let other_call = ua::ByeId {
            call_id: "c2".into(),
            ..first.clone()
        };
        assert!(!call.take(ua::ByeNews::Answered(other_call)));
        let other_from = ua::ByeId {
            from_tag: "2".into(),
            ..first.clone()
        };
        assert!(!call.take(ua::ByeNews::Answered(other_from)));
        assert!(call.take(ua::ByeNews::Answered(first.clone())));
        // A resend told after its answer is not waited for.
        assert!(call.take(ua::ByeNews::Sent(fork.clone())));

        // The answered dialog's BYE is waited for even before it is seen going out, and an
        // extra dialog's BYE seen going out is waited for after the answered dialog's answer.
        let mut call = ByesOfCall::new("c1", "1", &response("200 OK", ";tag=a"));
        assert!(!call.take(ua::ByeNews::Sent(fork.clone())));
        assert!(!call.take(ua::ByeNews::Answered(fork)));
        assert!(!call.take(ua::ByeNews::Sent(bye("c", "z9hG4bK-c"))));
        assert!(!call.take(ua::ByeNews::Answered(first)));
        assert!(call.take(ua::ByeNews::Answered(bye("c", "z9hG4bK-c"))));
    }

    /// A user agent on a loopback port of its own, serving.
    async fn agent() -> (Arc<UserAgent>, rsipstack::transaction::TransactionReceiver) {
        let cfg = super::super::config::SipConfig {
            listen: vec!["udp:127.0.0.1:0".into()],
            ..Default::default()
        };
        let (ua, incoming) = UserAgent::start(&cfg, None, None).await.unwrap();
        tokio::spawn(ua.clone().serve());
        (ua, incoming)
    }

    fn dial_to(ua: &UserAgent, trunk: std::net::SocketAddr, ring_timeout: Duration) -> Dial {
        let from = ua.addr(Transport::Udp).unwrap();
        Dial {
            target: format!("sip:100@{trunk}").as_str().try_into().unwrap(),
            from: format!("sip:baton@{from}").as_str().try_into().unwrap(),
            credential: None,
            ring_timeout,
            transport: Transport::Udp,
        }
    }

    fn settings() -> CallSettings {
        CallSettings {
            ring: Duration::ZERO,
            media: MediaConfig::default(),
            codecs: vec![Codec::Pcmu],
            rtp_ports: (31000, 39000),
        }
    }

    #[tokio::test]
    async fn a_trunk_that_never_answers_fails_at_the_ring_timeout() {
        let (ua, _incoming) = agent().await;
        // Bound and silent: the INVITE goes out and nothing ever comes back.
        let trunk = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let dial = dial_to(&ua, trunk.local_addr().unwrap(), Duration::from_secs(1));
        let start = Instant::now();
        let Err(outcome) = place(ua.clone(), dial, &settings()).await else {
            panic!("answered by nobody")
        };
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_millis(1500),
            "the outcome came {took:?} after the INVITE, for a ring timeout of 1 s"
        );
        let Outcome::Failed { reason } = outcome else {
            panic!("{outcome:?}")
        };
        assert!(
            reason.starts_with("no response from the trunk within 1 s"),
            "{reason}"
        );
        ua.shutdown();
    }

    #[tokio::test]
    async fn a_ringing_callee_not_answering_the_cancel_is_no_answer_at_the_ring_timeout() {
        let (ua, _incoming) = agent().await;
        let trunk = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let dial = dial_to(&ua, trunk.local_addr().unwrap(), Duration::from_secs(1));
        // The trunk rings at the first INVITE, then says nothing more (no 200 to the CANCEL,
        // no 487).
        let ringer = tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            let (n, from) = trunk.recv_from(&mut buf).await.unwrap();
            let invite = String::from_utf8_lossy(&buf[..n]).into_owned();
            let copied: Vec<&str> = invite
                .lines()
                .filter(|l| {
                    ["via:", "from:", "call-id:", "cseq:"]
                        .iter()
                        .any(|h| l.to_ascii_lowercase().starts_with(h))
                })
                .collect();
            let to = invite
                .lines()
                .find(|l| l.to_ascii_lowercase().starts_with("to:"))
                .unwrap();
            let ringing = format!(
                "SIP/2.0 180 Ringing\r\n{}\r\n{to};tag=callee\r\nContent-Length: 0\r\n\r\n",
                copied.join("\r\n")
            );
            trunk.send_to(ringing.as_bytes(), from).await.unwrap();
            // Keep the socket (and so the port) until the test ends.
            loop {
                let _ = trunk.recv_from(&mut buf).await;
            }
        });
        let start = Instant::now();
        let outcome = place(ua.clone(), dial, &settings()).await.err();
        let took = start.elapsed();
        assert_eq!(outcome, Some(Outcome::NoAnswer { status: None }));
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_millis(1500),
            "the outcome came {took:?} after the INVITE, for a ring timeout of 1 s"
        );
        ringer.abort();
        ua.shutdown();
    }

    #[test]
    fn warnings_are_quoted_safely() {
        let Header::Other(_, v) = warning("say \"hi\"\r\nX-Evil: 1") else {
            panic!()
        };
        assert_eq!(v, "399 baton \"say hiX-Evil: 1\"");
    }
}

//! Dialling a person for a warm transfer ([`crate::call::warm::Dialer`]) on the daemon's SIP user
//! agent: a number on its trunk (named by the human agent, or the only one), a SIP URI directly.
//! The INVITE's provisional answers are reported as they come, a cancel from the call sends
//! CANCEL, and an answered call's media leg goes to the call while its dialog runs here (the
//! person's BYE ends the leg; the call dropping the leg sends BYE).

use std::sync::Arc;

use tokio::sync::oneshot;
use tracing::Instrument;

use super::sip::{PlaceError, SipService};
use crate::call::warm::progress::{self, ProgressSender};
use crate::call::warm::{DialRequest, Dialer, Dialing, PersonProgress};
use crate::leg::sip::call::{self, Dial};
use crate::leg::sip::config::Transport;
use crate::transfer::Destination;

/// The daemon's SIP side as the warm transfers' dialer.
pub struct SipDialer(pub Arc<SipService>);

impl std::fmt::Debug for SipDialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SipDialer")
    }
}

impl Dialer for SipDialer {
    fn dial(&self, req: DialRequest) -> Dialing {
        let (tx, progress) = progress::channel();
        let (cancel, cancelled) = oneshot::channel();
        let svc = self.0.clone();
        let span = tracing::info_span!("person", to = %req.target);
        tokio::spawn(dial_person(svc, req, tx, cancelled).instrument(span));
        Dialing { progress, cancel }
    }
}

/// The INVITE of `req`: a number (or anything, when a trunk is named) on a trunk; a SIP URI
/// with no trunk called directly, as `sip:baton@<media address>`.
fn person_dial(svc: &SipService, req: &DialRequest) -> Result<Dial, PlaceError> {
    let ring = Some(req.ring_timeout.as_secs().max(1));
    match (&req.target, &req.trunk) {
        (Destination::Sip(uri), None) => {
            let lower = uri.to_ascii_lowercase();
            let transport = if lower.starts_with("sips:") {
                Transport::Tls
            } else if lower.contains(";transport=tcp") {
                Transport::Tcp
            } else {
                Transport::Udp
            };
            let target = rsipstack::sip::Uri::try_from(uri.as_str())
                .map_err(|_| PlaceError::BadTarget(uri.clone()))?;
            let from_text = format!("sip:baton@{}", svc.ua.media_ip);
            let from = rsipstack::sip::Uri::try_from(from_text.as_str())
                .map_err(|_| PlaceError::BadTarget(from_text.clone()))?;
            Ok(Dial {
                target,
                from,
                credential: None,
                ring_timeout: req.ring_timeout,
                transport,
            })
        }
        (target, trunk) => svc
            .trunk_dial(target.as_str(), trunk.as_deref(), None, ring)
            .map(|(_, _, d)| d),
    }
}

async fn dial_person(
    svc: Arc<SipService>,
    req: DialRequest,
    mut tx: ProgressSender,
    cancelled: oneshot::Receiver<()>,
) {
    let dial = match person_dial(&svc, &req) {
        Ok(d) => d,
        Err(e) => {
            tx.send(PersonProgress::Failed(format!(
                "the person cannot be dialled: {e}"
            )));
            return;
        }
    };
    tracing::info!(to = %req.target, "dialling the person for a warm transfer");
    call::place_and_run(svc.ua.clone(), dial, &svc.settings, cancelled, |p| {
        if !tx.send(p.into()) {
            tracing::info!("the call has ended; the person's leg goes");
        }
    })
    .await;
}

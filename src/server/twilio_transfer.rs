//! How a Twilio call's agents hand the caller to a person: the call redirected to `<Dial>`
//! through Twilio's REST API, one [`Transfer`] machine per request.

use super::AppState;
use crate::transfer::Transfer;

/// The port a Twilio call's transfers to a person are asked on: each blind transfer redirects
/// the live call to `<Dial>` through Twilio's REST API ([`crate::transfer::twilio`]), driven by
/// a [`Transfer`] machine (plan `Blind(TwilioRedirect)`) whose every event goes back to the
/// call (counted in the daemon's metrics when the call ends). `Err` says why this call cannot be redirected (the call then
/// answers a transfer with `unavailable`).
pub(super) fn transfer_port(
    app: &AppState,
    start: &crate::leg::bridge::StartInfo,
) -> Result<crate::leg::sip::transfer::TransferPort, String> {
    use crate::transfer::twilio::{DEFAULT_BASE_URL, RestSettings, TwilioRest};
    let c = &app.loaded.config.twilio;
    if c.auth_token_env.is_empty() {
        return Err("no twilio.auth_token_env: the REST API cannot be called".into());
    }
    let token = std::env::var(&c.auth_token_env)
        .map_err(|_| format!("${} (twilio.auth_token_env) is not set", c.auth_token_env))?;
    let account_sid = start
        .account_sid
        .clone()
        .filter(|s| !s.is_empty())
        .or_else(|| (!c.account_sid.is_empty()).then(|| c.account_sid.clone()))
        .ok_or("the stream's start names no account SID")?;
    let call_sid = start
        .call_sid
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or("the stream's start names no call SID")?;
    let base_url = if c.rest_base_url.is_empty() {
        DEFAULT_BASE_URL.to_owned()
    } else {
        c.rest_base_url.clone()
    };
    let rest = TwilioRest::new(RestSettings {
        base_url,
        account_sid,
        auth_token: crate::secret::Secret::new(token),
        timeout: std::time::Duration::from_secs(10),
    })
    .map_err(|e| e.to_string())?;
    let (tx, mut rx) = tokio::sync::mpsc::channel(crate::leg::sip::transfer::REQUESTS);
    tokio::spawn(async move {
        while let Some(req) = rx.recv().await {
            redirect(&rest, &call_sid, req).await;
        }
    });
    Ok(tx)
}

/// One blind transfer of a Twilio call, from the redirect to its outcome.
async fn redirect(
    rest: &crate::transfer::twilio::TwilioRest,
    call_sid: &str,
    mut req: crate::leg::sip::transfer::BlindTransfer,
) {
    use crate::transfer::twilio::DialOptions;
    use crate::transfer::{Action, BlindVia, Event, Input, Plan};
    use tokio::time::Instant;
    let plan = Plan::Blind(BlindVia::TwilioRedirect);
    let ring_timeout = Some(req.settings.ring_timeout);
    let mut m = Transfer::new(plan, req.target, req.settings, Instant::now().into_std());
    m.handle(Input::AnnouncementPlayed, Instant::now().into_std());
    loop {
        while let Some(action) = m.poll_action() {
            if let Action::Redirect { target } = action {
                let options = DialOptions {
                    ring_timeout,
                    caller_id: None,
                };
                match rest.redirect_to_dial(call_sid, &target, &options).await {
                    Ok(_) => m.handle(Input::Redirected, Instant::now().into_std()),
                    Err(e) => {
                        tracing::warn!(error = %e, "the Twilio redirect to a person failed");
                        m.handle(Input::Failed(e.failure()), Instant::now().into_std());
                    }
                }
            }
            // LeaveCall: Twilio ends the stream itself once the call is redirected; the call
            // ends baton's part on the outcome. Nothing else applies to a blind redirect.
        }
        let mut finished = false;
        while let Some(ev) = m.poll_event() {
            finished |= matches!(ev, Event::Finished(_));
            req.events.send(ev);
        }
        if finished {
            return;
        }
        let Some((at, _)) = m.poll_timeout() else {
            return;
        };
        tokio::time::sleep_until(Instant::from_std(at)).await;
        m.handle_timeout(Instant::now().into_std());
    }
}

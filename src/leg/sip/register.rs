//! Registrations with trunks and PBXs (`[sip.trunks.<name>] register = true`): REGISTER with
//! digest authentication (the stack answers 401/407), refreshed at three quarters of the expiry
//! the registrar granted, retried with back-off (1 s doubling to 60 s) while it fails, and
//! withdrawn (expires 0) when baton stops. Each trunk's state is watched by `/healthz` and the
//! log; a registrar that does not answer at all is told from one that refuses. Over TLS the Contact registered is baton's `tls:` listen address, so the calls the
//! registrar sends come back over TLS too.

use std::sync::Arc;
use std::time::Duration;

use rsipstack::dialog::authenticate::Credential;
use rsipstack::dialog::registration::{Registration, backoff_interval, refresh_interval};
use rsipstack::sip::StatusCodeKind;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::Transport;
use super::ua::UserAgent;

/// Where a trunk's registration stands.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RegState {
    Pending,
    /// Still pending, and why: the first REGISTER has gone unanswered for a while (the stack
    /// keeps sending it until its transaction gives up).
    #[serde(rename = "pending")]
    Unanswered {
        reason: String,
    },
    Registered {
        expires_s: u32,
    },
    Failed {
        reason: String,
    },
}

/// How long a first REGISTER goes unanswered before `/healthz` says so (the stack goes on
/// sending it until its transaction gives up, after 32 s).
const SILENCE_NOTED_AFTER: Duration = Duration::from_secs(4);

/// Why a registration failed when nothing answered the REGISTER in `waited`.
fn unanswered(registrar: &str, waited: Duration) -> String {
    format!(
        "no answer from the registrar at {registrar} within {} s (is its address right and \
         reachable?)",
        waited.as_secs()
    )
}

/// Runs `register`; when it is still unanswered `after` in and the trunk has never registered
/// (pending), the state says so meanwhile.
async fn noting_silence<F: std::future::Future>(
    register: F,
    status: &watch::Sender<RegState>,
    after: Duration,
    registrar: &str,
) -> F::Output {
    tokio::pin!(register);
    tokio::select! {
        r = &mut register => return r,
        _ = tokio::time::sleep(after) => {}
    }
    status.send_if_modified(|s| {
        let pending = *s == RegState::Pending;
        if pending {
            *s = RegState::Unanswered {
                reason: format!(
                    "no answer from the registrar at {registrar} in {} s yet; still trying (is \
                     its address right and reachable?)",
                    after.as_secs()
                ),
            };
        }
        pending
    });
    register.await
}

/// Keeps one registration up until `cancel`, then withdraws it.
pub async fn keep_registered(
    ua: Arc<UserAgent>,
    name: String,
    server: rsipstack::sip::Uri,
    credential: Credential,
    expires: u32,
    status: watch::Sender<RegState>,
    cancel: CancellationToken,
) {
    let user = credential.username.clone();
    let tls = server.scheme == Some(rsipstack::sip::Scheme::Sips)
        || server.params.iter().any(|p| {
            matches!(
                p,
                rsipstack::sip::Param::Transport(rsipstack::sip::Transport::Tls)
            )
        });
    let mut reg = Registration::new(ua.inner(), Some(credential));
    if tls {
        reg.contact = Some(rsipstack::sip::typed::Contact {
            display_name: None,
            uri: ua.contact(&user, Transport::Tls),
            params: vec![],
        });
    }
    let registrar = server.host_with_port.to_string();
    let mut failures = 0u32;
    let mut first = true;
    loop {
        // Over TLS, a certificate the stack refuses only shows as a 408 half a minute later:
        // the first attempt, and each after a failure, checks the handshake first and says
        // what is wrong at once.
        let refused = if tls && (first || failures > 0) {
            ua.tls_problem(&server).await
        } else {
            None
        };
        first = false;
        let started = Instant::now();
        let attempt = match refused {
            Some(why) => Err(why),
            None => {
                let register = reg.register(server.clone(), Some(expires));
                Ok(noting_silence(register, &status, SILENCE_NOTED_AFTER, &registrar).await)
            }
        };
        let wait = match attempt {
            Err(why) => {
                failures += 1;
                let reason = format!("cannot register over TLS: {why}");
                tracing::warn!(trunk = %name, %reason, "registration failed");
                status.send_replace(RegState::Failed { reason });
                backoff_interval(failures)
            }
            Ok(result) => match result {
                Ok(resp) if resp.status_code.kind() == StatusCodeKind::Successful => {
                    failures = 0;
                    let granted = reg.expires();
                    if !matches!(*status.borrow(), RegState::Registered { .. }) {
                        tracing::info!(trunk = %name, expires_s = granted, "registered");
                    }
                    status.send_replace(RegState::Registered { expires_s: granted });
                    refresh_interval(granted)
                }
                // The stack's own 408: nothing answered before the REGISTER gave up.
                Ok(resp) if super::call::timed_out_here(&resp) => {
                    failures += 1;
                    let reason = unanswered(&registrar, started.elapsed());
                    tracing::warn!(trunk = %name, %reason, "registration not answered");
                    status.send_replace(RegState::Failed { reason });
                    backoff_interval(failures)
                }
                Ok(resp) => {
                    failures += 1;
                    let reason = format!(
                        "the registrar answered {} {}",
                        u16::from(resp.status_code.clone()),
                        super::call::reason_of(&resp)
                    );
                    tracing::warn!(trunk = %name, %reason, "registration refused");
                    status.send_replace(RegState::Failed { reason });
                    backoff_interval(failures)
                }
                Err(e) => {
                    failures += 1;
                    let reason = format!("no answer from the registrar: {e}");
                    tracing::warn!(trunk = %name, %reason, "registration failed");
                    status.send_replace(RegState::Failed { reason });
                    backoff_interval(failures)
                }
            },
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = cancel.cancelled() => break,
        }
    }
    if matches!(*status.borrow(), RegState::Registered { .. }) {
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            reg.register(server.clone(), Some(0)),
        )
        .await;
        tracing::info!(trunk = %name, "registration withdrawn");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_first_register_unanswered_says_so_while_pending() {
        let (status, rx) = watch::channel(RegState::Pending);
        let answer = async {
            tokio::time::sleep(Duration::from_secs(32)).await;
            "408"
        };
        let waiting = noting_silence(answer, &status, SILENCE_NOTED_AFTER, "127.0.0.1:5090");
        tokio::pin!(waiting);
        tokio::select! {
            _ = &mut waiting => panic!("answered"),
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
        let RegState::Unanswered { reason } = rx.borrow().clone() else {
            panic!("{:?}", *rx.borrow())
        };
        assert!(
            reason.starts_with("no answer from the registrar at 127.0.0.1:5090 in 4 s yet"),
            "{reason}"
        );
        assert_eq!(
            serde_json::to_value(&*rx.borrow()).unwrap(),
            serde_json::json!({"state": "pending", "reason": reason})
        );
        assert_eq!(waiting.await, "408");
        // Registered or failed, the state stays what it says.
        status.send_replace(RegState::Registered { expires_s: 60 });
        let quick = noting_silence(
            tokio::time::sleep(Duration::from_secs(10)),
            &status,
            SILENCE_NOTED_AFTER,
            "x",
        );
        quick.await;
        assert_eq!(*rx.borrow(), RegState::Registered { expires_s: 60 });
    }

    #[tokio::test]
    async fn the_stacks_timeout_is_not_the_registrars_answer() {
        let cfg = super::super::config::SipConfig {
            listen: vec!["udp:127.0.0.1:0".into()],
            ..Default::default()
        };
        let (ua, _incoming) = UserAgent::start(&cfg, None, None).await.unwrap();
        let register = "REGISTER sip:127.0.0.1:5090 SIP/2.0\r\n\
             Via: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-1\r\n\
             From: <sip:baton@127.0.0.1:5090>;tag=1\r\nTo: <sip:baton@127.0.0.1:5090>\r\n\
             Call-ID: r1\r\nCSeq: 1 REGISTER\r\nContent-Length: 0\r\n\r\n";
        let rsipstack::sip::SipMessage::Request(req) =
            rsipstack::sip::SipMessage::try_from(register).unwrap()
        else {
            panic!("a response")
        };
        // What the stack hands back when its REGISTER transaction times out.
        let own = ua
            .inner()
            .make_response(&req, rsipstack::sip::StatusCode::RequestTimeout, None);
        assert!(super::super::call::timed_out_here(&own));
        let reason = unanswered("127.0.0.1:5090", Duration::from_millis(32_400));
        assert_eq!(
            reason,
            "no answer from the registrar at 127.0.0.1:5090 within 32 s (is its address right \
             and reachable?)"
        );
        ua.shutdown();
    }
}

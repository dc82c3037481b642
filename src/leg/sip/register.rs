//! Registrations with trunks and PBXs (`[sip.trunks.<name>] register = true`): REGISTER with
//! digest authentication (the stack answers 401/407), refreshed at three quarters of the expiry
//! the registrar granted, retried with back-off (1 s doubling to 60 s) while it fails, and
//! withdrawn (expires 0) when baton stops. Each trunk's state is watched by `/healthz` and the
//! log. Over TLS the Contact registered is baton's `tls:` listen address, so the calls the
//! registrar sends come back over TLS too.

use std::sync::Arc;
use std::time::Duration;

use rsipstack::dialog::authenticate::Credential;
use rsipstack::dialog::registration::{Registration, backoff_interval, refresh_interval};
use rsipstack::sip::StatusCodeKind;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::config::Transport;
use super::ua::UserAgent;

/// Where a trunk's registration stands.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RegState {
    Pending,
    Registered { expires_s: u32 },
    Failed { reason: String },
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
        let attempt = match refused {
            Some(why) => Err(why),
            None => Ok(reg.register(server.clone(), Some(expires)).await),
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

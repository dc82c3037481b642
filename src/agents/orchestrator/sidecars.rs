//! Sidecar results into the live session (seed 004) without interrupting it: each waits for a
//! quiet moment, then goes out in the form the model accepts. `clientContent` without
//! `turnComplete` adds context for the model's next answer and is sent once the current turn is
//! over (sent while a turn is generated, some servers cut that turn). Context never makes the
//! model speak: on a model without mid-session client content it is not delivered, and a
//! `sidecar_undelivered` event says why. A turn-completing prompt (only when configured,
//! `deliver = "prompt"`) also waits until no reply is owed to the caller, so it never starts a
//! turn over the caller's.

use std::time::Instant;

use super::{Action, Orchestrator, Phase};
use crate::agents::events::CallEvent;
use crate::agents::registry::Delivery;
use crate::model::gemini::wire::{ClientContent, Content};

/// A result waiting to be sent.
pub(super) struct Pending {
    sidecar: String,
    text: String,
    form: Delivery,
}

impl Orchestrator {
    pub(super) fn on_sidecar(
        &mut self,
        sidecar: String,
        text: String,
        deliver: Delivery,
        now: Instant,
    ) {
        let form = match deliver {
            Delivery::Auto | Delivery::ClientContent if self.caps.mid_session_client_content => {
                Delivery::ClientContent
            }
            // Context must never make the model speak: a model without mid-session content
            // would only take it as a prompt (configure `deliver = "prompt"` to want that).
            Delivery::Auto | Delivery::ClientContent => {
                let e = CallEvent::SidecarUndelivered {
                    sidecar,
                    reason: "the model takes no context mid-session (only a prompt, which would \
                             make it speak)"
                        .to_owned(),
                    at_ms: self.ms(now),
                };
                self.event(e);
                return;
            }
            other => other,
        };
        if form != Delivery::None {
            self.sidecar_out.push_back(Pending {
                sidecar,
                text,
                form,
            });
        }
    }

    /// Sends the waiting results this moment allows.
    pub(super) fn release_sidecars(&mut self, now: Instant) {
        let quiet = self.phase == Phase::Idle
            && !self.blocking_call_open()
            && self.standby.is_none()
            && self.held.is_empty();
        if !quiet {
            return;
        }
        let mut caller_quiet = !self.reply_owed && self.caller_line.is_empty();
        let mut keep = std::collections::VecDeque::new();
        while let Some(p) = self.sidecar_out.pop_front() {
            let turn_complete = match p.form {
                Delivery::ClientContent => false,
                Delivery::Prompt if caller_quiet => true,
                _ => {
                    keep.push_back(p);
                    continue;
                }
            };
            self.actions.push_back(Action::ClientContent(ClientContent {
                turns: Some(vec![Content::text(Some("user"), p.text)]),
                turn_complete: Some(turn_complete),
            }));
            let delivery = if turn_complete {
                "prompt"
            } else {
                "client_content"
            };
            let e = CallEvent::SidecarDelivered {
                sidecar: p.sidecar,
                delivery: delivery.to_owned(),
                at_ms: self.ms(now),
            };
            self.event(e);
            if turn_complete {
                // The model answers it: one prompt per quiet moment.
                self.reply_owed = true;
                caller_quiet = false;
            }
        }
        self.sidecar_out = keep;
    }
}

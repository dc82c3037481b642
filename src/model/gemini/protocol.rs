//! The Gemini Live protocol core, sans-IO: `setup` first, `setupComplete` accepts it; every
//! frame after it becomes [`ModelEvent`]s stamped with its arrival; the resumption handle the
//! session last made resumable and the `goAway` deadline are kept ([`Resumption`]). Setup order,
//! keepalive and close are the shared [`Link`]'s.

use tokio::time::Instant;

use super::codec;
use super::setup::SessionConfig;
use crate::model::ModelEvent;
use crate::model::protocol::{Frame, Link, ProtocolCore};
use crate::model::session::Outbound;

/// Where the session stands for a resumption.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resumption {
    /// The newest handle that came with `resumable: true`.
    pub handle: Option<String>,
    /// No update since that handle said otherwise (a non-resumable point, generation, a call).
    pub fresh: bool,
    /// When the service said it will close the connection (`goAway`).
    pub go_away_at: Option<Instant>,
}

/// One Gemini Live session's protocol state.
#[derive(Debug)]
pub struct GeminiCore {
    link: Link,
    resumption: Resumption,
}

impl GeminiCore {
    /// A session set up by `config`, starting at `now`.
    pub fn new(config: &SessionConfig, now: Instant) -> Self {
        GeminiCore {
            link: Link::new(
                codec::encode(&config.setup_message()),
                config.setup_timeout,
                config.keepalive,
                now,
            ),
            resumption: Resumption {
                handle: config.resume_handle.clone(),
                ..Default::default()
            },
        }
    }

    /// Where the session stands for a resumption.
    pub fn resumption(&self) -> &Resumption {
        &self.resumption
    }

    fn track(&mut self, e: &ModelEvent, now: Instant) {
        let r = &mut self.resumption;
        match e {
            ModelEvent::ResumptionUpdate {
                handle: Some(h),
                resumable: true,
            } => {
                r.handle = Some(h.clone());
                r.fresh = true;
            }
            ModelEvent::ResumptionUpdate { .. }
            | ModelEvent::Audio { .. }
            | ModelEvent::OutputTranscript { .. }
            | ModelEvent::ToolCall(_) => r.fresh = false,
            ModelEvent::GoAway { time_left } => {
                r.go_away_at = Some(now + time_left.unwrap_or_default());
            }
            _ => {}
        }
    }
}

impl ProtocolCore for GeminiCore {
    type Command = Outbound;

    fn link(&self) -> &Link {
        &self.link
    }

    fn link_mut(&mut self) -> &mut Link {
        &mut self.link
    }

    fn handle_frame(&mut self, frame: Frame<'_>, now: Instant) {
        let Some(events) = self
            .link
            .receive(frame, now, |bytes, out| match codec::decode(bytes) {
                Ok(msg) => codec::into_events(msg, out),
                Err(e) => out.push(ModelEvent::ProtocolError(e.to_string())),
            })
        else {
            return;
        };
        for e in &events {
            self.track(e, now);
        }
        self.link.deliver(events, now);
    }

    fn handle_outbound(&mut self, out: Outbound, now: Instant) {
        self.link.send(out, now);
    }
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;

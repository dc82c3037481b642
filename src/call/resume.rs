//! What a call keeps for reconnecting: where its sessions come from ([`ModelSource`]), the
//! reconnect machine ([`super::reconnect`]) with the caller audio it would replay, the session
//! being opened and the one closing, and what the caller was hearing when the old session
//! stopped (for `reconnect_gap_ms`). The rules that use it are the call core's
//! (`CallCore::session_lost` and the rest, in [`super::core`]).

use std::time::{Duration, Instant};

use super::outbox::SessionId;
use super::reconnect::{ReconnectPolicy, Reconnector};
use crate::backend::ModelBackend;
use crate::model::gemini::session::SessionConfig;
use crate::model::gemini::wire::ClientMessage;

/// Said to a fresh session that continues a call, after its own instruction.
pub const CONTINUE_NOTE: &str = "The call is already under way and the conversation so far is \
    in the history. Do not greet the caller or introduce yourself again; continue from the \
    caller's last words.";

/// Where the call's sessions come from when it must open another one (without an agent set; an
/// agent set brings its own).
#[derive(Clone, Debug)]
pub struct ModelSource {
    pub backend: ModelBackend,
    pub config: SessionConfig,
}

/// What the caller was hearing when the old session stopped.
#[derive(Debug)]
pub(super) struct Stopped {
    pub(super) at: Instant,
    /// The switch on the media timeline.
    pub(super) media: Duration,
    pub(super) turn: u64,
    pub(super) queued: Duration,
    /// The model owed the caller audio.
    pub(super) owed: bool,
}

/// The reconnect state of a call.
pub(super) struct Resume {
    /// Keeps each uplink frame for replay, as [`super::kept`] bytes.
    pub(super) machine: Reconnector<u8>,
    /// The frame being handed to the machine, encoded (reused: no allocation per frame).
    pub(super) frame: Vec<u8>,
    pub(super) source: Option<ModelSource>,
    /// The session being opened.
    pub(super) opening: Option<SessionId>,
    /// Sent first on the session being opened (a fresh session's history).
    pub(super) history: Option<ClientMessage>,
    /// The old session, closing.
    pub(super) closing: Option<SessionId>,
    pub(super) stopped: Option<Stopped>,
    /// Records waiting for the first voiced frame of a turn after `.1`, and the media time the
    /// silence is counted from at the earliest.
    pub(super) gaps: Vec<(usize, u64, Duration)>,
    pub(super) epoch: u64,
    /// The session opened by the last reconnect has not sent audio yet.
    pub(super) unheard: bool,
}

impl Resume {
    /// A call whose first session is live at `now`, on a leg whose media starts at `media_zero`
    /// (what the records' `at_ms` count from).
    pub(super) fn new(
        policy: ReconnectPolicy,
        source: Option<ModelSource>,
        media_zero: Instant,
        now: Instant,
    ) -> Self {
        Resume {
            machine: Reconnector::new(policy, now).timed_from(media_zero),
            frame: Vec::new(),
            source,
            opening: None,
            history: None,
            closing: None,
            stopped: None,
            gaps: Vec::new(),
            epoch: 0,
            unheard: false,
        }
    }

    /// Where sessions come from without an agent set.
    pub(super) fn source(&self) -> Option<&ModelSource> {
        self.source.as_ref()
    }

    /// The session being opened.
    pub(super) fn opening(&self) -> Option<SessionId> {
        self.opening
    }

    /// The old session being closed.
    pub(super) fn closing(&self) -> Option<SessionId> {
        self.closing
    }

    /// The session opened by the last reconnect has sent no audio yet: an `interrupted` from it
    /// cuts nothing the caller could hear (the queued audio is the old session's).
    pub(super) fn unheard(&self) -> bool {
        self.unheard
    }

    /// The current session sent audio.
    pub(super) fn heard(&mut self) {
        self.unheard = false;
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        self.machine.poll_timeout()
    }

    /// The call is ending: stop opening, close what is closing.
    pub(super) fn abandon(&mut self, out: &mut super::outbox::Outbox) {
        self.opening = None;
        if let Some(id) = self.closing.take() {
            out.close(id, false);
        }
    }
}

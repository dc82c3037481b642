//! What a model protocol core is, sans-IO: the interface the one WebSocket shell
//! ([`super::shell`]) drives ([`ProtocolCore`]: frames, outbound messages and the clock in;
//! frames to write, [`SessionEvent`]s and one timeout with its [`Reason`] out), and the part every
//! core shares ([`Link`]): the setup phase (setup first, everything else held until the service
//! accepted it, a deadline for its answer), the keepalive (pings, dead-socket detection), the
//! close, and the queues of frames to write and events to report.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::ModelEvent;
use super::gemini::keepalive::{Keepalive, KeepaliveAction, KeepaliveConfig};
use super::session::{Outbound, SessionError, SessionEvent};

/// An inbound WebSocket frame, as the core sees it.
#[derive(Clone, Copy, Debug)]
pub enum Frame<'a> {
    Text(&'a str),
    Binary(&'a [u8]),
    /// A ping or a pong: carries nothing but proves the socket alive.
    Control,
}

impl<'a> Frame<'a> {
    /// The message bytes of a data frame.
    pub fn payload(self) -> Option<&'a [u8]> {
        match self {
            Frame::Text(t) => Some(t.as_bytes()),
            Frame::Binary(b) => Some(b),
            Frame::Control => None,
        }
    }
}

/// How the socket ended, as the shell saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SocketEnd {
    /// The peer sent a close frame (`code` absent when it carried none).
    Closed { code: Option<u16>, reason: String },
    /// The stream ended without a close frame (1006).
    Ended,
    /// Reading or writing failed.
    Failed(String),
}

/// Why the core wants to be woken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The service has not answered the setup yet.
    Setup,
    /// A ping is due, or the socket is to be called dead.
    Keepalive,
    /// The close was sent; the service's answer is awaited this long at most.
    Closing,
}

/// Why a session did not start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetupFailure {
    /// The socket closed before the setup was accepted (`code` 1006: without a close frame).
    Refused { code: u16, reason: String },
    /// The service answered the setup with an error message.
    Rejected(String),
    /// No answer within the setup timeout.
    Timeout(Duration),
    /// Reading or writing failed.
    Io(String),
}

impl SetupFailure {
    /// The session's error, its setup's answer being `awaited`.
    pub(crate) fn into_error(self, awaited: &'static str) -> SessionError {
        match self {
            SetupFailure::Refused { code, reason } => SessionError::SetupRefused { code, reason },
            SetupFailure::Rejected(e) => SessionError::Rejected(e),
            SetupFailure::Timeout(after) => SessionError::SetupTimeout { awaited, after },
            SetupFailure::Io(e) => SessionError::Io(e),
        }
    }
}

/// How long a closed session waits for the service's close answer before it lets go.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// A protocol core: a pure state machine the shell feeds and drains. Driving rule, per wake-up:
/// feed what arrived (`handle_frame`, `handle_end`, `handle_outbound`, `handle_timeout`), write
/// every [`poll_transmit`](Self::poll_transmit) frame as one batch, report every
/// [`poll_event`](Self::poll_event), then sleep until [`poll_timeout`](Self::poll_timeout) or
/// the next input. Once [`is_over`](Self::is_over), the shell lets the socket go.
pub trait ProtocolCore {
    /// What the session handle sends the core.
    type Command;

    /// The shared part of the state.
    fn link(&self) -> &Link;
    fn link_mut(&mut self) -> &mut Link;

    /// A data or control frame arrived at `now`.
    fn handle_frame(&mut self, frame: Frame<'_>, now: Instant);

    /// The session handle sent `cmd`.
    fn handle_outbound(&mut self, cmd: Self::Command, now: Instant);

    /// The socket ended.
    fn handle_end(&mut self, end: SocketEnd, now: Instant) {
        self.link_mut().end(end, now);
    }

    /// The session handle is gone: the session closes.
    fn handle_abandoned(&mut self, now: Instant) {
        self.link_mut().send(Outbound::Close, now);
    }

    /// What is due at `now` (see [`poll_timeout`](Self::poll_timeout)).
    fn handle_timeout(&mut self, now: Instant) {
        self.link_mut().handle_timeout(now);
    }

    /// The next frame to write.
    fn poll_transmit(&mut self) -> Option<Outbound> {
        self.link_mut().transmit.pop_front()
    }

    /// The next event for the call.
    fn poll_event(&mut self) -> Option<SessionEvent> {
        self.link_mut().events.pop_front()
    }

    /// The setup's outcome, once (accepted or not).
    fn poll_setup(&mut self) -> Option<Result<(), SetupFailure>> {
        self.link_mut().setup.take()
    }

    /// When to call [`handle_timeout`](Self::handle_timeout), and why.
    fn poll_timeout(&self) -> Option<(Instant, Reason)> {
        self.link().poll_timeout()
    }

    /// The session is over: nothing more will be written or reported.
    fn is_over(&self) -> bool {
        self.link().phase == Phase::Over
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The setup went out (first); its answer is awaited until `deadline`.
    Setup {
        deadline: Instant,
    },
    Live,
    /// The close went out; the service's close is awaited until `deadline`.
    Closing {
        deadline: Instant,
    },
    Over,
}

/// The state every protocol core shares (see the module doc).
#[derive(Debug)]
pub struct Link {
    phase: Phase,
    setup_timeout: Duration,
    keepalive_config: KeepaliveConfig,
    /// Runs from the setup's acceptance.
    keepalive: Option<Keepalive>,
    transmit: VecDeque<Outbound>,
    /// Sent before the setup was accepted: written right after its acceptance, in order.
    held: VecDeque<Outbound>,
    events: VecDeque<SessionEvent>,
    setup: Option<Result<(), SetupFailure>>,
    /// The events of one frame, reused from frame to frame.
    scratch: Vec<ModelEvent>,
}

impl Link {
    /// A session whose setup message `setup` is the first frame written; the service has
    /// `setup_timeout` from `now` to accept it.
    pub fn new(
        setup: String,
        setup_timeout: Duration,
        keepalive: KeepaliveConfig,
        now: Instant,
    ) -> Self {
        Link {
            phase: Phase::Setup {
                deadline: now + setup_timeout,
            },
            setup_timeout,
            keepalive_config: keepalive,
            keepalive: None,
            transmit: VecDeque::from([Outbound::Text {
                json: setup,
                received_at: None,
            }]),
            held: VecDeque::new(),
            events: VecDeque::new(),
            setup: None,
            scratch: Vec::new(),
        }
    }

    /// The setup is not answered yet.
    pub fn in_setup(&self) -> bool {
        matches!(self.phase, Phase::Setup { .. })
    }

    /// A frame arrived at `now`: any frame proves the socket alive; a data frame's bytes are
    /// turned into the events `decode` appends, returned for the core to look at and hand back
    /// to [`deliver`](Self::deliver).
    pub fn receive(
        &mut self,
        frame: Frame<'_>,
        now: Instant,
        decode: impl FnOnce(&[u8], &mut Vec<ModelEvent>),
    ) -> Option<Vec<ModelEvent>> {
        if let Some(k) = &mut self.keepalive {
            k.on_frame(now);
        }
        let bytes = frame.payload()?;
        let mut events = std::mem::take(&mut self.scratch);
        decode(bytes, &mut events);
        Some(events)
    }

    /// Reports `events` (of a frame that arrived at `at`) in order; a `SetupComplete` among
    /// them accepts the setup.
    pub fn deliver(&mut self, mut events: Vec<ModelEvent>, at: Instant) {
        let mut accepted = false;
        for e in events.drain(..) {
            accepted |= e == ModelEvent::SetupComplete;
            if self.phase != Phase::Over {
                self.events.push_back(SessionEvent::Model(e, at));
            }
        }
        self.scratch = events;
        if accepted {
            self.setup_accepted(at);
        }
    }

    /// The service accepted the setup at `now`: held messages go out, the keepalive starts.
    fn setup_accepted(&mut self, now: Instant) {
        if !self.in_setup() {
            return;
        }
        self.phase = Phase::Live;
        self.keepalive = Some(Keepalive::new(self.keepalive_config, now));
        self.setup = Some(Ok(()));
        while let Some(out) = self.held.pop_front() {
            self.send(out, now);
        }
    }

    /// The setup failed: the session is over.
    pub fn setup_failed(&mut self, why: SetupFailure) {
        if self.in_setup() {
            self.setup = Some(Err(why));
            self.phase = Phase::Over;
            self.transmit.clear();
        }
    }

    /// Queues a frame: held during the setup (a close is not), dropped once closed.
    pub fn send(&mut self, out: Outbound, now: Instant) {
        match (self.phase, &out) {
            // The shell closes the socket as it lets go.
            (Phase::Setup { .. }, Outbound::Close) => self.setup_failed(SetupFailure::Io(
                "the session was closed during setup".into(),
            )),
            (Phase::Setup { .. }, _) => self.held.push_back(out),
            (Phase::Live, Outbound::Close) => {
                self.transmit.push_back(out);
                self.phase = Phase::Closing {
                    deadline: now + CLOSE_WAIT,
                };
            }
            (Phase::Live, _) => self.transmit.push_back(out),
            (Phase::Closing { .. } | Phase::Over, _) => {}
        }
    }

    /// The socket ended: a refused setup, or the end reported to the call.
    pub fn end(&mut self, end: SocketEnd, _now: Instant) {
        match self.phase {
            Phase::Setup { .. } => self.setup_failed(match end {
                SocketEnd::Closed { code, reason } => SetupFailure::Refused {
                    code: code.unwrap_or(1005),
                    reason,
                },
                SocketEnd::Ended => SetupFailure::Refused {
                    code: 1006,
                    reason: "connection closed".into(),
                },
                SocketEnd::Failed(e) => SetupFailure::Io(e),
            }),
            Phase::Live | Phase::Closing { .. } => {
                let (code, reason) = match end {
                    SocketEnd::Closed { code, reason } => (code, reason),
                    SocketEnd::Ended => (None, "connection ended without a close frame".into()),
                    SocketEnd::Failed(e) => (None, e),
                };
                self.events.push_back(SessionEvent::Closed { code, reason });
                self.over();
            }
            Phase::Over => {}
        }
    }

    fn over(&mut self) {
        self.phase = Phase::Over;
        self.transmit.clear();
        self.held.clear();
    }

    /// Fires what is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.phase {
            Phase::Setup { deadline } if now >= deadline => {
                self.setup_failed(SetupFailure::Timeout(self.setup_timeout));
            }
            Phase::Live => match self.keepalive.as_mut().and_then(|k| k.handle_timeout(now)) {
                Some(KeepaliveAction::Ping) => self.transmit.push_back(Outbound::Ping),
                Some(KeepaliveAction::Dead { silent_for }) => {
                    self.events.push_back(SessionEvent::Dead { silent_for });
                    self.over();
                }
                None => {}
            },
            Phase::Closing { deadline } if now >= deadline => self.over(),
            _ => {}
        }
    }

    fn poll_timeout(&self) -> Option<(Instant, Reason)> {
        match self.phase {
            Phase::Setup { deadline } => Some((deadline, Reason::Setup)),
            Phase::Live => self
                .keepalive
                .as_ref()
                .and_then(Keepalive::poll_timeout)
                .map(|at| (at, Reason::Keepalive)),
            Phase::Closing { deadline } => Some((deadline, Reason::Closing)),
            Phase::Over => None,
        }
    }
}

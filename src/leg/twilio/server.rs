//! baton's side of a Twilio media stream: the bridge leg's async shell
//! ([`crate::leg::bridge::server`]) with the Twilio dialect fixed.
//!
//! [`accept`] waits for `connected` + `start` (bounded by a timeout), then runs one driver task
//! (the core and the socket; bounded event queue toward the call, frames dropped and counted
//! when it is full, frames moved added to the live counters; what one wake-up produced, a
//! frame's `media` and `mark`, written at once with one flush: the call already paces playback
//! at 20 ms). It logs under the caller's span.
//!
//! The stream ends on Twilio's `stop`, on the call's [`LegCommand::Hangup`](crate::leg::LegCommand)
//! (baton closes the socket, which is how a bidirectional stream is ended from the server), when
//! the call drops its handle, or when the socket closes or fails. The driver's join handle yields
//! [`LegStats`].
//!
//! The `X-Twilio-Signature` check belongs to the HTTP upgrade, before this shell runs: use
//! [`super::signature::verify_upgrade`] in the route handler, and [`configure_upgrade`] to set the
//! socket's message limits. Serve the route with `TCP_NODELAY` on accepted connections
//! (`axum::serve::ListenerExt::tap_io(|tcp| tcp.set_nodelay(true))`): with Nagle's algorithm on,
//! a 20 ms frame can wait for the previous one's delayed ACK and reach the caller 40 ms late.

use std::time::Duration;

use axum::extract::ws::WebSocket;
use tokio::task::JoinHandle;

use super::stream::{StartInfo, StreamOptions};
use crate::leg::LegHandle;
use crate::leg::bridge::server::{self as bridge, BridgeLegOptions, FrameCounters};
use crate::leg::bridge::{Dialect, DialectChoice};

pub use crate::leg::bridge::server::{
    BridgeLegError as TwilioLegError, LegEnd, LegStats, MAX_SOCKET_MESSAGE, READ_BUFFER,
    configure_upgrade,
};

/// Settings of one Twilio leg.
#[derive(Clone, Debug)]
pub struct TwilioLegOptions {
    pub stream: StreamOptions,
    /// How long after the socket opens `start` must arrive.
    pub start_timeout: Duration,
    /// Live counts of 20 ms frames received and sent (e.g. the daemon's Prometheus counters);
    /// each frame is one atomic add. No-op by default.
    pub frames_in: metrics::Counter,
    pub frames_out: metrics::Counter,
}

impl Default for TwilioLegOptions {
    fn default() -> Self {
        let b = BridgeLegOptions::new(DialectChoice::Fixed(Dialect::Twilio));
        TwilioLegOptions {
            stream: b.stream,
            start_timeout: b.start_timeout,
            frames_in: metrics::Counter::noop(),
            frames_out: metrics::Counter::noop(),
        }
    }
}

impl From<TwilioLegOptions> for BridgeLegOptions {
    fn from(o: TwilioLegOptions) -> Self {
        BridgeLegOptions {
            dialect: DialectChoice::Fixed(Dialect::Twilio),
            stream: o.stream,
            start_timeout: o.start_timeout,
            frames: FrameCounters::only(Dialect::Twilio, o.frames_in, o.frames_out),
        }
    }
}

/// Takes over an upgraded Twilio Media Streams socket: waits for `start`, then runs the leg.
/// Returns the call's end of the leg, what `start` said, and the driver task yielding the stats.
pub async fn accept(
    socket: WebSocket,
    opts: TwilioLegOptions,
) -> Result<(LegHandle, StartInfo, JoinHandle<LegStats>), TwilioLegError> {
    bridge::accept(socket, opts.into()).await
}

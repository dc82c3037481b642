//! Caller legs: one adapter per caller protocol, all producing the same [`LegEvent`]s (frames of
//! decoded PCM at the leg's own rate, stop) and taking the same [`LegCommand`]s (play a frame,
//! clear, hang up). The call never knows which protocol a leg speaks.

pub mod audiosocket;
pub mod bridge;
pub mod fixture;
pub mod keypad;
pub mod mic;
pub mod sip;
pub mod stream;
pub mod twilio;
pub mod webrtc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::audio::Frame;
pub use crate::audio::playout::PlayedKind;

/// What a leg reports to its call.
#[derive(Debug)]
pub enum LegEvent {
    /// One 20 ms caller frame, decoded to PCM at the leg's rate; `received_at` is when its last
    /// byte arrived.
    Frame { frame: Frame, received_at: Instant },
    /// The caller pressed a key.
    Dtmf { digit: char },
    /// The caller has now heard agent audio up to this playout timestamp (from the bridge's
    /// playback acknowledgements, e.g. Twilio marks).
    Heard { up_to: std::time::Duration },
    /// The caller hung up (or the fixture ended).
    Stop,
}

/// What a call tells its leg.
#[derive(Debug)]
pub enum LegCommand {
    /// Play one 20 ms frame to the caller (at the leg's rate). `kind` says whether it is agent
    /// speech, idle silence, or silence inside a turn (an underrun); a leg may skip idle silence.
    Play { frame: Frame, kind: PlayedKind },
    /// Barge-in: drop whatever audio the leg has buffered toward the caller.
    Clear,
    /// End the call from baton's side.
    Hangup,
}

/// The call's end of a leg.
pub struct LegHandle {
    /// The leg's PCM rate, both directions.
    pub rate: u32,
    /// The instant the leg's media timeline starts (frame `ts` zero).
    pub started_at: Instant,
    pub events: mpsc::Receiver<LegEvent>,
    pub commands: mpsc::UnboundedSender<LegCommand>,
}

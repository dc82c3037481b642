//! Caller legs: one adapter per caller protocol, all producing the same [`LegEvent`]s (frames of
//! decoded PCM at the leg's own rate, stop) and taking the same [`LegCommand`]s (play a frame,
//! clear, hang up). The call never knows which protocol a leg speaks.

pub mod audiosocket;
pub mod bridge;
pub mod fixture;
pub mod keypad;
pub mod mic;
pub mod sip;
pub mod socket;
pub mod stream;
pub mod twilio;
pub mod webrtc;

use std::fmt;
use std::task::{Context, Poll};

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::audio::Frame;
use crate::audio::g711::Law;
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
    /// The caller's side ended, and why: the call's end reason.
    Stop(StopReason),
}

/// Why the caller's side ended, as the call records it (its end reason in the store, the
/// report, `/metrics` and the log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The caller hung up: a bridge's `stop`, a BYE, an AudioSocket hang-up, a connection
    /// closed cleanly, the end of a fixture or of a microphone.
    HungUp,
    /// The caller's side failed, in words: a protocol error, a socket error or a socket closed
    /// without its hang-up, a peer that stopped reading, no media for too long.
    Failed(String),
}

/// The end reason of a call whose caller hung up.
pub const CALLER_HUNG_UP: &str = "caller hung up";

/// The start of the end reason of a call whose caller's side failed.
pub const CALLER_LEG_FAILED: &str = "caller's leg failed";

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::HungUp => f.write_str(CALLER_HUNG_UP),
            StopReason::Failed(why) => write!(f, "{CALLER_LEG_FAILED}: {why}"),
        }
    }
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

/// What a leg looks like from the call's task: events polled, commands taken at once. A leg
/// that runs in the call's own task (a bridge, AudioSocket or `/stream` socket: reads, the
/// protocol core and writes driven here, no task or channel of its own; see [`socket`])
/// implements it directly; one that needs a task
/// (a UDP media loop, a sound card callback, a WebRTC stack) is reached through its channels
/// ([`LegHandle::new`]). A tap between leg and call (keypad) wraps one.
pub trait LegIo: Send {
    /// The leg's next event; `None` once the leg is gone (and after). Drives the leg's socket:
    /// reads what arrived and writes what the commands produced. Cancel-safe.
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<LegEvent>>;
    /// Takes a command, or says why not. Never waits: what it writes goes out on the next poll.
    /// A leg that writes a played frame out in place (its bytes rendered during the call, no
    /// reference kept) gives the frame back, for the call's playout to fill again instead of
    /// allocating a frame every tick; a leg that passes frames on keeps them (`Ok(None)`).
    fn command(&mut self, cmd: LegCommand) -> Result<Option<Frame>, Refused>;
    /// Pushes out what the commands wrote so far (one flush); a leg that writes elsewhere has
    /// nothing to do.
    fn poll_flush(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        Poll::Ready(())
    }
    /// Whether the leg needs an idle playout's ticks on time: it sends what plays while nothing
    /// does (silence packets, key tones). A leg that skips idle silence says no, and its call
    /// runs such a tick with its next input (the caller's next frame) instead of waking for it.
    fn idle_ticks(&self) -> bool {
        true
    }
}

/// Why a leg did not take a command.
#[derive(Debug)]
pub enum Refused {
    /// The leg is gone.
    Gone(LegCommand),
    /// The leg's task is [`COMMAND_QUEUE`] frames behind: this frame is not played.
    Full(LegCommand),
}

/// Commands queued toward a leg's task at most (250 frames: 5 s of audio). A task that far
/// behind loses frames rather than the call holding them.
pub const COMMAND_QUEUE: usize = 250;

/// The commands channel of a leg with a task of its own.
pub fn command_channel() -> (mpsc::Sender<LegCommand>, mpsc::Receiver<LegCommand>) {
    mpsc::channel(COMMAND_QUEUE)
}

/// A leg reached through its task's channels.
struct ChannelLeg {
    events: mpsc::Receiver<LegEvent>,
    commands: mpsc::Sender<LegCommand>,
    /// A clear or hang-up that found the queue full, sent on the next poll.
    held: std::collections::VecDeque<LegCommand>,
}

impl ChannelLeg {
    fn send_held(&mut self) {
        while let Some(cmd) = self.held.pop_front() {
            if let Err(mpsc::error::TrySendError::Full(cmd)) = self.commands.try_send(cmd) {
                self.held.push_front(cmd);
                return;
            }
        }
    }
}

impl Drop for ChannelLeg {
    /// A clear or hang-up still held is delivered once the leg's task makes room.
    fn drop(&mut self) {
        self.send_held();
        if self.held.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (held, commands) = (std::mem::take(&mut self.held), self.commands.clone());
        rt.spawn(async move {
            for cmd in held {
                if commands.send(cmd).await.is_err() {
                    return;
                }
            }
        });
    }
}

impl LegIo for ChannelLeg {
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<LegEvent>> {
        self.send_held();
        self.events.poll_recv(cx)
    }

    fn command(&mut self, cmd: LegCommand) -> Result<Option<Frame>, Refused> {
        self.send_held();
        if !self.held.is_empty() {
            // Behind a held command: keep the order (a frame would overtake a held clear).
            return match cmd {
                LegCommand::Play { .. } => Err(Refused::Full(cmd)),
                cmd => {
                    self.held.push_back(cmd);
                    Ok(None)
                }
            };
        }
        match self.commands.try_send(cmd) {
            Ok(()) => Ok(None),
            Err(mpsc::error::TrySendError::Closed(cmd)) => Err(Refused::Gone(cmd)),
            Err(mpsc::error::TrySendError::Full(cmd @ LegCommand::Play { .. })) => {
                Err(Refused::Full(cmd))
            }
            Err(mpsc::error::TrySendError::Full(cmd)) => {
                self.held.push_back(cmd);
                Ok(None)
            }
        }
    }

    fn poll_flush(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        self.send_held();
        Poll::Ready(())
    }
}

/// A leg whose first events were read ahead ([`LegHandle::listen_while`]).
struct Prefixed {
    early: std::collections::VecDeque<LegEvent>,
    inner: Box<dyn LegIo>,
}

impl LegIo for Prefixed {
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<LegEvent>> {
        match self.early.pop_front() {
            Some(ev) => Poll::Ready(Some(ev)),
            None => self.inner.poll_event(cx),
        }
    }

    fn command(&mut self, cmd: LegCommand) -> Result<Option<Frame>, Refused> {
        self.inner.command(cmd)
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.poll_flush(cx)
    }

    fn idle_ticks(&self) -> bool {
        self.inner.idle_ticks()
    }
}

/// The call's end of a leg.
pub struct LegHandle {
    /// The leg's PCM rate, both directions.
    pub rate: u32,
    /// The instant the leg's media timeline starts (frame `ts` zero).
    pub started_at: Instant,
    /// The G.711 law the leg's wire carries for the whole call, if it does: every frame played
    /// to it is quantised to that law, so the call may hold what it queues in it.
    pub law: Option<Law>,
    io: Box<dyn LegIo>,
}

impl LegHandle {
    /// A leg whose task delivers events on `events` and takes commands on `commands`.
    pub fn new(
        rate: u32,
        started_at: Instant,
        events: mpsc::Receiver<LegEvent>,
        commands: mpsc::Sender<LegCommand>,
    ) -> LegHandle {
        let leg = ChannelLeg {
            events,
            commands,
            held: Default::default(),
        };
        LegHandle::direct(rate, started_at, Box::new(leg))
    }

    /// A leg driven from the call's task.
    pub fn direct(rate: u32, started_at: Instant, io: Box<dyn LegIo>) -> LegHandle {
        LegHandle {
            rate,
            started_at,
            law: None,
            io,
        }
    }

    /// The leg as one whose wire carries `law` for the whole call (see [`LegHandle::law`]).
    pub fn with_law(mut self, law: Option<Law>) -> LegHandle {
        self.law = law;
        self
    }

    /// The leg's next event; `None` once it is gone. Cancel-safe.
    pub async fn recv(&mut self) -> Option<LegEvent> {
        std::future::poll_fn(|cx| self.io.poll_event(cx)).await
    }

    /// Polls for the leg's next event (see [`LegHandle::recv`]).
    pub fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<LegEvent>> {
        self.io.poll_event(cx)
    }

    /// Whether the leg needs an idle playout's ticks on time ([`LegIo::idle_ticks`]).
    pub fn idle_ticks(&self) -> bool {
        self.io.idle_ticks()
    }

    /// Gives the leg a command, or says why it did not take it; a frame the leg played in
    /// place comes back ([`LegIo::command`]).
    pub fn send(&mut self, cmd: LegCommand) -> Result<Option<Frame>, Refused> {
        self.io.command(cmd)
    }

    /// Starts writing what the commands so far produced (returns at once; the rest goes out
    /// as the socket takes it, on later polls).
    pub async fn flush(&mut self) {
        std::future::poll_fn(|cx| {
            let _ = self.io.poll_flush(cx);
            Poll::Ready(())
        })
        .await
    }

    /// Reads the leg while `fut` runs — a leg driven from the call's task is read only when
    /// polled — keeping at most `cap` frames (the oldest dropped first, counted in the third
    /// value); what was read comes first afterwards, each event with its own arrival time.
    pub async fn listen_while<F: std::future::Future>(
        mut self,
        fut: F,
        cap: usize,
    ) -> (F::Output, LegHandle, u64) {
        let mut fut = std::pin::pin!(fut);
        let mut early = std::collections::VecDeque::new();
        let (mut frames, mut dropped, mut done) = (0usize, 0u64, false);
        let out = loop {
            tokio::select! {
                biased;
                out = &mut fut => break out,
                ev = self.recv(), if !done => match ev {
                    Some(ev @ LegEvent::Frame { .. }) => {
                        if frames >= cap.max(1)
                            && let Some(i) = early.iter().position(|e| matches!(e, LegEvent::Frame { .. }))
                        {
                            early.remove(i);
                            frames -= 1;
                            dropped += 1;
                        }
                        frames += 1;
                        early.push_back(ev);
                    }
                    Some(ev) => {
                        done = matches!(ev, LegEvent::Stop(_));
                        early.push_back(ev);
                    }
                    None => done = true,
                },
            }
        };
        if early.is_empty() {
            return (out, self, dropped);
        }
        let leg = self.wrap(|inner| Box::new(Prefixed { early, inner }));
        (out, leg, dropped)
    }

    /// The same leg with `wrap` between it and the call (a tap).
    pub fn wrap(self, wrap: impl FnOnce(Box<dyn LegIo>) -> Box<dyn LegIo>) -> LegHandle {
        LegHandle {
            rate: self.rate,
            started_at: self.started_at,
            law: self.law,
            io: wrap(self.io),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn frame(n: u64) -> LegEvent {
        LegEvent::Frame {
            frame: Frame::silence(8000, Duration::from_millis(20 * n)),
            received_at: Instant::now(),
        }
    }

    fn ts(ev: &LegEvent) -> Option<u64> {
        match ev {
            LegEvent::Frame { frame, .. } => Some(frame.ts.as_millis() as u64 / 20),
            _ => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_leg_read_while_the_session_opens_keeps_the_newest_frames_in_order() {
        let (ev_tx, ev_rx) = mpsc::channel(16);
        let (cmd_tx, _cmd_rx) = command_channel();
        let leg = LegHandle::new(8000, Instant::now(), ev_rx, cmd_tx);
        for n in 0..5 {
            ev_tx.send(frame(n)).await.unwrap();
        }
        ev_tx.send(LegEvent::Dtmf { digit: '5' }).await.unwrap();
        let opening = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            "opened"
        };
        let (out, mut leg, dropped) = leg.listen_while(opening, 3).await;
        assert_eq!((out, dropped), ("opened", 2));
        ev_tx.send(frame(5)).await.unwrap();
        let mut got = Vec::new();
        for _ in 0..5 {
            let ev = leg.recv().await.unwrap();
            got.push(ts(&ev).map_or("key".to_owned(), |n| n.to_string()));
        }
        assert_eq!(got, ["2", "3", "4", "key", "5"]);
    }
}

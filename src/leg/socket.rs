//! What the legs driven from their call's task (the bridge dialects, AudioSocket, `/stream`) share:
//! [`Outbox`] writes a protocol core's messages as far as the socket takes them with one flush
//! per pass, [`Handover`] gives the leg to its closing task when the call lets it go, [`SocketIo`]
//! is the one shell through which the call drives each of them ([`SocketLeg`]), and [`close`] and
//! [`close_websocket`] end a WebSocket leg (refused, or the call over).

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, close_code};
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use tokio::sync::oneshot;
use tokio::time::{Instant, timeout};

use crate::audio::Frame;
use crate::leg::{LegCommand, LegEvent, LegIo, PlayedKind, Refused, StopReason};

/// The longest a write may wait for the peer to read before the leg is given up.
pub const WRITE_STALL: Duration = Duration::from_secs(5);

/// How long a closing WebSocket leg waits for each step of the close (the close frame taken, the
/// peer's answer).
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Sends a normal close ("call ended") and waits briefly for the peer to answer it before the
/// connection is dropped.
pub async fn close_websocket<S>(socket: &mut S)
where
    S: Stream<Item = Result<Message, axum::Error>> + Sink<Message, Error = axum::Error> + Unpin,
{
    let frame = CloseFrame {
        code: close_code::NORMAL,
        reason: "call ended".into(),
    };
    let sent = timeout(CLOSE_GRACE, socket.send(Message::Close(Some(frame)))).await;
    if matches!(sent, Ok(Ok(()))) {
        let _ = timeout(CLOSE_GRACE, async {
            while let Some(Ok(m)) = socket.next().await {
                if matches!(m, Message::Close(_)) {
                    break;
                }
            }
        })
        .await;
    }
}

/// Closes a WebSocket leg's `sink` with `code` and `reason` (cut to fit a control frame),
/// waiting at most [`CLOSE_GRACE`] for the socket to take it.
pub async fn close<S>(sink: &mut S, code: u16, reason: &str)
where
    S: Sink<Message> + Unpin,
{
    // A close reason must fit a control frame (125 bytes).
    let mut end = reason.len().min(120);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let frame = CloseFrame {
        code,
        reason: reason[..end].to_owned().into(),
    };
    let _ = timeout(CLOSE_GRACE, sink.send(Message::Close(Some(frame)))).await;
}

/// The writing side of a leg's socket: a message the socket could not take yet, whether a flush
/// is owed, and since when the socket has refused more.
#[derive(Debug)]
pub struct Outbox<M> {
    next: Option<M>,
    unflushed: bool,
    blocked_since: Option<Instant>,
}

impl<M> Default for Outbox<M> {
    fn default() -> Self {
        Outbox {
            next: None,
            unflushed: false,
            blocked_since: None,
        }
    }
}

impl<M> Outbox<M> {
    /// Writes the messages `produce` gives (the core's transmits) as far as `sink` takes them,
    /// then flushes once: one syscall and one TCP segment for what one pass produced rather
    /// than one per message. What the sink cannot take yet waits here (and in the core) for the
    /// next poll.
    pub fn poll_write<S>(
        &mut self,
        sink: &mut S,
        cx: &mut Context<'_>,
        mut produce: impl FnMut() -> Option<M>,
    ) -> Result<(), S::Error>
    where
        S: Sink<M> + Unpin,
    {
        loop {
            if self.next.is_none() {
                self.next = produce();
            }
            if self.next.is_none() {
                break;
            }
            match Pin::new(&mut *sink).poll_ready(cx) {
                Poll::Ready(Ok(())) => {
                    if let Some(msg) = self.next.take() {
                        Pin::new(&mut *sink).start_send(msg)?;
                        self.unflushed = true;
                    }
                }
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => break,
            }
        }
        if self.unflushed {
            match Pin::new(&mut *sink).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.unflushed = false,
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => {}
            }
        }
        if self.is_empty() {
            self.blocked_since = None;
        } else {
            self.blocked_since.get_or_insert_with(Instant::now);
        }
        Ok(())
    }

    /// Writes everything `produce` gives and flushes it; ends early on an error.
    pub async fn drain<S>(
        &mut self,
        sink: &mut S,
        mut produce: impl FnMut() -> Option<M>,
    ) -> Result<(), S::Error>
    where
        S: Sink<M> + Unpin,
    {
        poll_fn(|cx| match self.poll_write(sink, cx, &mut produce) {
            Ok(()) if self.is_empty() => Poll::Ready(Ok(())),
            Ok(()) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        })
        .await
    }

    /// Nothing waits to be written or flushed here (the core may still hold more).
    pub fn is_empty(&self) -> bool {
        self.next.is_none() && !self.unflushed
    }

    /// The socket has taken nothing for [`WRITE_STALL`] or longer.
    pub fn stalled(&self, now: Instant) -> bool {
        self.blocked_since
            .is_some_and(|t| now.saturating_duration_since(t) >= WRITE_STALL)
    }
}

/// The call's hold on a leg driven from its task: the leg while the call uses it, and the way to
/// its closing task. [`Handover::hand_over`] (on hang-up) or dropping it gives the leg to that
/// task, once.
pub struct Handover<L> {
    leg: Option<L>,
    closer: Option<oneshot::Sender<L>>,
}

impl<L> Handover<L> {
    /// Holds `leg`; the closing task awaits the receiver.
    pub fn new(leg: L) -> (Handover<L>, oneshot::Receiver<L>) {
        let (closer, closed) = oneshot::channel();
        let hold = Handover {
            leg: Some(leg),
            closer: Some(closer),
        };
        (hold, closed)
    }

    /// The leg, until it has been handed over.
    pub fn leg(&mut self) -> Option<&mut L> {
        self.leg.as_mut()
    }

    /// Gives the leg to its closing task (nothing more goes through this end).
    pub fn hand_over(&mut self) {
        if let (Some(leg), Some(closer)) = (self.leg.take(), self.closer.take()) {
            let _ = closer.send(leg);
        }
    }
}

impl<L> Drop for Handover<L> {
    fn drop(&mut self) {
        self.hand_over();
    }
}

/// A leg whose socket its call's task drives: what the shared shell ([`SocketIo`]) asks of each
/// protocol. The shell keeps the rules every such leg follows — the call hears `Stop` once, then
/// that the leg is gone; a hang-up hands the leg to its closing task; nothing is played once the
/// leg has ended — and the leg keeps what is its own: how it reads and writes, and what ends it.
pub trait SocketLeg: Send {
    /// The core's next event for the call.
    fn next_event(&mut self) -> Option<LegEvent>;
    /// The leg has ended (its peer or socket gone, or the call hung up).
    fn ended(&self) -> bool;
    /// Why it ended, for the call: asked once [`ended`](Self::ended) is true and the leg gave
    /// the call no `Stop` of its own.
    fn stop_reason(&self) -> StopReason;
    /// Writes what the core has, then reads what arrived (and runs the leg's timers). Ready when
    /// anything moved, for the shell to look at the core again; pending when all of it waits.
    fn poll_io(&mut self, cx: &mut Context<'_>) -> Poll<()>;
    /// Writes what the core has and flushes it (the end of the call's pass).
    fn poll_write(&mut self, cx: &mut Context<'_>);
    /// Plays one frame (rendered into the core's next message at once).
    fn play(&mut self, frame: &Frame, kind: PlayedKind, now: Instant);
    /// Drops what the peer has buffered (barge-in).
    fn clear(&mut self);
    /// The call hangs up: the leg notes how it ends.
    fn hang_up(&mut self);
    /// Gives the leg up if its peer has read nothing for [`WRITE_STALL`].
    fn give_up_if_stalled(&mut self, now: Instant);
}

/// The call's end of a [`SocketLeg`]: the leg driven from the call's task, given to its closing
/// task on hang-up or when the call drops it.
pub struct SocketIo<L> {
    hold: Handover<L>,
    /// The call has been given the leg's `Stop`.
    stop_sent: bool,
}

impl<L> SocketIo<L> {
    pub fn new(hold: Handover<L>) -> Self {
        SocketIo {
            hold,
            stop_sent: false,
        }
    }
}

impl<L: SocketLeg> LegIo for SocketIo<L> {
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<LegEvent>> {
        let Some(leg) = self.hold.leg() else {
            return Poll::Ready(None);
        };
        loop {
            if let Some(ev) = leg.next_event() {
                self.stop_sent |= matches!(ev, LegEvent::Stop(_));
                return Poll::Ready(Some(ev));
            }
            if leg.ended() {
                // Whatever ended it, the call hears `Stop` once, then that the leg is gone; the
                // closing task writes what is left.
                if !std::mem::replace(&mut self.stop_sent, true) {
                    return Poll::Ready(Some(LegEvent::Stop(leg.stop_reason())));
                }
                self.hold.hand_over();
                return Poll::Ready(None);
            }
            if leg.poll_io(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }

    fn command(&mut self, cmd: LegCommand) -> Result<Option<Frame>, Refused> {
        let Some(leg) = self.hold.leg() else {
            return Err(Refused::Gone(cmd));
        };
        if matches!(cmd, LegCommand::Hangup) {
            leg.hang_up();
            // Nothing more goes through this end: the closing starts now.
            self.hold.hand_over();
            return Ok(None);
        }
        if leg.ended() {
            return Err(Refused::Gone(cmd));
        }
        let now = Instant::now();
        let played = match cmd {
            LegCommand::Play { frame, kind } => {
                leg.play(&frame, kind, now);
                Some(frame)
            }
            LegCommand::Clear => {
                leg.clear();
                None
            }
            LegCommand::Hangup => None,
        };
        leg.give_up_if_stalled(now);
        Ok(played)
    }

    /// No: idle silence is not sent (each core's `play` skips it).
    fn idle_ticks(&self) -> bool {
        false
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(leg) = self.hold.leg().filter(|l| !l.ended()) {
            leg.poll_write(cx);
        }
        Poll::Ready(())
    }
}

/// The close code of a close frame that carried none (RFC 6455 7.1.5: "no status received").
pub const NO_STATUS: u16 = 1005;

/// How a WebSocket closed, in words: `closed (code 1000: bye)`, `closed (no status code)`, or
/// `closed without a close frame`. The peer's reason is its own text: control characters are
/// left out, so it cannot forge lines where it is logged or stored.
pub fn closed_words(code: Option<u16>, reason: &str) -> String {
    let reason: String = reason.chars().filter(|c| !c.is_control()).collect();
    match (code, reason.is_empty()) {
        (Some(NO_STATUS), true) => "closed (no status code)".to_owned(),
        (Some(c), true) => format!("closed (code {c})"),
        (Some(c), false) => format!("closed (code {c}: {reason})"),
        (None, _) => "closed without a close frame".to_owned(),
    }
}

/// How the call records a WebSocket that closed without the protocol's own hang-up (some
/// bridges, Vonage's among them, end only this way): a close frame is the peer ending the call
/// on purpose, the caller hanging up, unless its code says something broke (1002 protocol
/// error, 1003 unacceptable data, 1007 bad payload, 1008 policy, 1009 too big, 1010 missing
/// extension, 1011 internal error, 1012 service restart, 1013 try again later, 1014 bad gateway,
/// 1015 TLS failure); those, and a connection lost without any close frame, are the caller's
/// side failing, in `words`.
pub fn closed_stop_reason(code: Option<u16>, words: impl FnOnce() -> String) -> StopReason {
    match code {
        Some(1002 | 1003 | 1007..=1015) | None => StopReason::Failed(words()),
        Some(_) => StopReason::HungUp,
    }
}

/// For the legs' tests: plays a voiced frame every 20 ms on `leg` (at `rate`) until the leg
/// reports something, and checks that it stopped after [`WRITE_STALL`] (within a second) because
/// its peer read nothing; returns the event.
#[cfg(test)]
pub(crate) async fn play_until_given_up(
    leg: &mut crate::leg::LegHandle,
    rate: u32,
) -> Option<crate::leg::LegEvent> {
    use crate::audio::Frame;
    use crate::leg::{LegCommand, PlayedKind};
    let t0 = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    let mut n = 0u32;
    let stopped = loop {
        tokio::select! {
            ev = leg.recv() => break ev,
            _ = tick.tick() => {
                let frame = Frame::silence(rate, Duration::from_millis(20) * n);
                leg.send(LegCommand::Play { frame, kind: PlayedKind::Voice }).unwrap();
                leg.flush().await;
                n += 1;
            }
        }
    };
    let waited = Instant::now() - t0;
    assert!(
        waited >= WRITE_STALL && waited < WRITE_STALL + Duration::from_secs(1),
        "{waited:?}"
    );
    stopped
}

#[cfg(test)]
mod tests {
    use tokio_util::sync::PollSender;

    use super::*;

    #[test]
    fn a_close_is_said_in_words_not_as_an_option() {
        assert_eq!(closed_words(Some(1000), ""), "closed (code 1000)");
        assert_eq!(closed_words(Some(1011), "bye"), "closed (code 1011: bye)");
        assert_eq!(closed_words(None, "x"), "closed without a close frame");
        let end = crate::leg::bridge::server::LegEnd::SocketClosed {
            code: Some(1000),
            reason: "call ended".into(),
        };
        assert_eq!(end.to_string(), "the socket closed (code 1000: call ended)");
    }

    #[tokio::test(start_paused = true)]
    async fn a_sink_that_takes_nothing_is_stalled_after_the_limit() {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<u32>(2);
        let mut sink = PollSender::new(tx);
        let mut outbox = Outbox::default();
        let mut queued: std::collections::VecDeque<u32> = (0..5).collect();
        poll_fn(|cx| {
            outbox
                .poll_write(&mut sink, cx, || queued.pop_front())
                .unwrap();
            Poll::Ready(())
        })
        .await;
        // Two taken, the third waits in the outbox, two in the core.
        assert_eq!(queued.len(), 2);
        assert!(!outbox.is_empty());
        tokio::time::advance(WRITE_STALL - Duration::from_millis(1)).await;
        assert!(!outbox.stalled(Instant::now()));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(outbox.stalled(Instant::now()));
        // The peer reads again: everything goes out and the stall is over.
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(n) = rx.recv().await {
                got.push(n);
            }
            got
        });
        outbox
            .drain(&mut sink, || queued.pop_front())
            .await
            .unwrap();
        assert!(outbox.is_empty() && !outbox.stalled(Instant::now()));
        sink.close();
        assert_eq!(reader.await.unwrap(), [0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_leg_is_handed_over_once_even_when_dropped_after() {
        let (mut hold, mut closed) = Handover::new(7);
        assert_eq!(hold.leg().copied(), Some(7));
        hold.hand_over();
        assert!(hold.leg().is_none());
        drop(hold);
        assert_eq!(closed.try_recv().ok(), Some(7));
        let (hold, mut closed) = Handover::new("dropped");
        drop(hold);
        assert_eq!(closed.try_recv().ok(), Some("dropped"));
    }
}

#[cfg(test)]
mod shell_tests {
    //! The rules [`SocketIo`] keeps for every socket leg, on a leg whose I/O is a script.

    use std::collections::VecDeque;

    use super::*;

    /// A close frame is a hang-up unless its code says something broke; no close frame at
    /// all is a failure. Each failure says how the socket closed.
    #[test]
    fn a_close_is_a_hang_up_unless_its_code_or_its_absence_says_it_broke() {
        let words = |code| move || closed_words(code, "");
        for code in [1000, 1001, NO_STATUS, 4000, 4999] {
            assert_eq!(
                closed_stop_reason(Some(code), words(Some(code))),
                StopReason::HungUp,
                "{code}"
            );
        }
        for code in [
            1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 1015,
        ] {
            assert_eq!(
                closed_stop_reason(Some(code), words(Some(code))),
                StopReason::Failed(format!("closed (code {code})")),
            );
        }
        assert_eq!(
            closed_stop_reason(None, words(None)),
            StopReason::Failed("closed without a close frame".into())
        );
        assert_eq!(closed_words(Some(NO_STATUS), ""), "closed (no status code)");
        // The peer's reason cannot break a log line or a stored reason.
        assert_eq!(
            closed_words(Some(1000), "bye\nend=forged\r"),
            "closed (code 1000: byeend=forged)"
        );
    }

    #[derive(Default)]
    struct Scripted {
        events: VecDeque<LegEvent>,
        ended: bool,
        played: usize,
        cleared: usize,
        hung_up: bool,
        writes: usize,
        /// What `poll_io` does next: `true` ends the leg, `false` waits.
        io: VecDeque<bool>,
    }

    impl SocketLeg for Scripted {
        fn next_event(&mut self) -> Option<LegEvent> {
            self.events.pop_front()
        }
        fn ended(&self) -> bool {
            self.ended
        }
        fn stop_reason(&self) -> StopReason {
            StopReason::Failed("the script ended it".into())
        }
        fn poll_io(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
            match self.io.pop_front() {
                Some(true) => {
                    self.ended = true;
                    Poll::Ready(())
                }
                _ => Poll::Pending,
            }
        }
        fn poll_write(&mut self, _cx: &mut Context<'_>) {
            self.writes += 1;
        }
        fn play(&mut self, _frame: &Frame, _kind: PlayedKind, _now: Instant) {
            self.played += 1;
        }
        fn clear(&mut self) {
            self.cleared += 1;
        }
        fn hang_up(&mut self) {
            self.hung_up = true;
        }
        fn give_up_if_stalled(&mut self, _now: Instant) {}
    }

    fn poll(io: &mut SocketIo<Scripted>) -> Poll<Option<LegEvent>> {
        let waker = futures_util::task::noop_waker();
        io.poll_event(&mut Context::from_waker(&waker))
    }

    fn play() -> LegCommand {
        LegCommand::Play {
            frame: Frame::silence(8000, Duration::ZERO),
            kind: PlayedKind::Voice,
        }
    }

    #[tokio::test]
    async fn an_ended_leg_says_stop_once_then_goes_to_its_closer() {
        let leg = Scripted {
            io: [false, true].into(),
            ..Default::default()
        };
        let (hold, closed) = Handover::new(leg);
        let mut io = SocketIo::new(hold);
        assert!(poll(&mut io).is_pending());
        // A frame played while the leg lives is handed back for reuse.
        assert!(matches!(io.command(play()), Ok(Some(_))));
        assert!(matches!(io.command(LegCommand::Clear), Ok(None)));
        // The peer goes: the call hears `Stop` once, with the leg's reason, then that the leg
        // is gone.
        assert!(matches!(
            poll(&mut io),
            Poll::Ready(Some(LegEvent::Stop(StopReason::Failed(why)))) if why == "the script ended it"
        ));
        assert!(matches!(poll(&mut io), Poll::Ready(None)));
        assert!(matches!(poll(&mut io), Poll::Ready(None)));
        let leg = closed.await.unwrap();
        assert_eq!((leg.played, leg.cleared, leg.hung_up), (1, 1, false));
        assert!(matches!(io.command(play()), Err(Refused::Gone(_))));
    }

    #[tokio::test]
    async fn the_core_stop_is_not_repeated_and_nothing_plays_after_the_end() {
        let leg = Scripted {
            events: [LegEvent::Stop(StopReason::HungUp)].into(),
            ended: true,
            ..Default::default()
        };
        let (hold, _closed) = Handover::new(leg);
        let mut io = SocketIo::new(hold);
        assert!(matches!(io.command(play()), Err(Refused::Gone(_))));
        // The core's own `Stop` (and its reason) is the one the call hears.
        assert!(matches!(
            poll(&mut io),
            Poll::Ready(Some(LegEvent::Stop(StopReason::HungUp)))
        ));
        assert!(matches!(poll(&mut io), Poll::Ready(None)));
    }

    #[tokio::test]
    async fn a_hang_up_hands_the_leg_over_at_once() {
        let (hold, closed) = Handover::new(Scripted::default());
        let mut io = SocketIo::new(hold);
        let _ = io.poll_flush(&mut Context::from_waker(&futures_util::task::noop_waker()));
        assert!(matches!(io.command(LegCommand::Hangup), Ok(None)));
        let leg = closed.await.unwrap();
        assert!(leg.hung_up);
        assert_eq!((leg.writes, leg.played), (1, 0));
        assert!(matches!(poll(&mut io), Poll::Ready(None)));
        assert!(matches!(
            io.command(LegCommand::Hangup),
            Err(Refused::Gone(_))
        ));
    }
}

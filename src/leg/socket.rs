//! What the legs driven from their call's task (the bridge dialects, AudioSocket, `/stream`) share:
//! [`Outbox`] writes a protocol core's messages as far as the socket takes them with one flush
//! per pass, [`Handover`] gives the leg to its closing task when the call lets it go, and
//! [`close`] and [`close_websocket`] end a WebSocket leg (refused, or the call over).

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, close_code};
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use tokio::sync::oneshot;
use tokio::time::{Instant, timeout};

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

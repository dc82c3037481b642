//! A transfer's events on their way from the shell that carries it out (a SIP call's dialog, a
//! Twilio call's redirect task) to whoever asked for it (the call, an operator's request): a
//! bounded channel whose sender never waits. When the receiver falls behind, what arrives is:
//!
//! - **the [`Event::Finished`] report, always**, last, from a slot of its own;
//! - **every stage and dead-air window, in order**: one that finds the queue full waits in the
//!   sender, ahead of every later event, and goes on as soon as the receiver makes room, at the
//!   latest with the report (a transfer has few: its stages only move forward);
//! - **the first [`BAD_NOTIFIES_PASSED`] bad NOTIFYs one by one**, and the rest — as many as a
//!   peer cares to send — counted into one [`Event::MoreBadNotifies`] (with the last one's
//!   error) where they happened: ahead of the transfer's next other event, at the latest with
//!   the report.
//!
//! The queue holds [`QUEUE`] events, the sender at most [`HELD`] more (no transfer comes near
//! either); an event beyond both is dropped with a warning naming it.

use std::collections::VecDeque;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};

use super::machine::{Event, Report};

/// Events waiting in the queue for the receiver.
pub const QUEUE: usize = 16;
/// Bad NOTIFYs of one transfer passed on one by one; the rest are counted.
pub const BAD_NOTIFIES_PASSED: u32 = 4;
/// Stages and dead-air windows that may wait in the sender for room in the queue.
pub const HELD: usize = 16;

/// A channel for one transfer's events.
pub fn channel() -> (EventSender, EventReceiver) {
    channel_of(QUEUE)
}

fn channel_of(queue: usize) -> (EventSender, EventReceiver) {
    let (tx, rx) = mpsc::channel(queue);
    let (last_tx, last_rx) = oneshot::channel();
    (
        EventSender {
            queue: Some(tx),
            last: Some(last_tx),
            held: VecDeque::new(),
            bad_passed: 0,
            bad_counted: 0,
            bad_last: String::new(),
        },
        EventReceiver {
            queue: Some(rx),
            last: Some(last_rx),
            held: VecDeque::new(),
            report: None,
        },
    )
}

/// What the sender leaves when it is done: what still waited for room, and the report (none
/// when the transfer went without one, e.g. its call's media ended first).
#[derive(Debug)]
struct Last {
    held: VecDeque<Event>,
    report: Option<Report>,
}

/// The shell's end: [`EventSender::send`] each event of the machine, in order.
#[derive(Debug)]
pub struct EventSender {
    /// `None` once the report is sent: the receiver then takes the slot.
    queue: Option<mpsc::Sender<Event>>,
    last: Option<oneshot::Sender<Last>>,
    /// Stages and dead air (and counts of bad NOTIFYs) that found the queue full, in order.
    held: VecDeque<Event>,
    bad_passed: u32,
    /// Bad NOTIFYs counted since the last count went on, and the last one's error.
    bad_counted: u32,
    bad_last: String,
}

impl EventSender {
    /// Passes `event` on without waiting, by the rules in the module docs. Events after the
    /// report are not passed on (a warning says so); no shell sends any.
    pub fn send(&mut self, event: Event) {
        if self.last.is_none() {
            tracing::warn!(event = ?event, "a transfer event after its report is not passed on");
            return;
        }
        match event {
            Event::BadNotify { error } => self.bad_notify(error),
            Event::Finished(report) => self.close(Some(report)),
            other => {
                self.count_out();
                self.in_order(other);
            }
        }
    }

    fn bad_notify(&mut self, error: String) {
        let alone =
            self.bad_passed < BAD_NOTIFIES_PASSED && self.bad_counted == 0 && self.held.is_empty();
        let error = match (&self.queue, alone) {
            (Some(q), true) => match q.try_send(Event::BadNotify { error }) {
                Ok(()) => {
                    self.bad_passed += 1;
                    return;
                }
                Err(TrySendError::Full(Event::BadNotify { error })) => error,
                // Nobody listens any more.
                Err(_) => return,
            },
            _ => error,
        };
        self.bad_counted = self.bad_counted.saturating_add(1);
        self.bad_last = error;
    }

    /// The bad NOTIFYs counted so far go on as one event, where they happened.
    fn count_out(&mut self) {
        if self.bad_counted > 0 {
            let count = std::mem::take(&mut self.bad_counted);
            let last_error = std::mem::take(&mut self.bad_last);
            tracing::info!(
                count,
                last_error = %last_error,
                "bad NOTIFYs of a transfer counted, not passed on one by one"
            );
            self.in_order(Event::MoreBadNotifies { count, last_error });
        }
    }

    /// Queues `event` behind everything before it, holding it when the queue is full.
    fn in_order(&mut self, event: Event) {
        self.make_room();
        if self.held.is_empty()
            && let Some(q) = &self.queue
        {
            match q.try_send(event) {
                Ok(()) | Err(TrySendError::Closed(_)) => {}
                Err(TrySendError::Full(event)) => self.hold(event),
            }
        } else {
            self.hold(event);
        }
    }

    fn hold(&mut self, event: Event) {
        if self.held.len() < HELD {
            self.held.push_back(event);
        } else {
            tracing::warn!(
                event = ?event,
                "a transfer event is dropped: its receiver is {} events behind",
                QUEUE + HELD
            );
        }
    }

    /// Moves what is held into the queue while it has room.
    fn make_room(&mut self) {
        let Some(q) = &self.queue else { return };
        while let Some(event) = self.held.pop_front() {
            match q.try_send(event) {
                Ok(()) => {}
                Err(TrySendError::Full(event)) => {
                    self.held.push_front(event);
                    return;
                }
                Err(TrySendError::Closed(_)) => {
                    self.held.clear();
                    return;
                }
            }
        }
    }

    /// Hands over what is left, and the report, through the slot; the queue closes behind it.
    fn close(&mut self, report: Option<Report>) {
        self.count_out();
        self.make_room();
        if let Some(last) = self.last.take() {
            let held = std::mem::take(&mut self.held);
            let _ = last.send(Last { held, report });
        }
        self.queue = None;
    }
}

impl Drop for EventSender {
    fn drop(&mut self) {
        if self.last.is_some() {
            self.close(None);
        }
    }
}

/// The requester's end.
#[derive(Debug)]
pub struct EventReceiver {
    queue: Option<mpsc::Receiver<Event>>,
    last: Option<oneshot::Receiver<Last>>,
    held: VecDeque<Event>,
    report: Option<Report>,
}

impl EventReceiver {
    /// The next event, in the order sent; `None` after the report, or once the transfer went
    /// without one. Cancel-safe: an event is never lost to a `select!` that took another branch.
    pub async fn recv(&mut self) -> Option<Event> {
        if let Some(q) = self.queue.as_mut() {
            if let Some(event) = q.recv().await {
                return Some(event);
            }
            // The sender is done: what it left is in the slot.
            self.queue = None;
        }
        if let Some(last) = self.last.as_mut() {
            let left = last.await;
            self.last = None;
            if let Ok(Last { held, report }) = left {
                self.held = held;
                self.report = report;
            }
        }
        self.held
            .pop_front()
            .or_else(|| self.report.take().map(Event::Finished))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::transfer::{BlindVia, Destination, Input, Outcome, Plan, Settings, Stage, Transfer};

    fn report() -> Report {
        Report {
            plan: Plan::Blind(BlindVia::SipRefer),
            target: Destination::parse("sip:priya@pbx.example.com").unwrap(),
            outcome: Outcome::Transferred,
            status: Some(200),
            setup_ms: Some(10),
            ring_ms: None,
            total_ms: 20,
        }
    }

    fn stage(stage: Stage) -> Event {
        Event::Stage { stage }
    }

    fn bad(n: u32) -> Event {
        Event::BadNotify {
            error: format!("bad {n}"),
        }
    }

    /// Every event the receiver gets, once the sender is done.
    async fn drain(rx: &mut EventReceiver) -> Vec<Event> {
        let mut got = Vec::new();
        while let Some(e) = rx.recv().await {
            got.push(e);
        }
        got
    }

    #[tokio::test]
    async fn a_flood_of_bad_notifies_is_counted_and_the_report_still_arrives() {
        // Nobody reads while the flood lasts.
        let (mut tx, mut rx) = channel();
        tx.send(stage(Stage::Referring));
        for n in 0..10_000 {
            tx.send(bad(n));
        }
        tx.send(stage(Stage::Following));
        for n in 10_000..10_500 {
            tx.send(bad(n));
        }
        tx.send(Event::Finished(report()));
        let got = drain(&mut rx).await;
        let mut want = vec![stage(Stage::Referring)];
        want.extend((0..BAD_NOTIFIES_PASSED).map(bad));
        want.push(Event::MoreBadNotifies {
            count: 10_000 - BAD_NOTIFIES_PASSED,
            last_error: "bad 9999".into(),
        });
        want.push(stage(Stage::Following));
        want.push(Event::MoreBadNotifies {
            count: 500,
            last_error: "bad 10499".into(),
        });
        want.push(Event::Finished(report()));
        assert_eq!(got, want);
        assert!(got.len() <= QUEUE + HELD + 1);
    }

    #[tokio::test]
    async fn stages_that_find_the_queue_full_wait_in_order_and_arrive_with_the_report() {
        // A queue of two: the third stage on waits in the sender.
        let (mut tx, mut rx) = channel_of(2);
        let stages = [
            Stage::Dialing,
            Stage::Ringing,
            Stage::Screening,
            Stage::Briefing,
            Stage::Deciding,
            Stage::Bridged,
        ];
        for s in stages {
            tx.send(stage(s));
        }
        tx.send(bad(1));
        tx.send(Event::DeadAir {
            ms: 120,
            capped: false,
        });
        // The receiver makes room for two; the next send moves two held stages up.
        assert_eq!(rx.recv().await, Some(stage(Stage::Dialing)));
        assert_eq!(rx.recv().await, Some(stage(Stage::Ringing)));
        tx.send(Event::Finished(report()));
        let mut want: Vec<Event> = stages[2..].iter().map(|s| stage(*s)).collect();
        // A bad NOTIFY behind held stages is counted, never queued ahead of them.
        want.push(Event::MoreBadNotifies {
            count: 1,
            last_error: "bad 1".into(),
        });
        want.push(Event::DeadAir {
            ms: 120,
            capped: false,
        });
        want.push(Event::Finished(report()));
        assert_eq!(drain(&mut rx).await, want);
    }

    #[tokio::test]
    async fn a_receiver_keeping_up_gets_everything_as_it_comes() {
        let (mut tx, mut rx) = channel_of(1);
        for s in [Stage::Referring, Stage::Following] {
            tx.send(stage(s));
            assert_eq!(rx.recv().await, Some(stage(s)));
        }
        for n in 0..BAD_NOTIFIES_PASSED {
            tx.send(bad(n));
            assert_eq!(rx.recv().await, Some(bad(n)));
        }
        tx.send(bad(99));
        tx.send(Event::Finished(report()));
        assert_eq!(
            rx.recv().await,
            Some(Event::MoreBadNotifies {
                count: 1,
                last_error: "bad 99".into()
            })
        );
        assert_eq!(rx.recv().await, Some(Event::Finished(report())));
        assert_eq!(rx.recv().await, None);
        assert_eq!(rx.recv().await, None);
    }

    #[tokio::test]
    async fn a_transfer_gone_without_a_report_still_delivers_what_it_sent() {
        let (mut tx, mut rx) = channel_of(1);
        tx.send(stage(Stage::Referring));
        tx.send(stage(Stage::Following));
        tx.send(bad(1));
        drop(tx);
        let counted = Event::MoreBadNotifies {
            count: 1,
            last_error: "bad 1".into(),
        };
        assert_eq!(
            drain(&mut rx).await,
            vec![stage(Stage::Referring), stage(Stage::Following), counted]
        );
    }

    #[tokio::test]
    async fn events_after_the_report_and_a_gone_receiver_change_nothing() {
        let (mut tx, mut rx) = channel();
        tx.send(Event::Finished(report()));
        tx.send(stage(Stage::Done));
        assert_eq!(drain(&mut rx).await, vec![Event::Finished(report())]);
        let (mut tx, rx) = channel_of(1);
        drop(rx);
        for n in 0..100 {
            tx.send(bad(n));
            tx.send(stage(Stage::Following));
        }
        assert!(tx.held.is_empty(), "held for a receiver that is gone");
        tx.send(Event::Finished(report()));
        assert!(tx.held.is_empty());
    }

    #[tokio::test]
    async fn recv_is_cancel_safe() {
        let (mut tx, mut rx) = channel_of(4);
        // A `select!` that gives up on recv loses nothing.
        let waited = tokio::time::timeout(Duration::from_millis(5), rx.recv()).await;
        assert!(waited.is_err());
        tx.send(stage(Stage::Referring));
        tx.send(Event::Finished(report()));
        assert_eq!(
            drain(&mut rx).await,
            vec![stage(Stage::Referring), Event::Finished(report())]
        );
    }

    #[tokio::test]
    async fn a_blind_transfer_flooded_with_bad_notifies_reports_them_counted() {
        // The machine as the REFER shell drives it, its events straight into the channel.
        let t0 = Instant::now();
        let mut m = Transfer::new(
            Plan::Blind(BlindVia::SipRefer),
            Destination::parse("sip:priya@pbx.example.com").unwrap(),
            Settings::default(),
            t0,
        );
        let (mut tx, mut rx) = channel();
        let mut pump = |m: &mut Transfer| {
            while let Some(e) = m.poll_event() {
                tx.send(e);
            }
        };
        m.handle(Input::AnnouncementPlayed, t0);
        m.handle(Input::ReferAnswered { status: 202 }, t0);
        pump(&mut m);
        for n in 0..2_000u64 {
            let at = t0 + Duration::from_millis(n);
            m.handle(Input::Notify { sipfrag: b"hello" }, at);
            pump(&mut m);
        }
        m.handle(
            Input::Notify {
                sipfrag: b"SIP/2.0 200 OK\r\n",
            },
            t0 + Duration::from_secs(3),
        );
        pump(&mut m);
        let got = drain(&mut rx).await;
        let bad_alone = got
            .iter()
            .filter(|e| matches!(e, Event::BadNotify { .. }))
            .count();
        assert_eq!(bad_alone, BAD_NOTIFIES_PASSED as usize, "{got:?}");
        assert_eq!(got.iter().map(Event::bad_notifies).sum::<u32>(), 2_000);
        for error in got.iter().filter_map(Event::bad_notify_error) {
            assert!(error.contains("not a SIP status line"), "{error}");
        }
        let Some(Event::Finished(r)) = got.last() else {
            panic!("the report comes last: {got:?}")
        };
        assert_eq!(r.outcome, Outcome::Transferred);
        assert!(got.contains(&stage(Stage::Following)), "{got:?}");
    }
}

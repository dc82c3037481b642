//! How the person's INVITE reaches a warm transfer ([`super::Dialing::progress`]): a bounded
//! channel whose sender, the dialler, never waits. Ringing and early media are state — the
//! transfer needs the newest — so they share one slot: a newer one replaces one not yet read and
//! a repeat of the value there (another 180) is folded into it, counted for the log. The outcome
//! (answered with the leg, a final status, a failure) has a slot of its own and always arrives,
//! after the provisional answer sent before it.

use tokio::sync::{oneshot, watch};

use super::PersonProgress;

/// A channel for one dial.
pub fn channel() -> (ProgressSender, ProgressReceiver) {
    let (ring_tx, ring_rx) = watch::channel(None);
    let (out_tx, out_rx) = oneshot::channel();
    (
        ProgressSender {
            ringing: ring_tx,
            outcome: Some(out_tx),
            folded: 0,
        },
        ProgressReceiver {
            ringing: Some(ring_rx),
            outcome: Some(out_rx),
            held: None,
        },
    )
}

/// A provisional answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ringing {
    Ringing,
    EarlyMedia,
}

impl From<Ringing> for PersonProgress {
    fn from(r: Ringing) -> PersonProgress {
        match r {
            Ringing::Ringing => PersonProgress::Ringing,
            Ringing::EarlyMedia => PersonProgress::EarlyMedia,
        }
    }
}

/// The dialler's end.
pub struct ProgressSender {
    ringing: watch::Sender<Option<Ringing>>,
    outcome: Option<oneshot::Sender<PersonProgress>>,
    /// Provisional answers that repeated the one in the slot.
    folded: u32,
}

impl ProgressSender {
    /// Passes `p` on without waiting; false once the transfer no longer listens (an answered
    /// leg handed then is dropped: BYE). An outcome after the first is not passed on (a
    /// warning says so); no dialler sends one.
    pub fn send(&mut self, p: PersonProgress) -> bool {
        let ringing = match p {
            PersonProgress::Ringing => Ringing::Ringing,
            PersonProgress::EarlyMedia => Ringing::EarlyMedia,
            outcome => {
                let Some(tx) = self.outcome.take() else {
                    tracing::warn!("a second outcome of the person's INVITE is not passed on");
                    return false;
                };
                return tx.send(outcome).is_ok();
            }
        };
        if !self
            .ringing
            .send_if_modified(|now| now.replace(ringing) != Some(ringing))
        {
            self.folded = self.folded.saturating_add(1);
        }
        !self.ringing.is_closed()
    }
}

impl Drop for ProgressSender {
    fn drop(&mut self) {
        if self.folded > 0 {
            tracing::debug!(
                folded = self.folded,
                "repeated provisional answers of the person's INVITE folded into one"
            );
        }
    }
}

/// The transfer's end.
pub struct ProgressReceiver {
    ringing: Option<watch::Receiver<Option<Ringing>>>,
    outcome: Option<oneshot::Receiver<PersonProgress>>,
    /// The outcome, when it was found with a provisional answer not yet read (both sent while
    /// the slot's wait was already polled): the provisional answer goes first.
    held: Option<PersonProgress>,
}

impl ProgressReceiver {
    /// The newest provisional answer not yet read, else the outcome; `None` after the outcome
    /// or once the dialler went without one. Cancel-safe.
    pub async fn recv(&mut self) -> Option<PersonProgress> {
        loop {
            if let Some(outcome) = self.held.take() {
                return Some(outcome);
            }
            if self.ringing.is_none() && self.outcome.is_none() {
                return None;
            }
            tokio::select! {
                biased;
                changed = changed(&mut self.ringing) => {
                    let Some(rx) = self.ringing.as_mut().filter(|_| changed) else {
                        self.ringing = None;
                        continue;
                    };
                    if let Some(r) = *rx.borrow_and_update() {
                        return Some(r.into());
                    }
                }
                outcome = outcome(&mut self.outcome) => {
                    self.outcome = None;
                    // Nothing after the outcome matters; what came before it and was not read
                    // yet goes first.
                    let unread = self.ringing.take().and_then(|mut rx| {
                        let slot = rx.borrow_and_update();
                        if slot.has_changed() { *slot } else { None }
                    });
                    if outcome.is_some() {
                        return match unread {
                            Some(r) => {
                                self.held = outcome;
                                Some(r.into())
                            }
                            None => outcome,
                        };
                    }
                }
            }
        }
    }
}

/// True when the slot changed, false when its sender went; pending without one.
async fn changed(rx: &mut Option<watch::Receiver<Option<Ringing>>>) -> bool {
    match rx {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// The outcome, or `None` when its sender went without one; pending without a receiver.
async fn outcome(rx: &mut Option<oneshot::Receiver<PersonProgress>>) -> Option<PersonProgress> {
    match rx {
        Some(rx) => rx.await.ok(),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn kind(p: &PersonProgress) -> String {
        match p {
            PersonProgress::Ringing => "ringing".into(),
            PersonProgress::EarlyMedia => "early".into(),
            PersonProgress::Answered(_) => "answered".into(),
            PersonProgress::Final { status, .. } => format!("final {status}"),
            PersonProgress::Failed(why) => format!("failed: {why}"),
        }
    }

    async fn drain(rx: &mut ProgressReceiver) -> Vec<String> {
        let mut got = Vec::new();
        while let Some(p) = rx.recv().await {
            got.push(kind(&p));
        }
        got
    }

    #[tokio::test]
    async fn a_flood_of_18x_keeps_the_newest_and_the_outcome_arrives_after_it() {
        let (mut tx, mut rx) = channel();
        // Nobody reads while the peer sends 10 000 provisional answers.
        for n in 0..10_000 {
            let p = if n % 3 == 0 {
                PersonProgress::EarlyMedia
            } else {
                PersonProgress::Ringing
            };
            assert!(tx.send(p));
        }
        assert!(tx.send(PersonProgress::EarlyMedia));
        assert!(tx.send(PersonProgress::Final {
            status: 486,
            reason: "Busy Here".into()
        }));
        assert_eq!(drain(&mut rx).await, vec!["early", "final 486"]);
        // The sender outlives the outcome (the dialler's closure runs to the call's end).
        assert!(!tx.send(PersonProgress::Ringing));
    }

    #[tokio::test]
    async fn repeats_are_folded_and_a_change_read_in_time_arrives() {
        let (mut tx, mut rx) = channel();
        for _ in 0..50 {
            tx.send(PersonProgress::Ringing);
        }
        assert_eq!(rx.recv().await.as_ref().map(kind), Some("ringing".into()));
        tx.send(PersonProgress::Ringing);
        // A repeat of what was read is not news.
        let quiet = tokio::time::timeout(Duration::from_millis(5), rx.recv()).await;
        assert!(quiet.is_err(), "a repeated 180 woke the transfer");
        assert_eq!(tx.folded, 50);
        tx.send(PersonProgress::EarlyMedia);
        assert_eq!(rx.recv().await.as_ref().map(kind), Some("early".into()));
        tx.send(PersonProgress::Failed("the trunk went away".into()));
        assert_eq!(
            drain(&mut rx).await,
            vec!["failed: the trunk went away".to_owned()]
        );
    }

    #[tokio::test]
    async fn a_dialler_gone_without_an_outcome_ends_the_progress() {
        let (mut tx, mut rx) = channel();
        tx.send(PersonProgress::Ringing);
        drop(tx);
        assert_eq!(drain(&mut rx).await, vec!["ringing"]);
        let (tx, mut rx) = channel();
        drop(tx);
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_second_outcome_is_not_passed_on() {
        let (mut tx, mut rx) = channel();
        assert!(tx.send(PersonProgress::Failed("first".into())));
        assert!(!tx.send(PersonProgress::Failed("second".into())));
        assert_eq!(drain(&mut rx).await, vec!["failed: first".to_owned()]);
    }
}

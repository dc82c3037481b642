//! Optional connections of a call to the world beside it, none of which the audio path waits
//! for: an [`EventSink`] that copies every call event to listeners (the store's recorder, the
//! live-call registry, sidecar agents), and the command channel into the call loop (defined
//! beside the orchestrator it feeds). Every send here is a `try_send`: a full queue loses the
//! message (counted), never the frame clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

use crate::agents::CallEvent;
pub use crate::agents::commands::{CallCommand, CommandSendError, Commands, Inbox};

/// Copies call events to every subscriber: one shared copy of each event, and queues of
/// pointers (a queue's first block of slots is made with it: 32 pointers, not 32 events).
#[derive(Clone, Debug, Default)]
pub struct EventSink {
    txs: Vec<mpsc::Sender<Arc<CallEvent>>>,
    dropped: Arc<AtomicU64>,
}

impl EventSink {
    pub fn new() -> EventSink {
        EventSink::default()
    }

    /// A new listener with a queue of `capacity` events.
    pub fn subscribe(&mut self, capacity: usize) -> mpsc::Receiver<Arc<CallEvent>> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        self.txs.push(tx);
        rx
    }

    /// Offers the event to every listener without waiting.
    pub fn send(&self, ev: &CallEvent) {
        if self.txs.is_empty() {
            return;
        }
        let ev = Arc::new(ev.clone());
        for tx in &self.txs {
            if tx.try_send(ev.clone()).is_err() && !tx.is_closed() {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(
                        dropped_total = n,
                        "call event listener is behind; event dropped"
                    );
                }
            }
        }
    }

    /// Events a listener lost because its queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

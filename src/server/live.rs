//! One listed call as the outside sees it while it runs: its id, leg kind, start, active agent,
//! a hang-up signal of its own (WHIP `DELETE`), and its event feed: JSON lines kept from the
//! start (so a subscriber that connects late still gets `call_start` and the first
//! `agent_start`) and broadcast to every subscriber as they happen. A call run with its
//! listeners attached (see [`super::attach`]) also carries its [`Steering`]: who calls, its
//! agent set, the live view the admin API reads and the channel its commands go down. A call is
//! listed as soon as its leg is up, before its model session has opened; its steering is
//! attached once it runs, and [`LiveCall::steering_within`] waits for that.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use crate::agents::CallEvent;
use crate::call::CallReport;
use crate::call::metrics::{round2, summarize};
use crate::call::tap::Commands;
use crate::store::recorder::SharedView;

/// Lines kept for late subscribers; a longer call drops its oldest lines first.
const HISTORY: usize = 2000;
/// Lines a slow subscriber may fall behind before it misses some.
const LAG: usize = 256;

/// The shared state of one listed call.
pub struct LiveCall {
    pub id: String,
    /// `webrtc`, `twilio`, …
    pub leg: &'static str,
    /// Wall-clock start, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// The WHIP session secret, for WebRTC calls.
    pub(super) session: Option<String>,
    started: Instant,
    /// The media start of the call's leg, once known: where the feed's `at_ms` count from.
    media_zero: OnceLock<Instant>,
    feed: Mutex<Feed>,
    hangup: watch::Sender<bool>,
    /// Turns true when an operator hangs the call up (`POST /admin/calls/{id}/hangup`).
    operator_hangup: watch::Sender<bool>,
    ended: watch::Sender<bool>,
    steering: OnceLock<Steering>,
    /// Turns true when the steering is attached.
    steered: watch::Sender<bool>,
}

/// Why a listed call has no steering to hand out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotRunning {
    /// It ended (was unlisted) before it ran: its model session could not be opened, or the
    /// caller left first.
    Ended,
    /// It is still starting (its model session is opening) after the wait.
    Starting,
}

/// What the admin API may read and do on a call (set once, when the call starts running).
#[derive(Clone, Debug)]
pub struct Steering {
    /// The caller's identity (their agent contexts follow it), if known.
    pub caller: Option<String>,
    pub agent_set: Option<String>,
    pub commands: Commands,
    pub view: SharedView,
}

/// A live call as the admin API lists it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LiveSummary {
    pub id: String,
    pub caller: Option<String>,
    pub leg: String,
    pub agent_set: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub started_at: i64,
    pub active_agents: Vec<String>,
}

struct Feed {
    history: VecDeque<Arc<str>>,
    /// Made when the first subscriber comes (most calls have none: its slots are ~10 KiB).
    tx: Option<broadcast::Sender<Arc<str>>>,
    /// The active agent: its id (what the admin API takes) and its display name.
    agent_id: String,
    agent: String,
}

impl LiveCall {
    pub(super) fn new(id: String, leg: &'static str, session: Option<String>) -> LiveCall {
        let started_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        LiveCall {
            id,
            leg,
            started_unix_ms,
            session,
            started: Instant::now(),
            media_zero: OnceLock::new(),
            feed: Mutex::new(Feed {
                history: VecDeque::new(),
                tx: None,
                agent_id: String::new(),
                agent: String::new(),
            }),
            hangup: watch::channel(false).0,
            operator_hangup: watch::channel(false).0,
            ended: watch::channel(false).0,
            steering: OnceLock::new(),
            steered: watch::channel(false).0,
        }
    }

    /// Attaches the call's steering (the first one set stays).
    pub fn steer(&self, s: Steering) {
        let _ = self.steering.set(s);
        self.steered.send_replace(true);
    }

    /// The call's steering: at once when it runs; while it is still starting (listed, its model
    /// session opening), once it runs, waiting at most `limit`.
    pub async fn steering_within(&self, limit: Duration) -> Result<Steering, NotRunning> {
        if let Some(s) = self.steering() {
            return Ok(s.clone());
        }
        let mut steered = self.steered.subscribe();
        let mut ended = self.ended.subscribe();
        let waited = tokio::time::timeout(limit, async {
            tokio::select! {
                _ = steered.wait_for(|s| *s) => {}
                _ = ended.wait_for(|e| *e) => {}
            }
        })
        .await;
        match (self.steering(), waited) {
            (Some(s), _) => Ok(s.clone()),
            (None, Ok(())) => Err(NotRunning::Ended),
            (None, Err(_)) => Err(NotRunning::Starting),
        }
    }

    /// The call's steering, once it runs with its listeners attached.
    pub fn steering(&self) -> Option<&Steering> {
        self.steering.get()
    }

    /// The admin API's view of the call.
    pub fn admin_summary(&self) -> LiveSummary {
        let st = self.steering();
        let active_agents = match st {
            Some(s) => s.view.lock().map(|v| v.active.clone()).unwrap_or_default(),
            None => {
                let a = self.feed().agent_id.clone();
                if a.is_empty() { Vec::new() } else { vec![a] }
            }
        };
        LiveSummary {
            id: self.id.clone(),
            caller: st.and_then(|s| s.caller.clone()),
            leg: self.leg.to_owned(),
            agent_set: st.and_then(|s| s.agent_set.clone()),
            started_at: self.started_unix_ms as i64,
            active_agents,
        }
    }

    fn feed(&self) -> std::sync::MutexGuard<'_, Feed> {
        self.feed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Milliseconds since the call was listed.
    pub fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The call's media timeline starts at `zero` (its leg's start; the first one set stays):
    /// the feed's own events count from there, as the call's events and turns do.
    pub fn timed_from(&self, zero: Instant) {
        let _ = self.media_zero.set(zero);
    }

    /// Now on the call's media timeline, in ms (from the listing while the leg is not known).
    pub fn at_ms(&self) -> u64 {
        let zero = self.media_zero.get().copied().unwrap_or(self.started);
        Instant::now().saturating_duration_since(zero).as_millis() as u64
    }

    /// The active agent's display name (empty without an agent set).
    pub fn active_agent(&self) -> String {
        self.feed().agent.clone()
    }

    /// The active agent's id, as the admin API names it (empty without an agent set).
    pub fn active_agent_id(&self) -> String {
        self.feed().agent_id.clone()
    }

    /// Appends one JSON object to the feed.
    pub fn publish(&self, value: &serde_json::Value) {
        self.publish_line(value.to_string());
    }

    fn publish_line(&self, line: String) {
        let line: Arc<str> = line.into();
        let mut feed = self.feed();
        if feed.history.len() == HISTORY {
            feed.history.pop_front();
        }
        feed.history.push_back(line.clone());
        // No subscriber is not an error.
        if let Some(tx) = &feed.tx {
            let _ = tx.send(line);
        }
    }

    /// Appends an orchestrator event; an `agent_start` makes its agent the active one.
    pub fn publish_event(&self, ev: &CallEvent) {
        if let CallEvent::AgentStart {
            agent_id,
            agent_name,
            ..
        } = ev
        {
            let mut feed = self.feed();
            feed.agent_id.clone_from(agent_id);
            feed.agent.clone_from(agent_name);
        }
        self.publish_line(ev.to_json_line());
    }

    /// Everything published so far (no subscription made).
    pub fn history(&self) -> Vec<Arc<str>> {
        self.feed().history.iter().cloned().collect()
    }

    /// Everything published so far, and a receiver for what follows (nothing is missed or
    /// repeated between the two).
    pub fn subscribe(&self) -> (Vec<Arc<str>>, broadcast::Receiver<Arc<str>>) {
        let mut feed = self.feed();
        let rx = match &feed.tx {
            Some(tx) => tx.subscribe(),
            None if self.ended() => broadcast::channel(1).1,
            None => {
                let (tx, rx) = broadcast::channel(LAG);
                feed.tx = Some(tx);
                rx
            }
        };
        (feed.history.iter().cloned().collect(), rx)
    }

    /// Asks the call to end (the caller hung up through the signalling).
    pub fn hang_up(&self) {
        self.hangup.send_replace(true);
    }

    /// Turns true on [`Self::hang_up`].
    pub fn hangup_signal(&self) -> watch::Receiver<bool> {
        self.hangup.subscribe()
    }

    /// An operator ends the call (the admin API, from any instance).
    pub fn hang_up_by_operator(&self) {
        self.operator_hangup.send_replace(true);
    }

    /// Turns true on [`Self::hang_up_by_operator`].
    pub fn operator_hangup_signal(&self) -> watch::Receiver<bool> {
        self.operator_hangup.subscribe()
    }

    /// An operator has hung the call up.
    pub fn hung_up_by_operator(&self) -> bool {
        *self.operator_hangup.borrow()
    }

    /// The call has been unlisted (its slot was dropped).
    pub fn ended(&self) -> bool {
        *self.ended.borrow()
    }

    pub(super) fn mark_ended(&self) {
        self.ended.send_replace(true);
        // Subscribers see the end of the feed: the sender goes, and a later subscriber gets
        // the history and a feed already over.
        self.feed().tx = None;
    }

    /// Waits until the call is unlisted, at most `limit`; true if it was.
    pub async fn wait_ended(&self, limit: std::time::Duration) -> bool {
        let mut rx = self.ended.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|e| *e))
            .await
            .is_ok()
    }

    /// `GET /calls` entry.
    pub fn summary(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "leg": self.leg,
            "started_unix_ms": self.started_unix_ms,
            "duration_ms": self.elapsed_ms(),
            "active_agent": self.active_agent(),
            "active_agent_id": self.active_agent_id(),
            "events": format!("/calls/{}/events", self.id),
        })
    }
}

/// The end reason of a call an operator hung up.
pub const OPERATOR_HANGUP: &str = "hung up by an operator";

/// p50, p99 and max of some milliseconds, rounded to 0.01 ms.
pub fn percentiles(v: &[f64]) -> serde_json::Value {
    let s = summarize(v);
    serde_json::json!({"p50": s.p50.map(round2), "p99": s.p99.map(round2), "max": s.max.map(round2)})
}

/// The figures every `call_end` carries.
pub fn figures(report: &CallReport) -> serde_json::Value {
    serde_json::json!({
        "turns": report.turns.len(),
        "first_audio_ms": percentiles(&report.first_audio_ms),
        "uplink_added_ms": percentiles(&report.uplink_added_ms),
        "downlink_added_ms": percentiles(&report.downlink_added_ms),
        "underruns": report.underruns,
        "handoff_gap_ms": report.handoff_gap_ms,
    })
}

/// Publishes `call_end` with `reason` and `figures`.
pub fn publish_end(live: &LiveCall, reason: &str, figures: serde_json::Value) {
    live.publish(&serde_json::json!({
        "type": "call_end", "call_id": live.id, "reason": reason,
        "figures": figures, "at_ms": live.at_ms(),
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::broadcast::error::TryRecvError;

    fn line(n: u32) -> serde_json::Value {
        serde_json::json!({ "type": "test", "n": n })
    }

    #[test]
    fn the_feed_is_made_for_its_first_subscriber_and_over_when_the_call_ends() {
        let live = LiveCall::new("call_1".into(), "twilio", None);
        live.publish(&line(1));
        assert_eq!(live.history().len(), 1);
        assert!(live.feed().tx.is_none(), "no subscriber, no feed slots");
        let (history, mut rx) = live.subscribe();
        assert_eq!(history.len(), 1);
        live.publish(&line(2));
        let (again, mut rx2) = live.subscribe();
        assert_eq!(again.len(), 2);
        live.publish(&line(3));
        assert!(rx.try_recv().unwrap().contains("\"n\":2"));
        assert!(rx.try_recv().unwrap().contains("\"n\":3"));
        assert!(rx2.try_recv().unwrap().contains("\"n\":3"));
        live.mark_ended();
        assert_eq!(rx.try_recv(), Err(TryRecvError::Closed));
        assert_eq!(rx2.try_recv(), Err(TryRecvError::Closed));
        assert_eq!(live.history().len(), 3);
        let (late, mut rx3) = live.subscribe();
        assert_eq!(late.len(), 3, "a late subscriber still gets the history");
        assert_eq!(rx3.try_recv(), Err(TryRecvError::Closed));
    }
}

//! Per-call figures (design §6) and their summaries: `first_audio_ms`, `uplink_added_ms`,
//! `downlink_added_ms`, `underruns`, plus the per-turn timeline a person reads.

use std::time::Duration;

use serde::Serialize;

/// One caller turn and the agent's answer, on the caller's media timeline (ms from call start).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct TurnRecord {
    pub index: usize,
    pub caller_start_ms: f64,
    pub caller_end_ms: f64,
    /// What the model heard (input transcription).
    pub caller_text: String,
    /// First agent audio played after this turn, if any.
    pub agent_start_ms: Option<f64>,
    pub agent_end_ms: Option<f64>,
    pub agent_text: String,
    /// Voice to voice: end of caller speech → first agent audio frame out.
    pub first_audio_ms: Option<f64>,
    pub interrupted: bool,
    /// The agent whose voice answered (empty without an agent set).
    pub agent: String,
}

/// One handoff as the caller experienced it.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct HandoffRecord {
    pub from: String,
    pub to: String,
    pub strategy: String,
    pub trigger: String,
    /// Silence between the last voiced frame of `from` and the first voiced frame of `to`, as
    /// played out; `None` when `to` was never heard.
    pub gap_ms: Option<f64>,
    /// Audio of the announcing agent still queued in playout when `to`'s first audio arrived.
    pub announcement_queued_ms: Option<f64>,
    /// The input that triggered the handoff arrived → the handoff's first wire message was queued
    /// (for `inject_turn`, this includes waiting for the announcement's `generationComplete`).
    pub trigger_to_wire_ms: Option<f64>,
    /// Where the new agent's first voiced frame sits on the caller's timeline (ms).
    pub heard_at_ms: Option<f64>,
    /// Audio the caller still had to hear (queued in playout, and the rest of the frame being
    /// played) when the message that made the
    /// new agent speak went out: the model's first-audio latency minus this is the least
    /// silence any client could leave (the floor).
    pub queued_at_trigger_ms: Option<f64>,
    /// Why the strategy that carried it differs from the configured one, or what the model
    /// refused on the way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// When the handoff was decided (ms on the caller's media timeline, as turn times: from the
    /// leg's start).
    #[serde(skip)]
    pub at_ms: u64,
}

/// One model session switch forced by the service (goAway) or by a lost socket, as the caller
/// experienced it.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ReconnectRecord {
    /// What forced it: `go_away`, `closed:<code>` (e.g. `closed:1011`), `dead_socket`.
    pub cause: String,
    /// How it ended: `resumed` (session resumption handle), `reseeded` (fresh session seeded
    /// from baton's transcript), `failed` (the call could not go on).
    pub outcome: String,
    /// Sessions opened before one held (1 = the first try worked).
    pub attempts: u32,
    /// When the old session stopped being usable (ms on the caller's media timeline, as turn
    /// times: from the leg's start).
    pub at_ms: f64,
    /// Silence on the caller's timeline the reconnect caused (0 when buffered model audio covered
    /// it; `None` when no agent audio followed).
    pub gap_ms: Option<f64>,
    /// Model audio queued in playout when the old session stopped (what could cover the switch).
    pub model_audio_queued_ms: f64,
    /// Caller audio delivered again to the new session (ms); with `[model] uplink_chunk_ms`, it
    /// also counts the part of a chunk still being gathered, which no session had yet.
    pub audio_replayed_ms: f64,
    /// Caller audio that never reached any session (ms). Must be 0.
    pub audio_lost_ms: f64,
}

/// Everything measured on one call.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CallReport {
    pub turns: Vec<TurnRecord>,
    pub first_audio_ms: Vec<f64>,
    /// A bounded sample (see [`Reservoir`]); `uplink_added_seen` counts every frame.
    pub uplink_added_ms: Vec<f64>,
    /// A bounded sample; `downlink_added_seen` counts every chunk.
    pub downlink_added_ms: Vec<f64>,
    pub uplink_added_seen: u64,
    pub downlink_added_seen: u64,
    pub underruns: u64,
    pub late_ticks: u64,
    pub frames_played: u64,
    pub voice_frames: u64,
    pub interruptions: u64,
    pub tool_calls: u64,
    /// Model frames or parts baton could not use (the call carried on).
    pub protocol_errors: Vec<String>,
    /// Why the call ended.
    pub end_reason: String,
    /// Handoffs in order, with their gaps.
    pub handoffs: Vec<HandoffRecord>,
    /// Every voice change heard on the caller's timeline (ms of silence between two agents).
    pub handoff_gap_ms: Vec<f64>,
    /// The orchestrator's per-call events (seed 002 names), gaps filled in.
    pub events: Vec<crate::agents::CallEvent>,
    /// Agent activations (seed 000 §5.1).
    pub agent_history: serde_json::Value,
    /// Samples dropped from playout (only barge-ins flush).
    pub playout_flushed_samples: u64,
    /// Caller audio messages (a frame each, or a chunk with `[model] uplink_chunk_ms`) that
    /// could not be kept between sessions.
    pub uplink_dropped: u64,
    /// Model session switches (goAway, drops), in order.
    pub reconnects: Vec<ReconnectRecord>,
    /// Each change of the agent's voice the caller heard: where on the caller's timeline (ms)
    /// and whose (with an agent set).
    #[serde(skip)]
    pub voices_heard: Vec<(f64, String)>,
    /// `gap_ms` of every reconnect that was followed by agent audio.
    pub reconnect_gap_ms: Vec<f64>,
    /// Totals over `reconnects`.
    pub audio_replayed_ms: f64,
    pub audio_lost_ms: f64,
    /// Algorithmic delay of the uplink and downlink resamplers.
    pub uplink_resampler_delay_ms: f64,
    pub downlink_resampler_delay_ms: f64,
}

impl CallReport {
    /// The agents the caller heard, in the order their voices came (an agent heard again after
    /// another is listed again), from the frames played (`voices_heard`). Empty when no agent
    /// was heard.
    pub fn agents_heard(&self) -> Vec<String> {
        let mut heard: Vec<String> = Vec::new();
        for (_, agent) in &self.voices_heard {
            if heard.last() != Some(agent) {
                heard.push(agent.clone());
            }
        }
        heard
    }
}

/// Percentile summary.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Summary {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

/// Nearest-rank percentile of unsorted values (`q` in 0..=100).
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    Some(v[rank.min(v.len()) - 1])
}

pub fn summarize(values: &[f64]) -> Summary {
    Summary {
        p50: percentile(values, 50.0),
        p95: percentile(values, 95.0),
        p99: percentile(values, 99.0),
        max: values.iter().copied().reduce(f64::max),
    }
}

pub use crate::reservoir::{Reservoir, SAMPLE_CAP};

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Rounds to 0.01 ms for display and JSON.
pub fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_heard_are_the_voices_in_the_order_they_came() {
        let voice = |at: f64, agent: &str| (at, agent.to_owned());
        let r = CallReport {
            // Asha greets and answers, announces Ravi; Ravi answers and hands back.
            voices_heard: vec![
                voice(0.0, "advisor"),
                voice(9500.0, "schemes"),
                voice(13000.0, "advisor"),
            ],
            ..Default::default()
        };
        assert_eq!(r.agents_heard(), ["advisor", "schemes", "advisor"]);
        assert!(CallReport::default().agents_heard().is_empty());
    }

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[3.0], 95.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
        let s = summarize(&[5.0, 1.0, 3.0]);
        assert_eq!((s.p50, s.max), (Some(3.0), Some(5.0)));
    }
}

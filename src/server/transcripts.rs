//! Live transcripts of a call, without changing the call: an observer on the session copies each
//! transcript fragment out as the call takes the event, in order (the call's figures are
//! unchanged: nothing stands between the session and the call). Sessions the orchestrator opens
//! later (a `recreate` handoff) are not tapped; the call's report still has every turn.

use tokio::sync::mpsc;

use crate::model::ModelEvent;
use crate::model::handle::ModelSession;
use crate::model::session::SessionEvent;

/// One transcript fragment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fragment {
    /// `"caller"` or `"agent"`.
    pub role: &'static str,
    pub text: String,
    pub finished: bool,
}

/// Fragments queued for the reader at most. The tap runs in the call's task and never waits:
/// a reader that far behind loses fragments (counted in a warning), never the call's time.
pub const QUEUED_FRAGMENTS: usize = 256;

/// Taps `session`: returns the fragments as they arrive. The tap ends with the session.
pub fn tap(session: &mut ModelSession) -> mpsc::Receiver<Fragment> {
    let (frag_tx, frag_rx) = mpsc::channel(QUEUED_FRAGMENTS);
    let mut lost = 0u64;
    session.observe(Box::new(move |ev| {
        let SessionEvent::Model(m, _) = ev else {
            return;
        };
        let (role, text, finished) = match m {
            ModelEvent::InputTranscript { text, finished } => ("caller", text, finished),
            ModelEvent::OutputTranscript { text, finished } => ("agent", text, finished),
            _ => return,
        };
        let fragment = Fragment {
            role,
            text: text.clone(),
            finished: *finished,
        };
        if let Err(mpsc::error::TrySendError::Full(_)) = frag_tx.try_send(fragment) {
            lost += 1;
            if lost.is_power_of_two() {
                tracing::warn!(lost, "transcript reader behind: fragments dropped");
            }
        }
    }));
    frag_rx
}

/// The call's summary for a client: turns (who answered, what was said), handoffs and the
/// latency figures.
pub fn summary(report: &crate::call::CallReport) -> serde_json::Value {
    use crate::call::metrics::summarize;
    serde_json::json!({
        "turns": report.turns.iter().map(|t| serde_json::json!({
            "caller_text": t.caller_text,
            "agent": t.agent,
            "agent_text": t.agent_text,
            "first_audio_ms": t.first_audio_ms,
            "interrupted": t.interrupted,
        })).collect::<Vec<_>>(),
        "handoffs": report.handoffs.iter().map(|h| serde_json::json!({
            "from": h.from, "to": h.to, "strategy": h.strategy, "gap_ms": h.gap_ms,
        })).collect::<Vec<_>>(),
        "first_audio_ms": summarize(&report.first_audio_ms),
        "uplink_added_ms": summarize(&report.uplink_added_ms),
        "downlink_added_ms": summarize(&report.downlink_added_ms),
        "underruns": report.underruns,
    })
}

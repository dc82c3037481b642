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

/// Taps `session`: returns the fragments as they arrive. The tap ends with the session.
pub fn tap(session: &mut ModelSession) -> mpsc::UnboundedReceiver<Fragment> {
    let (frag_tx, frag_rx) = mpsc::unbounded_channel();
    session.observe(Box::new(move |ev| {
        let SessionEvent::Model(m, _) = ev else {
            return;
        };
        let (role, text, finished) = match m {
            ModelEvent::InputTranscript { text, finished } => ("caller", text, finished),
            ModelEvent::OutputTranscript { text, finished } => ("agent", text, finished),
            _ => return,
        };
        let _ = frag_tx.send(Fragment {
            role,
            text: text.clone(),
            finished: *finished,
        });
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

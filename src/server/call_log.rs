//! The `call ended` log line, the same for every leg: readable fields a person and a log query
//! both use (milliseconds rounded to 0.01, percentiles as separate numbers, the agents heard and
//! the handoff gaps as short lists), never a Rust `Debug` dump. The call's span carries its id,
//! leg and stream ids.

use crate::call::CallReport;
use crate::call::metrics::{round2, summarize};
use crate::leg::twilio::cadence::Cadence;

/// What a finished call adds beside its report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extra<'a> {
    /// The call's id in `GET /calls` and the admin API.
    pub call: &'a str,
    /// How long loading the caller's agent contexts took (ms).
    pub context_load_ms: Option<f64>,
    /// The leg's own send cadence (bridges, AudioSocket).
    pub cadence: Option<&'a Cadence>,
    /// DTMF digits received (AudioSocket).
    pub dtmf: Option<u64>,
}

/// `0, 0` — each handoff's gap in ms (`-` for one never heard); `none` without handoffs.
pub fn handoff_gaps(report: &CallReport) -> String {
    if report.handoffs.is_empty() {
        return "none".into();
    }
    report
        .handoffs
        .iter()
        .map(|h| h.gap_ms.map_or("-".to_owned(), |g| format!("{}", ms(g))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Rounded to 0.01 ms, never negative zero.
fn ms(x: f64) -> f64 {
    round2(x) + 0.0
}

/// Logs the `call ended` line at info, and exports the call's trace when traces are on.
pub fn call_ended(report: &CallReport, extra: Extra<'_>) {
    crate::traces::call_ended(report, extra.call);
    let first = summarize(&report.first_audio_ms);
    let up = summarize(&report.uplink_added_ms);
    let down = summarize(&report.downlink_added_ms);
    let agents = report.agents_heard();
    let dev = |us: u32| ms(f64::from(us) / 1000.0);
    tracing::info!(
        call = extra.call,
        end = %report.end_reason,
        turns = report.turns.len(),
        agents = %if agents.is_empty() { "-".to_owned() } else { agents.join(", ") },
        handoffs = report.handoffs.len(),
        handoff_gaps_ms = %handoff_gaps(report),
        underruns = report.underruns,
        reconnects = report.reconnects.len(),
        first_audio_p50_ms = first.p50.map(ms),
        first_audio_max_ms = first.max.map(ms),
        uplink_p50_ms = up.p50.map(ms),
        uplink_p99_ms = up.p99.map(ms),
        downlink_p50_ms = down.p50.map(ms),
        downlink_p99_ms = down.p99.map(ms),
        send_dev_p99_ms = extra.cadence.map(|c| dev(c.p99_dev_us)),
        send_dev_max_ms = extra.cadence.map(|c| dev(c.max_dev_us)),
        context_load_ms = extra.context_load_ms.map(ms),
        dtmf = extra.dtmf,
        "call ended"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::HandoffRecord;

    #[test]
    fn gaps_are_a_short_list() {
        let mut r = CallReport::default();
        assert_eq!(handoff_gaps(&r), "none");
        r.handoffs = vec![
            HandoffRecord {
                gap_ms: Some(-0.001),
                ..Default::default()
            },
            HandoffRecord {
                gap_ms: Some(320.456),
                ..Default::default()
            },
            HandoffRecord::default(),
        ];
        assert_eq!(handoff_gaps(&r), "0, 320.46, -");
    }
}

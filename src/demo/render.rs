//! `baton demo`'s human-readable output: the call's timeline, what was said, handoffs and
//! reconnects with their gaps, and the latency table.

use super::DemoOutcome;
use crate::call::metrics::summarize;

/// The human-readable timeline and latency table.
pub fn render(outcome: &DemoOutcome) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let r = &outcome.report;
    let _ = writeln!(
        s,
        "turn  caller speech (s)   agent audio (s)     first_audio  what was said"
    );
    for t in &r.turns {
        let agent = match (t.agent_start_ms, t.agent_end_ms) {
            (Some(a), Some(b)) => format!("{:>6.2} – {:<6.2}", a / 1000.0, b / 1000.0),
            _ => format!("{:^15}", "(no reply)"),
        };
        let v2v = t
            .first_audio_ms
            .map_or("—".to_owned(), |v| format!("{v:.0} ms"));
        let _ = writeln!(
            s,
            "{:>4}  {:>6.2} – {:<6.2}  {agent}  {v2v:>11}  caller: {}",
            t.index + 1,
            t.caller_start_ms / 1000.0,
            t.caller_end_ms / 1000.0,
            quote(&t.caller_text),
        );
        let who = if t.agent.is_empty() {
            "agent"
        } else {
            t.agent.as_str()
        };
        let _ = writeln!(
            s,
            "{:>55}{who}: {}{}",
            "",
            quote(&t.agent_text),
            if t.interrupted { " [interrupted]" } else { "" }
        );
    }
    if !r.handoffs.is_empty() {
        let _ = writeln!(
            s,
            "\nhandoff                                   strategy        trigger          gap_ms  announcement queued"
        );
        for h in &r.handoffs {
            let gap = h
                .gap_ms
                .map_or("not heard".to_owned(), |g| format!("{g:.0}"));
            let queued = h
                .announcement_queued_ms
                .map_or("—".to_owned(), |q| format!("{q:.0} ms"));
            let _ = writeln!(
                s,
                "{:<41} {:<15} {:<16} {gap:>6}  {queued}",
                format!("{} → {}", h.from, h.to),
                h.strategy,
                h.trigger
            );
            if let Some(note) = &h.note {
                let _ = writeln!(s, "    {note}");
            }
        }
    }
    for e in &r.events {
        if let crate::agents::CallEvent::SidecarUndelivered {
            sidecar, reason, ..
        } = e
        {
            let _ = writeln!(s, "sidecar {sidecar}: not delivered: {reason}");
            break;
        }
    }
    if !r.reconnects.is_empty() {
        let _ = writeln!(
            s,
            "\nreconnect at (s)  cause        outcome    tries  gap_ms  queued_ms  replayed_ms  lost_ms"
        );
        for c in &r.reconnects {
            let gap = c.gap_ms.map_or("—".to_owned(), |g| format!("{g:.0}"));
            let _ = writeln!(
                s,
                "{:>16.2}  {:<12} {:<10} {:>5}  {gap:>6}  {:>9.0}  {:>11.0}  {:>7.0}",
                c.at_ms / 1000.0,
                c.cause,
                c.outcome,
                c.attempts,
                c.model_audio_queued_ms,
                c.audio_replayed_ms,
                c.audio_lost_ms
            );
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "figure               p50       p95/p99   max       samples"
    );
    let row = |name: &str, v: &[f64], tail: f64| {
        let sm = summarize(v);
        let f = |x: Option<f64>| x.map_or("—".to_owned(), |x| format!("{x:.2}"));
        let tailv = if tail >= 99.0 { sm.p99 } else { sm.p95 };
        format!(
            "{name:<20} {:<9} {:<9} {:<9} {}\n",
            f(sm.p50),
            f(tailv),
            f(sm.max),
            v.len()
        )
    };
    s.push_str(&row("first_audio_ms", &r.first_audio_ms, 95.0));
    s.push_str(&row("uplink_added_ms", &r.uplink_added_ms, 99.0));
    s.push_str(&row("downlink_added_ms", &r.downlink_added_ms, 99.0));
    if !r.reconnects.is_empty() {
        s.push_str(&row("reconnect_gap_ms", &r.reconnect_gap_ms, 95.0));
        let _ = writeln!(
            s,
            "audio_replayed_ms    {:.0} (total)\naudio_lost_ms        {:.0} (total)",
            r.audio_replayed_ms, r.audio_lost_ms
        );
    }
    let _ = writeln!(s, "underruns            {}", r.underruns);
    let _ = writeln!(
        s,
        "\nmode {}, leg {}; resampler delay up {:.2} ms, down {:.2} ms; {} frames played ({} voiced), {} late ticks",
        outcome.summary.mode,
        outcome.summary.leg_codec,
        r.uplink_resampler_delay_ms,
        r.downlink_resampler_delay_ms,
        r.frames_played,
        r.voice_frames,
        r.late_ticks
    );
    if !r.protocol_errors.is_empty() {
        let _ = writeln!(
            s,
            "{} model frames could not be used: {}",
            r.protocol_errors.len(),
            r.protocol_errors[0]
        );
    }
    let _ = writeln!(s, "call ended: {}", r.end_reason);
    s.push_str(&crate::demo_store::render_calls(outcome));
    let _ = writeln!(
        s,
        "recording: {} (left = caller, right = agent as heard)",
        outcome.summary.recording
    );
    s
}

fn quote(t: &str) -> String {
    let t = t.trim();
    if t.is_empty() {
        "—".into()
    } else {
        format!("\"{t}\"")
    }
}

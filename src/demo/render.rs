//! `baton demo`'s human-readable output: the call's timeline, what was said, handoffs and
//! reconnects with their gaps, and the latency table.

use super::handoffs::{AgentMeta, HandoffLine, name_of};
use super::outcome::DemoOutcome;
use crate::agents::CallEvent;
use crate::agents::events::Speaker;
use crate::call::metrics::{CallReport, HandoffRecord, summarize};

/// The human-readable timeline and latency table; for a scenario of several calls, each call's
/// under a heading of its own, then the figures of them all.
pub fn render(outcome: &DemoOutcome) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if let Some(m) = outcome.metas.first() {
        let _ = writeln!(s, "{}: {}", m.name, m.description);
        let model = if m.embedded_mock {
            format!("the embedded mock model ({} profile)", m.profile)
        } else {
            "the model at --model-url".to_owned()
        };
        let _ = writeln!(s, "{model}, {} run\n", outcome.summary.mode);
    }
    if outcome.calls.len() > 1 {
        several(&mut s, outcome);
    } else {
        one(&mut s, outcome);
    }
    s
}

/// A scenario of one call.
fn one(s: &mut String, outcome: &DemoOutcome) {
    use std::fmt::Write;
    let r = &outcome.report;
    let agents: &[AgentMeta] = outcome.metas.first().map_or(&[], |m| &m.agents);
    story(
        s,
        r,
        agents,
        &outcome.summary.transfers,
        outcome.summary.person_recording.as_deref(),
    );
    let _ = writeln!(s);
    figures(s, &[r], &outcome.summary);
    call_end(s, r, &outcome.summary);
    s.push_str(&super::store::render_calls(outcome));
    let _ = writeln!(
        s,
        "recording: {} (left = caller, right = agent as heard)",
        outcome.summary.recording
    );
    timeline_line(s, outcome);
}

/// A scenario of several calls: each call under its heading (its turns, handoffs, figures,
/// contexts and recording), then the figures of every call together (`summary.json`'s top
/// level).
fn several(s: &mut String, outcome: &DemoOutcome) {
    use std::fmt::Write;
    let n = outcome.calls.len();
    let first_path = outcome.metas.first().map(|m| &m.path);
    for (i, ran) in outcome.calls.iter().enumerate() {
        let meta = outcome.metas.get(i);
        let listed = outcome.summary.call_list.get(i);
        let scenario = match meta {
            Some(m) if Some(&m.path) != first_path => format!(": {}: {}", m.name, m.description),
            Some(m) => format!(": {}", m.name),
            None => String::new(),
        };
        let _ = writeln!(s, "── call {} of {n} ({}){scenario}\n", i + 1, ran.id);
        let r = &ran.report;
        let agents: &[AgentMeta] = meta.map_or(&[], |m| &m.agents);
        story(
            s,
            r,
            agents,
            listed.map_or(&[], |c| &c.transfers),
            listed.and_then(|c| c.person_recording.as_deref()),
        );
        let _ = writeln!(s);
        figures(s, &[r], &outcome.summary);
        call_end(s, r, &outcome.summary);
        super::store::call_details(s, ran);
        if let Some(c) = listed {
            let _ = writeln!(
                s,
                "recording: {} (left = caller, right = agent as heard)",
                c.recording
            );
        }
        let _ = writeln!(s);
    }
    let reports: Vec<&CallReport> = outcome.calls.iter().map(|c| &c.report).collect();
    let handoffs: usize = reports.iter().map(|r| r.handoffs.len()).sum();
    let f = &outcome.summary.figures;
    let _ = writeln!(
        s,
        "── all {n} calls together: {} turns, {handoffs} handoffs, {} underruns\n",
        f.turns, f.underruns
    );
    figures(s, &reports, &outcome.summary);
    timeline_line(s, outcome);
}

/// One call's turns with each handoff where it was heard, its transfers to a person (and where
/// the person's side was recorded), its handoff and reconnect tables.
fn story(
    s: &mut String,
    r: &CallReport,
    agents: &[AgentMeta],
    transfers: &[serde_json::Value],
    person: Option<&str>,
) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "turn  caller speech (s)   agent audio (s)     first_audio  what was said"
    );
    let lines = agent_lines(r);
    let mut next_line = 0;
    let mut next_handoff = 0;
    let mut speaking: Option<String> = None;
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
        // The turn's agent lines from the transcript (each with its speaker), else its words.
        let mut said: Vec<(&str, &str)> = Vec::new();
        while let Some((id, text)) = lines.get(next_line) {
            if text.is_empty() || !t.agent_text.contains(text.as_str()) {
                break;
            }
            said.push((id, text));
            next_line += 1;
        }
        if said.is_empty() {
            said.push((t.agent.as_str(), t.agent_text.as_str()));
        }
        let last = said.len() - 1;
        for (k, (id, text)) in said.into_iter().enumerate() {
            if speaking.as_deref().is_some_and(|p| p != id)
                && let Some(h) = r.handoffs.get(next_handoff)
                && h.to == id
            {
                s.push_str(&marker(agents, h));
                next_handoff += 1;
            }
            speaking = Some(id.to_owned());
            let _ = writeln!(
                s,
                "{:>55}{}: {}{}",
                "",
                name_of(agents, id),
                quote(text),
                if t.interrupted && k == last {
                    " [interrupted]"
                } else {
                    ""
                }
            );
        }
    }
    for h in &r.handoffs[next_handoff.min(r.handoffs.len())..] {
        s.push_str(&marker(agents, h));
    }
    transfer_lines(s, transfers);
    if let Some(p) = person {
        let _ = writeln!(s, "the person's side (said left, heard right): {p}");
    }
    if !r.handoffs.is_empty() {
        let _ = writeln!(
            s,
            "\nhandoff                     heard at  gap_ms  strategy asked → carried         trigger          announcement queued"
        );
        for h in &r.handoffs {
            let line = HandoffLine::explain(agents, h);
            let gap = h
                .gap_ms
                .map_or("not heard".to_owned(), |g| format!("{:.0}", g + 0.0));
            let heard = h
                .heard_at_ms
                .map_or("—".to_owned(), |at| format!("{:.2} s", at / 1000.0));
            let queued = h
                .announcement_queued_ms
                .map_or("—".to_owned(), |q| format!("{q:.0} ms"));
            let _ = writeln!(
                s,
                "{:<27} {heard:>8}  {gap:>6}  {:<32} {:<16} {queued}",
                format!("{} → {}", name_of(agents, &h.from), name_of(agents, &h.to)),
                line.strategies(),
                h.trigger
            );
            if let Some(why) = &line.why {
                let _ = writeln!(s, "    why: {why}");
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
                c.model_audio_queued_ms + 0.0,
                c.audio_replayed_ms + 0.0,
                c.audio_lost_ms + 0.0
            );
        }
    }
}

/// The latency table over `reports`' samples together.
fn figures(s: &mut String, reports: &[&CallReport], summary: &super::DemoSummary) {
    use std::fmt::Write;
    let all = |f: fn(&CallReport) -> &Vec<f64>| -> Vec<f64> {
        reports.iter().flat_map(|r| f(r).iter().copied()).collect()
    };
    let _ = writeln!(
        s,
        "figure               p50       p95/p99   max       samples"
    );
    let row = |name: &str, v: &[f64], tail: f64| {
        let sm = summarize(v);
        let f = |x: Option<f64>| x.map_or("—".to_owned(), |x| format!("{:.2}", x + 0.0));
        let tailv = if tail >= 99.0 { sm.p99 } else { sm.p95 };
        format!(
            "{name:<20} {:<9} {:<9} {:<9} {}\n",
            f(sm.p50),
            f(tailv),
            f(sm.max),
            v.len()
        )
    };
    s.push_str(&row("first_audio_ms", &all(|r| &r.first_audio_ms), 95.0));
    if summary.mode == "accelerated" {
        // On the paused clock nothing advances time between a frame's arrival and its write.
        let _ = writeln!(
            s,
            "uplink_added_ms      not measured on the virtual clock (run with --realtime)"
        );
    } else {
        s.push_str(&row("uplink_added_ms", &all(|r| &r.uplink_added_ms), 99.0));
    }
    s.push_str(&row(
        "downlink_added_ms",
        &all(|r| &r.downlink_added_ms),
        99.0,
    ));
    if reports.iter().any(|r| !r.reconnects.is_empty()) {
        s.push_str(&row(
            "reconnect_gap_ms",
            &all(|r| &r.reconnect_gap_ms),
            95.0,
        ));
        let _ = writeln!(
            s,
            "audio_replayed_ms    {:.0} (total)\naudio_lost_ms        {:.0} (total)",
            reports.iter().map(|r| r.audio_replayed_ms).sum::<f64>() + 0.0,
            reports.iter().map(|r| r.audio_lost_ms).sum::<f64>() + 0.0
        );
    }
    let _ = writeln!(
        s,
        "underruns            {}",
        reports.iter().map(|r| r.underruns).sum::<u64>()
    );
}

/// How one call ran and ended: the mode and pace line, unusable model frames, the end reason.
fn call_end(s: &mut String, r: &CallReport, summary: &super::DemoSummary) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "\nmode {}, leg {}; resampler delay up {:.2} ms, down {:.2} ms; {} frames played ({} voiced), {} late ticks",
        summary.mode,
        summary.leg_codec,
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
}

fn timeline_line(s: &mut String, outcome: &DemoOutcome) {
    use std::fmt::Write;
    if let Some(svg) = &outcome.timeline {
        let _ = writeln!(
            s,
            "timeline picture: {} (and {})",
            svg.display(),
            svg.with_extension("png").display()
        );
    }
}

/// Each transfer to a person: what was asked, its stages with the call time they were reached,
/// and its outcome with its figures.
fn transfer_lines(s: &mut String, transfers: &[serde_json::Value]) {
    use std::fmt::Write;
    let text = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or("").to_owned();
    let at = |v: &serde_json::Value| v["at_ms"].as_f64().unwrap_or(0.0) / 1000.0;
    for e in transfers {
        match (e["type"].as_str(), e["event"].as_str()) {
            (Some("transfer_requested"), _) => {
                let _ = writeln!(
                    s,
                    "\ntransfer  {:>7.2} s  {} → {} ({} transfer to {})",
                    at(e),
                    text(e, "from"),
                    text(e, "to"),
                    text(e, "plan"),
                    text(e, "destination")
                );
            }
            (Some("transfer"), Some("stage")) => {
                let _ = writeln!(s, "          {:>7.2} s  {}", at(e), text(e, "stage"));
            }
            (Some("transfer"), Some("finished")) => {
                let figures: Vec<String> = e
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, v)| k.ends_with("_ms") && k.as_str() != "at_ms" && v.is_number())
                    .map(|(k, v)| format!("{k} {v}"))
                    .chain(e["status"].as_u64().map(|st| format!("status {st}")))
                    .collect();
                let _ = writeln!(
                    s,
                    "          {:>7.2} s  outcome: {} ({})",
                    at(e),
                    e["outcome"]["kind"].as_str().unwrap_or("?"),
                    figures.join(", ")
                );
            }
            _ => {}
        }
    }
}

/// The line marking a handoff where the caller heard it.
fn marker(agents: &[AgentMeta], h: &HandoffRecord) -> String {
    let heard = match (h.heard_at_ms, h.gap_ms) {
        (Some(at), Some(gap)) => format!("at {:.2} s, gap {:.0} ms", at / 1000.0, gap + 0.0),
        _ => "never heard".to_owned(),
    };
    format!(
        "{:>8} handoff {} → {} {heard} ({}, trigger {})\n",
        "⇢",
        name_of(agents, &h.from),
        name_of(agents, &h.to),
        h.strategy,
        h.trigger
    )
}

/// The agents' transcript lines, `(agent id, text)`, in order.
fn agent_lines(r: &CallReport) -> Vec<(String, String)> {
    r.events
        .iter()
        .filter_map(|e| match e {
            CallEvent::Transcript {
                role: Speaker::Agent,
                agent_id,
                text,
                ..
            } => Some((agent_id.clone(), text.trim().to_owned())),
            _ => None,
        })
        .collect()
}

fn quote(t: &str) -> String {
    let t = t.trim();
    if t.is_empty() {
        "—".into()
    } else {
        format!("\"{t}\"")
    }
}

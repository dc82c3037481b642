//! `GET /metrics`: the daemon's figures in the Prometheus text format.
//!
//! Each [`super::AppState`] owns its own [`PrometheusRecorder`] instead of installing a global
//! one: several servers can then run in one process (the integration tests do) without mixing
//! their counts, and nothing depends on which code installed a recorder first. Metrics are
//! written through `metrics::with_local_recorder`, which scopes the `metrics` macros to this
//! state's recorder for the length of a closure.
//!
//! What is live and what is recorded when a call ends:
//! * **live**: `baton_calls_active` (read from the call registry at each scrape), the frame
//!   counters (every telephony bridge leg adds its frames as it moves them, under its dialect's
//!   leg label, and so does every AudioSocket leg: one atomic add each, no lock),
//!   refused upgrades;
//! * **at the end of each call** of every leg, from its [`CallReport`] and leg stats (through
//!   [`super::call_log::call_ended`]): `baton_calls_total`, underruns and late ticks, the latency
//!   histograms, handoff and reconnect gaps, model errors and reconnects, the egress send
//!   cadence; and the frames of the legs that do not count them live (`/stream`, WebRTC, SIP).
//!
//! Histogram samples wait in the recorder until they are folded into their buckets at a scrape
//! or by [`Metrics::upkeep`], which `serve` runs every few seconds so an unscraped daemon does
//! not accumulate them. No label carries a secret, an id or caller audio: labels are small fixed
//! vocabularies (leg kind, end reason class, strategy, close code, reconnect outcome).

use metrics::{Gauge, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use crate::call::CallReport;
use crate::leg::bridge::server::FrameCounters;
use crate::leg::twilio::cadence::SendIntervals;

/// The content type of the Prometheus text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Buckets for per-frame added latency (uplink, downlink): sub-ms to a second.
const FRAME_MS_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 75.0, 100.0, 250.0,
    500.0, 1000.0,
];
/// Buckets for voice-to-voice latency.
const FIRST_AUDIO_BUCKETS: &[f64] = &[
    100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 1000.0, 1250.0, 1500.0, 2000.0, 3000.0,
    5000.0, 10000.0,
];
/// Buckets for silences between agents or sessions; `le="0"` counts the gapless ones.
const GAP_BUCKETS: &[f64] = &[
    0.0, 20.0, 40.0, 60.0, 100.0, 200.0, 300.0, 500.0, 750.0, 1000.0, 2000.0, 5000.0,
];
/// Buckets for `|send interval − 20 ms|`; 5 ms is the jitter budget.
const JITTER_BUCKETS: &[f64] = &[
    0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 40.0, 100.0, 250.0, 1000.0,
];

/// The histograms and their buckets.
const HISTOGRAMS: &[(&str, &[f64], &str)] = &[
    (
        "baton_first_audio_ms",
        FIRST_AUDIO_BUCKETS,
        "End of caller speech to the first agent audio frame handed to the leg.",
    ),
    (
        "baton_uplink_added_ms",
        FRAME_MS_BUCKETS,
        "A caller frame fully received to its audio written to the model socket (per call: a sample of at most 1000 values, weighted to count every frame).",
    ),
    (
        "baton_downlink_added_ms",
        FRAME_MS_BUCKETS,
        "A model audio chunk received to its first frame handed to the leg, minus queueing (per call: a sample of at most 1000 values, weighted to count every chunk).",
    ),
    (
        "baton_handoff_gap_ms",
        GAP_BUCKETS,
        "Silence between the last voiced frame of one agent and the first of the next.",
    ),
    (
        "baton_reconnect_gap_ms",
        GAP_BUCKETS,
        "Silence on the caller's timeline caused by a model session reconnect.",
    ),
    (
        "baton_egress_jitter_ms",
        JITTER_BUCKETS,
        "Deviation from 20 ms of the interval between consecutive outbound frames, as baton sent them.",
    ),
];

/// One daemon's metrics.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    calls_active: Gauge,
    /// Handed to each telephony bridge leg (Twilio and the other dialects) for its live frame
    /// counts, labelled with the dialect's name.
    pub frames: FrameCounters,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// How a call ended, as a label (a small fixed vocabulary; the full reason is in the log).
pub fn end_label(reason: &str) -> &'static str {
    if reason.starts_with(crate::leg::CALLER_HUNG_UP) {
        "caller_hung_up"
    } else if reason.starts_with(crate::leg::CALLER_LEG_FAILED) {
        // The caller's side failed (`leg::StopReason::Failed`).
        "leg_failed"
    } else if reason.starts_with("server is shutting down") {
        "shutdown"
    } else if reason.starts_with(super::live::OPERATOR_HANGUP) {
        "operator"
    } else if reason.starts_with("model closed the session") {
        "model_closed"
    } else if reason.starts_with("model connection lost") {
        "model_lost"
    } else if reason.starts_with("model session ended") {
        "model_ended"
    } else if reason.starts_with("no model session could be reopened") {
        "model_reopen_failed"
    } else if reason.starts_with("transferred to ") {
        // An agent handed the caller to a person (`call::CallCore::handle_transfer`).
        "transferred"
    } else {
        "other"
    }
}

/// The close code in "model closed the session (code N)", if any.
fn close_code_of(reason: &str) -> Option<&str> {
    let rest = reason.strip_prefix("model closed the session (code ")?;
    let end = rest.find(')')?;
    Some(&rest[..end])
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut builder = PrometheusBuilder::new();
        for (name, buckets, _) in HISTOGRAMS {
            builder = builder
                .set_buckets_for_metric(Matcher::Full((*name).to_owned()), buckets)
                .expect("bucket lists are not empty");
        }
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        let (calls_active, frames) = metrics::with_local_recorder(&recorder, || {
            describe();
            (
                metrics::gauge!("baton_calls_active"),
                FrameCounters::new(|d| {
                    (
                        metrics::counter!("baton_frames_in_total", "leg" => d.name()),
                        metrics::counter!("baton_frames_out_total", "leg" => d.name()),
                    )
                }),
            )
        });
        Metrics {
            recorder,
            handle,
            calls_active,
            frames,
        }
    }

    /// The text exposition, with `baton_calls_active` set to `active` and
    /// `baton_task_wakeups_total` read first.
    pub fn render(&self, active: usize) -> String {
        self.calls_active.set(active as f64);
        metrics::with_local_recorder(&self.recorder, || {
            metrics::counter!("baton_task_wakeups_total").absolute(crate::wakeups::total());
        });
        self.handle.render()
    }

    /// The live `(in, out)` frame counters of leg kind `leg`, for a leg to add its frames to as
    /// it moves them.
    pub fn frame_counters(&self, leg: &'static str) -> (metrics::Counter, metrics::Counter) {
        metrics::with_local_recorder(&self.recorder, || {
            (
                metrics::counter!("baton_frames_in_total", "leg" => leg),
                metrics::counter!("baton_frames_out_total", "leg" => leg),
            )
        })
    }

    /// Adds the frames a call of leg kind `leg` moved, once it has ended (a leg that does not
    /// count them as it moves them).
    pub fn add_frames(&self, leg: &'static str, frames_in: u64, frames_out: u64) {
        let (i, o) = self.frame_counters(leg);
        i.increment(frames_in);
        o.increment(frames_out);
    }

    /// Folds pending histogram samples into their buckets.
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// A telephony upgrade refused before the call began (`signature`: a bad Twilio signature;
    /// `credential`: a bad Telnyx token or Exotel Basic credential; `capacity`, `draining`).
    pub fn refused(&self, reason: &'static str) {
        metrics::with_local_recorder(&self.recorder, || {
            metrics::counter!("baton_calls_refused_total", "reason" => reason).increment(1);
        });
    }

    /// A call that ended before a model session could be opened.
    pub fn session_open_failed(&self, leg: &'static str) {
        metrics::with_local_recorder(&self.recorder, || {
            metrics::counter!("baton_calls_total", "leg" => leg, "end" => "session_open_failed")
                .increment(1);
            metrics::counter!("baton_model_errors_total", "close_code" => "open_failed")
                .increment(1);
        });
    }

    /// A call whose run failed outright (no report).
    pub fn call_failed(&self, leg: &'static str) {
        metrics::with_local_recorder(&self.recorder, || {
            metrics::counter!("baton_calls_total", "leg" => leg, "end" => "error").increment(1);
        });
    }

    /// The outcome of a transfer asked from outside a call's agents (`POST /calls/{id}/transfer`).
    pub fn transfer(&self, report: &crate::transfer::Report) {
        let finished = crate::transfer::Event::Finished(report.clone());
        metrics::with_local_recorder(&self.recorder, || {
            crate::transfer::figures::record(report.plan, &finished);
        });
    }

    /// Everything one finished call measured; `send_intervals` are the leg's outbound frame
    /// intervals (none when the leg's stats were lost).
    pub fn call_ended(
        &self,
        leg: &'static str,
        r: &CallReport,
        send_intervals: Option<&SendIntervals>,
    ) {
        metrics::with_local_recorder(&self.recorder, || {
            let end = end_label(&r.end_reason);
            metrics::counter!("baton_calls_total", "leg" => leg, "end" => end).increment(1);
            metrics::counter!("baton_underruns_total").increment(r.underruns);
            metrics::counter!("baton_late_ticks_total").increment(r.late_ticks);
            let h = metrics::histogram!("baton_first_audio_ms");
            r.first_audio_ms.iter().for_each(|&v| h.record(v));
            let h = metrics::histogram!("baton_uplink_added_ms");
            record_sample(&h, &r.uplink_added_ms, r.uplink_added_seen);
            let h = metrics::histogram!("baton_downlink_added_ms");
            record_sample(&h, &r.downlink_added_ms, r.downlink_added_seen);
            for hd in &r.handoffs {
                if let Some(gap) = hd.gap_ms {
                    let strategy = strategy_label(&hd.strategy);
                    metrics::histogram!("baton_handoff_gap_ms", "strategy" => strategy).record(gap);
                }
            }
            // Transfers to a person the call's agents asked for (their steps came back into the
            // call): outcomes by plan and kind, setup times, and the dead air after each switch,
            // counted under the plan of the transfer it followed (its report comes first).
            let mut plan = None;
            for ev in &r.events {
                let crate::agents::CallEvent::Transfer { step, .. } = ev else {
                    continue;
                };
                match step {
                    crate::transfer::Event::Finished(rep) => {
                        plan = Some(rep.plan);
                        crate::transfer::figures::record(rep.plan, step);
                    }
                    crate::transfer::Event::DeadAir { .. } => {
                        if let Some(p) = plan {
                            crate::transfer::figures::record(p, step);
                        }
                    }
                    _ => {}
                }
            }
            let h = metrics::histogram!("baton_reconnect_gap_ms");
            r.reconnect_gap_ms.iter().for_each(|&v| h.record(v));
            for rc in &r.reconnects {
                let outcome = match rc.outcome.as_str() {
                    "resumed" => "resumed",
                    "reseeded" => "reseeded",
                    "failed" => "failed",
                    _ => "other",
                };
                metrics::counter!("baton_model_reconnects_total", "outcome" => outcome)
                    .increment(1);
                let code = if let Some(code) = rc.cause.strip_prefix("closed:") {
                    Some(close_code_label(code))
                } else if rc.cause == "dead_socket" {
                    Some("none")
                } else {
                    None // goAway: a planned migration, not an error
                };
                if let Some(code) = code {
                    metrics::counter!("baton_model_errors_total", "close_code" => code)
                        .increment(1);
                }
            }
            if !r.protocol_errors.is_empty() {
                metrics::counter!("baton_model_errors_total", "close_code" => "protocol")
                    .increment(r.protocol_errors.len() as u64);
            }
            match end {
                "model_closed" => {
                    let code = close_code_of(&r.end_reason).map_or("other", close_code_label);
                    if code != "1000" {
                        metrics::counter!("baton_model_errors_total", "close_code" => code)
                            .increment(1);
                    }
                }
                "model_lost" => {
                    metrics::counter!("baton_model_errors_total", "close_code" => "none")
                        .increment(1);
                }
                _ => {}
            }
            if let Some(s) = send_intervals {
                let h = metrics::histogram!("baton_egress_jitter_ms");
                let dev_ms: Vec<f64> = s.kept_deviations_ms().collect();
                record_sample(&h, &dev_ms, s.seen());
            }
        });
        // A long call's samples stand for every frame it measured: a ten-minute call records
        // ~75,000 values. They wait in the recorder until folded into their buckets; fold them
        // now rather than let hundreds of long calls ending together pile them up.
        let recorded = r.uplink_added_seen
            + r.downlink_added_seen
            + send_intervals.map_or(0, SendIntervals::seen);
        if recorded > FOLD_AFTER {
            self.upkeep();
        }
    }
}

/// Values one call's end records past which they are folded into their buckets at once.
const FOLD_AFTER: u64 = 10_000;

/// Close codes as labels: the registered WebSocket codes and the application range by number,
/// anything else as `other`, so a peer cannot mint label values.
fn close_code_label(code: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "1000", "1001", "1002", "1003", "1005", "1006", "1007", "1008", "1009", "1010", "1011",
        "1012", "1013", "1014", "1015",
    ];
    KNOWN
        .iter()
        .find(|k| **k == code)
        .copied()
        .unwrap_or(match code.parse::<u16>() {
            Ok(4000..=4999) => "4xxx",
            _ => "other",
        })
}

/// Handoff strategies as labels (the orchestrator's names; anything else is `other`).
fn strategy_label(s: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "context_update",
        "tool_response",
        "inject_turn",
        "recreate",
        "recreate_cold",
    ];
    KNOWN.iter().find(|k| **k == s).copied().unwrap_or("other")
}

fn describe() {
    metrics::describe_gauge!("baton_calls_active", "Calls in progress.");
    metrics::describe_counter!(
        "baton_task_wakeups_total",
        "Wake-ups of the per-call tasks (leg driver and writer, call loop, model session shell)."
    );
    metrics::describe_counter!(
        "baton_calls_total",
        "Calls ended, by leg kind and how they ended."
    );
    metrics::describe_counter!(
        "baton_calls_refused_total",
        "Upgrades refused before a call began (signature, credential, capacity, draining)."
    );
    metrics::describe_counter!(
        "baton_frames_in_total",
        "Caller frames received from legs: 20 ms frames (bridges and AudioSocket live, /stream and WebRTC when their call ends); on SIP, RTP packets of the peer's ptime, keypad events included, when the call ends."
    );
    metrics::describe_counter!(
        "baton_frames_out_total",
        "Frames sent to legs: 20 ms frames (bridges and AudioSocket live, /stream and WebRTC when their call ends; idle silence is not sent where a leg skips it); on SIP, RTP packets, when the call ends."
    );
    metrics::describe_counter!(
        "baton_underruns_total",
        "20 ms ticks played as silence while the model was still speaking a turn."
    );
    metrics::describe_counter!(
        "baton_late_ticks_total",
        "Playout frames released a full tick or more past their deadline."
    );
    metrics::describe_counter!(
        "baton_model_reconnects_total",
        "Model session switches forced by goAway or a lost socket, by outcome."
    );
    metrics::describe_counter!(
        "baton_model_errors_total",
        "Model session failures by close code (none: lost without a close frame; protocol: unusable frame; open_failed: no session)."
    );
    for (name, _, help) in HISTOGRAMS {
        metrics::describe_histogram!(*name, Unit::Milliseconds, *help);
    }
}

/// Records a call's bounded sample of a per-frame figure as `seen` observations (each kept
/// value standing for its share of the frames), so the histogram counts every frame of a long
/// call and weighs calls by their length.
fn record_sample(h: &metrics::Histogram, values: &[f64], seen: u64) {
    if values.is_empty() {
        return;
    }
    let n = seen.max(values.len() as u64);
    let len = values.len() as u64;
    for i in 0..n {
        h.record(values[(i % len) as usize]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_a_fixed_vocabulary() {
        assert_eq!(end_label("caller hung up"), "caller_hung_up");
        let failed = crate::leg::StopReason::Failed("protocol error: bad kind".into());
        assert_eq!(end_label(&failed.to_string()), "leg_failed");
        assert_eq!(end_label("hung up by an operator"), "operator");
        assert_eq!(end_label("transferred to ravi"), "transferred");
        assert_eq!(
            end_label("model closed the session (code 1011): overloaded"),
            "model_closed"
        );
        assert_eq!(
            close_code_of("model closed the session (code 1011): overloaded"),
            Some("1011")
        );
        assert_eq!(close_code_label("4003"), "4xxx");
        assert_eq!(close_code_label("caller-123"), "other");
        assert_eq!(strategy_label("recreate"), "recreate");
        assert_eq!(strategy_label("a\"b"), "other");
    }

    #[test]
    fn one_call_renders_histograms_and_counters() {
        let m = Metrics::new();
        let r = CallReport {
            first_audio_ms: vec![640.0],
            uplink_added_ms: vec![0.2, 0.3],
            uplink_added_seen: 2,
            // A long call's sample: 1 value kept of 7 chunks seen.
            downlink_added_ms: vec![12.0],
            downlink_added_seen: 7,
            underruns: 3,
            end_reason: "caller hung up".into(),
            ..Default::default()
        };
        let mut sent = SendIntervals::default();
        sent.push(20_100);
        sent.push(19_900);
        m.call_ended("twilio", &r, Some(&sent));
        m.frames
            .of(crate::leg::bridge::Dialect::Twilio)
            .0
            .increment(5);
        m.frames
            .of(crate::leg::bridge::Dialect::Telnyx)
            .1
            .increment(2);
        let text = m.render(0);
        assert!(text.contains("baton_calls_active 0"), "{text}");
        assert!(text.contains("baton_calls_total{leg=\"twilio\",end=\"caller_hung_up\"} 1"));
        assert!(text.contains("baton_underruns_total 3"));
        assert!(text.contains("baton_first_audio_ms_count 1"));
        assert!(text.contains("baton_uplink_added_ms_count 2"));
        assert!(text.contains("baton_downlink_added_ms_count 7"), "{text}");
        assert!(text.contains("baton_egress_jitter_ms_bucket{le=\"0.25\"} 2"));
        assert!(text.contains("baton_frames_in_total{leg=\"twilio\"} 5"));
        assert!(text.contains("baton_frames_out_total{leg=\"telnyx\"} 2"));
        // A second state does not see the first one's figures.
        assert!(!Metrics::new().render(0).contains("baton_calls_total"));
    }
}

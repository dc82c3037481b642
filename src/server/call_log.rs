//! The end of a call, recorded the same way for every leg by [`call_ended`]: its figures in the
//! daemon's metrics, its trace, and the `call ended` log line. Every leg's handler ends a call
//! that ran through this one function, so none can log a call the metrics never see.
//!
//! The line has readable fields a person and a log query both use (milliseconds rounded to 0.01,
//! percentiles as separate numbers, the agents heard and the handoff gaps as short lists), never
//! a Rust `Debug` dump. `call` is baton's call id, the one `GET /calls`, the admin API and the
//! store use; the call's span carries its leg and stream ids. `scripts/bench-dialects.sh`,
//! `bench-audiosocket.sh` and `bench-sip.sh` read these field names from the JSON log.

use super::attach::RunError;
use super::metrics::Metrics;
use crate::call::CallReport;
use crate::call::metrics::{round2, summarize};
use crate::leg::sip::call::HungUpBy;
use crate::leg::sip::media::MediaStats;
use crate::leg::twilio::cadence::SendIntervals;

/// What a finished call adds beside its report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extra<'a> {
    /// The call's id in `GET /calls`, the admin API and the store.
    pub call: &'a str,
    /// How long loading the caller's agent contexts took (ms).
    pub context_load_ms: Option<f64>,
    /// The leg's outbound frame intervals, as it sent them (its send cadence in the line, the
    /// egress jitter in the metrics); none when the leg's stats were lost.
    pub send_intervals: Option<&'a SendIntervals>,
    /// 20 ms frames the leg received and sent, `(in, out)`, for a leg that does not add them to
    /// the live frame counters as it moves them (`/stream`, WebRTC; a SIP call's are its media
    /// packets).
    pub frames: Option<(u64, u64)>,
    /// The UUID the dialplan gave (AudioSocket).
    pub uuid: Option<&'a str>,
    /// DTMF digits received (AudioSocket).
    pub dtmf: Option<u64>,
    /// The audio format the client chose and the `mark`s it said it played (`/stream`).
    pub format: Option<&'a str>,
    pub marks_played: Option<u64>,
    /// A SIP call's parties, who hung up, and its media figures.
    pub sip: Option<SipEnd<'a>>,
}

/// What a SIP call adds to its line.
#[derive(Clone, Copy, Debug)]
pub struct SipEnd<'a> {
    pub from: &'a str,
    pub to: &'a str,
    pub hung_up_by: &'a HungUpBy,
    pub media: Option<&'a MediaStats>,
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

/// A call of leg kind `leg` that ran to its end: counts it in `metrics` (with its frames, when
/// the leg did not count them live), exports its trace when traces are on, and logs the
/// `call ended` line at info.
pub fn call_ended(metrics: &Metrics, leg: &'static str, report: &CallReport, extra: Extra<'_>) {
    metrics.call_ended(leg, report, extra.send_intervals);
    let media = extra.sip.and_then(|s| s.media);
    let frames = extra
        .frames
        .or_else(|| media.map(|m| (m.packets_in, m.packets_out)));
    if let Some((frames_in, frames_out)) = frames {
        metrics.add_frames(leg, frames_in, frames_out);
    }
    crate::traces::call_ended(report, extra.call);
    log(report, extra);
}

/// A call of leg kind `leg` that did not run to its end: counted in `metrics` by why.
pub fn call_not_run(metrics: &Metrics, leg: &'static str, e: &RunError) {
    match e {
        RunError::NoSession(_) => metrics.session_open_failed(leg),
        RunError::Failed(_) => metrics.call_failed(leg),
    }
}

/// The `call ended` line.
fn log(report: &CallReport, extra: Extra<'_>) {
    let first = summarize(&report.first_audio_ms);
    let up = summarize(&report.uplink_added_ms);
    let down = summarize(&report.downlink_added_ms);
    let agents = report.agents_heard();
    let dev = |us: u32| ms(f64::from(us) / 1000.0);
    let sip = extra.sip;
    let cadence = extra.send_intervals.map(SendIntervals::cadence);
    // Every media figure, as the one `media` field.
    let media = sip
        .and_then(|s| s.media)
        .and_then(|m| serde_json::to_string(m).ok());
    tracing::info!(
        call = extra.call,
        uuid = extra.uuid,
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
        send_dev_p99_ms = cadence.as_ref().map(|c| dev(c.p99_dev_us)),
        send_dev_max_ms = cadence.as_ref().map(|c| dev(c.max_dev_us)),
        context_load_ms = extra.context_load_ms.map(ms),
        dtmf = extra.dtmf,
        format = extra.format,
        marks_played = extra.marks_played,
        from = sip.map(|s| s.from),
        to = sip.map(|s| s.to),
        hung_up_by = sip.map(|s| s.hung_up_by.name()),
        media = media.as_deref(),
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

    /// What `call_ended` writes with `extra`, as the daemon's plain log format does.
    fn line(report: &CallReport, extra: Extra<'_>) -> String {
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || out.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || log(report, extra));
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    /// A call is counted under its leg wherever it is logged; frames a leg did not count live
    /// are added, a SIP call's from its media packets.
    #[test]
    fn every_call_ended_is_counted_under_its_leg() {
        let m = Metrics::new();
        let report = CallReport {
            end_reason: "caller hung up".into(),
            first_audio_ms: vec![700.0],
            ..Default::default()
        };
        let extra = |frames| Extra {
            call: "c1",
            frames,
            ..Default::default()
        };
        call_ended(&m, "stream", &report, extra(Some((50, 40))));
        call_ended(&m, "audiosocket", &report, extra(None));
        let media = MediaStats {
            packets_in: 30,
            packets_out: 20,
            ..Default::default()
        };
        let by = HungUpBy::Peer;
        let sip = SipEnd {
            from: "a",
            to: "b",
            hung_up_by: &by,
            media: Some(&media),
        };
        call_ended(
            &m,
            "sip",
            &report,
            Extra {
                sip: Some(sip),
                ..extra(None)
            },
        );
        let text = m.render(0);
        for leg in ["stream", "audiosocket", "sip"] {
            let line = format!("baton_calls_total{{leg=\"{leg}\",end=\"caller_hung_up\"}} 1");
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert!(text.contains("baton_first_audio_ms_count 3"), "{text}");
        for line in [
            "baton_frames_in_total{leg=\"stream\"} 50",
            "baton_frames_out_total{leg=\"stream\"} 40",
            "baton_frames_in_total{leg=\"sip\"} 30",
            "baton_frames_out_total{leg=\"sip\"} 20",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(!text.contains("leg=\"audiosocket\"} "), "{text}");
    }

    #[test]
    fn a_sip_call_ends_with_the_common_line_and_its_own_fields() {
        let mut report = CallReport {
            end_reason: "caller hung up".into(),
            ..Default::default()
        };
        report.first_audio_ms = vec![812.345];
        report.uplink_added_ms = vec![1.520202];
        let media = MediaStats {
            codec: "PCMU".into(),
            packets_in: 250,
            packets_out: 240,
            lost: 2,
            max_jitter_ms: 3.24159,
            ..Default::default()
        };
        let by = HungUpBy::Peer;
        let ended = line(
            &report,
            Extra {
                call: "c1",
                sip: Some(SipEnd {
                    from: "sip:alice@127.0.0.1",
                    to: "sip:baton@127.0.0.1",
                    hung_up_by: &by,
                    media: Some(&media),
                }),
                ..Default::default()
            },
        );
        for debug in ["Summary {", "Some(", "None", "Peer"] {
            assert!(!ended.contains(debug), "{debug:?} in {ended}");
        }
        for field in [
            "call=\"c1\"",
            "end=caller hung up",
            "turns=0",
            "agents=-",
            "handoffs=0",
            "handoff_gaps_ms=none",
            "first_audio_p50_ms=812.35",
            "uplink_p50_ms=1.52",
            "from=\"sip:alice@127.0.0.1\"",
            "to=\"sip:baton@127.0.0.1\"",
            "hung_up_by=\"peer\"",
        ] {
            assert!(ended.contains(field), "no {field} in {ended}");
        }
        // The media figures whole, as one JSON object (what the call's `sip_media` holds).
        let media = ended
            .split(" media=")
            .nth(1)
            .and_then(|r| {
                serde_json::Deserializer::from_str(&r.replace("\\\"", "\"")[1..])
                    .into_iter::<serde_json::Value>()
                    .next()
            })
            .and_then(Result::ok)
            .unwrap_or_else(|| panic!("no media object in {ended}"));
        assert_eq!(media["codec"], "PCMU", "{media}");
        assert_eq!(media["lost"], 2, "{media}");
        assert_eq!(media["buffer"]["late"], 0, "{media}");
        // Fields a leg does not have are left out, not written empty.
        assert!(!ended.contains("marks_played"), "{ended}");
    }
}

//! The standby socket hides the connect: `fault_mid_tool_call` (the socket drops right after a
//! tool call goes out, nothing queued for the caller) against a mock whose connections take
//! `connect_ms` to be accepted (the round trips to a distant service). The gap is measured on the
//! fixture leg's recording — the silence the caller heard from the switch to the answer — and
//! must be at most the model's own first-audio latency for that turn plus one frame; the report's
//! `reconnect_gap_ms` must meet the same bound and agree with the recording to the millisecond.
//! The same call without the standby pays the connect on top (so the bound can fail). Gemini
//! (resumed with the handle) on the in-process mock and on a separate mock over loopback.
//!
//! Report and recording measure the same thing from the same instant, on the leg's media
//! timeline (which `at_ms`, the played frames' timestamps and the recording share): from the
//! switch to the first sample of the answer's audio. The recording can only show where the answer
//! becomes audible, and every reply clip of the scenario opens with 50 ms of digital silence of
//! its own — audio the model sends, inside its first chunk, like any reply's; the model's
//! first-audio latency does not count it and neither does the drop's cost. So the recording's
//! answer starts at its first audible sample less the answering clip's own lead-in, sample-exact.
//! (Counting to the first audible 20 ms frame would read 640 ms for a gap of 600: the lead-in,
//! less the 10 ms the rounding down to a frame takes off.)

use crate::resume_support;

use std::sync::Arc;
use std::time::Duration;

use baton::backend::ModelBackend;
use baton::call::{self, CallOptions, CallReport, ModelSource, ReconnectPolicy};
use baton::leg::fixture::{FixtureCaller, LegCodec, Recording};
use baton::mock::{MockOptions, Resumption, Scenario};
use baton::model::catalog;
use baton::model::gemini::endpoint::{Backend, Endpoint};
use baton::model::gemini::session::SessionConfig;
use baton::model::handle::Protocol;
use resume_support::*;

/// What a connection costs at the mock: far more than a frame, so a connect paid during the
/// switch cannot hide in the bound.
const CONNECT: Duration = Duration::from_millis(300);
/// One frame: the playout tick the first new frame waits for.
const FRAME_MS: f64 = 20.0;
/// Report and recording read the same instants; what is left between them is the rounding of
/// media time to the recording's samples.
const AGREE_MS: f64 = 1.0;
/// A sample the caller hears: above -66 dBFS (the strictest reading, a faint onset included).
const AUDIBLE: u16 = 16;

fn slow_connect_scenario() -> Scenario {
    let mut sc = scenario("fault_mid_tool_call");
    sc.timing.connect = CONNECT;
    sc
}

/// The model's own first-audio latency for a turn that calls a tool: to the call, then from the
/// tool's result to the first audio (baton answers the call at once, without an agent set).
fn model_latency_ms(sc: &Scenario) -> f64 {
    2.0 * sc.timing.first_audio.as_secs_f64() * 1000.0
}

/// The first-audio latency of a tool-calling turn as the caller hears it without a drop: the
/// model's latency plus what baton's playout adds to any first audio, read from turn 2 of the
/// same call (no tool, no drop), whose voice-to-voice time is the mock's silence window, its
/// first-audio time and that addition.
fn first_audio_latency_ms(r: &CallReport, sc: &Scenario) -> f64 {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let turn2 = r.turns[1].first_audio_ms.expect("turn 2 answered");
    let added = turn2 - ms(sc.timing.silence) - ms(sc.timing.first_audio);
    assert!(
        (0.0..=60.0).contains(&added),
        "playout added {added} ms to turn 2"
    );
    model_latency_ms(sc) + added
}

struct Run {
    report: CallReport,
    recording: Recording,
}

async fn run(sc: &Scenario, backend: ModelBackend, samples: &[i16], standby: bool) -> Run {
    let config = SessionConfig {
        system_instruction: Some("You are a friendly financial advisor on a helpline.".into()),
        ..Default::default()
    };
    let session = backend.open(&config).await.unwrap();
    let fixture = FixtureCaller::from_pcm(samples, 16_000, LegCodec::L16k16, "dithered").unwrap();
    let (leg, recording) = fixture.start();
    let opts = CallOptions {
        caller_silence: sc.timing.silence,
        model: Some(ModelSource { backend, config }),
        reconnect: ReconnectPolicy {
            standby,
            ..in_process()
        },
        ..Default::default()
    };
    let report = call::run(leg, session, opts).await.unwrap();
    let recording = recording.await.unwrap();
    Run { report, recording }
}

fn in_process_backend(sc: &Scenario) -> ModelBackend {
    let opts = Arc::new(MockOptions {
        resumption: Resumption::capturing(),
        ..MockOptions::new(Arc::new(sc.clone()))
    });
    ModelBackend::in_process(opts)
}

/// Milliseconds of silence a reply clip opens with and ends with, as the caller hears it: the
/// mock's clip (at its 24 kHz output rate) through the downlink's resampler to the leg's `rate`,
/// aligned as baton aligns each reply.
fn clip_silences_ms(audio: &[i16], rate: u32) -> (f64, f64) {
    let mut rs =
        baton::audio::resample::StreamResampler::aligned(baton::mock::clip::OUTPUT_RATE, rate)
            .unwrap();
    let mut heard = Vec::new();
    rs.process(audio, &mut heard);
    rs.flush(&mut heard);
    let first = heard.iter().position(|x| x.unsigned_abs() > AUDIBLE);
    let last = heard.iter().rposition(|x| x.unsigned_abs() > AUDIBLE);
    let (Some(first), Some(last)) = (first, last) else {
        panic!("a reply clip with no sound");
    };
    let ms = |n: usize| n as f64 * 1000.0 / f64::from(rate);
    (ms(first), ms(heard.len() - 1 - last))
}

/// The silence the caller heard after each reconnect, read from the recording as the report
/// reads it (see the module doc): from the switch to the first sample of the answer's audio, in
/// ms of the leg's media time.
///
/// The report counts from the latest of the switch, the end of the caller's last voiced frame
/// and the end of the model audio played before. At these switches the caller's turn is over and
/// none of the model's audio is playing — checked here on the recording: the caller's last frame
/// the call's VAD counts as voiced, and the agent's last sound plus the longest silence any
/// reply of the scenario ends with, end before the switch — so both count from the switch.
fn gaps_by_recording(run: &Run, sc: &Scenario) -> Vec<f64> {
    let rate = run.recording.rate as usize;
    let frame = rate / 50;
    let to_ms = |n: usize| n as f64 * 1000.0 / rate as f64;
    let agent = &run.recording.agent;
    let lead_out = (0..sc.turns.len())
        .map(|i| sc.reply_for(i, None))
        .chain([&sc.default_reply])
        .map(|r| clip_silences_ms(&r.audio, run.recording.rate).1)
        .fold(0.0, f64::max);
    run.report
        .reconnects
        .iter()
        .map(|c| {
            let switch = (c.at_ms * rate as f64 / 1000.0).ceil() as usize;
            let onset = (switch..agent.len())
                .find(|&i| agent[i].unsigned_abs() > AUDIBLE)
                .unwrap_or_else(|| panic!("no voice after the reconnect at {} ms", c.at_ms));
            // The answer is the reply to the caller's turn under way at the switch.
            let turn = run
                .report
                .turns
                .iter()
                .rposition(|t| t.caller_start_ms <= c.at_ms)
                .expect("the caller had spoken");
            let lead_in = clip_silences_ms(&sc.reply_for(turn, None).audio, run.recording.rate).0;
            let answer = to_ms(onset) - lead_in;

            let caller_end = run.recording.caller[..switch.min(run.recording.caller.len())]
                .chunks(frame)
                .rposition(|f| {
                    baton::audio::vad::rms_dbfs(f) > baton::audio::vad::DEFAULT_THRESHOLD_DBFS
                })
                .map_or(0.0, |k| (k + 1) as f64 * FRAME_MS);
            let agent_end = agent[..onset]
                .iter()
                .rposition(|x| x.unsigned_abs() > AUDIBLE)
                .map_or(0.0, |i| to_ms(i + 1) + lead_out);
            assert!(
                caller_end <= c.at_ms && agent_end <= c.at_ms,
                "the silence starts at the switch ({} ms): caller voiced until {caller_end} ms, \
                 agent audio until {agent_end} ms",
                c.at_ms
            );
            answer - c.at_ms
        })
        .collect()
}

fn check(run: &Run, sc: &Scenario, what: &str) -> Vec<f64> {
    let r = &run.report;
    assert_eq!(r.end_reason, "caller hung up", "{what}");
    assert_eq!(r.reconnects.len(), 2, "{what}: {:#?}", r.reconnects);
    for c in &r.reconnects {
        assert_eq!(c.outcome, "resumed", "{what}: {c:?}");
        assert_eq!(
            c.model_audio_queued_ms, 0.0,
            "{what}: nothing queued: {c:?}"
        );
    }
    let heard = gaps_by_recording(run, sc);
    let reported: Vec<f64> = r.reconnects.iter().filter_map(|c| c.gap_ms).collect();
    println!(
        "{what}: reconnect_gap_ms reported {reported:?}, by the recording {heard:?} (first-audio latency {} ms, connect {} ms)",
        first_audio_latency_ms(r, sc),
        sc.timing.connect.as_millis()
    );
    assert_eq!(reported.len(), heard.len(), "{what}");
    for (rep, rec) in reported.iter().zip(&heard) {
        assert!(
            (rep - rec).abs() <= AGREE_MS,
            "{what}: reported {rep} ms, heard {rec} ms"
        );
    }
    heard
}

#[tokio::test(start_paused = true)]
async fn a_drop_mid_tool_call_costs_no_connect_with_the_standby_in_process() {
    let sc = slow_connect_scenario();
    let samples = caller(0);
    let with = run(&sc, in_process_backend(&sc), &samples, true).await;
    let bound = first_audio_latency_ms(&with.report, &sc) + FRAME_MS;
    let heard_with = check(&with, &sc, "in-process, standby");
    for (&g, c) in heard_with.iter().zip(&with.report.reconnects) {
        assert!(g <= bound, "in-process, standby: heard {g} ms > {bound} ms");
        let rep = c.gap_ms.unwrap_or(f64::MAX);
        assert!(
            rep <= bound,
            "in-process, standby: reported {rep} ms > {bound} ms"
        );
    }

    // The same call dialing only after the drop pays the connect on top.
    let without = run(&sc, in_process_backend(&sc), &samples, false).await;
    let connect = CONNECT.as_secs_f64() * 1000.0;
    for (g, w) in check(&without, &sc, "in-process, no standby")
        .into_iter()
        .zip(heard_with)
    {
        assert!(
            g >= w + connect - FRAME_MS,
            "in-process, no standby: heard {g} ms, with the standby {w} ms"
        );
    }
}

/// A separate mock over loopback, in real time: the caller is cut after the first drop's turn
/// is answered (one reconnect, seconds not minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_mid_tool_call_costs_no_connect_with_the_standby_over_loopback() {
    let mut sc = slow_connect_scenario();
    // One drop: the second would need the whole conversation in real time.
    sc.faults.drops.truncate(1);
    let opts = Arc::new(MockOptions {
        resumption: Resumption::capturing(),
        ..MockOptions::new(Arc::new(sc.clone()))
    });
    let mock = baton::mock::bind("127.0.0.1:0", opts.clone(), None)
        .await
        .unwrap()
        .spawn();
    let endpoint = Endpoint::new(mock.base_url(), Backend::DeveloperApi, "v1beta", None).unwrap();
    let backend = ModelBackend::Gemini {
        endpoint,
        model: catalog::lookup(Protocol::Gemini, opts.model_id()),
    };
    // The first turn, its answer and a little silence.
    let mut samples = conversation();
    samples.truncate(16_000 * 6);
    let samples = dither(samples);
    let r = run(&sc, backend, &samples, true).await;
    let rr = &r.report;
    assert_eq!(rr.reconnects.len(), 1, "{:#?}", rr.reconnects);
    let c = &rr.reconnects[0];
    assert_eq!(c.outcome, "resumed", "{c:?}");
    assert_eq!(c.model_audio_queued_ms, 0.0, "{c:?}");
    let heard = gaps_by_recording(&r, &sc);
    println!(
        "loopback, standby: reconnect_gap_ms reported {:?}, by the recording {heard:?}",
        c.gap_ms
    );
    // Real time on a shared machine adds scheduling delays (609–616 ms heard in trials): the
    // bound here shows the connect was not paid, not the last frame.
    let bound = model_latency_ms(&sc) + CONNECT.as_secs_f64() * 1000.0 / 2.0;
    assert!(
        heard[0] <= bound,
        "loopback: heard {} ms > {bound} ms",
        heard[0]
    );
    let rep = c.gap_ms.unwrap_or(f64::MAX);
    // Both on the leg's media timeline: real-time jitter moves report and recording alike.
    assert!(
        (rep - heard[0]).abs() <= AGREE_MS,
        "reported {rep}, heard {}",
        heard[0]
    );
}

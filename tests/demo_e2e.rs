//! The bundled conversation end to end on the accelerated clock: fixture caller → Gemini Live wire
//! protocol → embedded mock → playout. Checks the recording (each reply audible where the scenario
//! puts it, and it is the scripted clip), the voice-to-voice figure, and the summary's names.

use crate::support;

use std::path::{Path, PathBuf};

use baton::audio::{resample, wav};
use baton::demo::{self, DemoArgs};
use baton::leg::fixture::LegCodec;
use baton::mock::Scenario;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn args(out: &Path, codec: LegCodec) -> DemoArgs {
    DemoArgs {
        scenario: Some(
            root()
                .join("audio-fixtures/scenarios/demo.toml")
                .display()
                .to_string(),
        ),
        out: out.to_path_buf(),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        leg_codec: codec,
        ..Default::default()
    }
}

/// RMS of a window, in dBFS.
fn level(x: &[i16]) -> f32 {
    baton::audio::vad::rms_dbfs(x)
}

#[test]
fn bundled_call_replies_where_the_scenario_puts_them() {
    let dir = tempfile::tempdir().unwrap();
    let outcome = demo::run(&args(dir.path(), LegCodec::L16k16)).unwrap();
    let scenario = Scenario::load(&root().join("audio-fixtures/scenarios/demo.toml")).unwrap();
    let report = &outcome.report;

    assert_eq!(report.turns.len(), 4, "{:#?}", report.turns);
    assert_eq!(report.underruns, 0);
    assert!(
        report.protocol_errors.is_empty(),
        "{:?}",
        report.protocol_errors
    );
    assert_eq!(report.end_reason, "caller hung up");

    // Voice to voice = the mock's VAD silence window + its first-audio latency + baton's overhead,
    // which on the accelerated clock is waiting for the next 20 ms playout tick (at most 2 frames).
    let modelled = (scenario.timing.silence + scenario.timing.first_audio).as_secs_f64() * 1000.0;
    for t in &report.turns {
        let v2v = t.first_audio_ms.expect("every turn is answered");
        assert!(
            v2v >= modelled && v2v <= modelled + 40.0,
            "turn {}: first_audio_ms {v2v} not within [{modelled}, {modelled}+40]",
            t.index
        );
    }

    // The recording: right channel = what the caller heard.
    let rec = wav::read(&dir.path().join("call.wav")).unwrap();
    assert_eq!(rec.rate, 16_000);
    let stereo = {
        let mut r = hound::WavReader::open(dir.path().join("call.wav")).unwrap();
        assert_eq!(r.spec().channels, 2);
        r.samples::<i16>().map(Result::unwrap).collect::<Vec<_>>()
    };
    let right: Vec<i16> = stereo.iter().skip(1).step_by(2).copied().collect();
    let ms = |t: f64| (t * 16.0) as usize; // ms → sample index at 16 kHz
    for (t, turn) in report.turns.iter().zip(&scenario.turns) {
        let start = ms(t.agent_start_ms.unwrap());
        // Silence just before the reply, speech right at it.
        assert!(
            level(&right[start - ms(200.0)..start - ms(20.0)]) < -60.0,
            "turn {} not silent before",
            t.index
        );
        assert!(
            level(&right[start..start + ms(300.0)]) > -40.0,
            "turn {} not audible",
            t.index
        );
        // It starts where the scenario puts it: the caller's end + silence window + latency.
        let expected = t.caller_end_ms + modelled;
        assert!(
            (t.agent_start_ms.unwrap() - expected).abs() <= 40.0,
            "turn {} starts at {} ms, scenario puts it at {expected} ms",
            t.index,
            t.agent_start_ms.unwrap()
        );
        // And it is the scripted clip (24 kHz in the mock → 16 kHz here).
        let clip = resample::resample_all(&turn.reply.audio, 24_000, 16_000).unwrap();
        let score = support::best_match(&right, &clip, start, ms(40.0), usize::MAX, 1);
        assert!(
            score > 0.9,
            "turn {}: recording matches the scripted clip only {score:.3}",
            t.index
        );
        // Its length is the clip's.
        let heard = t.agent_end_ms.unwrap() - t.agent_start_ms.unwrap();
        let clip_ms = clip.len() as f64 / 16.0;
        assert!(
            (heard - clip_ms).abs() <= 40.0,
            "turn {}: heard {heard} ms of a {clip_ms} ms clip",
            t.index
        );
    }

    // The summary has the fixed names.
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    for key in [
        "calls",
        "turns",
        "first_audio_ms",
        "uplink_added_ms",
        "downlink_added_ms",
        "underruns",
        "handoffs",
        "handoff_gap_ms",
        "recording",
    ] {
        assert!(
            summary.get(key).is_some(),
            "summary.json lacks {key}: {summary}"
        );
    }
    for key in ["p50", "p95", "max"] {
        assert!(summary["first_audio_ms"][key].is_number(), "{summary}");
    }
    for key in ["p50", "p99", "max"] {
        assert!(summary["downlink_added_ms"][key].is_number(), "{summary}");
    }
    // Not measured on the virtual clock: null, and the note says why.
    assert!(summary["uplink_added_ms"].is_null(), "{summary}");
    assert!(summary["uplink_note"].is_string(), "{summary}");
    assert_eq!(summary["calls"], 1);
    assert_eq!(summary["turns"], 4);
    assert!(summary["handoff_gap_ms"].is_null());
}

#[test]
fn a_phone_caller_through_g711_is_answered_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    let outcome = demo::run(&args(dir.path(), LegCodec::Pcmu8k)).unwrap();
    assert_eq!(outcome.report.turns.len(), 4);
    assert_eq!(outcome.report.underruns, 0);
    assert_eq!(outcome.report.first_audio_ms.len(), 4);
    let rec = wav::read(&dir.path().join("call.wav")).unwrap();
    assert_eq!(rec.rate, 8_000);
    assert_eq!(outcome.summary.leg_codec, "pcmu8k");
}

#[test]
fn a_corrupt_fixture_is_an_error_naming_the_file() {
    for bad in [
        "audio-fixtures/bad/corrupt.wav",
        "audio-fixtures/bad/not_a_wav.wav",
    ] {
        let err = baton::leg::fixture::FixtureCaller::from_wav(&root().join(bad), LegCodec::L16k16)
            .unwrap_err()
            .to_string();
        assert!(err.contains(bad.rsplit('/').next().unwrap()), "{err}");
    }
}

#[test]
fn a_scenario_without_a_caller_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("s.toml");
    std::fs::write(&scenario, "name = \"x\"\n").unwrap();
    let mut a = args(dir.path(), LegCodec::L16k16);
    a.scenario = Some(scenario.display().to_string());
    let err = demo::run(&a).err().expect("no caller fixture").to_string();
    assert!(err.contains("s.toml") && err.contains("caller"), "{err}");
}

#[test]
fn a_first_audio_latency_no_turn_could_wait_for_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path(), LegCodec::L16k16);
    a.first_audio_ms = Some(999_999_999);
    let err = demo::run(&a).err().expect("refused").to_string();
    assert!(
        err.contains("--first-audio-ms 999999999") && err.contains("0 to 60000"),
        "{err}"
    );
}

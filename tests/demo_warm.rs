//! `baton demo --scenario warm_transfer` end to end, in real time on loopback: the fixture caller
//! talks to Asha (the embedded mock), who puts them through to Ravi, a person; baton dials Ravi's
//! phone — the demo's own SIP user agent — with a real INVITE, briefs him on his leg only, he
//! presses 1 and says his line. Checks the transfer's outcome and stages, that the caller heard
//! Ravi after the bridge and never the brief, and that Ravi's side (`person.wav`) has the brief.

use crate::support;

use std::path::{Path, PathBuf};

use baton::audio::{resample, wav};
use baton::demo::{self, DemoArgs};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A clip as it reaches the other party through the G.711 leg: band-limited to 8 kHz, at `rate`.
fn through_phone(rel: &str, rate: u32) -> Vec<i16> {
    let clip = wav::read(&root().join(rel)).unwrap();
    let narrow = resample::resample_all(&clip.samples, clip.rate, 8_000).unwrap();
    resample::resample_all(&narrow, 8_000, rate).unwrap()
}

/// One channel (0 left, 1 right) of a stereo WAV.
fn channel(path: &Path, ch: usize) -> (u32, Vec<i16>) {
    let mut r = hound::WavReader::open(path).unwrap();
    assert_eq!(r.spec().channels, 2, "{}", path.display());
    let rate = r.spec().sample_rate;
    let all: Vec<i16> = r.samples::<i16>().map(Result::unwrap).collect();
    (rate, all.iter().skip(ch).step_by(2).copied().collect())
}

fn at_of(events: &[Value], stage: &str) -> f64 {
    events
        .iter()
        .find(|e| e["event"] == "stage" && e["stage"] == stage)
        .and_then(|e| e["at_ms"].as_f64())
        .unwrap_or_else(|| panic!("no {stage} stage: {events:#?}"))
}

#[test]
fn the_warm_transfer_demo_puts_the_caller_through_to_ravi() {
    let listed = demo::list_scenarios().unwrap();
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("warm_transfer ") && l.contains("front_desk_warm")),
        "{listed}"
    );

    let dir = tempfile::tempdir().unwrap();
    let args = DemoArgs {
        scenario: Some("warm_transfer".into()),
        out: dir.path().to_path_buf(),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        ..Default::default()
    };
    let outcome = demo::run(&args).unwrap();
    let s = &outcome.summary;
    eprintln!("{}", demo::render(&outcome));
    assert_eq!(s.mode, "realtime", "a SIP peer runs in real time");

    // One warm transfer, asked by Asha, through every stage to connected.
    let t = &s.transfers;
    let asked: Vec<_> = t
        .iter()
        .filter(|e| e["type"] == "transfer_requested")
        .collect();
    assert_eq!(asked.len(), 1, "{t:#?}");
    assert_eq!(asked[0]["plan"], "warm");
    assert!(
        asked[0]["destination"]
            .as_str()
            .unwrap_or_default()
            .starts_with("sip:ravi@127.0.0.1:"),
        "{t:#?}"
    );
    let finished: Vec<_> = t.iter().filter(|e| e["event"] == "finished").collect();
    assert_eq!(finished.len(), 1, "{t:#?}");
    assert_eq!(finished[0]["outcome"]["kind"], "connected", "{t:#?}");
    let (briefing, bridged) = (at_of(t, "briefing"), at_of(t, "bridged"));
    for stage in ["dialing", "ringing"] {
        assert!(
            at_of(t, stage) <= briefing,
            "{stage} before briefing: {t:#?}"
        );
    }
    assert!(briefing < bridged, "{t:#?}");

    // The caller's recording (right: what the caller heard) has Ravi's words after the bridge.
    let (rate, heard) = channel(&dir.path().join("call.wav"), 1);
    let per_ms = f64::from(rate) / 1000.0;
    let sample = |ms: f64| (ms * per_ms) as usize;
    let hello = through_phone("audio-fixtures/clips/warm/ravi_hello.wav", rate);
    // Three voiced 200 ms pieces of his line (400–540 ms of it is silence), each within 100 ms
    // of where the one before puts it.
    let at_ms = |found: &[(usize, f64)]| -> Vec<(f64, f64)> {
        found
            .iter()
            .map(|&(at, score)| (at as f64 / per_ms, score))
            .collect()
    };
    let ravi = support::pieces_heard(
        &heard,
        &hello,
        &[0, sample(200.0), sample(540.0)],
        sample(200.0),
        (sample(bridged), sample(bridged + 2_000.0)),
        sample(100.0),
    );
    // Each piece clearly there; one of them may match less (> 0.6): a jitter buffer that
    // grows or shrinks by a frame inside a 200 ms piece (the person's SIP leg, on a loaded
    // machine) splits it across two alignments; audio that is not it scores far lower (the
    // brief's pieces, which the caller never hears, score 0.14-0.30 in the caller's track).
    let clear = ravi.iter().filter(|&&(_, score)| score > 0.8).count();
    assert!(
        clear >= 2 && ravi.iter().all(|&(_, score)| score > 0.6),
        "the caller heard Ravi after the bridge: three pieces of his line, (ms, match) each: \
         {:.3?}",
        at_ms(&ravi)
    );

    // The brief played to Ravi only: it is in what Ravi heard, not in what the caller heard,
    // neither as one 600 ms stretch nor as pieces of it.
    let brief = through_phone("audio-fixtures/clips/warm/brief.wav", rate);
    let span = sample(bridged - briefing + 1_000.0);
    let in_call = support::best_match(
        &heard,
        &brief,
        sample(briefing) + span / 2,
        span / 2,
        sample(600.0),
        2,
    );
    assert!(
        in_call < 0.5,
        "the caller heard the brief (match {in_call:.3})"
    );
    let brief_pieces = [0, sample(200.0), sample(400.0)];
    let leaked = support::pieces_heard(
        &heard,
        &brief,
        &brief_pieces,
        sample(200.0),
        (sample(briefing), sample(briefing) + span),
        sample(100.0),
    );
    assert!(
        leaked.iter().filter(|&&(_, score)| score > 0.7).count() < 2,
        "the caller heard pieces of the brief, (ms, match) each: {:.3?}",
        at_ms(&leaked)
    );
    let person_wav = dir.path().join("person.wav");
    assert_eq!(
        s.person_recording.as_deref(),
        Some(person_wav.display().to_string().as_str())
    );
    let (prate, ravi_heard) = channel(&person_wav, 1);
    let brief_8k = through_phone("audio-fixtures/clips/warm/brief.wav", prate);
    // person.wav starts at the answer; the brief follows within the model's first-audio time.
    let p_ms = |ms: usize| ms * prate as usize / 1000;
    let in_person = support::pieces_heard(
        &ravi_heard,
        &brief_8k,
        &[0, p_ms(200), p_ms(400)],
        p_ms(200),
        (0, p_ms(3_000)),
        p_ms(100),
    );
    assert!(
        in_person.iter().all(|&(_, score)| score > 0.8),
        "Ravi heard the brief: three pieces of it, (start in samples at {prate} Hz, match) \
         each: {in_person:.3?}"
    );
    let (_, ravi_said) = channel(&person_wav, 0);
    assert!(
        baton::audio::vad::rms_dbfs(&ravi_said) > -40.0,
        "Ravi's words are in person.wav"
    );
    assert!(
        outcome.report.end_reason.contains("hung up"),
        "{}",
        outcome.report.end_reason
    );
}

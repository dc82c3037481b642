//! Seed 000's handoff over a SIP call: the caller's conversation streamed over RTP (PCMU) to
//! baton with the financial agent set, Asha hands the caller to Ravi, and the gap the caller
//! hears at the handoff, measured on the call's recording, is the same as on the fixture leg
//! (`baton demo`'s run of the same scenario), within one 20 ms frame either way.

use crate::sip_support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use sip_support::{MediaPeer, Scenario, daemon, in_dialog, invite, recv, scenario, scratch, sipp};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Where `clip` best matches `track` (both at `rate`), searching `from..to` seconds.
fn onset(track: &[i16], clip: &[i16], rate: u32, from: f64, to: f64) -> (usize, f64) {
    // A quarter second, at every sample: a talkspurt starts wherever its audio arrived, off
    // any grid, and speech decorrelates within a fraction of a millisecond.
    let clip = &clip[..clip.len().min(rate as usize / 4)];
    let (mut best, mut at) = (0.0f64, 0usize);
    let lo = (from * f64::from(rate)) as usize;
    let hi = ((to * f64::from(rate)) as usize).min(track.len().saturating_sub(clip.len()));
    for lag in lo..hi {
        let (mut xy, mut xx, mut yy) = (0.0f64, 0.0f64, 0.0f64);
        for (i, &c) in clip.iter().enumerate() {
            let (x, y) = (f64::from(track[lag + i]), f64::from(c));
            xy += x * y;
            xx += x * x;
            yy += y * y;
        }
        if xx > 0.0 && yy > 0.0 && xy / (xx * yy).sqrt() > best {
            best = xy / (xx * yy).sqrt();
            at = lag;
        }
    }
    (at, best)
}

/// The gap the caller hears before Ravi's first words: the silent stretch (20 ms blocks under
/// −45 dBFS) that ends where his handoff reply starts in the agent's channel, in ms.
fn gap_before_ravi(agent: &[i16], rate: u32, start_s: f64) -> (f64, f64) {
    let clip = baton::audio::wav::read(
        &Path::new(ROOT).join("audio-fixtures/clips/seed000/ravi_02_handoff.wav"),
    )
    .unwrap();
    let clip = baton::audio::resample::resample_all(&clip.samples, clip.rate, rate).unwrap();
    // The clip's own lead-in is part of what is heard; find its first voiced block.
    let block = (rate / 50) as usize;
    let lead = clip
        .chunks(block)
        .position(|b| baton::audio::vad::rms_dbfs(b) > -45.0)
        .unwrap_or(0)
        * block;
    let (at, score) = onset(agent, &clip[lead..], rate, start_s - 3.0, start_s + 4.0);
    assert!(
        score > 0.8,
        "Ravi's reply not found (best match {score:.2})"
    );
    let mut silent = 0;
    let mut i = at;
    while i >= block && baton::audio::vad::rms_dbfs(&agent[i - block..i]) <= -45.0 {
        silent += 1;
        i -= block;
    }
    (silent as f64 * 20.0, at as f64 / f64::from(rate))
}

/// One channel of a recording as a phone line carries it (8 kHz through μ-law), so both legs'
/// recordings are measured alike.
fn channel(path: &Path, which: usize) -> (Vec<i16>, u32) {
    let mut r = hound::WavReader::open(path).unwrap();
    let spec = r.spec();
    let s: Vec<i16> = r.samples::<i16>().map(Result::unwrap).collect();
    let ch = spec.channels as usize;
    let one: Vec<i16> = s.iter().skip(which).step_by(ch).copied().collect();
    let narrow = baton::audio::resample::resample_all(&one, spec.sample_rate, 8000).unwrap();
    let mut line = Vec::new();
    baton::audio::g711::encode_ulaw(&narrow, &mut line);
    let mut out = Vec::new();
    baton::audio::g711::decode_ulaw(&line, &mut out);
    (out, 8000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed000_hands_off_over_sip_with_the_fixture_legs_gap() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("handoff");
    // The fixture leg: `baton demo` on seed 000.
    let demo_out = dir.join("demo");
    let args = baton::demo::DemoArgs {
        scenario: Some("seed000".into()),
        out: demo_out.clone(),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        ..Default::default()
    };
    // (The demo runs its own runtime.)
    let fixture = tokio::task::spawn_blocking(move || baton::demo::run(&args))
        .await
        .unwrap()
        .unwrap();
    let h = &fixture.report.handoffs[0];
    let fixture_heard = h.heard_at_ms.unwrap() / 1000.0;
    let (agent, rate) = channel(&demo_out.join("call.wav"), 1);
    let (fixture_gap, _) = gap_before_ravi(&agent, rate, fixture_heard);

    // The SIP leg: the same conversation over RTP, to Ravi's handoff reply (it ends at 17.6 s).
    let store = format!(
        "[agents]\nset = \"agents/financial.toml\"\n[store]\nurl = \"sqlite://{}/baton.db\"\nrecordings = \"{}/rec\"\n",
        dir.display(),
        dir.display()
    );
    let (d, addr) = daemon("audio-fixtures/scenarios/seed000.toml", "", &store).await;
    let mut rx = d.app.sip.get().unwrap().subscribe_finished();
    let peer = MediaPeer::bind().await;
    let xml = scenario(
        "seed000 caller",
        &[
            invite(&peer.port().to_string(), "0", "a=rtpmap:0 PCMU/8000\n"),
            recv(100, true),
            recv(200, false),
            in_dialog("ACK", 1, None),
            "  <pause milliseconds=\"19000\"/>\n".into(),
            in_dialog("BYE", 2, None),
            recv(200, false),
        ],
    );
    let clip = baton::audio::wav::read(
        &Path::new(ROOT).join("audio-fixtures/clips/seed000/caller_conversation.wav"),
    )
    .unwrap();
    let first = &clip.samples[..clip.rate as usize * 18_600 / 1000];
    let pcm = baton::audio::resample::resample_all(first, clip.rate, 8000).unwrap();
    let events = async {
        let mut live = None;
        for _ in 0..500 {
            if let Some(c) = d.app.calls.list().first() {
                live = Some(c.clone());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (history, mut rx) = live.expect("the call is listed").subscribe();
        let mut out: Vec<Value> = history
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        while !out.iter().any(|e| e["type"] == "call_end") {
            match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
                Ok(Ok(l)) => out.extend(serde_json::from_str::<Value>(&l).ok()),
                _ => break,
            }
        }
        out
    };
    let (run, _, events) = tokio::join!(
        sipp(&dir, Scenario::Xml(xml), addr, &["-m", "1"]),
        peer.converse(&pcm, 0, Default::default(), Duration::from_millis(18800)),
        events,
    );
    run.assert_ok();
    let r = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .unwrap()
        .unwrap();
    let handoff = events
        .iter()
        .find(|e| e["type"] == "handoff_complete")
        .unwrap_or_else(|| panic!("no handoff over SIP: {events:#?}"));
    assert_eq!(
        (handoff["from"].as_str(), handoff["to"].as_str()),
        (Some("advisor"), Some("schemes")),
        "{handoff}"
    );
    let id = r.call_id.clone().unwrap();
    let path = dir.join("rec").join(format!("{id}.wav"));
    for _ in 0..100 {
        if hound::WavReader::open(&path).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (agent, rate) = channel(&path, 1);
    let sip_gap_by_frames = handoff["gap_ms"].as_f64().unwrap_or(f64::NAN);
    // Ravi is heard at about 14 s of the conversation on both legs.
    let (sip_gap, heard_s) = gap_before_ravi(&agent, rate, fixture_heard);
    eprintln!(
        "handoff gap by recording: SIP {sip_gap} ms (Ravi at {heard_s:.2} s; by frames {sip_gap_by_frames} ms), fixture leg {fixture_gap} ms"
    );
    assert!(
        (sip_gap - fixture_gap).abs() <= 20.0,
        "the handoff gap over SIP ({sip_gap} ms) is the fixture leg's ({fixture_gap} ms)"
    );
    assert!(
        sip_gap_by_frames <= 20.0,
        "gapless by the played frames too: {handoff}"
    );
    assert_eq!(r.underruns, 0, "{r:?}");
    d.stop().await;
}

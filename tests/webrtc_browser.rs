//! The call page in a real browser: headless Chromium (Debian's `chromium`, installed by
//! `scripts/browser-setup.sh` when missing) opens `GET /` of `baton serve` on loopback, with a
//! fixture conversation as its fake microphone, presses Call, and talks to seed 000's agents on
//! the embedded mock. The page must play the agents' audio (WebAudio level of the remote
//! track), show the transcript tagged by agent, a handoff marker with its gap and the active
//! agent; Hang up must end the call (`GET /calls` empty). A screenshot taken after the handoff
//! is kept at `target/test-artifacts/webrtc-call-page.png`.
//!
//! Skipped, with the reason, only when no Chromium can be found or installed.

mod support;
mod webrtc_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use baton::audio::resample::resample_all;
use baton::audio::wav;
use serde_json::Value;
use support::{Daemon, ROOT};
use webrtc_support::browser::{Browser, chromium_or_install};

fn artifacts() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).join("test-artifacts")
}

/// Seed 000's caller up to just after Ravi's answer, with 1.5 s of silence first (the page
/// connects after the microphone opens), as 48 kHz 16-bit mono: what Chromium reads as is.
fn microphone(dir: &Path) -> PathBuf {
    let pcm =
        wav::read(&Path::new(ROOT).join("audio-fixtures/clips/seed000/caller_conversation.wav"))
            .unwrap();
    let keep = (pcm.rate as f64 * 18.5) as usize;
    let mut samples = vec![0i16; (pcm.rate as f64 * 1.5) as usize];
    samples.extend_from_slice(&pcm.samples[..keep.min(pcm.samples.len())]);
    let path = dir.join("caller.wav");
    wav::write_mono(
        &path,
        48_000,
        &resample_all(&samples, pcm.rate, 48_000).unwrap(),
    )
    .unwrap();
    path
}

const STATE: &str = "JSON.stringify({
    meter: document.querySelector('#agentMeter > div').style.width,
    error: baton.error, callId: baton.callId, handoffs: baton.handoffs.length,
    transcript: baton.transcript.length, peak: baton.agentPeak, voicedMs: baton.agentVoicedMs,
    agent: document.getElementById('agent').textContent,
    status: document.getElementById('status').textContent,
    markers: [...document.querySelectorAll('li.handoff')].map(li => li.textContent),
    lines: [...document.querySelectorAll('#transcript li.agent, #transcript li.caller')]
        .map(li => li.textContent),
})";

async fn state(b: &mut Browser) -> Value {
    let s = b.eval(STATE).await.unwrap();
    serde_json::from_str(s.as_str().unwrap_or("{}")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_page_talks_to_the_agents_from_headless_chromium() {
    let chromium = match chromium_or_install(Path::new(ROOT)) {
        Ok(p) => p,
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "no Chromium for the browser test, and CI is set: {why}"
            );
            eprintln!("SKIPPED: no Chromium for the browser test: {why}");
            return;
        }
    };
    let mut config = support::mock_config("audio-fixtures/scenarios/seed000.toml", "");
    config.push_str("[agents]\nset = \"agents/financial.toml\"\n");
    // With API tokens, as a deployment runs: the page takes the token from its address's
    // fragment and sends it on /whip (a header) and on the events WebSocket (a subprotocol).
    const TOKEN: &str = "browser-api-token-0123456789abcdef";
    let d = Daemon::start_with(&config, |st| {
        st.api_tokens = Some(std::sync::Arc::new(
            baton::server::auth::ApiTokens::parse(TOKEN, "TEST_TOKENS").unwrap(),
        ))
    })
    .await;
    let listed = || {
        d.app
            .calls
            .list()
            .iter()
            .map(|c| (c.id.clone(), c.active_agent()))
            .collect::<Vec<_>>()
    };
    let dir = tempfile::tempdir().unwrap();
    let mic = microphone(dir.path());
    let mut b = Browser::launch(&chromium, &mic).await.unwrap();
    b.goto(&format!("http://{}/?raw=1#token={TOKEN}", d.addr))
        .await
        .unwrap();
    b.eval("document.getElementById('call').click()")
        .await
        .unwrap();

    // Until the handoff to Ravi has been heard (about 16 s into the call), at most 45 s.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(45);
    let mut s = state(&mut b).await;
    while s["handoffs"].as_u64() < Some(1) && tokio::time::Instant::now() < deadline {
        assert!(s["error"].is_null(), "the page could not call: {s}");
        tokio::time::sleep(Duration::from_millis(250)).await;
        s = state(&mut b).await;
    }
    eprintln!("page after the handoff: {s}");
    assert_eq!(s["handoffs"], 1, "no handoff marker on the page: {s}");
    let now = listed();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(s["callId"], now[0].0.as_str());
    assert_eq!(now[0].1, "Ravi");
    // Let Ravi speak for a moment, then keep what the page shows.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let shot = artifacts().join("webrtc-call-page.png");
    b.screenshot(&shot).await.unwrap();
    eprintln!("screenshot: {}", shot.display());
    s = state(&mut b).await;
    eprintln!("page at the screenshot: {s}");

    assert_eq!(s["agent"], "Ravi", "{s}");
    let marker = s["markers"][0].as_str().unwrap_or("");
    assert!(
        marker.contains("Asha → Ravi") && marker.contains("gap 0 ms"),
        "handoff marker: {marker:?}"
    );
    let lines: Vec<&str> = s["lines"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Asha") && l.contains("emergency fund")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.starts_with("you")), "{lines:?}");
    assert!(lines.iter().any(|l| l.starts_with("Ravi")), "{lines:?}");
    // The agents' audio reached the page: the remote track's level, over the speaking time.
    let peak = s["peak"].as_f64().unwrap_or(0.0);
    let voiced = s["voicedMs"].as_f64().unwrap_or(0.0);
    assert!(peak > 0.05, "agent audio peak {peak} (RMS, full scale 1)");
    assert!(voiced > 4000.0, "agent audio heard for only {voiced} ms");

    b.eval("document.getElementById('hangup').click()")
        .await
        .unwrap();
    let mut gone = false;
    for _ in 0..50 {
        if listed().is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the call is still listed after Hang up");
    let s = state(&mut b).await;
    eprintln!("page after hang-up: {}", s["status"]);
    b.close().await;
    d.stop().await;
}

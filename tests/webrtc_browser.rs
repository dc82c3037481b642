//! The call page in a real browser: headless Chromium (Debian's `chromium`, installed by
//! `scripts/browser-setup.sh` when missing) opens `GET /` of `baton serve` on loopback, with a
//! fixture conversation as its fake microphone, presses Call, and talks to seed 000's agents on
//! the embedded mock. The page must play the agents' audio (WebAudio level of the remote
//! track), show the transcript tagged by agent, a handoff marker with its gap and the agent
//! speaking with the caller by name at each step (Asha, Ravi after the handoff, Asha again after
//! the handback); Hang up must end the call (`GET /calls` empty), reset the meters and show the
//! figures as a table with the call's timeline. Screenshots taken after the handoff and at the
//! end are kept in `target/test-artifacts/`. A second test asks for the API token when the page
//! has none, and calls with the page's recorded caller instead of the microphone.
//!
//! Skipped, with the reason, only when no Chromium can be found or installed.

use crate::support;
use crate::webrtc_support;

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

/// Seed 000's caller through the handback to Asha (36 s), with 1.5 s of silence first (the page
/// connects after the microphone opens), as 48 kHz 16-bit mono: what Chromium reads as is.
fn microphone(dir: &Path) -> PathBuf {
    let pcm =
        wav::read(&Path::new(ROOT).join("audio-fixtures/clips/seed000/caller_conversation.wav"))
            .unwrap();
    let keep = (pcm.rate as f64 * 36.0) as usize;
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
    notes: [...document.querySelectorAll('li.note')].map(li => li.textContent),
    ended: baton.ended, notice: document.getElementById('notice').textContent,
    tokenShown: !document.getElementById('tokenBox').hidden,
    figureRows: [...document.querySelectorAll('#figures tbody tr')].map(tr => tr.textContent),
    timeline: [...document.querySelectorAll('#timeline svg text')].map(t => t.textContent),
    micMeter: document.querySelector('#micMeter > div').style.width,
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
    // Once Ravi's words are on the page (not after a guessed delay), keep what it shows.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !(s["lines"].to_string().contains("\"Ravi") && s["voicedMs"].as_f64() > Some(4000.0))
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
        s = state(&mut b).await;
    }
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
    // The handoff note names the agents, not their ids.
    let notes = s["notes"].to_string();
    assert!(notes.contains("handing over: Asha → Ravi"), "{notes}");

    // Ravi hands the caller back (about 34 s into the call): the page names Asha again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(45);
    while s["handoffs"].as_u64() < Some(2) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        s = state(&mut b).await;
    }
    assert_eq!(s["handoffs"], 2, "no handback on the page: {s}");
    assert_eq!(s["agent"], "Asha", "after the handback: {s}");
    let back = s["markers"][1].as_str().unwrap_or("");
    assert!(back.contains("Ravi → Asha"), "handback marker: {back:?}");
    assert!(
        s["notes"].to_string().contains("handing over: Ravi → Asha"),
        "{s}"
    );

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
    // The call's end brings its figures as a table and its timeline; the meters are at rest.
    let mut s = state(&mut b).await;
    for _ in 0..50 {
        if s["ended"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        s = state(&mut b).await;
    }
    eprintln!("page after hang-up: {s}");
    assert_eq!(s["ended"], true, "{s}");
    assert_eq!(s["meter"], "0px", "{s}");
    assert_eq!(s["micMeter"], "0px", "{s}");
    let rows = s["figureRows"].to_string();
    assert!(
        rows.contains("caller stops → agent heard") && rows.contains(" ms"),
        "{rows}"
    );
    assert!(rows.contains("handoff gaps"), "{rows}");
    let timeline = s["timeline"].to_string();
    assert!(
        timeline.contains("Asha") && timeline.contains("Ravi"),
        "{timeline}"
    );
    assert_eq!(timeline.matches("handoff · gap").count(), 2, "{timeline}");
    let shot = artifacts().join("webrtc-call-page-end.png");
    b.screenshot(&shot).await.unwrap();
    b.close().await;
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_asks_for_the_token_and_can_call_with_its_recorded_caller() {
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
    const TOKEN: &str = "browser-api-token-fedcba9876543210";
    let d = Daemon::start_with(&config, |st| {
        st.api_tokens = Some(std::sync::Arc::new(
            baton::server::auth::ApiTokens::parse(TOKEN, "TEST_TOKENS").unwrap(),
        ))
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    // The fake microphone is silent: whatever the model hears comes from the recorded caller.
    let silent = dir.path().join("silent.wav");
    wav::write_mono(&silent, 48_000, &vec![0i16; 48_000]).unwrap();
    let mut b = Browser::launch(&chromium, &silent).await.unwrap();
    b.goto(&format!("http://{}/", d.addr)).await.unwrap();
    let s = state(&mut b).await;
    assert_eq!(
        s["tokenShown"], false,
        "no token box before it is needed: {s}"
    );

    // Without a token: the page says what it needs and shows the box to type it in.
    b.eval("document.getElementById('call').click()")
        .await
        .unwrap();
    let mut s = state(&mut b).await;
    for _ in 0..100 {
        if s["tokenShown"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        s = state(&mut b).await;
    }
    assert_eq!(s["tokenShown"], true, "{s}");
    assert!(
        s["status"]
            .as_str()
            .unwrap_or("")
            .contains("needs an API token"),
        "{s}"
    );
    assert!(d.app.calls.list().is_empty());

    // With the token typed in and the recorded caller chosen, the agents hear the caller.
    b.eval(&format!(
        "document.getElementById('token').value = '{TOKEN}'; \
         document.getElementById('source').value = 'recording'; \
         document.getElementById('call').click()"
    ))
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut s = state(&mut b).await;
    while !s["lines"].to_string().contains("\"you") && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        s = state(&mut b).await;
    }
    eprintln!("page with the recorded caller: {s}");
    assert!(s["lines"].to_string().contains("\"you"), "{s}");
    assert_eq!(s["agent"], "Asha", "{s}");
    assert_eq!(d.app.calls.list().len(), 1);
    b.eval("document.getElementById('hangup').click()")
        .await
        .unwrap();
    b.close().await;
    d.stop().await;
}

//! `baton serve` with Twilio-protocol callers over loopback: the bundled call end to end in real
//! time, barge-in, signatures, capacity, isolation between concurrent calls, hostile input, TwiML
//! and drain.

use crate::support;

use std::path::Path;
use std::time::Duration;

use baton::leg::twilio::caller::{self, CallerEnd, CallerError, CallerOptions};
use baton::leg::twilio::signature::AuthToken;
use support::{Daemon, ROOT, voiced_segments};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barge_in_makes_baton_send_clear() {
    let d = Daemon::start(&support::mock_config(
        "audio-fixtures/scenarios/demo.toml",
        "",
    ))
    .await;
    // The caller says turn 1, then talks over the agent's reply 1.4 s after finishing.
    let c1 = baton::audio::wav::read(&Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav"))
        .unwrap();
    let c2 = baton::audio::wav::read(&Path::new(ROOT).join("audio-fixtures/clips/caller_02.wav"))
        .unwrap();
    let mut pcm = vec![0i16; 8000];
    pcm.extend_from_slice(&c1.samples);
    pcm.extend(std::iter::repeat_n(0, 16000 * 14 / 10));
    let barge_at = pcm.len() as f64 / 16000.0;
    pcm.extend_from_slice(&c2.samples);
    pcm.extend(std::iter::repeat_n(0, 16000));
    let opts = CallerOptions::from_pcm(&pcm, 16000, "barge-in").unwrap();
    let report = caller::dial(&d.twilio_url(), opts).await.unwrap();
    assert!(report.clears_received >= 1, "{report:?}");
    // The reply that was talked over stops soon after the caller starts talking (the mock's VAD
    // needs two frames; baton then flushes and clears).
    let segs = voiced_segments(&report.recording.agent, 8000);
    let cut = segs
        .iter()
        .find(|(s, e)| *s < barge_at && *e > barge_at - 1.0)
        .copied();
    let (_, end) =
        cut.unwrap_or_else(|| panic!("no reply around the barge-in at {barge_at}s: {segs:?}"));
    assert!(
        end < barge_at + 0.3,
        "the interrupted reply kept playing until {end}s (barge-in at {barge_at}s)"
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_are_checked_before_the_upgrade() {
    let token = AuthToken::new("12345678901234567890123456789012");
    let d = Daemon::start_with_token(&support::mock_config("", ""), Some(token.clone())).await;
    let short = || CallerOptions::from_pcm(&vec![0i16; 8000], 8000, "silence").unwrap();

    let unsigned = caller::dial(&d.twilio_url(), short())
        .await
        .expect_err("refused");
    assert!(
        matches!(unsigned, CallerError::Refused { status: 403, .. }),
        "{unsigned}"
    );

    let mut wrong_token = short();
    wrong_token.auth_token = Some(AuthToken::new("00000000000000000000000000000000"));
    wrong_token.signed_url = Some(d.public_stream_url());
    let e = caller::dial(&d.twilio_url(), wrong_token)
        .await
        .expect_err("refused");
    assert!(matches!(e, CallerError::Refused { status: 403, .. }), "{e}");

    let mut wrong_url = short();
    wrong_url.auth_token = Some(token.clone());
    wrong_url.signed_url = Some("wss://evil.example.com/twilio".into());
    let e = caller::dial(&d.twilio_url(), wrong_url)
        .await
        .expect_err("refused");
    assert!(matches!(e, CallerError::Refused { status: 403, .. }), "{e}");

    let mut good = short();
    good.auth_token = Some(token);
    good.signed_url = Some(d.public_stream_url());
    good.max_tail = Duration::from_secs(3);
    let report = caller::dial(&d.twilio_url(), good)
        .await
        .expect("a signed call is accepted");
    assert_eq!(report.end, CallerEnd::HungUp);
    d.stop().await;
}

/// Two seconds of a loud `hz` tone at 8 kHz: what a test caller says.
fn tone(hz: f64) -> Vec<i16> {
    (0..8000 * 2)
        .map(|n| (8000.0 * (2.0 * std::f64::consts::PI * hz * f64::from(n) / 8000.0).sin()) as i16)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_calls_each_hear_only_themselves() {
    let echo = support::EchoModel::start().await;
    let d = Daemon::start(&support::mock_config(
        "",
        &format!("url = \"{}\"", echo.url),
    ))
    .await;
    let mut calls = Vec::new();
    for i in 0..20u32 {
        let hz = 300.0 + 45.0 * f64::from(i);
        let mut opts = CallerOptions::from_pcm(&tone(hz), 8000, "tone").unwrap();
        opts.max_tail = Duration::from_secs(3);
        opts.call_sid = format!("CA{i:032}");
        let url = d.twilio_url();
        calls.push(tokio::spawn(
            async move { (hz, caller::dial(&url, opts).await) },
        ));
    }
    for c in calls {
        let (hz, report) = c.await.unwrap();
        let report = report.unwrap();
        assert_eq!(report.end, CallerEnd::HungUp);
        let heard = support::dominant_hz(&report.recording.agent, 8000, 250.0, 1250.0);
        assert!(
            (heard - hz).abs() < 10.0,
            "a caller at {hz} Hz heard {heard} Hz"
        );
    }
    assert_eq!(d.calls_ended().await, 0);
    d.stop().await;
}

/// A Twilio caller's 8 kHz audio reaches a Gemini model at 8 kHz, declared as such; with
/// `[model] resample_input = true` it is resampled to 16 kHz first. Both still hear themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phone_callers_audio_is_declared_at_the_rate_it_is_sent() {
    for (resample, want) in [
        (false, "audio/pcm;rate=8000"),
        (true, "audio/pcm;rate=16000"),
    ] {
        let echo = support::EchoModel::start().await;
        let d = Daemon::start(&support::mock_config(
            "",
            &format!("url = \"{}\"\nresample_input = {resample}", echo.url),
        ))
        .await;
        let mut opts = CallerOptions::from_pcm(&tone(440.0), 8000, "tone").unwrap();
        opts.max_tail = Duration::from_secs(3);
        let report = caller::dial(&d.twilio_url(), opts).await.unwrap();
        let mimes = echo.mimes.lock().unwrap().clone();
        assert!(mimes.len() >= 50, "{resample}: {} chunks", mimes.len());
        let wrong = mimes.iter().filter(|m| *m != want).count();
        assert_eq!(
            wrong,
            0,
            "{resample}: {wrong} of {} chunks not {want}: {:?}",
            mimes.len(),
            mimes.first()
        );
        let heard = support::dominant_hz(&report.recording.agent, 8000, 250.0, 1250.0);
        assert!((heard - 440.0).abs() < 10.0, "{resample}: heard {heard} Hz");
        d.stop().await;
    }
}

/// An OpenAI Realtime model hears a Twilio caller in μ-law and answers in it, so the call
/// resamples nothing either way: on the embedded mock and on a separate `baton mock-model
/// --profile openai` addressed as `gpt-realtime`. `[model] resample_input = true` brings back
/// 24 kHz PCM both ways. Every call is answered, and the caller hears the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_model_hears_and_answers_a_phone_caller_in_its_own_law() {
    let scenario = "audio-fixtures/scenarios/demo.toml";
    let (_remote, url) = support::start_mock_model("openai", &Path::new(ROOT).join(scenario));
    let url = &url;
    let runs = [false, true].into_iter().flat_map(|remote| {
        [false, true].map(move |resample| async move {
            let config = if remote {
                support::mock_config(
                    "",
                    &format!(
                        "profile = \"openai\"\nurl = \"{url}\"\nmodel = \"gpt-realtime\"\n\
                         resample_input = {resample}"
                    ),
                )
            } else {
                support::mock_config(
                    scenario,
                    &format!("profile = \"openai\"\nresample_input = {resample}"),
                )
            };
            let d = Daemon::start(&config).await;
            let mut finished = d.app.calls.subscribe_finished();
            let sid = format!("openai-{remote}-{resample}");
            let caller = support::speaking_caller(&sid, Duration::from_secs(3));
            let heard = caller::dial(&d.twilio_url(), caller).await.unwrap();
            let ended = support::finished_calls(&mut finished, 1, Duration::from_secs(10)).await;
            d.stop().await;
            (remote, resample, heard, ended.into_iter().next().unwrap())
        })
    });
    for (remote, resample, heard, call) in futures_util::future::join_all(runs).await {
        let what = format!("remote {remote}, resample_input {resample}");
        support::assert_normal(&call, 5);
        let r = call.outcome.as_ref().unwrap();
        let delays = (r.uplink_resampler_delay_ms, r.downlink_resampler_delay_ms);
        if resample {
            assert!(delays.0 > 0.0 && delays.1 > 0.0, "{what}: {delays:?}");
        } else {
            assert_eq!(delays, (0.0, 0.0), "{what}: resampled");
        }
        let answer = voiced_segments(&heard.recording.agent, 8000);
        assert!(!answer.is_empty(), "{what}: the caller heard nothing");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_ends_only_that_call() {
    let d = Daemon::start(&support::mock_config("", "")).await;
    // A well-behaved call runs throughout.
    let mut good = CallerOptions::from_pcm(&vec![0i16; 8000 * 3], 8000, "silence").unwrap();
    good.max_tail = Duration::from_secs(2);
    let url = d.twilio_url();
    let good = tokio::spawn(async move { caller::dial(&url, good).await });
    for script in support::hostile_scripts() {
        support::send_raw(&d.twilio_url(), &script).await;
    }
    let report = good.await.unwrap().unwrap();
    assert_eq!(report.end, CallerEnd::HungUp, "{report:?}");
    assert_eq!(report.bad_messages, 0);
    // Every hostile call was cleaned up.
    assert_eq!(d.calls_ended().await, 0);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twiml_points_twilio_at_the_stream() {
    let d = Daemon::start(&support::mock_config("", "")).await;
    let body = support::http(&d.addr, "POST /twiml HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 29\r\nConnection: close\r\n\r\nFrom=%2B15550100&CallSid=CA12").await;
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("text/xml"), "{body}");
    assert!(
        body.contains(&format!("<Stream url=\"ws://{}/twilio\">", d.addr)),
        "{body}"
    );
    assert!(
        body.contains("<Parameter name=\"From\" value=\"+15550100\"/>"),
        "{body}"
    );
    assert!(
        body.contains("<Parameter name=\"CallSid\" value=\"CA12\"/>"),
        "{body}"
    );
    let health = support::http(
        &d.addr,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(health.contains("\"status\":\"ok\""), "{health}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_hangs_up_calls_after_the_deadline() {
    let d = Daemon::start(&support::mock_config("", "")).await;
    let mut long = CallerOptions::from_pcm(&vec![0i16; 8000 * 30], 8000, "long silence").unwrap();
    long.max_tail = Duration::from_secs(1);
    let url = d.twilio_url();
    let call = tokio::spawn(async move { caller::dial(&url, long).await });
    // Ready when the daemon has the call (no fixed sleep: a slow machine just takes longer).
    while d.active_calls().await == 0 {
        assert!(!call.is_finished(), "the call ended before it was active");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(d.active_calls().await, 1);
    d.stop().await; // drain_timeout_s = 1 in the test config
    let report = call.await.unwrap().unwrap();
    assert!(
        matches!(report.end, CallerEnd::ServerClosed { .. }),
        "{:?}",
        report.end
    );
    // Cut by the deadline, not ended by the caller: its 30 s (1500 frames) were never all sent.
    assert!(report.frames_sent < 1500, "{report:?}");
}

//! Browser callers without a browser: a scripted WebRTC peer (webrtc-rs, Opus) calls
//! `baton serve` over WHIP-style signalling on loopback, plays a fixture conversation in real
//! time and records what it hears; the call is listed by `GET /calls` and followed on
//! `WS /calls/{id}/events`; bad offers get clear 4xx answers while another call carries on.

use crate::support;
use crate::webrtc_support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use baton::audio::resample::resample_all;
use baton::audio::wav;
use support::{Daemon, ROOT, best_match, voiced_segments};
use webrtc_support::{RATE, calls, follow_events, place_call, request};

fn config(scenario: &str, agents: bool) -> String {
    let mut c = support::mock_config(scenario, "");
    if agents {
        c.push_str("[agents]\nset = \"agents/financial.toml\"\n");
    }
    c
}

/// A fixture clip at the leg's 24 kHz.
fn clip(rel: &str) -> Vec<i16> {
    let pcm = wav::read(&Path::new(ROOT).join(rel)).unwrap();
    resample_all(&pcm.samples, pcm.rate, RATE).unwrap()
}

fn secs(s: f64) -> usize {
    (s * f64::from(RATE)) as usize
}

/// How well the first 1.5 s of `reply` matches `heard` within ±1 s of `at` seconds: every lag
/// at a quarter of the rate (each side averaged over 4 samples), then every sample around the
/// best of them (speech decorrelates within a fraction of a millisecond at 24 kHz).
fn heard_reply(heard: &[i16], reply: &[i16], at: f64) -> f64 {
    let quarter = |x: &[i16]| -> Vec<i16> {
        x.chunks(4)
            .map(|c| (c.iter().map(|&v| i32::from(v)).sum::<i32>() / c.len() as i32) as i16)
            .collect()
    };
    let (h4, r4) = (quarter(heard), quarter(reply));
    let at4 = secs(at) / 4;
    let mut best = (0.0, at4);
    for lag in at4.saturating_sub(secs(1.0) / 4)..=at4 + secs(1.0) / 4 {
        let s = best_match(&h4, &r4, lag, 0, secs(1.5) / 4, 1);
        if s > best.0 {
            best = (s, lag);
        }
    }
    best_match(heard, reply, best.1 * 4, 8, secs(1.5), 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_peer_hears_both_agents_and_the_events_follow_the_call() {
    let d = Daemon::start(&config("audio-fixtures/scenarios/seed000.toml", true)).await;
    let addr = d.addr;
    // Turns 1 and 2 of seed 000: Asha answers, then announces Ravi, who answers (to 17.6 s).
    let caller = clip("audio-fixtures/clips/seed000/caller_conversation.wav");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let result = place_call(
        addr,
        &caller[..secs(18.5)],
        Duration::ZERO,
        move |id| async move {
            let events = follow_events(addr, &id);
            // Once the call is listed with its first agent; then until the listing names the
            // agent after the handoff, while the call lasts.
            let listed = |v: &[serde_json::Value]| {
                v.first()
                    .is_some_and(|c| c["active_agent"].as_str().is_some_and(|a| !a.is_empty()))
            };
            let deadline = tokio::time::Instant::now() + Duration::from_secs(25);
            let mut early = calls(addr).await;
            while !listed(&early) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
                early = calls(addr).await;
            }
            let mut late = early.clone();
            let ravi =
                |v: &[serde_json::Value]| v.first().is_some_and(|c| c["active_agent"] == "Ravi");
            while !ravi(&late) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                match calls(addr).await {
                    now if now.is_empty() => break,
                    now => late = now,
                }
            }
            let _ = tx.send((early, late, events));
        },
    )
    .await;
    assert_eq!(result.delete_status, 200, "DELETE hangs up");
    assert!(
        calls(addr).await.is_empty(),
        "the call is gone after DELETE"
    );
    let (early, late, events) = rx.await.unwrap();
    assert_eq!(early.len(), 1, "{early:?}");
    assert_eq!(early[0]["id"], result.call_id.as_str());
    assert_eq!(early[0]["leg"], "webrtc");
    assert_eq!(early[0]["active_agent"], "Asha");
    assert_eq!(late[0]["active_agent"], "Ravi", "{late:?}");
    // The admin API's name for the same agent.
    assert_eq!(early[0]["active_agent_id"], "advisor");
    assert_eq!(late[0]["active_agent_id"], "schemes", "{late:?}");

    let events = tokio::time::timeout(Duration::from_secs(5), events)
        .await
        .expect("the event stream ends with the call")
        .unwrap();
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types.first(), Some(&"call_start"), "{types:?}");
    assert_eq!(types.last(), Some(&"call_end"), "{types:?}");
    for t in [
        "agent_start",
        "handoff_announcement",
        "handoff_complete",
        "transcript",
        "tool_called",
    ] {
        assert!(types.contains(&t), "no {t} in {types:?}");
    }
    let complete = events
        .iter()
        .find(|e| e["type"] == "handoff_complete")
        .unwrap();
    assert_eq!(
        (complete["from"].as_str(), complete["to"].as_str()),
        (Some("advisor"), Some("schemes"))
    );
    let gap = complete["gap_ms"]
        .as_u64()
        .expect("the gap is measured before it is sent");
    assert!(gap <= 40, "handoff gap {gap} ms");
    let said: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["type"] == "transcript" && e["role"] == "agent")
        .map(|e| {
            (
                e["agent_id"].as_str().unwrap_or(""),
                e["text"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(
        said.iter()
            .any(|(a, t)| *a == "advisor" && t.contains("Asha")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|(a, t)| *a == "schemes" && t.contains("Ravi")),
        "{said:?}"
    );

    // The recording holds Asha's two replies and Ravi's answer, where the scenario puts them
    // (the caller's timeline starts at its POST; replies land within a second of the script).
    let heard = &result.heard;
    let segs = voiced_segments(heard, RATE);
    eprintln!("heard {} packets; voiced {segs:?}", result.packets_in);
    for (file, at) in [
        ("asha_01.wav", 3.88),
        ("asha_02.wav", 11.10),
        ("ravi_02_handoff.wav", 14.06),
    ] {
        let reply = clip(&format!("audio-fixtures/clips/seed000/{file}"));
        let score = heard_reply(heard, &reply, at);
        eprintln!("{file}: correlation {score:.2}");
        assert!(
            score > 0.8,
            "{file} not heard near {at}s (best correlation {score:.2})"
        );
    }
    let end = events.last().unwrap();
    eprintln!("figures: {}", end["figures"]);
    let fig = &end["figures"];
    assert!(fig["uplink_added_ms"]["p50"].as_f64().is_some(), "{fig}");
    assert!(
        fig["leg"]["inbound"]["packets"].as_u64().unwrap_or(0) > 800,
        "{fig}"
    );
    assert_eq!(fig["leg"]["end"], "deleted");
    d.stop().await;
}

async fn post(addr: SocketAddr, ct: &str, body: &[u8]) -> webrtc_support::HttpResponse {
    request(addr, "POST", "/whip", &[("Content-Type", ct)], body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_offers_get_clear_4xx_and_the_call_in_progress_carries_on() {
    let d = Daemon::start(&config("audio-fixtures/scenarios/demo.toml", false)).await;
    let addr = d.addr;
    let caller = clip("audio-fixtures/clips/caller_01.wav");
    let mut pcm = vec![0i16; secs(0.5)];
    pcm.extend_from_slice(&caller);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let good = place_call(addr, &pcm, Duration::from_secs(4), move |_id| async move {
        // While the call is in progress: once `GET /calls` lists it.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while calls(addr).await.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut answers = Vec::new();
        let r = post(addr, "text/plain", b"v=0\r\n").await;
        answers.push(("wrong content type", r.status, r.body));
        let big = vec![b'a'; 40 * 1024];
        let r = post(addr, "application/sdp", &big).await;
        answers.push(("oversized", r.status, r.body));
        let r = post(addr, "application/sdp", b"v=0\r\nthis is not SDP\r\n").await;
        answers.push(("malformed", r.status, r.body));
        let r = post(addr, "application/sdp", b"hello").await;
        answers.push(("not SDP", r.status, r.body));
        let r = post(addr, "application/sdp", &[0xff, 0xfe, 0x00]).await;
        answers.push(("not UTF-8", r.status, r.body));
        let no_opus = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=sendrecv\r\na=rtpmap:0 PCMU/8000\r\n";
        let r = post(addr, "application/sdp", no_opus.as_bytes()).await;
        answers.push(("no Opus", r.status, r.body));
        let r = request(addr, "DELETE", "/whip/00000000000000000000000000000000", &[], b"").await;
        answers.push(("unknown session", r.status, r.body));
        let r = request(addr, "GET", "/calls/nope/events", &[], b"").await;
        answers.push(("unknown call events", r.status, r.body));
        let r = request(addr, "OPTIONS", "/whip", &[], b"").await;
        let accept = r.header("accept-post").map(str::to_owned);
        answers.push(("options", r.status, accept.unwrap_or_default()));
        let r = request(addr, "PATCH", "/whip/x", &[("Content-Type", "application/trickle-ice-sdpfrag")], b"").await;
        answers.push(("patch", r.status, r.body));
        let _ = tx.send(answers);
    })
    .await;
    let answers = rx.await.unwrap();
    for a in &answers {
        eprintln!("{a:?}");
    }
    let expect = [
        ("wrong content type", 415, "application/sdp"),
        ("oversized", 413, "webrtc.max_offer_bytes"),
        ("malformed", 400, "does not parse"),
        ("not SDP", 400, "not an SDP offer"),
        ("not UTF-8", 400, "UTF-8"),
        ("no Opus", 400, "no Opus"),
        ("unknown session", 404, "no such WHIP session"),
        ("unknown call events", 404, "{\"error\":\"no live call"),
        ("options", 204, "application/sdp"),
        ("patch", 405, ""),
    ];
    for ((name, status, body), (ename, estatus, etext)) in answers.iter().zip(expect) {
        assert_eq!(*name, ename);
        assert_eq!(*status, estatus, "{name}: {body}");
        assert!(body.contains(etext), "{name}: {body:?} lacks {etext:?}");
    }
    // The good call was not disturbed: it heard the advisor's first reply.
    assert_eq!(good.delete_status, 200);
    let reply = clip("audio-fixtures/clips/advisor_01.wav");
    let segs = voiced_segments(&good.heard, RATE);
    let score = heard_reply(
        &good.heard,
        &reply,
        pcm.len() as f64 / f64::from(RATE) + 0.8,
    );
    eprintln!("voiced {segs:?}; advisor_01 correlation {score:.2}");
    assert!(
        score > 0.8,
        "the call in progress did not hear its reply ({score:.2})"
    );
    assert!(calls(addr).await.is_empty());
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilio_calls_are_listed_and_streamed_too() {
    use baton::leg::twilio::caller::{self, CallerOptions};
    let d = Daemon::start(&config("", false)).await;
    let addr = d.addr;
    let mut opts = CallerOptions::from_pcm(&vec![0i16; 8000 * 2], 8000, "silence").unwrap();
    opts.max_tail = Duration::from_secs(1);
    let url = d.twilio_url();
    let call = tokio::spawn(async move { caller::dial(&url, opts).await });
    let mut listed = Vec::new();
    for _ in 0..40 {
        listed = calls(addr).await;
        if !listed.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["leg"], "twilio");
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    let events = follow_events(addr, &id).await.unwrap();
    call.await.unwrap().unwrap();
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types, ["call_start", "call_end"], "{events:?}");
    assert!(calls(addr).await.is_empty());
    d.stop().await;
}

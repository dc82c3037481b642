//! The other ways a session ends, on the accelerated clock: a refused resume falls back to a
//! fresh session seeded with the transcript, which continues the conversation without greeting
//! again; pongs 30 s late do not end a healthy session; a socket that goes silent is declared
//! dead within the configured time and the call resumes.

use crate::resume_support;

use std::time::Duration;

use baton::mock::Faults;
use baton::mock::faults::{DropRule, Ending, When};
use baton::mock::scenario::Reply;
use baton::model::gemini::keepalive::KeepaliveConfig;
use resume_support::*;

fn once(when: When, at_s: f64, ending: Ending) -> DropRule {
    DropRule {
        when,
        after: (Duration::from_secs_f64(at_s), Duration::from_secs_f64(at_s)),
        ending,
        every_connection: false,
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_resume_is_reseeded_from_the_transcript_without_a_second_greeting() {
    let mut sc = scenario("demo");
    // This model greets a fresh conversation on its own.
    let greeting = sc.default_reply.audio.clone();
    sc.greeting = Some(Reply {
        audio: greeting,
        text: "Hello, you're through to the helpline.".into(),
    });
    // The caller waits for the greeting: 3 s of silence before the conversation.
    let mut samples = vec![0i16; 3 * 16_000];
    samples.extend(conversation());
    let samples = dither(samples);
    let faults = Faults {
        // Mid-way through the caller's second turn (8.0–10.9 s, +3 s).
        drops: vec![once(When::MidCallerUtterance, 12.0, Ending::Close(1011))],
        refuse_resume: true,
        ..Faults::default()
    };
    let o = run_call(
        &sc,
        faults,
        &samples,
        in_process(),
        KeepaliveConfig::default(),
    )
    .await;
    let r = &o.report;
    assert_eq!(r.end_reason, "caller hung up");
    let conns = o.store.connections();
    assert_eq!(conns.len(), 3, "{conns:#?}");
    assert!(conns[0].greeted, "the first session greets");
    assert_eq!(conns[0].fault.as_deref(), Some("drop:1011"));
    assert_eq!(conns[1].refused, Some(1007), "the resume is refused");
    let fresh = &conns[2];
    assert!(fresh.resumed.is_none());
    assert!(
        fresh.history_turns >= 2,
        "the transcript so far: {}",
        fresh.history_turns
    );
    assert!(!fresh.greeted, "no second greeting");
    assert_eq!(
        fresh.said.first(),
        Some(&sc.turns[1].reply.text),
        "it answers the caller's interrupted turn: {fresh:#?}"
    );
    assert!(!fresh.said.iter().any(|s| s.contains("helpline")));
    assert_eq!(r.reconnects.len(), 1);
    let rec = &r.reconnects[0];
    assert_eq!(
        (rec.cause.as_str(), rec.outcome.as_str(), rec.attempts),
        ("closed:1011", "reseeded", 2)
    );
    assert_eq!(rec.audio_lost_ms, 0.0);
    // Every caller turn answered, and no caller audio missing from what the conversation is
    // built on (the first session up to its last handle, then the fresh one).
    for t in &r.turns {
        assert!(t.agent_start_ms.is_some(), "{t:#?}");
    }
    let (got, cuts) = received(&o.store);
    let check = check_audio(&got, &cuts, &samples);
    assert_eq!((check.lost_frames, check.misordered), (0, 0), "{check:?}");
}

#[tokio::test(start_paused = true)]
async fn pongs_thirty_seconds_late_do_not_end_a_session() {
    let sc = scenario("demo");
    // 70 s of a caller saying nothing: the model sends nothing either, only pongs arrive.
    let samples = dither(vec![0; 70 * 16_000]);
    let late = |late_pong_ms: u64| Faults {
        late_pong: (late_pong_ms > 0).then(|| Duration::from_millis(late_pong_ms)),
        ..Faults::default()
    };
    let strict = KeepaliveConfig {
        dead_after: Duration::from_secs(25),
        ..KeepaliveConfig::default()
    };
    // Default keepalive (ping every 10 s, dead after 45 s of nothing): survives 30 s pongs.
    let o = run_call(
        &sc,
        late(30_000),
        &samples,
        in_process(),
        KeepaliveConfig::default(),
    )
    .await;
    assert_eq!(o.report.end_reason, "caller hung up");
    assert!(o.report.reconnects.is_empty(), "{:?}", o.report.reconnects);
    // The controls: a 25 s dead time survives prompt pongs, and calls 30 s-late pongs dead.
    let o = run_call(&sc, late(0), &samples, in_process(), strict).await;
    assert!(o.report.reconnects.is_empty(), "{:?}", o.report.reconnects);
    let o = run_call(&sc, late(30_000), &samples, in_process(), strict).await;
    assert_eq!(o.report.end_reason, "caller hung up");
    let first = o.report.reconnects.first().expect("declared dead");
    assert_eq!(first.cause, "dead_socket");
    assert_eq!(first.outcome, "resumed");
    assert!(
        (25_000.0..25_100.0).contains(&first.at_ms),
        "dead 25 s after the last frame: {first:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_socket_is_declared_dead_within_the_configured_time() {
    let sc = scenario("demo");
    // The conversation, then a minute of silence; the socket goes quiet after the last reply.
    let samples = caller(60);
    let fault_s = 31.0;
    let faults = Faults {
        drops: vec![once(When::After, fault_s, Ending::Silent)],
        ..Faults::default()
    };
    let o = run_call(
        &sc,
        faults,
        &samples,
        in_process(),
        KeepaliveConfig::default(),
    )
    .await;
    let r = &o.report;
    assert_eq!(r.end_reason, "caller hung up");
    assert_eq!(r.reconnects.len(), 1, "{:?}", r.reconnects);
    let rec = &r.reconnects[0];
    assert_eq!(
        (rec.cause.as_str(), rec.outcome.as_str()),
        ("dead_socket", "resumed")
    );
    // Nothing arrived after the fault (and the last frame came shortly before it): dead at most
    // 45 s after the fault, and not much earlier.
    let after = rec.at_ms - fault_s * 1000.0;
    assert!(
        (43_000.0..=45_020.0).contains(&after),
        "declared dead {after} ms after the fault"
    );
    assert_eq!(rec.audio_lost_ms, 0.0);
    let (got, cuts) = received(&o.store);
    let check = check_audio(&got, &cuts, &samples);
    assert_eq!((check.lost_frames, check.misordered), (0, 0), "{check:?}");
}

//! The Gemini Live core on a virtual clock: setup order, its deadline and refusal, keepalive
//! pings and a dead socket, resumption handles and `goAway`, the close.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::model::protocol::{CLOSE_WAIT, Reason, SetupFailure, SocketEnd};
use crate::model::session::SessionEvent;

fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The frames the core wants written, as text (`<ping>`, `<close>` for the others).
fn written(core: &mut GeminiCore) -> Vec<String> {
    std::iter::from_fn(|| core.poll_transmit())
        .map(|o| match o {
            Outbound::Text { json, .. } => json,
            Outbound::Ping => "<ping>".into(),
            Outbound::Close => "<close>".into(),
        })
        .collect()
}

fn events(core: &mut GeminiCore) -> Vec<SessionEvent> {
    std::iter::from_fn(|| core.poll_event()).collect()
}

fn model_events(core: &mut GeminiCore) -> Vec<ModelEvent> {
    events(core)
        .into_iter()
        .filter_map(|e| match e {
            SessionEvent::Model(m, _) => Some(m),
            _ => None,
        })
        .collect()
}

fn text(json: &str) -> Outbound {
    Outbound::Text {
        json: json.into(),
        received_at: None,
    }
}

/// A core whose setup was accepted at `t0`.
fn live(t0: Instant) -> GeminiCore {
    let mut core = GeminiCore::new(&SessionConfig::default(), t0);
    written(&mut core);
    core.handle_frame(Frame::Text(r#"{"setupComplete":{}}"#), t0);
    assert_eq!(core.poll_setup(), Some(Ok(())));
    events(&mut core);
    core
}

#[test]
fn setup_goes_first_and_everything_else_waits_for_setup_complete() {
    let t0 = Instant::now();
    let mut core = GeminiCore::new(&SessionConfig::default(), t0);
    core.handle_outbound(text(r#"{"clientContent":{}}"#), t0);
    let first = written(&mut core);
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(first[0].starts_with(r#"{"setup":"#), "{first:?}");
    assert_eq!(core.poll_setup(), None);
    // What arrives before setupComplete is reported; the held message waits.
    core.handle_frame(
        Frame::Text(r#"{"usageMetadata":{"totalTokenCount":3}}"#),
        t0,
    );
    assert!(written(&mut core).is_empty());
    core.handle_frame(Frame::Text(r#"{"setupComplete":{}}"#), t0 + s(1));
    assert_eq!(core.poll_setup(), Some(Ok(())));
    assert_eq!(written(&mut core), [r#"{"clientContent":{}}"#]);
    assert_eq!(
        model_events(&mut core),
        [
            ModelEvent::Usage {
                total_tokens: Some(3)
            },
            ModelEvent::SetupComplete
        ]
    );
}

#[test]
fn an_unanswered_setup_times_out_and_a_refused_one_says_why() {
    let t0 = Instant::now();
    let cfg = SessionConfig::default();
    let mut core = GeminiCore::new(&cfg, t0);
    assert_eq!(
        core.poll_timeout(),
        Some((t0 + cfg.setup_timeout, Reason::Setup))
    );
    core.handle_timeout(t0 + cfg.setup_timeout - Duration::from_millis(1));
    assert_eq!(core.poll_setup(), None);
    core.handle_timeout(t0 + cfg.setup_timeout);
    assert_eq!(
        core.poll_setup(),
        Some(Err(SetupFailure::Timeout(cfg.setup_timeout)))
    );
    assert!(core.is_over() && core.poll_timeout().is_none());

    let mut core = GeminiCore::new(&cfg, t0);
    core.handle_end(
        SocketEnd::Closed {
            code: Some(1008),
            reason: "invalid handle".into(),
        },
        t0,
    );
    assert_eq!(
        core.poll_setup(),
        Some(Err(SetupFailure::Refused {
            code: 1008,
            reason: "invalid handle".into()
        }))
    );
    let mut core = GeminiCore::new(&cfg, t0);
    core.handle_end(SocketEnd::Ended, t0);
    assert!(matches!(
        core.poll_setup(),
        Some(Err(SetupFailure::Refused { code: 1006, .. }))
    ));
    // A handle dropped during the setup ends it.
    let mut core = GeminiCore::new(&cfg, t0);
    core.handle_abandoned(t0);
    assert!(matches!(core.poll_setup(), Some(Err(SetupFailure::Io(_)))));
    assert!(core.is_over());
}

#[test]
fn keepalive_pings_a_quiet_socket_and_calls_a_silent_one_dead() {
    let t0 = Instant::now();
    let mut core = live(t0);
    // Ping every 10 s while nothing arrives; a pong (any frame) postpones death.
    assert_eq!(core.poll_timeout(), Some((t0 + s(10), Reason::Keepalive)));
    core.handle_timeout(t0 + s(10));
    assert_eq!(written(&mut core), ["<ping>"]);
    core.handle_frame(Frame::Control, t0 + s(30));
    // From the pong at 30 s: pings at 40, 50, 60, 70; dead at 75.
    let mut pings = vec![];
    while let Some((at, reason)) = core.poll_timeout() {
        assert_eq!(reason, Reason::Keepalive);
        core.handle_timeout(at);
        if !written(&mut core).is_empty() {
            pings.push((at - t0).as_secs());
        }
    }
    assert_eq!(pings, [40, 50, 60, 70]);
    match &events(&mut core)[..] {
        [SessionEvent::Dead { silent_for }] => assert_eq!(*silent_for, s(45)),
        other => panic!("{other:?}"),
    }
    assert!(core.is_over());
    // Nothing is written or reported after that.
    core.handle_outbound(text("{}"), t0 + s(80));
    core.handle_frame(Frame::Text(r#"{"setupComplete":{}}"#), t0 + s(80));
    assert!(written(&mut core).is_empty() && events(&mut core).is_empty());
}

#[test]
fn the_resumable_handle_and_go_away_are_tracked() {
    let t0 = Instant::now();
    let cfg = SessionConfig {
        resume_handle: Some("h-0".into()),
        ..Default::default()
    };
    let mut core = GeminiCore::new(&cfg, t0);
    assert_eq!(core.resumption().handle.as_deref(), Some("h-0"));
    core.handle_frame(Frame::Text(r#"{"setupComplete":{}}"#), t0);
    core.handle_frame(
        Frame::Text(r#"{"sessionResumptionUpdate":{"newHandle":"h-1","resumable":true}}"#),
        t0 + s(1),
    );
    assert_eq!(core.resumption().handle.as_deref(), Some("h-1"));
    assert!(core.resumption().fresh);
    // A point that cannot be resumed keeps the last resumable handle, no longer fresh.
    core.handle_frame(
        Frame::Text(r#"{"sessionResumptionUpdate":{"resumable":false}}"#),
        t0 + s(2),
    );
    assert_eq!(core.resumption().handle.as_deref(), Some("h-1"));
    assert!(!core.resumption().fresh);
    core.handle_frame(
        Frame::Text(r#"{"sessionResumptionUpdate":{"newHandle":"h-2","resumable":true}}"#),
        t0 + s(3),
    );
    core.handle_frame(
        Frame::Text(r#"{"toolCall":{"functionCalls":[{"id":"c1","name":"f","args":{}}]}}"#),
        t0 + s(4),
    );
    assert_eq!(core.resumption().handle.as_deref(), Some("h-2"));
    assert!(!core.resumption().fresh, "a call is executing");
    assert_eq!(core.resumption().go_away_at, None);
    core.handle_frame(Frame::Text(r#"{"goAway":{"timeLeft":"10s"}}"#), t0 + s(5));
    assert_eq!(core.resumption().go_away_at, Some(t0 + s(15)));
    // The call gets every event, in order.
    let got = model_events(&mut core);
    assert!(matches!(got[0], ModelEvent::SetupComplete), "{got:?}");
    assert!(matches!(
        got.last(),
        Some(ModelEvent::GoAway { time_left: Some(t) }) if *t == s(10)
    ));
}

#[test]
fn a_close_goes_out_last_and_the_answer_ends_the_session() {
    let t0 = Instant::now();
    let mut core = live(t0);
    core.handle_outbound(text("{\"a\":1}"), t0);
    core.handle_outbound(Outbound::Close, t0);
    core.handle_outbound(text("{\"b\":2}"), t0);
    assert_eq!(written(&mut core), ["{\"a\":1}", "<close>"]);
    assert_eq!(
        core.poll_timeout(),
        Some((t0 + CLOSE_WAIT, Reason::Closing))
    );
    core.handle_end(
        SocketEnd::Closed {
            code: Some(1000),
            reason: "bye".into(),
        },
        t0 + s(1),
    );
    assert!(matches!(
        &events(&mut core)[..],
        [SessionEvent::Closed {
            code: Some(1000),
            ..
        }]
    ));
    assert!(core.is_over());
    // A service that never answers the close is let go after the wait.
    let mut core = live(t0);
    core.handle_abandoned(t0);
    assert_eq!(written(&mut core), ["<close>"]);
    core.handle_timeout(t0 + CLOSE_WAIT);
    assert!(core.is_over());
}

#[test]
fn a_bad_frame_is_reported_and_the_session_carries_on() {
    let t0 = Instant::now();
    let mut core = live(t0);
    core.handle_frame(Frame::Binary(b"{not json"), t0);
    core.handle_frame(
        Frame::Text(r#"{"serverContent":{"turnComplete":true}}"#),
        t0,
    );
    let got = model_events(&mut core);
    assert!(matches!(got[0], ModelEvent::ProtocolError(_)), "{got:?}");
    assert_eq!(got[1..], [ModelEvent::TurnComplete]);
    assert!(!core.is_over());
}

//! Fault modes: goAway and the close when its time is up, silence after it, drops at a kind of
//! moment, garbage frames, the fault budget.

use super::*;
use crate::mock::Resumption;
use crate::mock::faults::{DropRule, Ending, Faults, When};

fn rule(when: When, at_ms: u64, ending: Ending) -> DropRule {
    DropRule {
        when,
        after: (Duration::from_millis(at_ms), Duration::from_millis(at_ms)),
        ending,
        every_connection: false,
    }
}

fn session(turns: Vec<Turn>, faults: Faults) -> Harness {
    let store = Arc::new(Resumption::default());
    let mut h = Harness::on_server(scenario(turns), &store, faults);
    h.send(json!({"setup": {"model": "models/gemini-3.8-live", "outputAudioTranscription": {}}}));
    h
}

fn go_aways(log: &[Outgoing]) -> Vec<String> {
    log.iter()
        .filter_map(|o| match o {
            Outgoing::Message(m) => m.go_away.as_ref()?.time_left.clone(),
            _ => None,
        })
        .collect()
}

#[test]
fn go_away_then_the_close_when_time_is_up() {
    let faults = Faults {
        go_away_after: Some((Duration::from_secs(5), Duration::from_secs(5))),
        go_away_time_left: Duration::from_secs(10),
        ..Faults::default()
    };
    let mut h = session(vec![], faults);
    h.take();
    h.advance(4999 * MS);
    assert!(go_aways(&h.take()).is_empty());
    h.advance(MS);
    assert_eq!(go_aways(&h.take()), ["10s"]);
    h.advance(9999 * MS);
    assert!(h.take().is_empty());
    h.advance(MS);
    match h.take().as_slice() {
        [Outgoing::Close { code: 1011, reason }] => assert!(reason.contains("Deadline")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn silent_after_go_away_sends_nothing_more() {
    let faults = Faults {
        go_away_after: Some((Duration::from_secs(1), Duration::from_secs(1))),
        go_away_time_left: Duration::from_secs(20),
        silent_after_go_away: true,
        ..Faults::default()
    };
    let mut h = session(vec![], faults);
    h.advance(Duration::from_secs(1));
    assert_eq!(go_aways(&h.take()), ["20s"]);
    h.speak(&tone(600));
    h.speak(&silence(700));
    h.advance(Duration::from_secs(5));
    assert!(h.take().is_empty(), "no reply after goAway");
}

#[test]
fn drops_fire_at_their_kind_of_moment() {
    // Mid tool call: right after the call goes out.
    let faults = Faults {
        drops: vec![rule(When::MidToolCall, 0, Ending::Abrupt)],
        ..Faults::default()
    };
    let mut h = session(vec![tool_turn("get_balance")], faults);
    h.speak(&tone(600));
    h.speak(&silence(700));
    h.settle();
    let log = h.take();
    let n = log.len();
    assert!(matches!(&log[n - 2], Outgoing::Message(m) if m.tool_call.is_some()));
    assert_eq!(log[n - 1], Outgoing::Drop);
    assert!(h.s.is_closed());

    // Mid caller utterance, not before the earliest moment.
    let faults = Faults {
        drops: vec![rule(When::MidCallerUtterance, 300, Ending::Silent)],
        ..Faults::default()
    };
    let mut h = session(vec![], faults);
    h.take();
    h.speak(&silence(400));
    assert!(h.take().is_empty());
    h.speak(&tone(200));
    assert_eq!(h.take().last(), Some(&Outgoing::Hang));

    // Mid model turn: after a burst that is not the reply's last.
    let faults = Faults {
        drops: vec![rule(When::MidModelTurn, 0, Ending::Close(1008))],
        ..Faults::default()
    };
    let mut h = session(vec![], faults);
    h.speak(&tone(600));
    h.speak(&silence(700));
    h.settle();
    let log = h.take();
    assert!(
        log.iter().any(|o| audio_samples(o) > 0),
        "some audio went out"
    );
    assert!(matches!(
        log.last(),
        Some(Outgoing::Close { code: 1008, .. })
    ));
    assert!(
        !log.iter()
            .any(|o| sc(o).is_some_and(|c| c.generation_complete == Some(true)))
    );
}

#[test]
fn garbage_frames_and_the_fault_budget() {
    let faults = Faults {
        garbage_every: Some(Duration::from_secs(1)),
        drops: vec![rule(When::After, 2500, Ending::Close(1011))],
        ..Faults::default()
    };
    let mut h = session(vec![], faults);
    h.take();
    h.advance(Duration::from_secs(3));
    let log = h.take();
    let garbage = log.iter().filter(|o| matches!(o, Outgoing::Raw(_))).count();
    assert_eq!(garbage, 2);
    assert!(matches!(
        log.last(),
        Some(Outgoing::Close { code: 1011, .. })
    ));

    // A spent budget: the same drop does not fire.
    let store = Arc::new(Resumption::default());
    assert!(store.take_fault(Some(1)));
    let faults = Faults {
        drops: vec![rule(When::After, 100, Ending::Close(1011))],
        max_faults: Some(1),
        ..Faults::default()
    };
    let mut h = Harness::on_server(scenario(vec![]), &store, faults);
    h.send(json!({"setup": {"model": "models/gemini-3.8-live"}}));
    h.advance(Duration::from_secs(1));
    assert!(!h.s.is_closed());
}

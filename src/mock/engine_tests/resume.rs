//! Resumption handles: issued when idle, `resumable: false` while a reply is generated, a resume
//! restoring the conversation, and the refusals.

use super::*;
use crate::mock::{Faults, Resumption};
use crate::model::gemini::wire::SessionResumptionUpdate;

fn two_turns() -> Arc<Scenario> {
    let mut first = reply_clip();
    first.text = "first".into();
    let mut second = reply_clip();
    second.text = "second".into();
    scenario(vec![
        Turn::new(Some("one".into()), first),
        Turn::new(Some("two".into()), second),
    ])
}

fn updates(log: &[Outgoing]) -> Vec<SessionResumptionUpdate> {
    log.iter()
        .filter_map(|o| match o {
            Outgoing::Message(m) => m.session_resumption_update.clone(),
            _ => None,
        })
        .collect()
}

fn said(log: &[Outgoing]) -> String {
    log.iter()
        .filter_map(|o| sc(o)?.output_transcription.as_ref()?.text.clone())
        .collect::<Vec<_>>()
        .join("")
}

fn setup(handle: Option<&str>) -> Value {
    let sr = match handle {
        Some(h) => json!({ "handle": h }),
        None => json!({}),
    };
    json!({"setup": {"model": "models/gemini-3.8-live", "outputAudioTranscription": {},
                     "sessionResumption": sr}})
}

/// Setup, one caller turn answered to the end; returns the handle issued after it.
fn one_turn(h: &mut Harness) -> String {
    h.send(setup(None));
    let first = updates(&h.take());
    assert_eq!(first.len(), 1, "a handle right after setupComplete");
    assert_eq!(first[0].resumable, Some(true));
    h.speak(&tone(600));
    h.speak(&silence(700));
    let during = updates(&h.take());
    assert!(
        during.iter().all(|u| u.resumable == Some(false)),
        "{during:?}"
    );
    h.settle();
    let log = h.take();
    let after = updates(&log);
    let last = after.last().expect("a handle after turnComplete");
    assert_eq!(last.resumable, Some(true));
    last.new_handle.clone().unwrap_or_default()
}

#[test]
fn handles_come_when_idle_and_a_resume_continues_the_script() {
    let store = Arc::new(Resumption::default());
    let sc = two_turns();
    let mut a = Harness::on_server(sc.clone(), &store, Faults::default());
    let handle = one_turn(&mut a);
    store.closed(a.s.connection(), a.now);

    let mut b = Harness::on_server(sc, &store, Faults::default());
    b.now = a.now;
    b.send(setup(Some(&handle)));
    let log = b.take();
    assert!(matches!(&log[0], Outgoing::Message(m) if m.setup_complete.is_some()));
    b.speak(&tone(600));
    b.speak(&silence(700));
    b.settle();
    assert_eq!(
        said(&b.take()),
        "second",
        "the script goes on where the handle left it"
    );
    assert_eq!(
        store.connections()[1].resumed.as_deref(),
        Some(handle.as_str())
    );
}

#[test]
fn no_handles_without_session_resumption_in_setup() {
    let mut h = Harness::ready(two_turns(), json!({}));
    h.speak(&tone(600));
    h.speak(&silence(700));
    h.settle();
    assert!(updates(&h.take()).is_empty());
}

fn refused(h: &mut Harness, v: Value) -> (u16, String) {
    h.send(v);
    match h.take().last() {
        Some(Outgoing::Close { code, reason }) => (*code, reason.clone()),
        other => panic!("expected a close, got {other:?}"),
    }
}

#[test]
fn resumes_are_refused_while_open_unknown_expired_or_for_another_model() {
    let store = Arc::new(Resumption::default());
    let sc = two_turns();
    let mut a = Harness::on_server(sc.clone(), &store, Faults::default());
    let handle = one_turn(&mut a);

    // The issuing socket is still open.
    let mut b = Harness::on_server(sc.clone(), &store, Faults::default());
    assert_eq!(refused(&mut b, setup(Some(&handle))).0, 1011);

    let mut c = Harness::on_server(sc.clone(), &store, Faults::default());
    assert_eq!(refused(&mut c, setup(Some("no-such-handle"))).0, 1007);

    store.closed(a.s.connection(), a.now);
    let mut d = Harness::on_server(sc.clone(), &store, Faults::default());
    let (code, reason) = refused(
        &mut d,
        json!({"setup": {"model": "models/other-live", "sessionResumption": {"handle": handle}}}),
    );
    assert_eq!(code, 1007, "{reason}");

    // Past the TTL after the session ended.
    let short = Faults {
        handle_ttl: Duration::from_secs(60),
        ..Faults::default()
    };
    let mut e = Harness::on_server(sc.clone(), &store, short.clone());
    e.now = a.now + Duration::from_secs(61);
    assert_eq!(refused(&mut e, setup(Some(&handle))).0, 1007);

    // The refuse_resume fault refuses a valid handle.
    let refuse = Faults {
        refuse_resume: true,
        ..Faults::default()
    };
    let mut f = Harness::on_server(sc, &store, refuse);
    f.now = a.now;
    assert_eq!(refused(&mut f, setup(Some(&handle))).0, 1007);
    assert_eq!(store.connections()[5].refused, Some(1007));
}

//! The OpenAI Realtime core on a virtual clock: `session.update` first and its answer, the
//! response gate (never a second `response.create` while one is open, late tool results,
//! a refused request), and barge-in.

use base64::Engine;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::*;
use crate::model::protocol::SetupFailure;
use crate::model::session::SessionEvent;

/// The `type`s of the frames the core wants written.
fn written(core: &mut OpenAiCore) -> Vec<String> {
    let mut out = vec![];
    while let Some(o) = core.poll_transmit() {
        let Outbound::Text { json, .. } = o else {
            panic!("{o:?}")
        };
        let v: Value = serde_json::from_str(&json).unwrap();
        out.push(v["type"].as_str().unwrap().to_owned());
    }
    out
}

fn server(core: &mut OpenAiCore, v: Value, now: Instant) {
    core.handle_frame(Frame::Text(&v.to_string()), now);
}

fn created(core: &mut OpenAiCore, id: &str, now: Instant) {
    server(
        core,
        json!({"type": "response.created", "response": {"id": id}}),
        now,
    );
}

fn done(core: &mut OpenAiCore, id: &str, now: Instant) {
    server(
        core,
        json!({"type": "response.done", "response": {"id": id, "status": "completed"}}),
        now,
    );
}

fn respond(core: &mut OpenAiCore, now: Instant) {
    core.handle_outbound(Command::Respond, now);
}

/// A core whose `session.update` was answered at `t0`.
fn live(t0: Instant) -> OpenAiCore {
    let mut core = OpenAiCore::new(&SessionConfig::default(), Api::Ga, t0);
    assert_eq!(written(&mut core), ["session.update"]);
    server(
        &mut core,
        json!({"type": "session.updated", "session": {}}),
        t0,
    );
    assert_eq!(core.poll_setup(), Some(Ok(())));
    while core.poll_event().is_some() {}
    core
}

#[test]
fn session_update_goes_first_and_an_error_in_answer_refuses_the_session() {
    let t0 = Instant::now();
    let mut core = OpenAiCore::new(&SessionConfig::default(), Api::Ga, t0);
    respond(&mut core, t0);
    assert_eq!(written(&mut core), ["session.update"]);
    // `session.created` came before the update was sent; it does not accept it.
    server(
        &mut core,
        json!({"type": "session.created", "session": {}}),
        t0,
    );
    assert_eq!(core.poll_setup(), None);
    server(
        &mut core,
        json!({"type": "session.updated", "session": {}}),
        t0,
    );
    assert_eq!(core.poll_setup(), Some(Ok(())));
    assert_eq!(
        written(&mut core),
        ["response.create"],
        "held until accepted"
    );
    assert!(matches!(
        core.poll_event(),
        Some(SessionEvent::Model(ModelEvent::SetupComplete, _))
    ));

    let mut core = OpenAiCore::new(&SessionConfig::default(), Api::Ga, t0);
    written(&mut core);
    server(
        &mut core,
        json!({"type": "error", "error": {"type": "invalid_request_error",
            "code": "invalid_value", "message": "bad format", "param": "session.audio"}}),
        t0,
    );
    match core.poll_setup() {
        Some(Err(SetupFailure::Rejected(m))) => assert!(m.contains("invalid_value"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(core.is_over());
}

/// A core set up by `config` whose `session.update` the service answered with `session`.
fn answered(config: &SessionConfig, api: Api, session: &Value, t0: Instant) -> OpenAiCore {
    let mut core = OpenAiCore::new(config, api, t0);
    written(&mut core);
    server(
        &mut core,
        json!({"type": "session.updated", "session": session}),
        t0,
    );
    core
}

#[test]
fn a_session_whose_caller_audio_format_the_service_changed_is_refused() {
    let t0 = Instant::now();
    let phone = SessionConfig {
        input_format: AudioFormat::Pcmu,
        output_format: AudioFormat::Pcmu,
        ..SessionConfig::default()
    };
    // The GA shape confirming what was asked, or saying nothing of it: accepted. The
    // `session.created` before it states the service's default (PCM), which is not an answer.
    for session in [
        json!({"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcmu"}}}}),
        json!({}),
    ] {
        let mut core = OpenAiCore::new(&phone, Api::Ga, t0);
        written(&mut core);
        server(
            &mut core,
            json!({"type": "session.created", "session": {"type": "realtime",
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}}}),
            t0,
        );
        server(
            &mut core,
            json!({"type": "session.updated", "session": session}),
            t0,
        );
        assert_eq!(core.poll_setup(), Some(Ok(())), "{session}");
    }
    // 24 kHz PCM stated where μ-law was asked (GA and beta shapes), or a format baton does not
    // know: the frames would be read as something else, so the setup is refused, saying so.
    for (api, session) in [
        (
            Api::Ga,
            json!({"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}}),
        ),
        (Api::Beta, json!({"input_audio_format": "pcm16"})),
        (Api::Beta, json!({"input_audio_format": "opus"})),
    ] {
        let mut core = answered(&phone, api, &session, t0);
        match core.poll_setup() {
            Some(Err(SetupFailure::Rejected(m))) => {
                assert!(m.contains("where baton asked for audio/pcmu"), "{m}");
                assert!(m.contains("resample_input"), "{m}");
            }
            other => panic!("{session}: {other:?}"),
        }
        assert!(core.is_over());
    }
    // The default (24 kHz PCM) confirmed in either shape: accepted; PCM at another rate: not.
    for (api, session, ok) in [
        (Api::Beta, json!({"input_audio_format": "pcm16"}), true),
        (
            Api::Ga,
            json!({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}}),
            true,
        ),
        (
            Api::Ga,
            json!({"audio": {"input": {"format": {"type": "audio/pcm"}}}}),
            true,
        ),
        (
            Api::Ga,
            json!({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}),
            false,
        ),
    ] {
        let mut core = answered(&SessionConfig::default(), api, &session, t0);
        match core.poll_setup() {
            Some(Ok(())) => assert!(ok, "{session}"),
            Some(Err(SetupFailure::Rejected(m))) => {
                assert!(!ok, "{session}: {m}");
                assert!(m.contains("audio/pcm at 16000 Hz"), "{m}");
                assert!(!m.contains("resample_input"), "no phone fix for PCM: {m}");
            }
            other => panic!("{session}: {other:?}"),
        }
    }
}

#[test]
fn no_second_response_create_while_one_is_open() {
    let t0 = Instant::now();
    let mut core = live(t0);
    respond(&mut core, t0);
    assert_eq!(written(&mut core), ["response.create"]);
    // Requested and not created yet, then in progress: requests wait.
    respond(&mut core, t0);
    created(&mut core, "r1", t0);
    respond(&mut core, t0);
    respond(&mut core, t0);
    assert!(written(&mut core).is_empty());
    // Every request made meanwhile is served by one response after it.
    done(&mut core, "r1", t0);
    assert_eq!(written(&mut core), ["response.create"]);
    created(&mut core, "r2", t0);
    done(&mut core, "r2", t0);
    assert!(written(&mut core).is_empty());
}

#[test]
fn a_late_tool_result_waits_for_the_response_in_progress() {
    let t0 = Instant::now();
    let mut core = live(t0);
    // The model announces a transfer (a response of its own, from the caller's speech) …
    created(&mut core, "r-announce", t0);
    // … while the transfer call's result arrives: the item goes out at once, the response
    // that uses it only after the announcement is done.
    let item = ClientEvent::ConversationItemCreate {
        event_id: None,
        previous_item_id: None,
        item: super::super::wire::Item::function_output("call-1", "{\"ok\":true}"),
    };
    core.handle_outbound(
        Command::Out(Outbound::Text {
            json: codec::encode(&item),
            received_at: None,
        }),
        t0,
    );
    respond(&mut core, t0);
    assert_eq!(written(&mut core), ["conversation.item.create"]);
    server(
        &mut core,
        json!({"type": "response.output_audio_transcript.delta", "item_id": "a1", "delta": "One moment"}),
        t0,
    );
    assert!(written(&mut core).is_empty());
    done(&mut core, "r-announce", t0);
    assert_eq!(written(&mut core), ["response.create"]);
}

#[test]
fn a_refused_response_create_is_asked_again_once() {
    let t0 = Instant::now();
    let mut core = live(t0);
    respond(&mut core, t0);
    assert_eq!(written(&mut core), ["response.create"]);
    server(
        &mut core,
        json!({"type": "error", "error": {"type": "invalid_request_error",
            "code": "conversation_already_has_active_response", "message": "busy"}}),
        t0,
    );
    // Not a setup refusal: reported, and the request stands.
    assert!(!core.is_over());
    assert_eq!(written(&mut core), ["response.create"]);
    created(&mut core, "r2", t0);
    done(&mut core, "r2", t0);
    assert!(written(&mut core).is_empty());
}

#[test]
fn barge_in_cancels_the_response_and_truncates_what_was_heard() {
    let t0 = Instant::now();
    let mut core = live(t0);
    // Nothing playing: nothing to send.
    assert!(core.barge_in(20, t0).is_empty());
    created(&mut core, "r1", t0);
    let pcm = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 4800]);
    server(
        &mut core,
        json!({"type": "response.output_audio.delta", "item_id": "a1", "delta": pcm}),
        t0,
    );
    assert_eq!(
        core.audio_item()
            .map(|i| (i.item_id.as_str(), i.produced_ms())),
        Some(("a1", 100))
    );
    assert_eq!(core.barge_in(20, t0).len(), 2);
    let mut frames = vec![];
    while let Some(Outbound::Text { json, .. }) = core.poll_transmit() {
        frames.push(serde_json::from_str::<Value>(&json).unwrap());
    }
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert_eq!(frames[0]["type"], "response.cancel");
    assert_eq!(frames[1]["type"], "conversation.item.truncate");
    assert_eq!(
        (&frames[1]["item_id"], &frames[1]["audio_end_ms"]),
        (&json!("a1"), &json!(20))
    );
}

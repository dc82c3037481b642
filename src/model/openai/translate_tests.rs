//! The mapping of baton's messages onto OpenAI Realtime client events, message by message.

use serde_json::{Value, json};

use super::*;
use crate::audio::g711::Law;
use crate::model::gemini::wire::{
    ContextUpdate, FunctionResponseScheduling, RealtimeInput, ToolResponse, ToolsWrapper,
};

fn sent(steps: &[Step]) -> Vec<Value> {
    steps
        .iter()
        .map(|s| match s {
            Step::Send(e) => serde_json::to_value(e).unwrap(),
            Step::Respond => json!("respond"),
        })
        .collect()
}

fn decls() -> Vec<Value> {
    vec![
        json!({"functionDeclarations": [
            {"name": "transfer_to_schemes", "description": "Hand over to Ravi.",
             "parametersJsonSchema": {"type": "object", "properties": {"summary": {"type": "string"}}},
             "behavior": "NON_BLOCKING"},
            {"name": "get_balance", "parameters": {"type": "OBJECT", "properties": {"id": {"type": "STRING"}}}},
            {"name": "no_args"}
        ]}),
        json!({"googleSearch": {}}),
    ]
}

#[test]
fn function_declarations_become_function_tools() {
    let tools = function_tools(&decls());
    let v = serde_json::to_value(&tools).unwrap();
    assert_eq!(
        v,
        json!([
            {"type": "function", "name": "transfer_to_schemes", "description": "Hand over to Ravi.",
             "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}}},
            {"type": "function", "name": "get_balance",
             "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}},
            {"type": "function", "name": "no_args", "parameters": {"type": "object", "properties": {}}}
        ])
    );
}

#[test]
fn context_update_is_a_partial_session_update_without_voice() {
    let mut t = Translator::new(Api::Ga, false);
    let cu = ClientMessage::ContextUpdate(ContextUpdate {
        system_instruction: Some(Content::text(None, "You are Ravi.")),
        tools: Some(ToolsWrapper { tools: decls() }),
    });
    let v = sent(&t.translate(&cu));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0]["type"], "session.update");
    let s = &v[0]["session"];
    assert_eq!(s["type"], "realtime");
    assert_eq!(s["instructions"], "You are Ravi.");
    assert_eq!(s["tools"][0]["name"], "transfer_to_schemes");
    assert!(
        s.get("audio").is_none(),
        "the voice is never changed in place: {s}"
    );
    // Instructions only: the tools stay as they are.
    let only_si = ClientMessage::ContextUpdate(ContextUpdate {
        system_instruction: Some(Content::text(None, "You are Asha.")),
        tools: None,
    });
    let v = sent(&t.translate(&only_si));
    assert!(v[0]["session"].get("tools").is_none());
    // Beta: the flat shape.
    let mut beta = Translator::new(Api::Beta, false);
    let v = sent(&beta.translate(&cu));
    assert!(v[0]["session"].get("type").is_none());
    assert_eq!(v[0]["session"]["instructions"], "You are Ravi.");
}

#[test]
fn client_content_turns_become_items_and_turn_complete_a_response() {
    let mut t = Translator::new(Api::Ga, false);
    let cc = ClientMessage::ClientContent(ClientContent {
        turns: Some(vec![
            Content::text(Some("user"), "I want to save."),
            Content::text(Some("model"), "Start with an emergency fund."),
            Content::text(Some("system"), "Speak as Ravi."),
        ]),
        turn_complete: Some(true),
    });
    let v = sent(&t.translate(&cc));
    assert_eq!(v.len(), 4, "{v:?}");
    assert_eq!(v[0]["type"], "conversation.item.create");
    assert_eq!(
        v[0]["item"],
        json!({"type": "message", "role": "user",
               "content": [{"type": "input_text", "text": "I want to save."}]})
    );
    assert_eq!(v[1]["item"]["role"], "assistant");
    assert_eq!(v[1]["item"]["content"][0]["type"], "output_text");
    assert_eq!(v[2]["item"]["role"], "system");
    assert_eq!(v[3], json!("respond"));
    // turnComplete false: context only.
    let partial = ClientMessage::ClientContent(ClientContent {
        turns: Some(vec![Content::text(Some("user"), "Note: VIP caller.")]),
        turn_complete: Some(false),
    });
    let v = sent(&t.translate(&partial));
    assert_eq!(v.len(), 1);
    // Beta assistant text parts are `text`.
    let mut beta = Translator::new(Api::Beta, false);
    let v = sent(&beta.translate(&cc));
    assert_eq!(v[1]["item"]["content"][0]["type"], "text");
}

#[test]
fn the_initial_history_asks_for_no_response() {
    let mut t = Translator::new(Api::Ga, true);
    let history = ClientMessage::ClientContent(ClientContent {
        turns: Some(vec![
            Content::text(Some("user"), "Hi."),
            Content::text(Some("model"), "Hello."),
        ]),
        turn_complete: Some(true),
    });
    let v = sent(&t.translate(&history));
    assert_eq!(v.len(), 2, "history is items only: {v:?}");
    // The next turn-completing content is a prompt.
    let v = sent(&t.translate(&history));
    assert_eq!(v.last(), Some(&json!("respond")));
}

#[test]
fn tool_responses_are_outputs_then_one_response() {
    let mut t = Translator::new(Api::Ga, false);
    let tr = ClientMessage::ToolResponse(ToolResponse {
        function_responses: Some(vec![
            FunctionResponse {
                id: Some("call_1".into()),
                name: Some("transfer_to_schemes".into()),
                response: Some(json!({"status": "transferred", "agent": "Ravi"})),
                scheduling: Some(FunctionResponseScheduling::WhenIdle),
                ..Default::default()
            },
            FunctionResponse {
                id: Some("call_2".into()),
                response: Some(json!("plain text")),
                ..Default::default()
            },
            FunctionResponse {
                id: None,
                ..Default::default()
            },
        ]),
    });
    let v = sent(&t.translate(&tr));
    assert_eq!(v.len(), 3, "{v:?}");
    assert_eq!(
        v[0]["item"],
        json!({"type": "function_call_output", "call_id": "call_1",
               "output": "{\"agent\":\"Ravi\",\"status\":\"transferred\"}"})
    );
    assert_eq!(v[1]["item"]["output"], "plain text");
    assert_eq!(v[2], json!("respond"));
    let empty = ClientMessage::ToolResponse(ToolResponse {
        function_responses: Some(vec![]),
    });
    assert!(t.translate(&empty).is_empty());
}

#[test]
fn realtime_text_is_a_user_item_and_a_response() {
    let mut t = Translator::new(Api::Ga, false);
    let ri = ClientMessage::RealtimeInput(RealtimeInput {
        text: Some("Greet the caller as Ravi.".into()),
        ..Default::default()
    });
    let v = sent(&t.translate(&ri));
    assert_eq!(
        v[0]["item"]["content"][0]["text"],
        "Greet the caller as Ravi."
    );
    assert_eq!(v[1], json!("respond"));
    let end = ClientMessage::RealtimeInput(RealtimeInput {
        audio_stream_end: Some(true),
        ..Default::default()
    });
    assert!(t.translate(&end).is_empty());
}

#[test]
fn session_settings_map_to_the_first_session_update() {
    let cfg = BatonConfig {
        model: "models/gemini-3.8-live".into(),
        system_instruction: Some("You are Asha.".into()),
        tools: decls(),
        voice: Some("Kore".into()),
        silence_duration_ms: Some(600),
        ..Default::default()
    };
    let oa = session_config(&cfg, "gpt-realtime");
    assert_eq!(oa.model, "gpt-realtime");
    assert_eq!(oa.instructions.as_deref(), Some("You are Asha."));
    assert_eq!(oa.tools.len(), 3);
    assert_eq!(oa.voice, None, "Kore is no OpenAI voice");
    assert_eq!(
        oa.turn_detection
            .as_ref()
            .and_then(|t| t.silence_duration_ms),
        Some(600)
    );
    assert!(oa.transcription.is_some());
    let marin = BatonConfig {
        voice: Some("Marin".into()),
        transcription: false,
        ..Default::default()
    };
    let oa = session_config(&marin, "gpt-realtime");
    assert_eq!(oa.voice.as_deref(), Some("marin"));
    assert!(oa.transcription.is_none());
}

/// A phone caller's law sets the session up in it both ways, in either dialect's words; without
/// one the session stays at 24 kHz PCM.
#[test]
fn a_phone_law_sets_the_session_up_in_g711() {
    for (law, ga, beta) in [
        (Some(Law::Ulaw), "audio/pcmu", "g711_ulaw"),
        (Some(Law::Alaw), "audio/pcma", "g711_alaw"),
        (None, "audio/pcm", "pcm16"),
    ] {
        let cfg = BatonConfig {
            phone_law: law,
            ..Default::default()
        };
        let oa = session_config(&cfg, "gpt-realtime");
        let update = serde_json::to_value(oa.session_update(Api::Ga)).unwrap();
        let audio = &update["session"]["audio"];
        assert_eq!(audio["input"]["format"]["type"], ga, "{update}");
        assert_eq!(audio["output"]["format"]["type"], ga, "{update}");
        let update = serde_json::to_value(oa.session_update(Api::Beta)).unwrap();
        assert_eq!(update["session"]["input_audio_format"], beta, "{update}");
        assert_eq!(update["session"]["output_audio_format"], beta, "{update}");
    }
}

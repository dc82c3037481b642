//! Vonage Voice API WebSocket: a `websocket:connected` text message naming the content type
//! (`audio/l16;rate=16000`) with the NCCO's headers flattened beside it, then **binary** frames of
//! little-endian L16, exactly 20 ms each, both ways. Text events: `websocket:dtmf`, and the
//! acknowledgements `websocket:notify` (of baton's `{"action":"notify"}`, the mark equivalent)
//! and `websocket:cleared` (of `{"action":"clear"}`).

use serde_json::{Map, Value, json};

use super::json::{self, Msg};
use super::{
    BridgeWriter, Ctx, Inbound, MAX_INBOUND_MESSAGE, MAX_OUTBOUND_MESSAGE, MediaFormat, Outgoing,
    Reply, Start, Transmit, WireError, usable_rate,
};
use crate::leg::bridge::audio::{AudioFormat, Encoding};

pub const CONNECTED: &str = "websocket:connected";

pub fn parse(text: &str) -> Result<Inbound, WireError> {
    let m = json::object(text, MAX_INBOUND_MESSAGE, "event")?;
    Ok(match m.event.as_str() {
        CONNECTED => Inbound::Start(start(&m)?),
        "websocket:dtmf" => Inbound::Dtmf(if m.has("digit") {
            m.digit("digit")?
        } else {
            m.digit("dtmf.digit")?
        }),
        "websocket:notify" => Inbound::Mark(m.required("payload.name")?),
        "websocket:cleared" => Inbound::Cleared,
        other => Inbound::Unknown(other.to_owned()),
    })
}

fn start(m: &Msg) -> Result<Start, WireError> {
    let ct = m
        .str("content-type")?
        .ok_or_else(|| m.missing("content-type"))?;
    let (encoding, rate) = split_content_type(&ct);
    let params = m
        .map
        .iter()
        .filter(|(k, _)| k.as_str() != "event" && k.as_str() != "content-type")
        .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
        .collect::<std::collections::BTreeMap<_, _>>();
    let id = ["uuid", "conversation_uuid", "call_uuid"]
        .iter()
        .find_map(|k| params.get(*k).cloned())
        .unwrap_or_else(|| "vonage".to_owned());
    Ok(Start {
        stream_sid: Some(id.clone()),
        account_sid: None,
        call_sid: Some(id),
        tracks: Vec::new(),
        custom_parameters: params,
        media_format: Some(MediaFormat {
            encoding: Some(encoding),
            sample_rate: rate,
            channels: Some(1),
        }),
    })
}

/// `audio/l16;rate=16000` → (`audio/l16`, 16000).
fn split_content_type(ct: &str) -> (String, Option<u64>) {
    let mut parts = ct.split(';');
    let encoding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    let rate = parts
        .filter_map(|p| p.trim().strip_prefix("rate="))
        .find_map(|r| r.trim().parse().ok());
    (encoding, rate)
}

pub fn format(start: &Start) -> Result<AudioFormat, String> {
    let f = start.media_format.clone().unwrap_or(MediaFormat {
        encoding: None,
        sample_rate: None,
        channels: None,
    });
    let enc = f.encoding.unwrap_or_default();
    if enc != "audio/l16" {
        return Err(format!(
            "content-type {enc:?}; audio/l16;rate=8000|16000|24000 is spoken here"
        ));
    }
    let rate = usable_rate(f.sample_rate.unwrap_or(16000))?;
    Ok(AudioFormat::new(Encoding::L16Le, rate))
}

pub fn render(t: &Transmit, _ctx: Ctx<'_>) -> Outgoing {
    match t {
        Transmit::Media(p) => Outgoing::Binary(p.clone()),
        Transmit::Mark(name) => {
            Outgoing::Text(json!({"action": "notify", "payload": {"name": name}}).to_string())
        }
        Transmit::Clear => Outgoing::Text(json!({"action": "clear"}).to_string()),
    }
}

pub fn parse_reply(text: &str) -> Result<Reply, WireError> {
    let m = json::object(text, MAX_OUTBOUND_MESSAGE, "action")?;
    Ok(match m.event.as_str() {
        "notify" => Reply::Mark(m.required("payload.name")?),
        "clear" => Reply::Clear,
        other => Reply::Unknown(other.to_owned()),
    })
}

pub fn opening(w: &BridgeWriter) -> Vec<Outgoing> {
    let mut map = Map::new();
    map.insert("event".into(), Value::from(CONNECTED));
    map.insert(
        "content-type".into(),
        Value::from(format!("audio/l16;rate={}", w.format.rate)),
    );
    map.insert("uuid".into(), Value::from(w.ids.call_sid.clone()));
    for (k, v) in &w.ids.custom_parameters {
        map.entry(k.clone())
            .or_insert_with(|| Value::from(v.clone()));
    }
    vec![Outgoing::Text(Value::Object(map).to_string())]
}

pub fn mark_echo(name: &str) -> Outgoing {
    Outgoing::Text(json!({"event": "websocket:notify", "payload": {"name": name}}).to_string())
}

pub fn cleared() -> Outgoing {
    Outgoing::Text(json!({"event": "websocket:cleared"}).to_string())
}

pub fn dtmf(digit: char) -> Outgoing {
    Outgoing::Text(
        json!({"event": "websocket:dtmf", "digit": digit.to_string(), "duration": 260}).to_string(),
    )
}

//! Telnyx media streaming: snake_case JSON, `stream_id` at top level, RTP payloads (PCMU by
//! default; PCMA and big-endian L16 also spoken), counters as strings or numbers. Telnyx does not
//! promise order: `media.chunk` (and `sequence_number`) let the stream reorder.

use serde_json::json;

use super::json::{self, Msg};
use super::{
    BridgeWriter, Ctx, Inbound, MAX_INBOUND_MESSAGE, MAX_OUTBOUND_MESSAGE, Outgoing, Reply, Start,
    Transmit, WireError, b64, mono, usable_rate,
};
use crate::leg::bridge::audio::{AudioFormat, Encoding};

pub fn parse(text: &str) -> Result<Inbound, WireError> {
    let m = json::object(text, MAX_INBOUND_MESSAGE, "event")?;
    Ok(match m.event.as_str() {
        "connected" => Inbound::Connected,
        "start" => Inbound::Start(start(&m)?),
        "media" => m.media("sequence_number")?,
        "dtmf" => Inbound::Dtmf(m.digit("dtmf.digit")?),
        "mark" => Inbound::Mark(m.required("mark.name")?),
        "error" => Inbound::Error(format!(
            "{} {}: {}",
            m.str("payload.code")?.unwrap_or_default(),
            m.str("payload.title")?.unwrap_or_default(),
            m.str("payload.detail")?.unwrap_or_default()
        )),
        "stop" => Inbound::Stop,
        other => Inbound::Unknown(other.to_owned()),
    })
}

fn start(m: &Msg) -> Result<Start, WireError> {
    m.require_object("start")?;
    let stream_sid = m
        .str("stream_id")?
        .or(m.str("start.stream_id")?)
        .ok_or_else(|| m.missing("stream_id"))?;
    let params = m.start_parameters(&["from", "to", "call_session_id", "client_state"])?;
    let media_format = m.media_format("start.media_format", "sample_rate")?;
    Ok(Start {
        stream_sid: Some(stream_sid),
        account_sid: m.str("start.user_id")?,
        call_sid: m.str("start.call_control_id")?,
        tracks: Vec::new(),
        custom_parameters: params,
        media_format,
    })
}

pub fn format(start: &Start) -> Result<AudioFormat, String> {
    let Some(f) = &start.media_format else {
        return Ok(AudioFormat::PCMU_8K);
    };
    mono(f)?;
    let rate = usable_rate(f.sample_rate.unwrap_or(8000))?;
    let enc = f.encoding.as_deref().unwrap_or("PCMU").to_ascii_uppercase();
    let encoding = match enc.as_str() {
        "PCMU" | "AUDIO/X-MULAW" => Encoding::Pcmu,
        "PCMA" | "AUDIO/X-ALAW" => Encoding::Pcma,
        "L16" | "AUDIO/L16" => Encoding::L16Be,
        other => {
            return Err(format!(
                "start.media_format.encoding is {other}; PCMU, PCMA or L16 is spoken here \
                 (set the stream's codec, or bidirectional codec, to one of them)"
            ));
        }
    };
    if encoding != Encoding::L16Be && rate != 8000 {
        return Err(format!("{enc} at {rate} Hz; G.711 runs at 8000 Hz"));
    }
    Ok(AudioFormat::new(encoding, rate))
}

pub fn render(t: &Transmit, _ctx: Ctx<'_>) -> Outgoing {
    let v = match t {
        Transmit::Media(p) => json!({"event": "media", "media": {"payload": b64(p)}}),
        Transmit::Mark(name) => json!({"event": "mark", "mark": {"name": name}}),
        Transmit::Clear => json!({"event": "clear"}),
    };
    Outgoing::Text(v.to_string())
}

pub fn parse_reply(text: &str) -> Result<Reply, WireError> {
    let m = json::object(text, MAX_OUTBOUND_MESSAGE, "event")?;
    Ok(match m.event.as_str() {
        "media" => Reply::Media(m.payload("media.payload")?),
        "mark" => Reply::Mark(m.required("mark.name")?),
        "clear" => Reply::Clear,
        other => Reply::Unknown(other.to_owned()),
    })
}

fn encoding_name(f: AudioFormat) -> &'static str {
    match f.encoding {
        Encoding::Pcmu => "PCMU",
        Encoding::Pcma => "PCMA",
        Encoding::L16Le | Encoding::L16Be => "L16",
    }
}

pub fn opening(w: &BridgeWriter, seq: &mut u64) -> Vec<Outgoing> {
    *seq += 1;
    let start = json!({
        "event": "start",
        "sequence_number": seq.to_string(),
        "stream_id": w.ids.stream_sid,
        "start": {
            "user_id": w.ids.account_sid,
            "call_control_id": w.ids.call_sid,
            "call_session_id": format!("session-{}", w.ids.call_sid),
            "from": "+15550100",
            "to": "+15550199",
            "custom_parameters": w.ids.custom_parameters,
            "media_format": {
                "encoding": encoding_name(w.format),
                "sample_rate": w.format.rate,
                "channels": 1,
            },
        },
    });
    vec![
        Outgoing::Text(json!({"event": "connected", "version": "1.0.0"}).to_string()),
        Outgoing::Text(start.to_string()),
    ]
}

pub fn media(w: &BridgeWriter, seq: u64, chunk: u64, ts: u64, payload: &[u8]) -> Outgoing {
    Outgoing::Text(
        json!({
            "event": "media",
            "sequence_number": seq.to_string(),
            "stream_id": w.ids.stream_sid,
            "media": {
                "track": "inbound",
                "chunk": chunk.to_string(),
                "timestamp": ts.to_string(),
                "payload": b64(payload),
            },
        })
        .to_string(),
    )
}

pub fn mark_echo(w: &BridgeWriter, seq: u64, name: &str) -> Outgoing {
    Outgoing::Text(
        json!({"event": "mark", "sequence_number": seq.to_string(), "stream_id": w.ids.stream_sid,
               "mark": {"name": name}})
        .to_string(),
    )
}

pub fn dtmf(w: &BridgeWriter, seq: u64, digit: char) -> Outgoing {
    Outgoing::Text(
        json!({"event": "dtmf", "sequence_number": seq.to_string(), "stream_id": w.ids.stream_sid,
               "dtmf": {"digit": digit.to_string()}})
        .to_string(),
    )
}

pub fn stop(w: &BridgeWriter, seq: u64) -> Outgoing {
    Outgoing::Text(
        json!({"event": "stop", "sequence_number": seq.to_string(), "stream_id": w.ids.stream_sid,
               "stop": {"user_id": w.ids.account_sid, "call_control_id": w.ids.call_sid}})
        .to_string(),
    )
}

//! Plivo Audio Streams: camelCase JSON with numbers as numbers, `streamId`, media `timestamp` in
//! wall-clock epoch ms, μ-law 8 kHz or L16 (taken as little-endian) 8/16 kHz. baton plays with
//! `playAudio`, marks with `checkpoint` (acknowledged by `playedStream`, or `played` in older
//! material) and clears with `clearAudio` (acknowledged by `clearedAudio`).

use serde_json::json;

use super::json::{self, Msg};
use super::{
    BridgeWriter, Ctx, Inbound, MAX_INBOUND_MESSAGE, MAX_OUTBOUND_MESSAGE, Outgoing, Reply, Start,
    Transmit, WireError, b64, mono, usable_rate,
};
use crate::leg::bridge::audio::{AudioFormat, Encoding};

/// Epoch milliseconds the caller's timestamps start from (any wall-clock-like value).
const EPOCH_BASE_MS: u64 = 1_767_225_600_000;

pub fn parse(text: &str) -> Result<Inbound, WireError> {
    let m = json::object(text, MAX_INBOUND_MESSAGE, "event")?;
    Ok(match m.event.as_str() {
        "start" => Inbound::Start(start(&m)?),
        "media" => m.media("sequenceNumber")?,
        "dtmf" => Inbound::Dtmf(m.digit("dtmf.digit")?),
        "playedStream" | "played" => Inbound::Mark(m.required("name")?),
        "clearedAudio" => Inbound::Cleared,
        "stop" => Inbound::Stop,
        "connected" => Inbound::Connected,
        other => Inbound::Unknown(other.to_owned()),
    })
}

fn start(m: &Msg) -> Result<Start, WireError> {
    m.require_object("start")?;
    let stream_sid = m
        .str("start.streamId")?
        .or(m.str("streamId")?)
        .ok_or_else(|| m.missing("start.streamId"))?;
    let mut params = std::collections::BTreeMap::new();
    if let Some(h) = m.str("extra_headers")? {
        params.insert("extra_headers".to_owned(), h);
    }
    let media_format = m.media_format("start.mediaFormat", "sampleRate")?;
    Ok(Start {
        stream_sid: Some(stream_sid),
        account_sid: m.str("start.accountId")?,
        call_sid: m.str("start.callId")?,
        tracks: m.strings("start.tracks")?,
        custom_parameters: params,
        media_format,
    })
}

pub fn format(start: &Start) -> Result<AudioFormat, String> {
    let Some(f) = &start.media_format else {
        // Plivo's default contentType.
        return Ok(AudioFormat::new(Encoding::L16Le, 8000));
    };
    mono(f)?;
    let rate = usable_rate(f.sample_rate.unwrap_or(8000))?;
    let enc = f
        .encoding
        .as_deref()
        .unwrap_or("audio/x-l16")
        .to_ascii_lowercase();
    match enc.as_str() {
        "audio/x-mulaw" | "mulaw" | "pcmu" if rate == 8000 => {
            Ok(AudioFormat::new(Encoding::Pcmu, rate))
        }
        "audio/x-l16" | "l16" | "linear16" => Ok(AudioFormat::new(Encoding::L16Le, rate)),
        _ => Err(format!(
            "start.mediaFormat is {enc} at {rate} Hz; audio/x-mulaw 8000 Hz or audio/x-l16 \
             8000/16000 Hz is spoken here"
        )),
    }
}

fn content_type(f: AudioFormat) -> &'static str {
    match f.encoding {
        Encoding::Pcmu => "audio/x-mulaw",
        Encoding::Pcma => "audio/x-alaw",
        Encoding::L16Le | Encoding::L16Be => "audio/x-l16",
    }
}

pub fn render(t: &Transmit, ctx: Ctx<'_>) -> Outgoing {
    let v = match t {
        Transmit::Media(p) => json!({"event": "playAudio", "streamId": ctx.stream_sid, "media": {
            "contentType": content_type(ctx.format),
            "sampleRate": ctx.format.rate,
            "payload": b64(p),
        }}),
        Transmit::Mark(name) => {
            json!({"event": "checkpoint", "streamId": ctx.stream_sid, "name": name})
        }
        Transmit::Clear => json!({"event": "clearAudio", "streamId": ctx.stream_sid}),
    };
    Outgoing::Text(v.to_string())
}

pub fn parse_reply(text: &str) -> Result<Reply, WireError> {
    let m = json::object(text, MAX_OUTBOUND_MESSAGE, "event")?;
    Ok(match m.event.as_str() {
        "playAudio" => Reply::Media(m.payload("media.payload")?),
        "checkpoint" => Reply::Mark(m.required("name")?),
        "clearAudio" => Reply::Clear,
        other => Reply::Unknown(other.to_owned()),
    })
}

pub fn opening(w: &BridgeWriter, seq: &mut u64) -> Vec<Outgoing> {
    *seq += 1;
    let start = json!({
        "event": "start",
        "sequenceNumber": *seq,
        "start": {
            "callId": w.ids.call_sid,
            "streamId": w.ids.stream_sid,
            "accountId": w.ids.account_sid,
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": content_type(w.format), "sampleRate": w.format.rate},
        },
        "extra_headers": "{}",
    });
    vec![Outgoing::Text(start.to_string())]
}

pub fn media(w: &BridgeWriter, seq: u64, chunk: u64, ts: u64, payload: &[u8]) -> Outgoing {
    Outgoing::Text(
        json!({
            "event": "media",
            "sequenceNumber": seq,
            "streamId": w.ids.stream_sid,
            "media": {
                "track": "inbound",
                "timestamp": (EPOCH_BASE_MS + ts).to_string(),
                "chunk": chunk,
                "payload": b64(payload),
            },
        })
        .to_string(),
    )
}

pub fn mark_echo(w: &BridgeWriter, seq: u64, name: &str) -> Outgoing {
    Outgoing::Text(
        json!({"event": "playedStream", "sequenceNumber": seq, "streamId": w.ids.stream_sid,
               "name": name})
        .to_string(),
    )
}

pub fn cleared(w: &BridgeWriter, _seq: u64) -> Outgoing {
    Outgoing::Text(
        json!({"sequenceNumber": 0, "event": "clearedAudio", "streamId": w.ids.stream_sid})
            .to_string(),
    )
}

pub fn dtmf(w: &BridgeWriter, seq: u64, digit: char) -> Outgoing {
    Outgoing::Text(
        json!({"event": "dtmf", "sequenceNumber": seq, "streamId": w.ids.stream_sid,
               "dtmf": {"track": "inbound", "digit": digit.to_string()}})
        .to_string(),
    )
}

pub fn stop(w: &BridgeWriter, seq: u64) -> Outgoing {
    Outgoing::Text(
        json!({"event": "stop", "sequenceNumber": seq, "streamId": w.ids.stream_sid}).to_string(),
    )
}

//! Exotel Voicebot (bidirectional): snake_case JSON with `stream_sid`; audio is raw 16-bit
//! little-endian PCM ("slin") at 8 kHz unless `?sample-rate=16000|24000` was on the stream URL or
//! `start.media_format` says otherwise (μ-law where a stream asks for it). `media`, `mark` and
//! `clear` toward Exotel; marks come back as `mark`.

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
        "stop" => Inbound::Stop,
        other => Inbound::Unknown(other.to_owned()),
    })
}

fn start(m: &Msg) -> Result<Start, WireError> {
    m.require_object("start")?;
    let stream_sid = m
        .str("start.stream_sid")?
        .or(m.str("stream_sid")?)
        .ok_or_else(|| m.missing("start.stream_sid"))?;
    let params = m.start_parameters(&["from", "to"])?;
    let media_format = m.media_format("start.media_format", "sample_rate")?;
    Ok(Start {
        stream_sid: Some(stream_sid),
        account_sid: m.str("start.account_sid")?,
        call_sid: m.str("start.call_sid")?,
        tracks: Vec::new(),
        custom_parameters: params,
        media_format,
    })
}

/// `fallback` carries the rate of the stream URL's `?sample-rate=`.
pub fn format(start: &Start, fallback: Option<AudioFormat>) -> Result<AudioFormat, String> {
    let default_rate = fallback.map_or(8000, |f| f.rate);
    let Some(f) = &start.media_format else {
        return Ok(AudioFormat::new(Encoding::L16Le, default_rate));
    };
    mono(f)?;
    let rate = usable_rate(f.sample_rate.unwrap_or(u64::from(default_rate)))?;
    let enc = f.encoding.as_deref().unwrap_or("").to_ascii_lowercase();
    if enc.contains("mulaw") || enc.contains("ulaw") || enc == "pcmu" {
        if rate != 8000 {
            return Err(format!("μ-law at {rate} Hz; G.711 runs at 8000 Hz"));
        }
        return Ok(AudioFormat::PCMU_8K);
    }
    if enc.contains("alaw") || enc == "pcma" {
        return Err(format!(
            "start.media_format.encoding is {enc}; slin or μ-law is spoken here"
        ));
    }
    // "base64", "slin", "audio/l16", "pcm" or nothing: raw 16-bit little-endian PCM.
    Ok(AudioFormat::new(Encoding::L16Le, rate))
}

pub fn render(t: &Transmit, ctx: Ctx<'_>) -> Outgoing {
    let sid = ctx.stream_sid;
    let v = match t {
        Transmit::Media(p) => {
            json!({"event": "media", "stream_sid": sid, "media": {"payload": b64(p)}})
        }
        Transmit::Mark(name) => {
            json!({"event": "mark", "stream_sid": sid, "mark": {"name": name}})
        }
        Transmit::Clear => json!({"event": "clear", "stream_sid": sid}),
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

pub fn opening(w: &BridgeWriter, seq: &mut u64) -> Vec<Outgoing> {
    *seq += 1;
    let encoding = match w.format.encoding {
        Encoding::Pcmu => "audio/x-mulaw",
        _ => "base64",
    };
    let start = json!({
        "event": "start",
        "sequence_number": *seq,
        "stream_sid": w.ids.stream_sid,
        "start": {
            "stream_sid": w.ids.stream_sid,
            "call_sid": w.ids.call_sid,
            "account_sid": w.ids.account_sid,
            "from": "09999999999",
            "to": "08888888888",
            "custom_parameters": w.ids.custom_parameters,
            "media_format": {"encoding": encoding, "sample_rate": w.format.rate.to_string(),
                             "bit_rate": "128kbps"},
        },
    });
    vec![
        Outgoing::Text(json!({"event": "connected"}).to_string()),
        Outgoing::Text(start.to_string()),
    ]
}

pub fn media(w: &BridgeWriter, seq: u64, chunk: u64, ts: u64, payload: &[u8]) -> Outgoing {
    Outgoing::Text(
        json!({
            "event": "media",
            "sequence_number": seq,
            "stream_sid": w.ids.stream_sid,
            "media": {"chunk": chunk, "timestamp": ts.to_string(), "payload": b64(payload)},
        })
        .to_string(),
    )
}

pub fn mark_echo(w: &BridgeWriter, seq: u64, name: &str) -> Outgoing {
    Outgoing::Text(
        json!({"event": "mark", "sequence_number": seq, "stream_sid": w.ids.stream_sid,
               "mark": {"name": name}})
        .to_string(),
    )
}

pub fn dtmf(w: &BridgeWriter, seq: u64, digit: char) -> Outgoing {
    Outgoing::Text(
        json!({"event": "dtmf", "sequence_number": seq, "stream_sid": w.ids.stream_sid,
               "dtmf": {"duration": "100", "digit": digit.to_string()}})
        .to_string(),
    )
}

pub fn stop(w: &BridgeWriter, seq: u64) -> Outgoing {
    Outgoing::Text(
        json!({"event": "stop", "sequence_number": seq, "stream_sid": w.ids.stream_sid,
               "stop": {"call_sid": w.ids.call_sid, "account_sid": w.ids.account_sid,
                        "reason": "callended"}})
        .to_string(),
    )
}

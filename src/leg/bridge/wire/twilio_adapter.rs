//! Twilio Media Streams through its own typed parser (`leg::twilio::wire`).

use super::{BridgeWriter, Ctx, Inbound, Outgoing, Reply, Start, Transmit, WireError};
use crate::leg::bridge::audio::AudioFormat;
use crate::leg::twilio::wire::{
    self as tw, Dtmf, FromTwilio, MediaFormat, Stop, ToTwilio, TwilioEvent,
};

pub fn parse(text: &str) -> Result<Inbound, WireError> {
    tw::parse_from_twilio(text).map(from_twilio)
}

/// The vocabulary-wide form of a parsed Twilio message.
pub fn from_twilio(msg: FromTwilio) -> Inbound {
    match msg.event {
        TwilioEvent::Connected { .. } => Inbound::Connected,
        TwilioEvent::Start(mut s) => {
            if s.stream_sid.is_none() {
                s.stream_sid = msg.stream_sid;
            }
            Inbound::Start(s)
        }
        TwilioEvent::Media(media) => Inbound::Media {
            media,
            seq: msg.sequence_number,
        },
        TwilioEvent::Dtmf(d) => Inbound::Dtmf(d.digit),
        TwilioEvent::Mark(m) => Inbound::Mark(m.name),
        TwilioEvent::Stop(_) => Inbound::Stop,
        TwilioEvent::Unknown { event } => Inbound::Unknown(event),
    }
}

pub fn format(start: &Start) -> Result<AudioFormat, String> {
    let f = start
        .media_format
        .clone()
        .unwrap_or_else(MediaFormat::mulaw_8k);
    if f.is_mulaw_8k_mono() {
        Ok(AudioFormat::PCMU_8K)
    } else {
        Err(format!(
            "start.mediaFormat is {f}; only audio/x-mulaw 8000 Hz mono is spoken here"
        ))
    }
}

/// The Twilio form of a transmit.
pub fn to_twilio(t: &Transmit, stream_sid: &str) -> ToTwilio {
    let stream_sid = stream_sid.to_owned();
    match t {
        Transmit::Media(payload) => ToTwilio::Media {
            stream_sid,
            payload: payload.clone(),
        },
        Transmit::Mark(name) => ToTwilio::Mark {
            stream_sid,
            name: name.clone(),
        },
        Transmit::Clear => ToTwilio::Clear { stream_sid },
    }
}

pub fn render(t: &Transmit, ctx: Ctx<'_>) -> Outgoing {
    Outgoing::Text(match t {
        // The per-frame message, written without copying the frame or the stream id first.
        Transmit::Media(payload) => ToTwilio::media_json(ctx.stream_sid, payload),
        t => to_twilio(t, ctx.stream_sid).to_json(),
    })
}

pub fn parse_reply(text: &str) -> Result<Reply, WireError> {
    Ok(match tw::parse_to_twilio(text)? {
        ToTwilio::Media { payload, .. } => Reply::Media(payload),
        ToTwilio::Mark { name, .. } => Reply::Mark(name),
        ToTwilio::Clear { .. } => Reply::Clear,
        ToTwilio::Unknown { event } => Reply::Unknown(event),
    })
}

fn msg(w: &BridgeWriter, seq: Option<u64>, event: TwilioEvent) -> Outgoing {
    let sid = seq.map(|_| w.ids.stream_sid.clone());
    Outgoing::Text(
        FromTwilio {
            sequence_number: seq,
            stream_sid: sid,
            event,
        }
        .to_json(),
    )
}

pub fn opening(w: &BridgeWriter, seq: &mut u64) -> Vec<Outgoing> {
    let connected = msg(
        w,
        None,
        TwilioEvent::Connected {
            protocol: Some("Call".into()),
            version: Some("1.0.0".into()),
        },
    );
    *seq += 1;
    let start = msg(
        w,
        Some(*seq),
        TwilioEvent::Start(Start {
            stream_sid: Some(w.ids.stream_sid.clone()),
            account_sid: Some(w.ids.account_sid.clone()),
            call_sid: Some(w.ids.call_sid.clone()),
            tracks: vec!["inbound".into()],
            custom_parameters: w.ids.custom_parameters.clone(),
            media_format: Some(MediaFormat::mulaw_8k()),
        }),
    );
    vec![connected, start]
}

pub fn dtmf(w: &BridgeWriter, seq: u64, digit: char) -> Outgoing {
    msg(
        w,
        Some(seq),
        TwilioEvent::Dtmf(Dtmf {
            track: Some("inbound_track".into()),
            digit,
        }),
    )
}

pub fn stop(w: &BridgeWriter, seq: u64) -> Outgoing {
    msg(
        w,
        Some(seq),
        TwilioEvent::Stop(Stop {
            account_sid: Some(w.ids.account_sid.clone()),
            call_sid: Some(w.ids.call_sid.clone()),
        }),
    )
}

//! Which bridge is on a socket, from its first text messages (the approach of pipecat's runner):
//! Vonage opens with `websocket:connected`; the others open with `connected` (ambiguous) and then
//! `start`, whose id fields differ in spelling:
//!
//! | dialect | clue in `start` |
//! |---|---|
//! | Twilio | `start.streamSid` / `start.callSid` (camelCase, `…Sid`) |
//! | Telnyx | top-level `stream_id` or `start.call_control_id` |
//! | Plivo | `start.streamId` / `start.callId` |
//! | Exotel | `start.stream_sid` / `start.call_sid` (snake_case, `…_sid`) |
//!
//! A route of its own per bridge is still the robust choice (a signature must be checked before
//! any message is read); detection serves a shared path and is a sanity check.

use serde_json::Value;

use super::Dialect;

/// The dialect a message reveals, or `None` when it reveals nothing (`connected`, media, garbage).
pub fn detect(text: &str) -> Option<Dialect> {
    // A start is small; anything huge is not one.
    if text.len() > super::wire::MAX_INBOUND_MESSAGE {
        return None;
    }
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    let event = map.get("event").and_then(Value::as_str)?;
    if event == super::wire::VONAGE_CONNECTED {
        return Some(Dialect::Vonage);
    }
    if event != "start" {
        return None;
    }
    let start = map.get("start").and_then(Value::as_object);
    let in_start = |k: &str| start.is_some_and(|s| s.get(k).is_some_and(|v| !v.is_null()));
    let top = |k: &str| map.get(k).is_some_and(|v| !v.is_null());
    if top("stream_id") || in_start("call_control_id") {
        Some(Dialect::Telnyx)
    } else if in_start("streamSid") || in_start("callSid") || (top("streamSid") && start.is_some())
    {
        Some(Dialect::Twilio)
    } else if in_start("streamId") || in_start("callId") {
        Some(Dialect::Plivo)
    } else if in_start("stream_sid") || in_start("call_sid") || top("stream_sid") {
        Some(Dialect::Exotel)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leg::bridge::audio::AudioFormat;
    use crate::leg::bridge::wire::{BridgeWriter, CallIds, Outgoing};

    #[test]
    fn every_callers_opening_is_recognised_and_connected_alone_is_not() {
        for d in Dialect::ALL {
            let ids = CallIds {
                account_sid: "AC1".into(),
                call_sid: "CA1".into(),
                stream_sid: "MZ1".into(),
                ..Default::default()
            };
            let w = BridgeWriter::new(d, ids, AudioFormat::PCMU_8K);
            let mut seq = 0;
            let found: Vec<Option<Dialect>> = w
                .opening(&mut seq)
                .iter()
                .map(|m| match m {
                    Outgoing::Text(t) => detect(t),
                    Outgoing::Binary(_) => None,
                })
                .collect();
            assert_eq!(found.last(), Some(&Some(d)), "{d}");
            assert!(found[..found.len() - 1].iter().all(Option::is_none), "{d}");
        }
        assert_eq!(detect("garbage"), None);
        assert_eq!(detect(r#"{"event":"start"}"#), None);
        assert_eq!(detect(r#"{"event":"media","streamSid":"MZ"}"#), None);
    }
}

//! Twilio Media Streams wire format: every message both ways parses from the shapes Twilio (and
//! the bridges speaking its dialect) send, and every kind of garbage is refused with an error
//! that names the event and field.

use baton::leg::twilio::wire::{
    FromTwilio, InboundWriter, MAX_INBOUND_MESSAGE, MediaFormat, ToTwilio, TwilioEvent, WireError,
    parse_from_twilio, parse_to_twilio,
};

fn err(text: &str) -> String {
    match parse_from_twilio(text) {
        Ok(m) => panic!("accepted {text:?} as {m:?}"),
        Err(e) => e.to_string(),
    }
}

fn assert_mentions(e: &str, words: &[&str]) {
    for w in words {
        assert!(e.contains(w), "error {e:?} does not mention {w:?}");
    }
}

#[test]
fn documented_messages_parse() {
    let m =
        parse_from_twilio(r#"{"event":"connected","protocol":"Call","version":"1.0.0"}"#).unwrap();
    assert_eq!(
        m.event,
        TwilioEvent::Connected {
            protocol: Some("Call".into()),
            version: Some("1.0.0".into())
        }
    );

    let m = parse_from_twilio(
        r#"{"event":"start","sequenceNumber":"1","streamSid":"MZ1",
            "start":{"streamSid":"MZ1","accountSid":"AC1","callSid":"CA1","tracks":["inbound"],
                     "customParameters":{"tenant":"acme","n":7},
                     "mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1}}}"#,
    )
    .unwrap();
    assert_eq!(m.sequence_number, Some(1));
    let TwilioEvent::Start(s) = m.event else {
        panic!("not start")
    };
    assert_eq!(s.stream_sid.as_deref(), Some("MZ1"));
    assert_eq!(s.account_sid.as_deref(), Some("AC1"));
    assert_eq!(s.call_sid.as_deref(), Some("CA1"));
    assert_eq!(s.tracks, ["inbound"]);
    assert_eq!(s.custom_parameters["tenant"], "acme");
    assert_eq!(s.custom_parameters["n"], "7");
    assert_eq!(s.media_format, Some(MediaFormat::mulaw_8k()));

    let m = parse_from_twilio(
        r#"{"event":"media","sequenceNumber":"3","streamSid":"MZ1",
            "media":{"track":"inbound","chunk":"1","timestamp":"5","payload":"//7+"}}"#,
    )
    .unwrap();
    let TwilioEvent::Media(media) = m.event else {
        panic!("not media")
    };
    assert_eq!(media.track.as_deref(), Some("inbound"));
    assert_eq!((media.chunk, media.timestamp), (Some(1), Some(5)));
    assert_eq!(media.payload, [0xFF, 0xFE, 0xFE]);

    let m = parse_from_twilio(
        r##"{"event":"dtmf","sequenceNumber":"5","streamSid":"MZ1","dtmf":{"track":"inbound_track","digit":"#"}}"##,
    )
    .unwrap();
    let TwilioEvent::Dtmf(d) = m.event else {
        panic!("not dtmf")
    };
    assert_eq!(d.digit, '#');

    let m = parse_from_twilio(
        r#"{"event":"mark","sequenceNumber":"4","streamSid":"MZ1","mark":{"name":"b:20"}}"#,
    )
    .unwrap();
    assert!(matches!(m.event, TwilioEvent::Mark(ref k) if k.name == "b:20"));

    let m = parse_from_twilio(
        r#"{"event":"stop","sequenceNumber":"99","streamSid":"MZ1","stop":{"accountSid":"AC1","callSid":"CA1"}}"#,
    )
    .unwrap();
    let TwilioEvent::Stop(stop) = m.event else {
        panic!("not stop")
    };
    assert_eq!(stop.call_sid.as_deref(), Some("CA1"));
    assert_eq!(m.sequence_number, Some(99));
}

#[test]
fn lenient_where_bridges_differ() {
    // Numbers as numbers, missing optional fields, extra fields, streamSid only at the top level.
    let m = parse_from_twilio(
        r#"{"event":"start","sequenceNumber":1,"streamSid":"MZ9","extra":{"x":[1,2]},
            "start":{"mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":"8000","channels":"1"}}}"#,
    )
    .unwrap();
    let TwilioEvent::Start(s) = m.event else {
        panic!("not start")
    };
    assert_eq!(s.stream_sid.as_deref(), Some("MZ9"));
    assert!(s.tracks.is_empty() && s.custom_parameters.is_empty());
    assert!(s.media_format.unwrap().is_mulaw_8k_mono());

    let m = parse_from_twilio(
        r#"{"event":"media","media":{"payload":"AAAA","timestamp":40,"chunk":3,"new":true}}"#,
    )
    .unwrap();
    let TwilioEvent::Media(media) = m.event else {
        panic!("not media")
    };
    assert_eq!(
        (media.chunk, media.timestamp, media.track),
        (Some(3), Some(40), None)
    );

    // Unknown events are tolerated and named, even when they reuse another event's field names.
    let m = parse_from_twilio(r#"{"event":"transcript","media":5,"streamSid":"MZ1"}"#).unwrap();
    assert_eq!(
        m.event,
        TwilioEvent::Unknown {
            event: "transcript".into()
        }
    );
    // A stop without a body is still a stop.
    assert!(matches!(
        parse_from_twilio(r#"{"event":"stop"}"#).unwrap().event,
        TwilioEvent::Stop(_)
    ));
}

#[test]
fn garbage_is_refused_with_a_useful_message() {
    assert_mentions(&err("hello"), &["not JSON", "line 1 column 1"]);
    assert_mentions(&err(r#"{"event":"media""#), &["not JSON"]);
    assert_mentions(&err("[1,2]"), &["not a JSON object", "array"]);
    assert_mentions(&err(r#"["media"]"#), &["not a JSON object"]);
    assert_mentions(&err("42"), &["not a JSON object", "number"]);
    assert_mentions(&err(r#"{"media":{"payload":""}}"#), &["no \"event\""]);
    assert_mentions(&err(r#"{"event":7}"#), &["\"event\" must be a string", "7"]);
    assert_mentions(
        &err(r#"{"event":"media"}"#),
        &["\"media\" message", "media", "missing"],
    );
    assert_mentions(
        &err(r#"{"event":"media","media":{"track":"inbound","chunk":"1"}}"#),
        &["\"media\" message", "media.payload", "missing"],
    );
    assert_mentions(
        &err(r#"{"event":"media","media":{"payload":"!!!not base64"}}"#),
        &["\"media\" message", "media.payload", "base64"],
    );
    assert_mentions(
        &err(r#"{"event":"media","media":{"payload":"AAAA","chunk":"one"}}"#),
        &["\"media\" message", "media.chunk", "\"one\""],
    );
    assert_mentions(
        &err(r#"{"event":"media","media":{"payload":"AAAA","timestamp":-5}}"#),
        &["media.timestamp", "-5"],
    );
    assert_mentions(
        &err(r#"{"event":"media","media":{"payload":12}}"#),
        &["\"media\" message", "media.payload"],
    );
    assert_mentions(
        &err(r#"{"event":"media","sequenceNumber":"x1","media":{"payload":"AAAA"}}"#),
        &["\"media\" message", "sequenceNumber", "\"x1\""],
    );
    assert_mentions(
        &err(r#"{"event":"start"}"#),
        &["\"start\" message", "start", "missing"],
    );
    assert_mentions(
        &err(r#"{"event":"start","start":{"accountSid":"AC1"}}"#),
        &["\"start\" message", "start.streamSid", "missing"],
    );
    assert_mentions(
        &err(r#"{"event":"start","streamSid":"MZ","start":{"tracks":"inbound"}}"#),
        &["\"start\" message", "start.tracks"],
    );
    assert_mentions(
        &err(r#"{"event":"dtmf","dtmf":{"digit":"12"}}"#),
        &["\"dtmf\" message", "dtmf.digit", "one key", "\"12\""],
    );
    assert_mentions(
        &err(r#"{"event":"dtmf","dtmf":{}}"#),
        &["dtmf.digit", "missing"],
    );
    assert_mentions(
        &err(r#"{"event":"mark","mark":{}}"#),
        &["\"mark\" message", "mark.name", "missing"],
    );
    assert_mentions(
        &err(r#"{"event":"mark"}"#),
        &["\"mark\" message", "mark", "missing"],
    );
}

#[test]
fn oversized_messages_are_refused_before_parsing() {
    let payload = "A".repeat(1 << 20);
    let text = format!(r#"{{"event":"media","media":{{"payload":"{payload}"}}}}"#);
    let e = parse_from_twilio(&text).unwrap_err();
    assert!(
        matches!(
            e,
            WireError::TooLarge {
                limit: MAX_INBOUND_MESSAGE,
                ..
            }
        ),
        "{e:?}"
    );
    assert_mentions(&e.to_string(), &["refused", "65536"]);
    // Just under the limit is fine.
    let ok = "A".repeat(MAX_INBOUND_MESSAGE - 64);
    let text = format!(r#"{{"event":"media","media":{{"payload":"{ok}"}}}}"#);
    assert!(parse_from_twilio(&text).is_ok());
}

#[test]
fn messages_round_trip_through_json() {
    let w = InboundWriter::new("MZ\"quoted\"");
    let mut text = String::new();
    w.media(7, 3, 40, &[0, 1, 2, 255], &mut text);
    let m = parse_from_twilio(&text).unwrap();
    assert_eq!(m.sequence_number, Some(7));
    assert_eq!(m.stream_sid.as_deref(), Some("MZ\"quoted\""));
    let TwilioEvent::Media(media) = m.event else {
        panic!("not media")
    };
    assert_eq!((media.chunk, media.timestamp), (Some(3), Some(40)));
    assert_eq!(media.payload, [0, 1, 2, 255]);
    // The counters are strings, as Twilio sends them.
    assert!(
        text.contains(r#""chunk":"3""#) && text.contains(r#""timestamp":"40""#),
        "{text}"
    );

    text.clear();
    w.mark(8, "b:\\20\n", &mut text);
    let m = parse_from_twilio(&text).unwrap();
    assert!(
        matches!(m.event, TwilioEvent::Mark(ref k) if k.name == "b:\\20\n"),
        "{text}"
    );

    let stop = FromTwilio {
        sequence_number: Some(9),
        stream_sid: Some("MZ1".into()),
        event: TwilioEvent::Stop(Default::default()),
    };
    assert_eq!(parse_from_twilio(&stop.to_json()).unwrap(), stop);

    for msg in [
        ToTwilio::Media {
            stream_sid: "MZ1".into(),
            payload: vec![0xFF; 160],
        },
        ToTwilio::Mark {
            stream_sid: "MZ1".into(),
            name: "b:1234".into(),
        },
        ToTwilio::Clear {
            stream_sid: "MZ1".into(),
        },
    ] {
        assert_eq!(parse_to_twilio(&msg.to_json()).unwrap(), msg);
    }
    // What Twilio documents as outbound shapes.
    assert_eq!(
        ToTwilio::Clear {
            stream_sid: "MZ1".into()
        }
        .to_json(),
        r#"{"event":"clear","streamSid":"MZ1"}"#
    );
    assert_eq!(
        ToTwilio::Mark {
            stream_sid: "MZ1".into(),
            name: "x".into()
        }
        .to_json(),
        r#"{"event":"mark","streamSid":"MZ1","mark":{"name":"x"}}"#
    );
}

#[test]
fn outbound_parser_refuses_garbage_too() {
    let e = parse_to_twilio(r#"{"event":"media","streamSid":"MZ","media":{}}"#).unwrap_err();
    assert_mentions(
        &e.to_string(),
        &["\"media\" message", "media.payload", "missing"],
    );
    let e = parse_to_twilio(r#"{"event":"mark","streamSid":"MZ","mark":{"name":3}}"#).unwrap_err();
    assert_mentions(&e.to_string(), &["\"mark\" message", "mark.name"]);
    assert_eq!(
        parse_to_twilio(r#"{"event":"sendDigits"}"#).unwrap(),
        ToTwilio::Unknown {
            event: "sendDigits".into()
        }
    );
    // Outbound media may be long: a minute of audio in one message is accepted.
    let minute = ToTwilio::Media {
        stream_sid: "MZ".into(),
        payload: vec![0x7F; 8000 * 60],
    };
    assert_eq!(parse_to_twilio(&minute.to_json()).unwrap(), minute);
}

/// A `media` message reads the same whether its strings are plain (read in one pass, borrowed)
/// or escaped (read the general way); garbage in either shape is refused alike.
#[test]
fn media_reads_the_same_plain_or_escaped() {
    let plain = parse_from_twilio(
        r#"{"event":"media","sequenceNumber":"3","streamSid":"MZ/1",
            "media":{"track":"inbound","chunk":"1","timestamp":5,"payload":"//7+"}}"#,
    )
    .unwrap();
    let escaped = parse_from_twilio(
        r#"{"event":"m\u0065dia","sequenceNumber":"3","streamSid":"MZ\/1",
            "media":{"track":"in\u0062ound","chunk":1,"timestamp":"5","payload":"\/\/7+"}}"#,
    )
    .unwrap();
    assert_eq!(plain, escaped);
    assert_eq!(plain.stream_sid.as_deref(), Some("MZ/1"));
    // Positional (array) form is not an object, whatever it holds.
    assert_mentions(
        &err(r#"["media","3","MZ1",{"payload":"//7+"}]"#),
        &["not a JSON object"],
    );
    assert_mentions(
        &err(r#"{"event":"media","media":{"payload":"@@"}}"#),
        &["media", "media.payload", "base64"],
    );
    assert_mentions(
        &err(r#"{"event":"media","media":{"track":7,"payload":"//7+"}}"#),
        &["media", "track"],
    );
    // Toward Twilio likewise.
    let out = parse_to_twilio(r#"{"event":"media","streamSid":"MZ1","media":{"payload":"//7+"}}"#)
        .unwrap();
    assert_eq!(
        out,
        parse_to_twilio(r#"{"event":"media","streamSid":"MZ\u0031","media":{"payload":"\/\/7+"}}"#)
            .unwrap()
    );
    assert_eq!(parse_to_twilio(&out.to_json()).unwrap(), out);
    // A body in positional (array) form is refused toward Twilio as it always was.
    assert!(parse_to_twilio(r#"{"event":"media","media":["a","1","2","//7+"]}"#).is_err());
}

//! Every parser of input baton does not control, by name, each behind one byte-level entry point:
//! `run(bytes, name) -> Result<(), message>`. The bad-input corpus (`tests/corpus/<parser>/`) and
//! the fuzz targets (`fuzz/fuzz_targets/<parser>.rs`) both drive the parsers through this table,
//! so a parser added later (another telephony dialect, another leg's framing) is covered by
//! adding one [`Parser`] here, a corpus folder and a three-line fuzz target.
//!
//! Each entry calls the same function production code calls, on the same kind of input (a model
//! frame, a Twilio text message, a file's bytes, a raw HTTP response), and turns its outcome into
//! `Ok(())` or the error message a person would read. The contract every entry keeps: no panic,
//! no hang, bounded memory, and an `Err` that names what is wrong.

use std::path::Path;

use crate::model::ModelEvent;

/// One parser of outside input.
pub struct Parser {
    /// The corpus folder and fuzz target name.
    pub name: &'static str,
    /// What it parses, for people.
    pub input: &'static str,
    /// Parses `bytes`; `name` labels the input in errors (a file path, a case name).
    pub run: fn(bytes: &[u8], name: &Path) -> Result<(), String>,
}

/// All of them.
pub const PARSERS: &[Parser] = &[
    Parser {
        name: "gemini_server",
        input: "one Gemini Live server frame (codec::decode, then codec::into_events)",
        run: gemini_server,
    },
    Parser {
        name: "openai_server",
        input: "one OpenAI Realtime server event (codec::decode, then the Decoder of a 24 kHz \
                session)",
        run: openai_server,
    },
    Parser {
        name: "twilio_event",
        input: "one Twilio Media Streams text message (wire::parse_from_twilio)",
        run: twilio_event,
    },
    Parser {
        name: "twilio_signature",
        input: "line 1: the configured public stream URL; line 2, if any: the X-Twilio-Signature \
                header (signature::verify_upgrade with a fixed token)",
        run: twilio_signature,
    },
    Parser {
        name: "agent_set",
        input: "an agent-set TOML file (agents::parse)",
        run: agent_set,
    },
    Parser {
        name: "tool_response",
        input: "the raw HTTP/1.1 response of an http tool (runner::exchange_over)",
        run: tool_response,
    },
    Parser {
        name: "wav",
        input: "a WAV file (audio::wav::parse)",
        run: wav,
    },
    Parser {
        name: "daemon_config",
        input: "the daemon's TOML config (config::parse)",
        run: daemon_config,
    },
    Parser {
        name: "sdp_offer",
        input: "the body of POST /whip, an SDP offer (leg::webrtc::peer::check_offer)",
        run: sdp_offer,
    },
    Parser {
        name: "audiosocket_stream",
        input: "the bytes an Asterisk AudioSocket connection sends, start to close \
                (leg::audiosocket::wire::Decoder)",
        run: audiosocket_stream,
    },
    Parser {
        name: "control_bus",
        input: "one notification on the cluster's control bus (server::cluster::bus::parse_message)",
        run: control_bus,
    },
    Parser {
        name: "stream_control",
        input: "one JSON control message of WS /stream (leg::stream::wire::parse)",
        run: stream_control,
    },
    Parser {
        name: "telnyx_event",
        input: "one Telnyx media-streaming text message (leg::bridge::wire::parse, and \
                wire::format on a start)",
        run: telnyx_event,
    },
    Parser {
        name: "plivo_event",
        input: "one Plivo Audio Streams text message (leg::bridge::wire::parse, and \
                wire::format on a start)",
        run: plivo_event,
    },
    Parser {
        name: "exotel_event",
        input: "one Exotel Voicebot text message (leg::bridge::wire::parse, and wire::format \
                on a start)",
        run: exotel_event,
    },
    Parser {
        name: "vonage_event",
        input: "one Vonage Voice API WebSocket text message (leg::bridge::wire::parse, and \
                wire::format on websocket:connected)",
        run: vonage_event,
    },
    Parser {
        name: "media_stream_detect",
        input: "the text messages a socket on /media-stream sends, one per line, read until its \
                dialect is detected and its start is taken (leg::bridge::MediaStream, detecting)",
        run: media_stream_detect,
    },
    Parser {
        name: "mock_scenario",
        input: "a mock model scenario TOML (mock::Scenario::parse)",
        run: mock_scenario,
    },
    Parser {
        name: "mcp_tool",
        input: "one tool of an MCP server's tools/list, as JSON (rmcp's Tool, then \
                mcp::hub::check_tool: its name and input schema as the models would see them)",
        run: mcp_tool,
    },
    Parser {
        name: "sip_message",
        input: "one SIP message as it arrives on the SIP port (rsipstack's parser; for a new \
                INVITE, what baton decides on it: leg::sip::uas::decide on its source, \
                credentials and SDP offer)",
        run: sip_message,
    },
    Parser {
        name: "sip_sdp",
        input: "a SIP peer's SDP offer, the body of an INVITE or re-INVITE (leg::sip::sdp::parse, \
                then sdp::negotiate with PCMU and PCMA)",
        run: sip_sdp,
    },
    Parser {
        name: "rtp_packet",
        input: "one datagram on a SIP call's RTP port (leg::sip::rtp::parse; a telephone-event \
                payload, type 101, by leg::sip::dtmf::parse_event)",
        run: rtp_packet,
    },
    Parser {
        name: "rtcp_packet",
        input: "one datagram on a SIP call's RTCP port (leg::sip::rtcp::parse)",
        run: rtcp_packet,
    },
    Parser {
        name: "twilio_rest_answer",
        input: "Twilio's answer to a call update (a blind transfer's redirect): line 1 the HTTP \
                status, the rest its body (transfer::twilio::parse_answer)",
        run: twilio_rest_answer,
    },
    Parser {
        name: "sipfrag",
        input: "the message/sipfrag body of a REFER's NOTIFY (transfer::sipfrag::parse)",
        run: sipfrag,
    },
    Parser {
        name: "human_agent",
        input: "a human agent's table as TOML: destination, ring timeout, on no answer \
                (transfer::destination::parse)",
        run: human_agent,
    },
];

fn twilio_rest_answer(bytes: &[u8], _name: &Path) -> Result<(), String> {
    let (head, body) = match bytes.iter().position(|&b| b == b'\n') {
        Some(i) => (&bytes[..i], &bytes[i + 1..]),
        None => (bytes, &b""[..]),
    };
    let head = std::str::from_utf8(head).map_err(|_| "the status line is not text".to_owned())?;
    let status: u16 = head
        .trim()
        .parse()
        .ok()
        .filter(|s| (100..=599).contains(s))
        .ok_or_else(|| format!("{:?} is not an HTTP status", head.trim()))?;
    crate::transfer::twilio::parse_answer(status, body)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn sipfrag(bytes: &[u8], _name: &Path) -> Result<(), String> {
    crate::transfer::sipfrag::parse(bytes)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn human_agent(bytes: &[u8], _name: &Path) -> Result<(), String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the table is not UTF-8 text".to_owned())?;
    crate::transfer::destination::parse(text, "agents.person")
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The parser called `name`.
pub fn find(name: &str) -> Option<&'static Parser> {
    PARSERS.iter().find(|p| p.name == name)
}

/// The name fuzz inputs are parsed under: a folder that does not exist, so paths a fuzzed file
/// names relative to itself (clips, agent sets) are never found.
pub const FUZZ_INPUT: &str = "/nonexistent/baton-fuzz/input";

/// One fuzz execution: the parser called `name` on `data`. Beyond "no panic, no hang" it checks
/// that a refusal says something. Inputs naming device or kernel files are skipped: a config may
/// name any file, and reading `/dev/zero` is the operator's choice, not a parser's defect.
pub fn fuzz(name: &str, data: &[u8]) {
    let Some(p) = find(name) else {
        panic!("no parser named {name:?}")
    };
    let special = [&b"/dev/"[..], b"/proc/", b"/sys/"];
    if special
        .iter()
        .any(|s| data.windows(s.len()).any(|w| w == *s))
    {
        return;
    }
    if let Err(message) = (p.run)(data, Path::new(FUZZ_INPUT)) {
        assert!(!message.trim().is_empty(), "{name}: an empty error message");
    }
}

fn sip_message(bytes: &[u8], _name: &Path) -> Result<(), String> {
    use crate::leg::sip::{sdp::Codec, ua, uas};
    use rsipstack::sip::SipMessage;
    use rsipstack::sip::prelude::*;
    // What the UDP transport reads at most.
    if bytes.len() > 65_535 {
        return Err(format!(
            "{} bytes is over a SIP datagram's 65535",
            bytes.len()
        ));
    }
    let msg =
        SipMessage::try_from(bytes.to_vec()).map_err(|e| format!("not a SIP message: {e}"))?;
    let SipMessage::Request(req) = msg else {
        return Ok(());
    };
    if req.method != rsipstack::sip::Method::Invite {
        return Ok(());
    }
    let authorization = req.header_value("Authorization");
    let content_type = req.header_value("Content-Type");
    let request_uri = req.uri.to_string();
    let facts = uas::InviteFacts {
        source: ua::source_ip(&req),
        authorization: authorization.as_deref(),
        request_uri: &request_uri,
        content_type: content_type.as_deref(),
        body: &req.body,
    };
    // With credentials, a policy that checks them; without, one that takes anyone.
    let policy = uas::Policy {
        allow: Vec::new(),
        digest: authorization.is_some().then(|| uas::DigestPolicy {
            user: "corpus".into(),
            password: crate::secret::Secret::new("corpus-password"),
            realm: "baton".into(),
        }),
        codecs: Codec::ALL.to_vec(),
    };
    let mut nonces = uas::Nonces::default();
    let now = tokio::time::Instant::now();
    let _called = ua::called_user(&req);
    match uas::decide(&facts, &policy, &uas::Capacity::Open, &mut nonces, now) {
        uas::Decision::Answer { .. } => Ok(()),
        uas::Decision::Reject { status, reason, .. } => Err(format!("{status}: {reason}")),
        uas::Decision::Challenge(_) => {
            Err("401: the credentials are not valid for this SIP account (challenged again)".into())
        }
    }
}

fn sip_sdp(bytes: &[u8], _name: &Path) -> Result<(), String> {
    use crate::leg::sip::sdp;
    let offer = sdp::parse(bytes).map_err(|e| e.to_string())?;
    sdp::negotiate(&offer, &sdp::Codec::ALL)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn rtp_packet(bytes: &[u8], _name: &Path) -> Result<(), String> {
    use crate::leg::sip::{dtmf, opus, rtp};
    let p = rtp::parse(bytes).map_err(|e| e.to_string())?;
    if p.pt == 101 {
        dtmf::parse_event(&p.payload).map_err(|e| e.to_string())?;
    }
    if p.pt == opus::OFFERED_OPUS_PT {
        // As the jitter buffer takes it (its length from the TOC), then through libopus.
        let n = opus::packet_samples(&p.payload, 16_000).map_err(|e| e.to_string())?;
        if n == 0 || n > 1920 {
            return Err(format!("an Opus packet of {n} samples is not 2.5-120 ms"));
        }
        let mut dec = opus::OpusDecoder::new(16_000).map_err(|e| e.to_string())?;
        let mut out = vec![0i16; n];
        if !crate::leg::sip::jitter::Decoder::decode(&mut dec, &p.payload, &mut out) {
            return Err("libopus could not decode the Opus packet".into());
        }
    }
    Ok(())
}

fn rtcp_packet(bytes: &[u8], _name: &Path) -> Result<(), String> {
    crate::leg::sip::rtcp::parse(bytes, 0)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn mcp_tool(bytes: &[u8], name: &Path) -> Result<(), String> {
    let tool: rmcp::model::Tool = serde_json::from_slice(bytes)
        .map_err(|e| format!("{}: not an MCP tool: {e}", name.display()))?;
    crate::mcp::hub::check_tool("corpus", &tool)
        .map(drop)
        .map_err(|r| r.to_string())
}

/// Text files are read as UTF-8 by their loaders; the same refusal, naming the input.
fn text<'a>(bytes: &'a [u8], name: &Path) -> Result<&'a str, String> {
    std::str::from_utf8(bytes).map_err(|e| format!("{}: not UTF-8 text: {e}", name.display()))
}

fn gemini_server(bytes: &[u8], _name: &Path) -> Result<(), String> {
    use crate::model::gemini::codec;
    let msg = codec::decode(bytes).map_err(|e| e.to_string())?;
    let mut events = Vec::new();
    codec::into_events(msg, &mut events);
    protocol_errors(events)
}

fn openai_server(bytes: &[u8], _name: &Path) -> Result<(), String> {
    use crate::model::openai::codec;
    use crate::model::openai::wire::AudioFormat;
    let ev = codec::decode(bytes).map_err(|e| e.to_string())?;
    let mut events = Vec::new();
    codec::Decoder::new(AudioFormat::PCM24K).into_events(ev, &mut events);
    protocol_errors(events)
}

/// A model message's events: an error where the message made any protocol error.
fn protocol_errors(events: Vec<ModelEvent>) -> Result<(), String> {
    let errors: Vec<String> = events
        .into_iter()
        .filter_map(|e| match e {
            ModelEvent::ProtocolError(m) => Some(m),
            _ => None,
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

fn sdp_offer(bytes: &[u8], _name: &Path) -> Result<(), String> {
    let text =
        std::str::from_utf8(bytes).map_err(|e| format!("the SDP offer is not UTF-8 text: {e}"))?;
    crate::leg::webrtc::peer::check_offer(text).map_err(|e| e.to_string())
}

/// The whole connection: every message must decode, and the connection must not end inside one.
fn audiosocket_stream(bytes: &[u8], _name: &Path) -> Result<(), String> {
    use crate::leg::audiosocket::wire::{Decoder, WireError};
    let mut decoder = Decoder::new(crate::leg::audiosocket::wire::DEFAULT_MAX_PAYLOAD);
    decoder.push(bytes);
    while decoder.next_message().map_err(|e| e.to_string())?.is_some() {}
    match decoder.pending() {
        0 => Ok(()),
        have if have < 3 => Err(WireError::TruncatedHeader { have }.to_string()),
        have => Err(format!(
            "connection ended inside a message ({have} bytes of it received)"
        )),
    }
}

fn control_bus(bytes: &[u8], _name: &Path) -> Result<(), String> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("a control bus message must be UTF-8 text: {e}"))?;
    crate::server::cluster::bus::parse_message(text)
}

fn stream_control(bytes: &[u8], _name: &Path) -> Result<(), String> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("a /stream control message must be UTF-8 text: {e}"))?;
    crate::leg::stream::wire::parse(text)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn twilio_event(bytes: &[u8], _name: &Path) -> Result<(), String> {
    // The socket layer hands the parser text frames only; a binary frame is ignored before it.
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("a Twilio message must be UTF-8 text: {e}"))?;
    crate::leg::twilio::wire::parse_from_twilio(text)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// One text message of a bridge speaking `dialect`, and the audio format of a `start` (a format
/// baton cannot speak refuses the stream, with the reason).
fn bridge_event(bytes: &[u8], dialect: crate::leg::bridge::Dialect) -> Result<(), String> {
    use crate::leg::bridge::wire::{self, Inbound};
    // The socket layer hands the parser text frames only (Vonage's binary frames are raw audio).
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("a {dialect} message must be UTF-8 text: {e}"))?;
    match wire::parse(dialect, text).map_err(|e| e.to_string())? {
        Inbound::Start(start) => wire::format(dialect, &start, None).map(drop),
        _ => Ok(()),
    }
}

fn telnyx_event(bytes: &[u8], _name: &Path) -> Result<(), String> {
    bridge_event(bytes, crate::leg::bridge::Dialect::Telnyx)
}

fn plivo_event(bytes: &[u8], _name: &Path) -> Result<(), String> {
    bridge_event(bytes, crate::leg::bridge::Dialect::Plivo)
}

fn exotel_event(bytes: &[u8], _name: &Path) -> Result<(), String> {
    bridge_event(bytes, crate::leg::bridge::Dialect::Exotel)
}

fn vonage_event(bytes: &[u8], _name: &Path) -> Result<(), String> {
    bridge_event(bytes, crate::leg::bridge::Dialect::Vonage)
}

/// A shared-path socket's opening: every line one text message, fed to a detecting stream until
/// it has started; the first refusal is the error, and so is an opening that never starts.
fn media_stream_detect(bytes: &[u8], _name: &Path) -> Result<(), String> {
    use crate::leg::bridge::{DialectChoice, MediaStream, StreamOptions};
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("a media-stream message must be UTF-8 text: {e}"))?;
    let mut stream = MediaStream::new(DialectChoice::Detect, StreamOptions::default());
    let now = tokio::time::Instant::now();
    let mut read = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        read += 1;
        stream.handle_text(line, now).map_err(|e| e.to_string())?;
        if stream.start_info().is_some() {
            return Ok(());
        }
    }
    Err(match stream.dialect() {
        Some(d) => format!("{d} stream never started: no usable \"start\" in {read} message(s)"),
        None => format!("no dialect recognised in {read} message(s), and no \"start\""),
    })
}

/// The token the signature corpus is signed with.
pub const SIGNATURE_TEST_TOKEN: &str = "corpus-auth-token-0000000000000000";

fn twilio_signature(bytes: &[u8], _name: &Path) -> Result<(), String> {
    use crate::leg::twilio::signature::{self, AuthToken, SIGNATURE_HEADER};
    let mut lines = bytes.splitn(2, |&b| b == b'\n');
    let url = lines.next().unwrap_or_default();
    let url = std::str::from_utf8(url)
        .map_err(|e| format!("the public URL is not UTF-8 text: {e}"))?
        .trim_end_matches('\r');
    let mut headers = axum::http::HeaderMap::new();
    if let Some(value) = lines.next() {
        let value = value.strip_suffix(b"\n").unwrap_or(value);
        // An HTTP server refuses a header value with control characters before any handler.
        let v = axum::http::HeaderValue::from_bytes(value)
            .map_err(|_| "the X-Twilio-Signature header has bytes HTTP does not allow")?;
        headers.insert(SIGNATURE_HEADER, v);
    }
    signature::verify_upgrade(&headers, url, &AuthToken::new(SIGNATURE_TEST_TOKEN))
        .map_err(|e| e.to_string())
}

fn agent_set(bytes: &[u8], name: &Path) -> Result<(), String> {
    crate::agents::parse(text(bytes, name)?, name)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn wav(bytes: &[u8], name: &Path) -> Result<(), String> {
    crate::audio::wav::parse(bytes, name)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn daemon_config(bytes: &[u8], name: &Path) -> Result<(), String> {
    crate::config::parse(text(bytes, name)?, name)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn mock_scenario(bytes: &[u8], name: &Path) -> Result<(), String> {
    crate::mock::Scenario::parse(text(bytes, name)?, name)
        .map(drop)
        .map_err(|e| e.to_string())
}

thread_local! {
    static RUNTIME: Option<tokio::runtime::Runtime> = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok();
}

/// The URL the tool-response corpus pretends to have called.
pub const TOOL_TEST_URL: &str = "http://tool.test/lookup";

fn tool_response(bytes: &[u8], _name: &Path) -> Result<(), String> {
    use bytes::Bytes;
    use http_body_util::Full;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let url = url::Url::parse(TOOL_TEST_URL).map_err(|e| e.to_string())?;
    let req = http::Request::post(url.path())
        .header(http::header::HOST, "tool.test")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from_static(b"{}")))
        .map_err(|e| e.to_string())?;
    let response = bytes.to_vec();
    let exchange = async move {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let peer = tokio::spawn(async move {
            // Answer after the whole request (its body is `{}`), as a server does.
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n{}") {
                match server.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = server.write_all(&response).await;
            let _ = server.shutdown().await;
            // Keep reading until the client is done, as a server that closed its side would.
            let mut sink = Vec::new();
            let _ = server.read_to_end(&mut sink).await;
        });
        let out = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            crate::agents::runner::exchange_over(client, "corpus", &url, req),
        )
        .await;
        peer.abort();
        match out {
            Ok(r) => r.map(drop).map_err(|e| e.to_string()),
            Err(_) => Err("no answer within 5 s".to_owned()),
        }
    };
    RUNTIME.with(|rt| match rt {
        Some(rt) => rt.block_on(exchange),
        None => Err("cannot start a runtime".to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_good_input_passes() {
        let mut names: Vec<_> = PARSERS.iter().map(|p| p.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), PARSERS.len());
        let ok = |parser: &str, input: &[u8]| (find(parser).unwrap().run)(input, Path::new("x"));
        assert_eq!(
            ok(
                "gemini_server",
                br#"{"serverContent":{"turnComplete":true}}"#
            ),
            Ok(())
        );
        assert_eq!(
            ok("twilio_event", br#"{"event":"mark","mark":{"name":"a"}}"#),
            Ok(())
        );
        assert_eq!(
            ok(
                "tool_response",
                b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n{\"ok\":true}"
            ),
            Ok(())
        );
        let signed = crate::leg::twilio::signature::sign(
            "wss://b.example.com/twilio",
            &[],
            &crate::secret::Secret::new(SIGNATURE_TEST_TOKEN),
        );
        assert_eq!(
            ok(
                "twilio_signature",
                format!("wss://b.example.com/twilio\n{signed}").as_bytes()
            ),
            Ok(())
        );
        assert_eq!(ok("daemon_config", b""), Ok(()));
        assert_eq!(
            ok(
                "telnyx_event",
                br#"{"event":"start","stream_id":"s1","start":{"media_format":{"encoding":"PCMA","sample_rate":8000,"channels":1}}}"#
            ),
            Ok(())
        );
        assert_eq!(
            ok(
                "vonage_event",
                br#"{"event":"websocket:connected","content-type":"audio/l16;rate=16000"}"#
            ),
            Ok(())
        );
        assert_eq!(
            ok(
                "media_stream_detect",
                b"{\"event\":\"connected\"}\n{\"event\":\"start\",\"start\":{\"stream_sid\":\"x\",\"call_sid\":\"c\"}}\n"
            ),
            Ok(())
        );
    }
}

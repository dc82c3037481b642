//! AudioSocket framing: `kind (1 byte) | length (u16, big-endian) | payload`, no sockets, no
//! state beyond the bytes of a message not yet complete.
//!
//! Kinds (Asterisk's `res_audiosocket`): `0x00` hang-up, `0x01` the call's 16-byte UUID (first,
//! once), `0x03` one DTMF digit (ASCII), `0x10` slin (16-bit signed little-endian mono, 8 kHz),
//! `0x11`…`0x18` slin at 12, 16, 24, 32, 44.1, 48, 96 and 192 kHz, `0xFF` an error (a byte of flags).
//! Anything else is refused, and so are length-0 audio, an odd number of audio bytes, a UUID that
//! is not 16 bytes, a DTMF payload that is not one digit, and lengths above the decoder's limit
//! (refused from the header alone, before the payload is waited for).

use bytes::{Buf, Bytes, BytesMut};

/// Bytes of a message header: kind and a big-endian u16 length.
pub const HEADER_LEN: usize = 3;
/// Kind bytes.
pub const KIND_HANGUP: u8 = 0x00;
pub const KIND_UUID: u8 = 0x01;
pub const KIND_DTMF: u8 = 0x03;
pub const KIND_SLIN: u8 = 0x10;
pub const KIND_ERROR: u8 = 0xFF;
/// The slin kinds `0x10`…`0x18` and their rates, in Asterisk's order.
pub const SLIN_RATES: [(u8, u32); 9] = [
    (0x10, 8_000),
    (0x11, 12_000),
    (0x12, 16_000),
    (0x13, 24_000),
    (0x14, 32_000),
    (0x15, 44_100),
    (0x16, 48_000),
    (0x17, 96_000),
    (0x18, 192_000),
];
/// Largest payload accepted by default: 20 ms at 192 kHz is 7680 bytes; anything a peer sends for
/// a 20 ms frame fits.
pub const DEFAULT_MAX_PAYLOAD: usize = 8192;

/// The rate of a slin kind.
pub fn slin_rate(kind: u8) -> Option<u32> {
    SLIN_RATES.iter().find(|(k, _)| *k == kind).map(|(_, r)| *r)
}

/// The slin kind of a rate.
pub fn slin_kind(rate: u32) -> Option<u8> {
    SLIN_RATES.iter().find(|(_, r)| *r == rate).map(|(k, _)| *k)
}

/// One complete message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// `0x00`: the peer hangs up.
    Hangup,
    /// `0x01`: the call's UUID.
    Uuid([u8; 16]),
    /// `0x03`: a key pressed.
    Dtmf(char),
    /// `0x10`…`0x18`: PCM16 little-endian mono at `rate`.
    Audio { kind: u8, rate: u32, payload: Bytes },
    /// `0xFF`: the peer reports an error (Asterisk's flags: 0x01 hung up, 0x02 frame forwarding,
    /// 0x04 memory).
    Error(Bytes),
}

impl Message {
    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Hangup => "hangup",
            Message::Uuid(_) => "uuid",
            Message::Dtmf(_) => "dtmf",
            Message::Audio { .. } => "audio",
            Message::Error(_) => "error",
        }
    }
}

/// A message that breaks the protocol. Every one ends the connection: after a bad header the
/// byte stream cannot be trusted to be in step.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error(
        "unknown message kind 0x{kind:02x} (length {len}): AudioSocket kinds are 0x00, 0x01, \
         0x03, 0x10-0x18 and 0xff"
    )]
    UnknownKind { kind: u8, len: usize },
    #[error("message kind 0x{kind:02x} announces {len} bytes, above the {max}-byte limit")]
    Oversize { kind: u8, len: usize, max: usize },
    #[error("audio message (kind 0x{kind:02x}) with length 0")]
    EmptyAudio { kind: u8 },
    #[error("audio message (kind 0x{kind:02x}) of {len} bytes: 16-bit samples need an even length")]
    OddAudio { kind: u8, len: usize },
    #[error("UUID message of {len} bytes: a UUID is 16 bytes")]
    BadUuid { len: usize },
    #[error("DTMF message of {len} bytes: one ASCII digit expected")]
    BadDtmfLength { len: usize },
    #[error("DTMF byte 0x{0:02x} is not a key (0-9, *, #, A-D)")]
    BadDtmfDigit(u8),
    #[error("connection ended inside a message header ({have} of 3 bytes)")]
    TruncatedHeader { have: usize },
    #[error("connection ended inside a message (kind 0x{kind:02x}: {have} of {len} payload bytes)")]
    TruncatedPayload { kind: u8, len: usize, have: usize },
}

/// Splits a byte stream into messages.
#[derive(Debug)]
pub struct Decoder {
    buf: BytesMut,
    max_payload: usize,
}

impl Decoder {
    pub fn new(max_payload: usize) -> Self {
        Decoder {
            buf: BytesMut::with_capacity(4096),
            max_payload,
        }
    }

    /// Appends bytes as they arrived.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held of a message not yet complete.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next complete message, `None` until one is complete.
    pub fn next_message(&mut self) -> Result<Option<Message>, WireError> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let kind = self.buf[0];
        let len = usize::from(u16::from_be_bytes([self.buf[1], self.buf[2]]));
        check_header(kind, len, self.max_payload)?;
        if self.buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        self.buf.advance(HEADER_LEN);
        let payload = self.buf.split_to(len).freeze();
        parse(kind, payload).map(Some)
    }

    /// At the end of the stream: an error if a message was left incomplete.
    pub fn finish(&self) -> Result<(), WireError> {
        match self.buf.len() {
            0 => Ok(()),
            have if have < HEADER_LEN => Err(WireError::TruncatedHeader { have }),
            have => Err(WireError::TruncatedPayload {
                kind: self.buf[0],
                len: usize::from(u16::from_be_bytes([self.buf[1], self.buf[2]])),
                have: have - HEADER_LEN,
            }),
        }
    }
}

/// Refuses what can be refused from the header alone.
fn check_header(kind: u8, len: usize, max: usize) -> Result<(), WireError> {
    let known = matches!(kind, KIND_HANGUP | KIND_UUID | KIND_DTMF | KIND_ERROR)
        || slin_rate(kind).is_some();
    if !known {
        return Err(WireError::UnknownKind { kind, len });
    }
    if len > max {
        return Err(WireError::Oversize { kind, len, max });
    }
    if slin_rate(kind).is_some() {
        if len == 0 {
            return Err(WireError::EmptyAudio { kind });
        }
        if len % 2 == 1 {
            return Err(WireError::OddAudio { kind, len });
        }
    }
    match kind {
        KIND_UUID if len != 16 => Err(WireError::BadUuid { len }),
        KIND_DTMF if len != 1 => Err(WireError::BadDtmfLength { len }),
        _ => Ok(()),
    }
}

fn parse(kind: u8, payload: Bytes) -> Result<Message, WireError> {
    Ok(match kind {
        // A hang-up's payload (none is defined) is ignored.
        KIND_HANGUP => Message::Hangup,
        KIND_UUID => {
            let mut id = [0u8; 16];
            id.copy_from_slice(&payload);
            Message::Uuid(id)
        }
        KIND_DTMF => {
            let b = payload[0];
            if !(b.is_ascii_digit() || matches!(b, b'*' | b'#' | b'A'..=b'D')) {
                return Err(WireError::BadDtmfDigit(b));
            }
            Message::Dtmf(char::from(b))
        }
        KIND_ERROR => Message::Error(payload),
        _ => match slin_rate(kind) {
            Some(rate) => Message::Audio {
                kind,
                rate,
                payload,
            },
            // check_header refused every other kind.
            None => return Err(WireError::UnknownKind { kind, len: 0 }),
        },
    })
}

/// Appends one audio message of `samples` (little-endian PCM16) in `kind`.
pub fn encode_audio(kind: u8, samples: &[i16], out: &mut BytesMut) {
    let len = (samples.len() * 2).min(usize::from(u16::MAX)) & !1;
    out.reserve(HEADER_LEN + len);
    out.extend_from_slice(&[kind]);
    out.extend_from_slice(&(len as u16).to_be_bytes());
    for s in &samples[..len / 2] {
        out.extend_from_slice(&s.to_le_bytes());
    }
}

/// Appends a header and payload as they are (any kind: also for writing broken messages in tests).
pub fn encode_raw(kind: u8, payload: &[u8], out: &mut BytesMut) {
    let len = payload.len().min(usize::from(u16::MAX));
    out.extend_from_slice(&[kind]);
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend_from_slice(&payload[..len]);
}

/// The hang-up message, `00 00 00`.
pub const HANGUP: [u8; 3] = [KIND_HANGUP, 0, 0];

/// Decodes little-endian PCM16 into `out`.
pub fn decode_samples(payload: &[u8], out: &mut Vec<i16>) {
    out.extend(
        payload
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]])),
    );
}

/// `8-4-4-4-12` lowercase hex, the form the dialplan gave.
pub fn uuid_string(id: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, b) in id.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Parses a UUID string (`8-4-4-4-12` hex, or 32 hex digits).
pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = s.bytes().filter(|&b| b != b'-').collect();
    if hex.len() != 32 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, pair) in hex.chunks_exact(2).enumerate() {
        let pair = std::str::from_utf8(pair).ok()?;
        id[i] = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(id)
}

/// The error flag Asterisk sends when the calling party hung up.
pub const ERROR_CALLER_HUNG_UP: u8 = 0x01;

/// Asterisk's error flags in words.
pub fn describe_error(payload: &[u8]) -> String {
    let Some(&code) = payload.first() else {
        return "no error code".into();
    };
    let mut parts = Vec::new();
    if code & 0x01 != 0 {
        parts.push("caller hung up");
    }
    if code & 0x02 != 0 {
        parts.push("frame forwarding error");
    }
    if code & 0x04 != 0 {
        parts.push("memory allocation error");
    }
    if parts.is_empty() {
        format!("error code 0x{code:02x}")
    } else {
        format!("{} (0x{code:02x})", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(bytes: &[u8]) -> Result<Vec<Message>, WireError> {
        let mut d = Decoder::new(DEFAULT_MAX_PAYLOAD);
        let mut out = Vec::new();
        // One byte at a time: framing must not depend on how reads split the stream.
        for b in bytes {
            d.push(std::slice::from_ref(b));
            while let Some(m) = d.next_message()? {
                out.push(m);
            }
        }
        d.finish()?;
        Ok(out)
    }

    #[test]
    fn every_kind_round_trips_byte_by_byte() {
        let id = parse_uuid("0b6e4d2a-8f1c-4e55-9a3b-2c7d1e0f9a88").unwrap();
        let mut b = BytesMut::new();
        encode_raw(KIND_UUID, &id, &mut b);
        encode_audio(0x10, &[1, -2, 300], &mut b);
        encode_raw(KIND_DTMF, b"#", &mut b);
        encode_audio(0x12, &[i16::MIN, i16::MAX], &mut b);
        encode_raw(KIND_ERROR, &[0x01], &mut b);
        b.extend_from_slice(&HANGUP);
        let msgs = decode_all(&b).unwrap();
        assert_eq!(msgs[0], Message::Uuid(id));
        assert_eq!(uuid_string(&id), "0b6e4d2a-8f1c-4e55-9a3b-2c7d1e0f9a88");
        let Message::Audio { rate, payload, .. } = &msgs[1] else {
            panic!("{msgs:?}")
        };
        assert_eq!(*rate, 8000);
        assert_eq!(&payload[..], &[1, 0, 0xFE, 0xFF, 0x2C, 0x01]);
        assert_eq!(msgs[2], Message::Dtmf('#'));
        let Message::Audio { rate, payload, .. } = &msgs[3] else {
            panic!()
        };
        let mut s = Vec::new();
        decode_samples(payload, &mut s);
        assert_eq!((*rate, s), (16000, vec![i16::MIN, i16::MAX]));
        let Message::Error(e) = &msgs[4] else {
            panic!()
        };
        assert_eq!(describe_error(e), "caller hung up (0x01)");
        assert_eq!(msgs[5], Message::Hangup);
    }

    #[test]
    fn rates_follow_asterisk() {
        assert_eq!(slin_rate(0x11), Some(12_000));
        assert_eq!(slin_rate(0x12), Some(16_000));
        assert_eq!(slin_rate(0x18), Some(192_000));
        assert_eq!(slin_kind(48_000), Some(0x16));
        assert_eq!(slin_rate(0x19), None);
    }

    #[test]
    fn bad_messages_are_refused_from_the_header() {
        // Only the header is pushed: the refusal must not wait for the payload.
        let refuse = |h: &[u8]| {
            let mut d = Decoder::new(DEFAULT_MAX_PAYLOAD);
            d.push(h);
            d.next_message().unwrap_err()
        };
        assert_eq!(
            refuse(&[0x02, 0, 1]),
            WireError::UnknownKind { kind: 2, len: 1 }
        );
        assert_eq!(
            refuse(&[0x10, 0x20, 0x01]),
            WireError::Oversize {
                kind: 0x10,
                len: 8193,
                max: 8192
            }
        );
        assert_eq!(refuse(&[0x10, 0, 0]), WireError::EmptyAudio { kind: 0x10 });
        assert_eq!(
            refuse(&[0x12, 0, 3]),
            WireError::OddAudio { kind: 0x12, len: 3 }
        );
        assert_eq!(refuse(&[0x01, 0, 4]), WireError::BadUuid { len: 4 });
        assert_eq!(refuse(&[0x03, 0, 2]), WireError::BadDtmfLength { len: 2 });
        let mut d = Decoder::new(DEFAULT_MAX_PAYLOAD);
        d.push(&[0x03, 0, 1, b'x']);
        assert_eq!(d.next_message().unwrap_err(), WireError::BadDtmfDigit(b'x'));
    }

    #[test]
    fn truncation_is_reported_at_the_end() {
        assert_eq!(
            decode_all(&[0x10, 0]).unwrap_err(),
            WireError::TruncatedHeader { have: 2 }
        );
        assert_eq!(
            decode_all(&[0x10, 0, 4, 1, 2]).unwrap_err(),
            WireError::TruncatedPayload {
                kind: 0x10,
                len: 4,
                have: 2
            }
        );
        assert_eq!(decode_all(&[]).unwrap(), vec![]);
    }

    #[test]
    fn uuid_strings() {
        assert!(parse_uuid("not a uuid").is_none());
        assert!(parse_uuid("0b6e4d2a8f1c4e559a3b2c7d1e0f9a8g").is_none());
        // A sign is no hex digit, though `from_str_radix` would take it.
        assert!(parse_uuid("+b6e4d2a8f1c4e559a3b2c7d1e0f9a88").is_none());
        let id = parse_uuid("0B6E4D2A8F1C4E559A3B2C7D1E0F9A88").unwrap();
        assert_eq!(uuid_string(&id), "0b6e4d2a-8f1c-4e55-9a3b-2c7d1e0f9a88");
    }
}

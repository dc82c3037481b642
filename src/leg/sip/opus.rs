//! Opus on a SIP call (RFC 7587): the decoder the [jitter buffer](super::jitter) runs as
//! payloads play (in timestamp order; a lost 20 ms rebuilt from the next packet's in-band FEC
//! when that packet is already buffered, else by libopus's packet-loss concealment), and the
//! encoder, which is the WebRTC leg's ([`OpusOutbound`]: mono, VoIP, in-band FEC on). Both
//! run at the leg's PCM rate; the RTP clock is 48 kHz whatever that rate is.

use super::jitter::Decoder;
pub use crate::leg::webrtc::codec::{CodecError, OpusOutbound, RTP_CLOCK};

/// Bits per second baton sends: wideband speech with room for FEC.
pub const BITRATE: u32 = 32_000;

/// The payload type baton offers Opus on (peers may choose another in their offer).
pub use super::sdp::OFFERED_OPUS_PT;

/// An RTP payload that is not an Opus packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpusPacketError {
    #[error("the Opus payload is empty")]
    Empty,
    #[error(
        "not an Opus packet: its table of contents (first byte {toc:#04x}) is invalid ({reason})"
    )]
    Toc { toc: u8, reason: String },
}

/// The samples at `rate` an Opus packet holds (RFC 6716 §3: its TOC byte and frame count),
/// without decoding it.
pub fn packet_samples(payload: &[u8], rate: u32) -> Result<usize, OpusPacketError> {
    let toc = *payload.first().ok_or(OpusPacketError::Empty)?;
    match opus::packet::get_nb_samples(payload, rate) {
        Ok(0) => Err(OpusPacketError::Toc {
            toc,
            reason: "it announces no audio frames".into(),
        }),
        Ok(n) => Ok(n),
        Err(e) => Err(OpusPacketError::Toc {
            toc,
            reason: e.to_string(),
        }),
    }
}

/// libopus's decoder, mono at the leg's rate.
pub struct OpusDecoder {
    dec: opus::Decoder,
    rate: u32,
}

impl std::fmt::Debug for OpusDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpusDecoder")
            .field("rate", &self.rate)
            .finish()
    }
}

impl OpusDecoder {
    /// A mono decoder producing audio at `rate` (8, 12, 16, 24 or 48 kHz).
    pub fn new(rate: u32) -> Result<OpusDecoder, CodecError> {
        match rate {
            8_000 | 12_000 | 16_000 | 24_000 | 48_000 => {}
            other => return Err(CodecError::Rate(other)),
        }
        Ok(OpusDecoder {
            dec: opus::Decoder::new(rate, opus::Channels::Mono)?,
            rate,
        })
    }
}

impl Decoder for OpusDecoder {
    fn samples(&self, payload: &[u8]) -> Option<usize> {
        packet_samples(payload, self.rate).ok()
    }

    fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> bool {
        match self.dec.decode(payload, out, false) {
            Ok(n) if n == out.len() => true,
            Ok(n) => {
                let len = out.len();
                out[n.min(len)..].fill(0);
                true
            }
            Err(_) => false,
        }
    }

    fn conceal(&mut self, next: Option<&[u8]>, out: &mut [i16]) -> bool {
        // libopus conceals in whole 2.5 ms units; the rest of an odd length is silence.
        let unit = (self.rate / 400) as usize;
        let n = out.len() - out.len() % unit.max(1);
        if let Some(packet) = next
            && let Ok(got) = self.dec.decode(packet, &mut out[..n], true)
        {
            out[got.min(n)..].fill(0);
            return true;
        }
        let got = self.dec.decode(&[], &mut out[..n], false).unwrap_or(0);
        out[got.min(n)..].fill(0);
        false
    }
}

/// baton's encoder for a leg at `rate`.
pub fn encoder(rate: u32) -> Result<OpusOutbound, CodecError> {
    OpusOutbound::new(rate, BITRATE)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use tokio::time::Instant;

    use super::*;
    use crate::leg::sip::jitter::{FrameKind, JitterBuffer, JitterConfig};

    const RATE: u32 = 16_000;

    fn tone(frames: usize) -> Vec<Vec<i16>> {
        let spf = (RATE / 50) as usize;
        (0..frames)
            .map(|f| {
                (0..spf)
                    .map(|i| {
                        let n = (f * spf + i) as f64;
                        (8000.0 * (2.0 * std::f64::consts::PI * 440.0 * n / f64::from(RATE)).sin())
                            as i16
                    })
                    .collect()
            })
            .collect()
    }

    fn buffer() -> JitterBuffer {
        JitterBuffer::encoded(
            JitterConfig {
                rate: RATE,
                min_delay_ms: 40,
                max_delay_ms: 200,
            },
            RTP_CLOCK / RATE,
            Box::new(OpusDecoder::new(RATE).unwrap()),
        )
    }

    #[test]
    fn payloads_play_in_timestamp_order_and_losses_are_rebuilt_by_the_decoder() {
        let mut enc = encoder(RATE).unwrap();
        let packets: Vec<Bytes> = tone(40)
            .iter()
            .map(|f| Bytes::from(enc.encode(f).unwrap()))
            .collect();
        let mut b = buffer();
        let t0 = Instant::now();
        // 48 kHz timestamps near the wrap; packet 11 before 10 (reordered), 20 lost, 30 and 31
        // lost.
        let base = u32::MAX - 10 * 960;
        let ts = |i: usize| base.wrapping_add(960 * i as u32);
        let mut order: Vec<usize> = (0..40).filter(|i| ![20, 30, 31].contains(i)).collect();
        order.swap(10, 11);
        let mut out = Vec::new();
        for (n, &i) in order.iter().enumerate() {
            b.push_encoded(
                ts(i),
                packets[i].clone(),
                t0 + Duration::from_millis(20 * n as u64),
            );
            if n >= 3 {
                out.push(b.pop());
            }
        }
        for _ in 0..6 {
            out.push(b.pop());
        }
        let s = b.stats().clone();
        assert_eq!((s.packets, s.reordered, s.late), (37, 1, 0), "{s:?}");
        // Every 20 ms of the 40 played, three of them concealed: 20 and 31 from the next
        // packet's FEC, 30 by PLC.
        let played = &out;
        assert_eq!(played.len(), 40);
        assert!(
            played
                .iter()
                .all(|p| p.kind == FrameKind::Audio || p.kind == FrameKind::Concealed)
        );
        assert!(played.iter().all(|p| p.samples.len() == 320));
        assert_eq!(s.concealed_frames, 3, "{s:?}");
        assert_eq!(s.fec_frames, 2, "{s:?}");
        // The tone carries on through the losses rather than dropping out.
        for i in [20, 30, 31] {
            let level = crate::audio::vad::rms_dbfs(&played[i].samples);
            assert!(level > -30.0, "frame {i}: {level} dBFS");
        }
        assert!(crate::audio::vad::rms_dbfs(&played[35].samples) > -20.0);
    }

    #[test]
    fn garbage_payloads_are_counted_and_their_time_concealed() {
        let mut b = buffer();
        let t0 = Instant::now();
        b.push_encoded(0, Bytes::new(), t0);
        assert_eq!(b.stats().bad_payloads, 1);
        // A TOC byte announcing a frame count over the limit.
        b.push_encoded(0, Bytes::from_static(&[0x03, 0xff]), t0);
        assert_eq!(b.stats().bad_payloads, 2);
        assert!(OpusDecoder::new(44_100).is_err());
    }
}

//! The audio encodings telephony bridges put in their media messages, and the conversion of one
//! payload to and from 16-bit PCM. Every encoding here is one byte or one 16-bit word per sample,
//! mono, so positions in a stream are counted in samples whatever the encoding.

use std::fmt;

use crate::audio::{g711, samples_per_frame};

/// How samples are written in a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// G.711 μ-law (PCMU).
    Pcmu,
    /// G.711 A-law (PCMA).
    Pcma,
    /// 16-bit linear PCM, little-endian ("slin"; Vonage, Exotel, Plivo L16).
    L16Le,
    /// 16-bit linear PCM, big-endian (network order: L16 as an RTP payload, Telnyx).
    L16Be,
}

impl Encoding {
    pub fn bytes_per_sample(self) -> usize {
        match self {
            Encoding::Pcmu | Encoding::Pcma => 1,
            Encoding::L16Le | Encoding::L16Be => 2,
        }
    }

    /// The G.711 law of a companded encoding.
    pub fn law(self) -> Option<g711::Law> {
        match self {
            Encoding::Pcmu => Some(g711::Law::Ulaw),
            Encoding::Pcma => Some(g711::Law::Alaw),
            Encoding::L16Le | Encoding::L16Be => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Encoding::Pcmu => "PCMU (G.711 μ-law)",
            Encoding::Pcma => "PCMA (G.711 A-law)",
            Encoding::L16Le => "L16 little-endian",
            Encoding::L16Be => "L16 big-endian",
        }
    }
}

/// An encoding at a rate: what one stream carries, both directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AudioFormat {
    pub encoding: Encoding,
    pub rate: u32,
}

impl fmt::Display for AudioFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} Hz mono", self.encoding.name(), self.rate)
    }
}

/// Rates a leg may run at (the call resamples between these and the model's rates).
pub const RATES: [u32; 3] = [8000, 16000, 24000];

impl AudioFormat {
    /// G.711 μ-law at 8 kHz: Twilio's only format, and the default of most bridges.
    pub const PCMU_8K: AudioFormat = AudioFormat {
        encoding: Encoding::Pcmu,
        rate: 8000,
    };

    pub const fn new(encoding: Encoding, rate: u32) -> Self {
        AudioFormat { encoding, rate }
    }

    /// Samples in one 20 ms frame.
    pub fn frame_samples(&self) -> usize {
        samples_per_frame(self.rate)
    }

    /// Payload bytes of one 20 ms frame.
    pub fn frame_bytes(&self) -> usize {
        self.frame_samples() * self.encoding.bytes_per_sample()
    }

    /// Samples a payload of `len` bytes holds (a trailing odd byte of L16 is not a sample).
    pub fn samples_in(&self, len: usize) -> usize {
        len / self.encoding.bytes_per_sample()
    }

    /// Appends the samples of `payload` to `out`. A trailing odd byte of L16 is ignored (the
    /// stream refuses such payloads before they get here).
    pub fn decode(&self, payload: &[u8], out: &mut Vec<i16>) {
        match self.encoding {
            Encoding::Pcmu => g711::decode_ulaw(payload, out),
            Encoding::Pcma => g711::decode_alaw(payload, out),
            Encoding::L16Le => out.extend(
                payload
                    .chunks_exact(2)
                    .map(|b| i16::from_le_bytes([b[0], b[1]])),
            ),
            Encoding::L16Be => out.extend(
                payload
                    .chunks_exact(2)
                    .map(|b| i16::from_be_bytes([b[0], b[1]])),
            ),
        }
    }

    /// Appends the encoding of `pcm` to `out`.
    pub fn encode(&self, pcm: &[i16], out: &mut Vec<u8>) {
        match self.encoding {
            Encoding::Pcmu => g711::encode_ulaw(pcm, out),
            Encoding::Pcma => g711::encode_alaw(pcm, out),
            Encoding::L16Le => crate::audio::push_pcm16le(pcm, out),
            Encoding::L16Be => out.extend(pcm.iter().flat_map(|s| s.to_be_bytes())),
        }
    }

    /// One sample of silence, encoded.
    pub fn silence(&self) -> &'static [u8] {
        match self.encoding {
            Encoding::Pcmu => &[0xFF],
            Encoding::Pcma => &[0xD5],
            Encoding::L16Le | Encoding::L16Be => &[0, 0],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_encoding_round_trips_and_knows_its_frame_size() {
        let pcm: Vec<i16> = (0..320).map(|i| (i * 97 - 15000) as i16).collect();
        for enc in [
            Encoding::Pcmu,
            Encoding::Pcma,
            Encoding::L16Le,
            Encoding::L16Be,
        ] {
            let f = AudioFormat::new(enc, 16000);
            assert_eq!(f.frame_samples(), 320);
            assert_eq!(f.frame_bytes(), 320 * enc.bytes_per_sample());
            let mut bytes = Vec::new();
            f.encode(&pcm, &mut bytes);
            assert_eq!(bytes.len(), f.frame_bytes());
            let mut back = Vec::new();
            f.decode(&bytes, &mut back);
            let tol = if enc.bytes_per_sample() == 2 { 0 } else { 1024 };
            assert!(
                back.iter()
                    .zip(&pcm)
                    .all(|(a, b)| (i32::from(*a) - i32::from(*b)).abs() <= tol),
                "{enc:?}"
            );
            let mut silence = Vec::new();
            f.decode(f.silence(), &mut silence);
            assert!(silence[0].abs() <= 8, "{enc:?}");
        }
        // Byte order: 0x0102 is [02, 01] little-endian and [01, 02] big-endian.
        let mut le = Vec::new();
        AudioFormat::new(Encoding::L16Le, 8000).encode(&[0x0102], &mut le);
        assert_eq!(le, [2, 1]);
        let mut be = Vec::new();
        AudioFormat::new(Encoding::L16Be, 8000).encode(&[0x0102], &mut be);
        assert_eq!(be, [1, 2]);
    }
}

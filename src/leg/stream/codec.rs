//! The audio of `/stream` both ways: PCM16 little-endian (inbound of any size, an odd trailing
//! byte carried to the next message) or Opus (one packet per message, via libopus).

use super::wire::{Encoding, Format};

/// Opus packets are at most 120 ms long.
const OPUS_MAX_MS: usize = 120;
/// The largest Opus packet libopus produces for one frame.
const OPUS_MAX_PACKET: usize = 1275;

/// An audio message could not be decoded, or a frame encoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("Opus: {0}")]
    Opus(String),
}

impl From<opus::Error> for CodecError {
    fn from(e: opus::Error) -> Self {
        CodecError::Opus(e.to_string())
    }
}

/// One stream's decoder and encoder.
pub enum AudioCodec {
    Pcm16 {
        /// An odd byte left from the previous message.
        carry: Option<u8>,
    },
    Opus {
        decoder: opus::Decoder,
        encoder: opus::Encoder,
        /// Decode buffer: 120 ms at the rate.
        pcm: Vec<i16>,
        packet: Vec<u8>,
    },
}

impl AudioCodec {
    pub fn new(format: Format) -> Result<Self, CodecError> {
        Ok(match format.encoding {
            Encoding::Pcm16 => AudioCodec::Pcm16 { carry: None },
            Encoding::Opus => {
                let rate = format.sample_rate;
                AudioCodec::Opus {
                    decoder: opus::Decoder::new(rate, opus::Channels::Mono)?,
                    encoder: opus::Encoder::new(
                        rate,
                        opus::Channels::Mono,
                        opus::Application::Voip,
                    )?,
                    pcm: vec![0; rate as usize * OPUS_MAX_MS / 1000],
                    packet: vec![0; OPUS_MAX_PACKET],
                }
            }
        })
    }

    /// Appends the samples of one inbound message to `out`.
    pub fn decode(&mut self, data: &[u8], out: &mut Vec<i16>) -> Result<(), CodecError> {
        match self {
            AudioCodec::Pcm16 { carry } => {
                let mut data = data;
                if let Some(lo) = carry.take() {
                    let Some((&hi, rest)) = data.split_first() else {
                        *carry = Some(lo);
                        return Ok(());
                    };
                    out.push(i16::from_le_bytes([lo, hi]));
                    data = rest;
                }
                let pairs = data.chunks_exact(2);
                if let [b] = pairs.remainder() {
                    *carry = Some(*b);
                }
                out.extend(pairs.map(|b| i16::from_le_bytes([b[0], b[1]])));
                Ok(())
            }
            AudioCodec::Opus { decoder, pcm, .. } => {
                let n = decoder.decode(data, pcm, false)?;
                out.extend_from_slice(&pcm[..n.min(pcm.len())]);
                Ok(())
            }
        }
    }

    /// Encodes one 20 ms frame into one outbound message.
    pub fn encode(&mut self, samples: &[i16]) -> Result<Vec<u8>, CodecError> {
        match self {
            AudioCodec::Pcm16 { .. } => Ok(samples.iter().flat_map(|s| s.to_le_bytes()).collect()),
            AudioCodec::Opus {
                encoder, packet, ..
            } => {
                let n = encoder.encode(samples, packet)?;
                Ok(packet[..n].to_vec())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcm16_carries_odd_bytes_across_messages() {
        let mut c = AudioCodec::new(Format {
            encoding: Encoding::Pcm16,
            sample_rate: 16000,
        })
        .unwrap();
        let bytes: Vec<u8> = [1i16, -2, 300, i16::MIN]
            .iter()
            .flat_map(|s| s.to_le_bytes())
            .collect();
        let mut out = Vec::new();
        for chunk in [&bytes[..3], &bytes[3..4], &bytes[4..]] {
            c.decode(chunk, &mut out).unwrap();
        }
        assert_eq!(out, [1, -2, 300, i16::MIN]);
        assert_eq!(c.encode(&out).unwrap(), bytes);
    }

    #[test]
    fn opus_round_trips_a_tone() {
        let f = Format {
            encoding: Encoding::Opus,
            sample_rate: 48000,
        };
        let (mut tx, mut rx) = (AudioCodec::new(f).unwrap(), AudioCodec::new(f).unwrap());
        let tone: Vec<i16> = (0..48000)
            .map(|n| {
                (8000.0 * (2.0 * std::f64::consts::PI * 440.0 * n as f64 / 48000.0).sin()) as i16
            })
            .collect();
        let mut out = Vec::new();
        for frame in tone.chunks(960) {
            let packet = tx.encode(frame).unwrap();
            assert!(packet.len() < 400, "{} bytes", packet.len());
            rx.decode(&packet, &mut out).unwrap();
        }
        assert_eq!(out.len(), tone.len());
        // Past the codec's start-up, the tone's energy comes through.
        let rms = |s: &[i16]| {
            (s.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / s.len() as f64).sqrt()
        };
        let (a, b) = (rms(&tone[9600..]), rms(&out[9600..]));
        assert!((b / a - 1.0).abs() < 0.2, "rms {a} in, {b} out");
        assert!(rx.decode(&[0xFF, 0xFF, 0xFF], &mut out).is_err());
    }
}

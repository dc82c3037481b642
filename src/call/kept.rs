//! How the reconnect ring keeps a caller frame: one byte per sample (G.711 μ-law or A-law)
//! when that byte gives back exactly the frame's PCM — every frame of a μ-law or A-law leg,
//! whose PCM was decoded from those bytes — else the PCM16 itself. A μ-law caller's ring is
//! half the size of its PCM and nothing is lost on any leg. A frame of digital silence (a muted
//! caller, a fixture's pauses, padding) is kept as its length alone: three bytes for 20 ms.
//!
//! Each frame is one or more records: a tag byte (the encoding), the sample count (`u16`, little
//! endian) and the samples (none for silence). The ring drops whole frames, so what it hands back
//! for a replay is whole records.

use crate::audio::g711::{self, Law};

const ULAW: u8 = 0;
const ALAW: u8 = 1;
const PCM16: u8 = 2;
/// `n` zero samples, with no body.
const SILENCE: u8 = 3;

/// Samples per record at most (the count is a `u16`); a 20 ms frame is far shorter.
const MAX_RECORD: usize = u16::MAX as usize;

/// Appends `frame` to `out` as records.
pub fn encode(frame: &[i16], out: &mut Vec<u8>) {
    for part in frame.chunks(MAX_RECORD) {
        if part.iter().all(|&s| s == 0) {
            header(SILENCE, part.len(), out);
        } else if !by_law(part, Law::Ulaw, ULAW, out) && !by_law(part, Law::Alaw, ALAW, out) {
            out.reserve(3 + 2 * part.len());
            header(PCM16, part.len(), out);
            crate::audio::push_pcm16le(part, out);
        }
    }
}

/// Samples tried one by one before a whole record is encoded: audio that was never G.711
/// fails within them.
const PROBE: usize = 8;

/// Appends `part` as a record of one law if every sample comes back exact; else appends
/// nothing and says so.
#[inline(always)]
fn by_law(part: &[i16], law: Law, tag: u8, out: &mut Vec<u8>) -> bool {
    if part[..part.len().min(PROBE)]
        .iter()
        .any(|&s| law.decode(law.encode(s)) != s)
    {
        return false;
    }
    out.reserve(3 + part.len());
    let start = out.len();
    header(tag, part.len(), out);
    let body = out.len();
    out.resize(body + part.len(), 0);
    let mut exact = true;
    for (b, &s) in out[body..].iter_mut().zip(part) {
        let c = law.encode(s);
        *b = c;
        exact &= law.decode(c) == s;
    }
    if !exact {
        out.truncate(start);
    }
    exact
}

fn header(tag: u8, samples: usize, out: &mut Vec<u8>) {
    out.push(tag);
    out.extend_from_slice(&(samples as u16).to_le_bytes());
}

/// Appends the PCM of every whole record in `bytes` to `out`; a truncated last record is
/// ignored (the ring never holds one).
pub fn decode(mut bytes: &[u8], out: &mut Vec<i16>) {
    while let [tag, n0, n1, rest @ ..] = bytes {
        let n = usize::from(u16::from_le_bytes([*n0, *n1]));
        let width = match *tag {
            PCM16 => 2,
            SILENCE => 0,
            _ => 1,
        };
        let Some(body) = rest.get(..n * width) else {
            debug_assert!(false, "a truncated record in the reconnect ring");
            return;
        };
        match *tag {
            ULAW => g711::decode_ulaw(body, out),
            ALAW => g711::decode_alaw(body, out),
            SILENCE => out.resize(out.len() + n, 0),
            _ => out.extend(
                body.chunks_exact(2)
                    .map(|p| i16::from_le_bytes([p[0], p[1]])),
            ),
        }
        bytes = &rest[n * width..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(frame: &[i16]) -> (Vec<u8>, Vec<i16>) {
        let mut bytes = Vec::new();
        encode(frame, &mut bytes);
        let mut pcm = Vec::new();
        decode(&bytes, &mut pcm);
        (bytes, pcm)
    }

    #[test]
    fn a_frame_decoded_from_either_law_is_kept_in_one_byte_per_sample() {
        for (tag, dec) in [
            (ULAW, g711::ulaw_decode as fn(u8) -> i16),
            (ALAW, g711::alaw_decode),
        ] {
            let frame: Vec<i16> = (0..=255u8).map(dec).collect();
            let (bytes, pcm) = round_trip(&frame);
            assert_eq!(pcm, frame);
            assert_eq!(bytes.len(), 3 + frame.len());
            assert_eq!(bytes[0], tag);
        }
    }

    #[test]
    fn silence_is_kept_as_its_length() {
        let (bytes, pcm) = round_trip(&[0; 320]);
        assert_eq!(pcm, [0; 320]);
        assert_eq!(bytes, [SILENCE, 64, 1]);
        // Silence between other frames keeps its place.
        let ulaw: Vec<i16> = (0..160u8).map(g711::ulaw_decode).collect();
        let mut bytes = Vec::new();
        for f in [&ulaw[..], &[0; 160], &ulaw[..]] {
            encode(f, &mut bytes);
        }
        let mut out = Vec::new();
        decode(&bytes, &mut out);
        assert_eq!(out, [&ulaw[..], &[0; 160], &ulaw[..]].concat());
        assert_eq!(bytes.len(), 3 * 3 + 2 * 160);
        // A frame exact only after the probe's first samples still comes out whole.
        let mut late: Vec<i16> = vec![0; 20];
        late.push(1001);
        assert_eq!(round_trip(&late).1, late);
        assert_eq!(round_trip(&late).0[0], PCM16);
    }

    #[test]
    fn any_other_pcm_is_kept_as_it_is() {
        // One sample neither law can give back makes the whole frame PCM16.
        let mut frame: Vec<i16> = (0..=255u8).map(g711::ulaw_decode).collect();
        frame.push(1001);
        let (bytes, pcm) = round_trip(&frame);
        assert_eq!(pcm, frame);
        assert_eq!(bytes.len(), 3 + 2 * frame.len());
        let sweep: Vec<i16> = (i16::MIN..=i16::MAX).step_by(7).collect();
        assert_eq!(round_trip(&sweep).1, sweep);
        assert_eq!(
            round_trip(&[i16::MIN, i16::MAX, 0, -1, 1]).1,
            [i16::MIN, i16::MAX, 0, -1, 1]
        );
    }

    #[test]
    fn frames_end_to_end_come_back_in_order_whatever_their_encoding() {
        let ulaw: Vec<i16> = (0..160u8).map(g711::ulaw_decode).collect();
        let pcm: Vec<i16> = (0..320).map(|i| i * 97 - 15_000).collect();
        let long: Vec<i16> = (0..70_000).map(|i| (i % 30_000) as i16 + 3).collect();
        let empty: Vec<i16> = Vec::new();
        let mut bytes = Vec::new();
        for f in [&ulaw, &pcm, &empty, &long, &ulaw] {
            encode(f, &mut bytes);
        }
        let mut out = Vec::new();
        decode(&bytes, &mut out);
        let want: Vec<i16> = [&ulaw, &pcm, &empty, &long, &ulaw]
            .into_iter()
            .flatten()
            .copied()
            .collect();
        assert_eq!(out, want);
    }
}

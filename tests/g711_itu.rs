//! G.711 against the ITU-T G.191 STL reference: a full sweep of every 16-bit input, encoded and
//! decoded, checked by CRC-32 of the little-endian 16-bit word stream the STL tools write.

use baton::audio::g711::{alaw_decode, alaw_encode, ulaw_decode, ulaw_encode};

fn sweep() -> impl Iterator<Item = i16> {
    i16::MIN..=i16::MAX
}

fn crc_of_words(words: impl Iterator<Item = i16>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for w in words {
        h.update(&w.to_le_bytes());
    }
    h.finalize()
}

#[test]
fn harness_input_sweep() {
    assert_eq!(sweep().count(), 65536);
    assert_eq!(crc_of_words(sweep()), 0xC8BA_7682);
}

#[test]
fn ulaw_encode_matches_stl() {
    assert_eq!(
        crc_of_words(sweep().map(|s| i16::from(ulaw_encode(s)))),
        0xCD17_0E15
    );
}

#[test]
fn alaw_encode_matches_stl() {
    assert_eq!(
        crc_of_words(sweep().map(|s| i16::from(alaw_encode(s)))),
        0x7471_9FE4
    );
}

#[test]
fn ulaw_decode_matches_stl() {
    assert_eq!(
        crc_of_words(sweep().map(|s| ulaw_decode(ulaw_encode(s)))),
        0x6364_1C01
    );
}

#[test]
fn alaw_decode_matches_stl() {
    assert_eq!(
        crc_of_words(sweep().map(|s| alaw_decode(alaw_encode(s)))),
        0xABCE_AA69
    );
}

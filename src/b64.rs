//! Base64 for the audio payloads every message carries (telephony bridges, both model
//! protocols, the mock): the base64 crate's SIMD engine (AVX2 or NEON, detected once at run
//! time, the scalar engine otherwise) with the same alphabets and padding rules as the crate's
//! `general_purpose` constants of the same names, so what is accepted, refused and written is
//! unchanged.

use std::sync::LazyLock;

use base64::engine::Simd;
use base64::engine::general_purpose::{NO_PAD, PAD, PAD_INDIFFERENT};

/// Standard alphabet, padding written and required.
pub static STANDARD: LazyLock<Simd> = LazyLock::new(|| Simd::standard(PAD));
/// Standard alphabet, no padding written, none accepted.
pub static STANDARD_NO_PAD: LazyLock<Simd> = LazyLock::new(|| Simd::standard(NO_PAD));
/// Standard alphabet, padding written, accepted with or without it.
pub static STANDARD_PAD_INDIFFERENT: LazyLock<Simd> =
    LazyLock::new(|| Simd::standard(PAD_INDIFFERENT));
/// URL-safe alphabet, padding written and required.
pub static URL_SAFE: LazyLock<Simd> = LazyLock::new(|| Simd::url_safe(PAD));
/// URL-safe alphabet, padding written, accepted with or without it.
pub static URL_SAFE_PAD_INDIFFERENT: LazyLock<Simd> =
    LazyLock::new(|| Simd::url_safe(PAD_INDIFFERENT));

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose as gp;

    /// Every length around the SIMD block sizes, every byte value, and inputs the scalar
    /// engines refuse: the SIMD engines write and read exactly what they do.
    #[test]
    fn the_simd_engines_agree_with_the_scalar_ones() {
        let pairs: [(&dyn Fn(&[u8]) -> String, &dyn Fn(&[u8]) -> String); 5] = [
            (&|b| super::STANDARD.encode(b), &|b| gp::STANDARD.encode(b)),
            (&|b| super::STANDARD_NO_PAD.encode(b), &|b| {
                gp::STANDARD_NO_PAD.encode(b)
            }),
            (&|b| super::URL_SAFE.encode(b), &|b| gp::URL_SAFE.encode(b)),
            (&|b| super::STANDARD_PAD_INDIFFERENT.encode(b), &|b| {
                gp::STANDARD_PAD_INDIFFERENT.encode(b)
            }),
            (&|b| super::URL_SAFE_PAD_INDIFFERENT.encode(b), &|b| {
                gp::URL_SAFE_PAD_INDIFFERENT.encode(b)
            }),
        ];
        let decoders: [(&dyn Fn(&[u8]) -> String, &dyn Fn(&[u8]) -> String); 5] = [
            (&|s| format!("{:?}", super::STANDARD.decode(s)), &|s| {
                format!("{:?}", gp::STANDARD.decode(s))
            }),
            (
                &|s| format!("{:?}", super::STANDARD_NO_PAD.decode(s)),
                &|s| format!("{:?}", gp::STANDARD_NO_PAD.decode(s)),
            ),
            (&|s| format!("{:?}", super::URL_SAFE.decode(s)), &|s| {
                format!("{:?}", gp::URL_SAFE.decode(s))
            }),
            (
                &|s| format!("{:?}", super::STANDARD_PAD_INDIFFERENT.decode(s)),
                &|s| format!("{:?}", gp::STANDARD_PAD_INDIFFERENT.decode(s)),
            ),
            (
                &|s| format!("{:?}", super::URL_SAFE_PAD_INDIFFERENT.decode(s)),
                &|s| format!("{:?}", gp::URL_SAFE_PAD_INDIFFERENT.decode(s)),
            ),
        ];
        let bytes: Vec<u8> = (0..4000u32).map(|i| (i * 7 + i / 256) as u8).collect();
        for len in (0..200).chain([319, 320, 640, 960, 1919, 1920, 3999]) {
            let input = &bytes[..len];
            for (simd, scalar) in &pairs {
                let text = scalar(input);
                assert_eq!(simd(input), text, "encode, {len} bytes");
                for (dec_simd, dec_scalar) in &decoders {
                    assert_eq!(dec_simd(text.as_bytes()), dec_scalar(text.as_bytes()));
                    // A bad character at every kind of place, a cut, padding taken off.
                    for bad in [0, text.len() / 2, text.len().saturating_sub(1)] {
                        let mut t = text.clone().into_bytes();
                        if let Some(c) = t.get_mut(bad) {
                            *c = b'*';
                        }
                        assert_eq!(dec_simd(&t), dec_scalar(&t), "{len} bytes, bad at {bad}");
                    }
                    let cut = &text.as_bytes()[..text.len().saturating_sub(1)];
                    assert_eq!(dec_simd(cut), dec_scalar(cut));
                    let bare = text.trim_end_matches('=').as_bytes();
                    assert_eq!(dec_simd(bare), dec_scalar(bare));
                }
            }
        }
    }
}

//! Base64 for the audio payloads every message carries (telephony bridges, both model
//! protocols, the mock): the base64 crate's SIMD engine (AVX2 or NEON, detected once at run
//! time, the scalar engine otherwise or on targets it has none for) with the same alphabets and padding rules as the crate's
//! `general_purpose` constants of the same names, so what is accepted, refused and written is
//! unchanged.

use std::sync::LazyLock;

use base64::engine::general_purpose::{NO_PAD, PAD, PAD_INDIFFERENT};

/// The crate's SIMD engine where it has one for the target ...
#[cfg(any(
    target_arch = "x86_64",
    all(target_arch = "aarch64", target_feature = "neon")
))]
mod pick {
    use base64::engine::GeneralPurposeConfig;

    pub type Engine = base64::engine::Simd;

    pub fn standard(config: GeneralPurposeConfig) -> Engine {
        Engine::standard(config)
    }

    pub fn url_safe(config: GeneralPurposeConfig) -> Engine {
        Engine::url_safe(config)
    }
}

/// ... and its scalar engine elsewhere.
#[cfg(not(any(
    target_arch = "x86_64",
    all(target_arch = "aarch64", target_feature = "neon")
)))]
mod pick {
    use base64::alphabet;
    use base64::engine::GeneralPurposeConfig;

    pub type Engine = base64::engine::GeneralPurpose;

    pub fn standard(config: GeneralPurposeConfig) -> Engine {
        Engine::new(&alphabet::STANDARD, config)
    }

    pub fn url_safe(config: GeneralPurposeConfig) -> Engine {
        Engine::new(&alphabet::URL_SAFE, config)
    }
}

use pick::Engine;

/// Standard alphabet, padding written and required.
pub static STANDARD: LazyLock<Engine> = LazyLock::new(|| pick::standard(PAD));
/// Standard alphabet, no padding written, none accepted.
pub static STANDARD_NO_PAD: LazyLock<Engine> = LazyLock::new(|| pick::standard(NO_PAD));
/// Standard alphabet, padding written, accepted with or without it.
pub static STANDARD_PAD_INDIFFERENT: LazyLock<Engine> =
    LazyLock::new(|| pick::standard(PAD_INDIFFERENT));
/// URL-safe alphabet, padding written and required.
pub static URL_SAFE: LazyLock<Engine> = LazyLock::new(|| pick::url_safe(PAD));
/// URL-safe alphabet, padding written, accepted with or without it.
pub static URL_SAFE_PAD_INDIFFERENT: LazyLock<Engine> =
    LazyLock::new(|| pick::url_safe(PAD_INDIFFERENT));

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose as gp;

    /// `simd` writes what `scalar` writes and reads what it reads, with the same errors: every
    /// length around the SIMD block sizes, a bad character at the start, middle and end, a cut
    /// and the padding taken off.
    fn agree(simd: &impl Engine, scalar: &impl Engine) {
        let bytes: Vec<u8> = (0..4000u32).map(|i| (i * 7 + i / 256) as u8).collect();
        let by_simd = |t: &[u8]| format!("{:?}", simd.decode(t));
        let by_scalar = |t: &[u8]| format!("{:?}", scalar.decode(t));
        for len in (0..200).chain([319, 320, 640, 960, 1919, 1920, 3999]) {
            let text = scalar.encode(&bytes[..len]);
            assert_eq!(simd.encode(&bytes[..len]), text, "encode, {len} bytes");
            let mut inputs = vec![text.clone().into_bytes()];
            for bad in [0, text.len() / 2, text.len().saturating_sub(1)] {
                let mut t = text.clone().into_bytes();
                if let Some(c) = t.get_mut(bad) {
                    *c = b'*';
                }
                inputs.push(t);
            }
            inputs.push(text.as_bytes()[..text.len().saturating_sub(1)].to_vec());
            inputs.push(text.trim_end_matches('=').as_bytes().to_vec());
            for t in &inputs {
                assert_eq!(by_simd(t), by_scalar(t), "decode, {len} bytes");
            }
        }
    }

    #[test]
    fn the_simd_engines_agree_with_the_scalar_ones() {
        agree(&*super::STANDARD, &gp::STANDARD);
        agree(&*super::STANDARD_NO_PAD, &gp::STANDARD_NO_PAD);
        agree(
            &*super::STANDARD_PAD_INDIFFERENT,
            &gp::STANDARD_PAD_INDIFFERENT,
        );
        agree(&*super::URL_SAFE, &gp::URL_SAFE);
        agree(
            &*super::URL_SAFE_PAD_INDIFFERENT,
            &gp::URL_SAFE_PAD_INDIFFERENT,
        );
    }
}

//! G.711 companding (μ-law and A-law) between 16-bit linear PCM and 8-bit codes, bit-exact with
//! the ITU-T G.191 Software Tool Library reference (`g711.c`).
//!
//! Encoding follows the STL arithmetic step by step (one's complement of negative inputs, the
//! μ-law bias of 33 on the 14-bit value, A-law on the 12 most significant bits of magnitude).
//! Decoding is a lookup in a 256-entry table per law, built at compile time from the STL's
//! expansion formulas; decoded values are on the 16-bit scale, as the STL outputs them. μ-law
//! encoding of whole frames (every caller frame of a μ-law leg, every sample of agent audio
//! queued for one) is a lookup too: the code depends only on the sample's top 14 bits, so a
//! 16 KiB table built at compile time from [`ulaw_encode`] gives the same codes several times
//! faster than the arithmetic.

/// Encodes one 16-bit linear sample to a μ-law code (ITU-T G.711, STL `ulaw_compress`).
pub const fn ulaw_encode(s: i16) -> u8 {
    let x = s as i32;
    // 14-bit magnitude (one's complement for negatives, so -1 and 0 share a code) plus the bias.
    let mut absno = if x < 0 { (!x) >> 2 } else { x >> 2 } + 33;
    if absno > 0x1FFF {
        absno = 0x1FFF;
    }
    // Segment number 1..=8: one more than the bit length of `absno >> 6`.
    let segno = 1 + (32 - ((absno >> 6) as u32).leading_zeros()) as i32;
    let high_nibble = 8 - segno;
    let low_nibble = 0xF - ((absno >> segno) & 0xF);
    let code = (high_nibble << 4) | low_nibble;
    if x >= 0 {
        (code | 0x80) as u8
    } else {
        code as u8
    }
}

/// Decodes one μ-law code to a 16-bit linear sample (ITU-T G.711, STL `ulaw_expand`).
pub const fn ulaw_decode(code: u8) -> i16 {
    ULAW_TABLE[code as usize]
}

/// Encodes one 16-bit linear sample to an A-law code (ITU-T G.711, STL `alaw_compress`).
pub const fn alaw_encode(s: i16) -> u8 {
    let x = s as i32;
    // 12-bit magnitude, one's complement for negatives: 0 <= ix <= 2047.
    let mut ix = if x < 0 { (!x) >> 4 } else { x >> 4 };
    if ix > 15 {
        // Segments 1..=7: normalise the mantissa into 16..=31 and count the shifts.
        let mut iexp = 1;
        while ix > 16 + 15 {
            ix >>= 1;
            iexp += 1;
        }
        ix -= 16;
        ix += iexp << 4;
    }
    if x >= 0 {
        ix |= 0x80;
    }
    (ix ^ 0x55) as u8
}

/// Decodes one A-law code to a 16-bit linear sample (ITU-T G.711, STL `alaw_expand`).
pub const fn alaw_decode(code: u8) -> i16 {
    ALAW_TABLE[code as usize]
}

/// G.711's one sample rate (Hz).
pub const RATE: u32 = 8_000;

/// One of the two G.711 laws, for code that holds audio in whichever one its leg speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Law {
    /// μ-law (PCMU).
    Ulaw,
    /// A-law (PCMA).
    Alaw,
}

impl Law {
    /// The code of one linear sample.
    pub fn encode(self, s: i16) -> u8 {
        match self {
            Law::Ulaw => ulaw_code(s),
            Law::Alaw => alaw_encode(s),
        }
    }

    /// The linear sample of one code.
    pub const fn decode(self, code: u8) -> i16 {
        match self {
            Law::Ulaw => ULAW_TABLE[code as usize],
            Law::Alaw => ALAW_TABLE[code as usize],
        }
    }
}

/// Appends the μ-law codes of `pcm` to `out` (no reallocation if `out` has the capacity).
pub fn encode_ulaw(pcm: &[i16], out: &mut Vec<u8>) {
    out.extend(pcm.iter().map(|&s| ulaw_code(s)));
}

/// [`ulaw_encode`] by lookup: the code of every sample with the same top 14 bits (`s >> 2`, an
/// arithmetic shift, so negatives keep their one's-complement pairing) is the same.
#[inline]
fn ulaw_code(s: i16) -> u8 {
    ULAW_CODES[((s >> 2) as u16 & 0x3FFF) as usize]
}

/// μ-law codes indexed by the sample's top 14 bits, two's complement (`(s >> 2) & 0x3FFF`).
static ULAW_CODES: [u8; 1 << 14] = build_ulaw_codes();

const fn build_ulaw_codes() -> [u8; 1 << 14] {
    let mut t = [0u8; 1 << 14];
    let mut i = 0;
    while i < 1 << 14 {
        // The 14-bit index back to a sample with those top bits (sign-extended).
        let top = if i >= 1 << 13 {
            i as i32 - (1 << 14)
        } else {
            i as i32
        };
        t[i] = ulaw_encode((top << 2) as i16);
        i += 1;
    }
    t
}

/// Appends the linear samples of μ-law `codes` to `out` (no reallocation if `out` has the capacity).
pub fn decode_ulaw(codes: &[u8], out: &mut Vec<i16>) {
    out.extend(codes.iter().map(|&c| ULAW_TABLE[usize::from(c)]));
}

/// Appends the A-law codes of `pcm` to `out` (no reallocation if `out` has the capacity).
pub fn encode_alaw(pcm: &[i16], out: &mut Vec<u8>) {
    out.extend(pcm.iter().map(|&s| alaw_encode(s)));
}

/// Appends the linear samples of A-law `codes` to `out` (no reallocation if `out` has the capacity).
pub fn decode_alaw(codes: &[u8], out: &mut Vec<i16>) {
    out.extend(codes.iter().map(|&c| ALAW_TABLE[usize::from(c)]));
}

static ULAW_TABLE: [i16; 256] = build_ulaw_table();
static ALAW_TABLE: [i16; 256] = build_alaw_table();

const fn ulaw_expand(code: u8) -> i16 {
    let inverted = !(code as i32);
    let exponent = (inverted >> 4) & 0x7;
    let mantissa = inverted & 0xF;
    let step = 4 << (exponent + 1);
    let magnitude = (0x80 << exponent) + step * mantissa + step / 2 - 4 * 33;
    // The largest magnitude is 32124, so both signs fit in an i16.
    if code < 0x80 {
        -magnitude as i16
    } else {
        magnitude as i16
    }
}

const fn alaw_expand(code: u8) -> i16 {
    let ix = ((code ^ 0x55) & 0x7F) as i32;
    let iexp = ix >> 4;
    let mut mant = ix & 0xF;
    if iexp > 0 {
        mant += 16;
    }
    mant = (mant << 4) + 8;
    if iexp > 1 {
        mant <<= iexp - 1;
    }
    // The largest magnitude is 32256, so both signs fit in an i16.
    if code > 127 {
        mant as i16
    } else {
        -mant as i16
    }
}

const fn build_ulaw_table() -> [i16; 256] {
    let mut table = [0i16; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = ulaw_expand(i as u8);
        i += 1;
    }
    table
}

const fn build_alaw_table() -> [i16; 256] {
    let mut table = [0i16; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = alaw_expand(i as u8);
        i += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ulaw_table_gives_the_arithmetic_code_of_every_sample() {
        for s in i16::MIN..=i16::MAX {
            assert_eq!(ulaw_code(s), ulaw_encode(s), "sample {s}");
            assert_eq!(Law::Ulaw.encode(s), ulaw_encode(s), "sample {s}");
        }
        let pcm: Vec<i16> = (i16::MIN..=i16::MAX).collect();
        let mut codes = Vec::new();
        encode_ulaw(&pcm, &mut codes);
        assert!(codes.iter().zip(&pcm).all(|(&c, &s)| c == ulaw_encode(s)));
    }

    #[test]
    fn known_codes() {
        // Silence and full scale, from the G.711 tables.
        assert_eq!(ulaw_encode(0), 0xFF);
        assert_eq!(ulaw_encode(-1), 0x7F);
        assert_eq!(ulaw_encode(i16::MAX), 0x80);
        assert_eq!(ulaw_encode(i16::MIN), 0x00);
        assert_eq!(ulaw_decode(0xFF), 0);
        assert_eq!(ulaw_decode(0x80), 32124);
        assert_eq!(ulaw_decode(0x00), -32124);
        assert_eq!(alaw_encode(0), 0xD5);
        assert_eq!(alaw_encode(-1), 0x55);
        assert_eq!(alaw_decode(0xD5), 8);
        assert_eq!(alaw_decode(0x55), -8);
        assert_eq!(alaw_decode(0xAA), 32256);
        assert_eq!(alaw_decode(0x2A), -32256);
    }

    #[test]
    fn decode_then_encode_is_identity_on_codes() {
        for c in 0..=255u8 {
            // μ-law has two zeros (0x7F and 0xFF); the decoded 0 re-encodes as the positive one.
            let expect = if c == 0x7F { 0xFF } else { c };
            assert_eq!(ulaw_encode(ulaw_decode(c)), expect, "ulaw {c:#04x}");
            assert_eq!(alaw_encode(alaw_decode(c)), c, "alaw {c:#04x}");
        }
    }

    #[test]
    fn slice_helpers_append_without_reallocating() {
        let pcm: Vec<i16> = (0..160).map(|i| (i * 200 - 16000) as i16).collect();
        let mut codes = Vec::with_capacity(4 + pcm.len());
        codes.extend_from_slice(&[1, 2, 3, 4]);
        let ptr = codes.as_ptr();
        encode_ulaw(&pcm, &mut codes);
        assert_eq!(codes.as_ptr(), ptr);
        assert_eq!(&codes[..4], &[1, 2, 3, 4]);
        assert!(
            codes[4..]
                .iter()
                .zip(&pcm)
                .all(|(&c, &s)| c == ulaw_encode(s))
        );

        let mut back = Vec::with_capacity(pcm.len());
        let ptr = back.as_ptr();
        decode_ulaw(&codes[4..], &mut back);
        assert_eq!(back.as_ptr(), ptr);
        assert_eq!(back.len(), pcm.len());

        let mut a = Vec::with_capacity(pcm.len());
        encode_alaw(&pcm, &mut a);
        let mut back = Vec::with_capacity(pcm.len());
        decode_alaw(&a, &mut back);
        assert!(
            back.iter()
                .zip(&pcm)
                .all(|(&d, &s)| (i32::from(d) - i32::from(s)).abs() <= 1024)
        );
    }
}

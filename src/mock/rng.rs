//! The mock's randomness: a small seeded generator, so a scenario's jitter and faults play the
//! same way for the same seed.

use std::time::Duration;

/// A small seeded generator (SplitMix64) for jitter: deterministic for a given seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..=max`, with millisecond resolution.
    pub fn duration_up_to(&mut self, max: Duration) -> Duration {
        let ms = max.as_millis() as u64;
        if ms == 0 {
            Duration::ZERO
        } else {
            Duration::from_millis(self.next_u64() % (ms + 1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_seeded_and_bounded() {
        let a: Vec<u64> = (0..5)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..5)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        let mut r = Rng::new(1);
        for _ in 0..100 {
            assert!(r.duration_up_to(Duration::from_millis(10)) <= Duration::from_millis(10));
        }
    }
}

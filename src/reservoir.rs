//! A bounded uniform sample of a per-frame figure (Vitter's algorithm R, the largest value always
//! kept): what a call keeps of figures it measures every 20 ms, so that a long call holds no
//! more than a 20-second one.

/// Values a per-frame figure keeps per call at most: every value of a call's first 20 s (1,000
/// frames of 20 ms), then a uniform sample of that many. 1,000 values put a call's p99 within
/// about ±0.3 percentile points; a call's three samples hold 20 KiB at most (60 KiB with 3,000,
/// which a long call's memory kept growing into for minutes).
pub const SAMPLE_CAP: usize = 1000;

/// Bounds a per-frame figure of a call (`uplink_added_ms`, `downlink_added_ms`, a leg's send
/// intervals): every value while fewer than [`SAMPLE_CAP`] were seen, then a uniform sample of that many (Vitter's
/// algorithm R), the largest value always kept. A ten-minute call keeps what a 20-second call
/// does, and its percentiles are those of the sample.
#[derive(Debug, Clone)]
pub struct Reservoir {
    seen: u64,
    rng: u64,
    /// Where the largest value kept is.
    max_slot: usize,
}

impl Default for Reservoir {
    fn default() -> Self {
        Reservoir {
            seen: 0,
            rng: 0x9E37_79B9_7F4A_7C15,
            max_slot: 0,
        }
    }
}

impl Reservoir {
    /// Offers `x` to `values` (which only this reservoir fills).
    pub fn push<T: PartialOrd + Copy>(&mut self, values: &mut Vec<T>, x: T) {
        self.seen += 1;
        if values.len() < SAMPLE_CAP {
            if values.len() == values.capacity() {
                // Doubling, but never past the cap: a long call's samples hold 1,000 values
                // each, not 1,024.
                values.reserve_exact(values.len().max(64).min(SAMPLE_CAP - values.len()));
            }
            if values.get(self.max_slot).is_none_or(|&m| x > m) {
                self.max_slot = values.len();
            }
            values.push(x);
            return;
        }
        let is_max = values.get(self.max_slot).is_some_and(|&m| x > m);
        let j = self.next() % self.seen;
        let slot = if (j as usize) < SAMPLE_CAP {
            j as usize
        } else if is_max {
            // The new largest takes the old one's place: one slot holds the maximum, the others
            // a uniform sample.
            self.max_slot
        } else {
            return;
        };
        if slot == self.max_slot && !is_max {
            // The largest value stays.
            return;
        }
        values[slot] = x;
        if is_max {
            self.max_slot = slot;
        }
    }

    /// xorshift64: enough for choosing slots, and the same on every run.
    fn next(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Values offered so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::metrics::summarize;

    #[test]
    fn a_long_call_keeps_a_bounded_uniform_sample_and_its_largest_value() {
        let mut r = Reservoir::default();
        let mut v = Vec::new();
        for i in 0..100_000u32 {
            // An ordered stream: a sample biased toward either end would show in the median.
            r.push(
                &mut v,
                f64::from(i % 50_000) + if i == 77_777 { 1e6 } else { 0.0 },
            );
        }
        assert_eq!(v.len(), SAMPLE_CAP);
        assert_eq!(v.capacity(), SAMPLE_CAP, "grown to the cap, not past it");
        let s = summarize(&v);
        assert_eq!(s.max, Some(1e6 + f64::from(77_777 % 50_000)));
        let p50 = s.p50.unwrap();
        assert!((23_500.0..=26_500.0).contains(&p50), "median {p50}");
        let p99 = s.p99.unwrap();
        assert!((48_500.0..=50_000.0).contains(&p99), "p99 {p99}");
    }

    #[test]
    fn a_short_call_keeps_every_value() {
        let mut r = Reservoir::default();
        let mut v = Vec::new();
        for i in 0..SAMPLE_CAP {
            r.push(&mut v, i as f64);
        }
        assert_eq!(v, (0..SAMPLE_CAP).map(|i| i as f64).collect::<Vec<_>>());
    }
}

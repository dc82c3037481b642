//! Cadence figures for a 20 ms frame stream: how far the intervals between consecutive frames
//! stray from the 20 ms frame period (median, 99th percentile, worst).

use crate::audio::FRAME_MS;

const PERIOD_US: i64 = FRAME_MS as i64 * 1000;

/// Deviation of frame intervals from 20 ms, in µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Cadence {
    /// Intervals measured.
    pub intervals: usize,
    /// Mean interval.
    pub mean_interval_us: u32,
    /// Median of `|interval - 20 ms|`.
    pub p50_dev_us: u32,
    /// 99th percentile (nearest rank) of `|interval - 20 ms|`.
    pub p99_dev_us: u32,
    /// Largest `|interval - 20 ms|`.
    pub max_dev_us: u32,
}

impl Cadence {
    /// Figures over `intervals_us` (all zeros when empty).
    pub fn from_intervals_us(intervals_us: &[u32]) -> Self {
        if intervals_us.is_empty() {
            return Cadence::default();
        }
        let mut dev: Vec<u32> = intervals_us
            .iter()
            .map(|&i| {
                (i64::from(i) - PERIOD_US)
                    .unsigned_abs()
                    .min(u64::from(u32::MAX)) as u32
            })
            .collect();
        dev.sort_unstable();
        let rank = |p: f64| {
            let r = (p * dev.len() as f64).ceil() as usize;
            dev[r.clamp(1, dev.len()) - 1]
        };
        let sum: u64 = intervals_us.iter().map(|&i| u64::from(i)).sum();
        Cadence {
            intervals: dev.len(),
            mean_interval_us: (sum / intervals_us.len() as u64) as u32,
            p50_dev_us: rank(0.50),
            p99_dev_us: rank(0.99),
            max_dev_us: dev[dev.len() - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures() {
        assert_eq!(Cadence::from_intervals_us(&[]), Cadence::default());
        let mut v = vec![20_000u32; 98];
        v.push(21_000);
        v.push(60_000);
        let c = Cadence::from_intervals_us(&v);
        assert_eq!(c.intervals, 100);
        assert_eq!(c.p50_dev_us, 0);
        assert_eq!(c.p99_dev_us, 1_000);
        assert_eq!(c.max_dev_us, 40_000);
        let early = Cadence::from_intervals_us(&[15_000]);
        assert_eq!(early.max_dev_us, 5_000);
    }
}

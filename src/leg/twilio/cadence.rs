//! Cadence figures for a 20 ms frame stream: how far the intervals between consecutive frames
//! (or messages of several frames) stray from their period (median, 99th percentile, worst), and the bounded record of
//! those intervals a leg keeps while its call runs ([`SendIntervals`]).

use std::time::Duration;

use tokio::time::Instant;

use crate::audio::FRAME_MS;
use crate::reservoir::Reservoir;

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
        Self::around(intervals_us, PERIOD_US as u32)
    }

    /// Figures over `intervals_us` of a stream whose messages are `period_us` apart (a bridge
    /// that carries several frames per message: Exotel's 100 ms chunks).
    pub fn around(intervals_us: &[u32], period_us: u32) -> Self {
        if intervals_us.is_empty() {
            return Cadence::default();
        }
        let mut dev: Vec<u32> = intervals_us
            .iter()
            .map(|&i| deviation_from(i, i64::from(period_us)))
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

/// The intervals between a leg's consecutive outbound frames, in µs, as a call of any length
/// can keep them: every one of the first minute's, then a uniform sample of as many (see
/// [`Reservoir`]); their count, sum and largest deviation from 20 ms exact.
#[derive(Clone, Debug, Default)]
pub struct SendIntervals {
    kept: Vec<u32>,
    reservoir: Reservoir,
    sum_us: u64,
    max_dev_us: u32,
    /// Where the last frame sent ended on the media timeline, and when it was sent.
    last: Option<(Duration, Instant)>,
}

impl SendIntervals {
    /// A frame spanning `ts..end` of the media timeline was handed to the socket at `now`: its
    /// interval from the previous frame counts when it follows that frame on the timeline.
    pub fn sent(&mut self, ts: Duration, end: Duration, now: Instant) {
        if let Some((prev_end, prev_at)) = self.last
            && prev_end == ts
        {
            let us = now.saturating_duration_since(prev_at).as_micros();
            self.push(u32::try_from(us).unwrap_or(u32::MAX));
        }
        self.last = Some((end, now));
    }

    /// The timeline breaks (a barge-in's clear): the next frame starts no interval.
    pub fn break_off(&mut self) {
        self.last = None;
    }

    /// One more interval.
    pub fn push(&mut self, us: u32) {
        self.sum_us += u64::from(us);
        self.max_dev_us = self.max_dev_us.max(deviation(us));
        self.reservoir.push(&mut self.kept, us);
    }

    /// The intervals kept, in the order they were measured until the sample starts replacing.
    pub fn kept(&self) -> &[u32] {
        &self.kept
    }

    /// The kept intervals' deviations from 20 ms, in ms.
    pub fn kept_deviations_ms(&self) -> impl Iterator<Item = f64> + '_ {
        self.kept
            .iter()
            .map(|&us| f64::from(deviation(us)) / 1000.0)
    }

    /// Intervals measured (kept or not).
    pub fn seen(&self) -> u64 {
        self.reservoir.seen()
    }

    /// Cadence figures: percentiles over the sample, count, mean and worst over every interval.
    pub fn cadence(&self) -> Cadence {
        let seen = self.seen();
        if seen == 0 {
            return Cadence::default();
        }
        Cadence {
            intervals: usize::try_from(seen).unwrap_or(usize::MAX),
            mean_interval_us: u32::try_from(self.sum_us / seen).unwrap_or(u32::MAX),
            max_dev_us: self.max_dev_us,
            ..Cadence::from_intervals_us(&self.kept)
        }
    }
}

fn deviation(us: u32) -> u32 {
    deviation_from(us, PERIOD_US)
}

fn deviation_from(us: u32, period_us: i64) -> u32 {
    (i64::from(us) - period_us)
        .unsigned_abs()
        .min(u64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_stream_keeps_a_bounded_sample_and_exact_totals() {
        let mut s = SendIntervals::default();
        let mut all = Vec::new();
        for i in 0..200_000u32 {
            // Mostly on time, 2 % late by 1 ms, one very early.
            let us = match i {
                123_456 => 1_000,
                i if i % 50 == 0 => 21_000,
                _ => 20_000,
            };
            s.push(us);
            all.push(us);
        }
        assert!(s.kept().len() <= crate::reservoir::SAMPLE_CAP);
        let c = s.cadence();
        let exact = Cadence::from_intervals_us(&all);
        assert_eq!(c.intervals, 200_000);
        assert_eq!(c.mean_interval_us, exact.mean_interval_us);
        assert_eq!(
            c.max_dev_us, 19_000,
            "the worst interval is never sampled away"
        );
        assert_eq!(
            (c.p50_dev_us, c.p99_dev_us),
            (exact.p50_dev_us, exact.p99_dev_us)
        );
        let mut short = SendIntervals::default();
        [20_000, 21_000, 19_000]
            .into_iter()
            .for_each(|us| short.push(us));
        assert_eq!(short.kept(), [20_000, 21_000, 19_000]);
        assert_eq!(
            short.cadence(),
            Cadence::from_intervals_us(&[20_000, 21_000, 19_000])
        );
    }

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

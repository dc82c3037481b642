//! Cutting a leg's audio of any packet size into 20 ms frames on one continuous media timeline:
//! samples are collected until a frame is full, each frame is stamped with where its first sample
//! sits (samples before it ÷ rate), silence can be filled in for a short gap, and the timeline can
//! jump past a long one. Every leg that receives audio in pieces (the `/stream` socket,
//! AudioSocket, the telephony bridges, the microphone) frames it here.

use std::ops::Range;
use std::time::Duration;

use super::frame::{Frame, samples_per_frame};

/// Audio in, whole 20 ms frames out.
#[derive(Debug)]
pub struct Reframer {
    rate: u32,
    spf: usize,
    /// The frame being filled.
    partial: Vec<i16>,
    /// Where the frame being filled starts on the timeline (samples).
    start: u64,
}

impl Reframer {
    /// A reframer at `rate` Hz whose timeline starts at 0.
    pub fn new(rate: u32) -> Self {
        let spf = samples_per_frame(rate);
        Reframer {
            rate,
            spf,
            partial: Vec::with_capacity(spf),
            start: 0,
        }
    }

    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// Samples held toward the next frame.
    pub fn pending(&self) -> usize {
        self.partial.len()
    }

    /// Where the next sample lands on the timeline (samples).
    pub fn position(&self) -> u64 {
        self.start.saturating_add(self.partial.len() as u64)
    }

    /// Appends `samples`; `emit` gets each frame that fills.
    pub fn push(&mut self, samples: &[i16], emit: impl FnMut(Frame)) {
        self.push_with(
            samples.len(),
            |r, out| out.extend_from_slice(&samples[r]),
            emit,
        );
    }

    /// Appends `n` samples of silence (a short gap filled so the timeline stays continuous).
    pub fn push_silence(&mut self, n: usize, emit: impl FnMut(Frame)) {
        self.push_with(n, |r, out| out.resize(out.len() + r.len(), 0), emit);
    }

    /// Appends `n` samples that `decode` writes straight into the frame being filled: it is
    /// called with the range of the `n` samples to append next (in order) and must push exactly
    /// that many. Decoding in place spares a copy per packet (G.711, L16 of either order).
    pub fn push_with(
        &mut self,
        n: usize,
        mut decode: impl FnMut(Range<usize>, &mut Vec<i16>),
        mut emit: impl FnMut(Frame),
    ) {
        let mut done = 0;
        while done < n {
            let take = (n - done).min(self.spf - self.partial.len());
            let before = self.partial.len();
            decode(done..done + take, &mut self.partial);
            // A decoder that wrote too few or too many samples must not shift the timeline.
            self.partial.resize(before + take, 0);
            done += take;
            if self.partial.len() == self.spf {
                emit(self.take_frame());
            }
        }
    }

    /// The frame being filled, padded with silence to 20 ms (`None` when nothing is held): the
    /// end of the caller's audio, or the last audio before a long gap.
    pub fn flush(&mut self) -> Option<Frame> {
        if self.partial.is_empty() {
            return None;
        }
        self.partial.resize(self.spf, 0);
        Some(self.take_frame())
    }

    /// Moves the timeline to `pos` (a jump past a gap too long to fill, or the first packet's
    /// own timestamp). What was held is flushed first and returned.
    pub fn jump_to(&mut self, pos: u64) -> Option<Frame> {
        let held = self.flush();
        self.start = pos;
        held
    }

    fn take_frame(&mut self) -> Frame {
        let samples = std::mem::replace(&mut self.partial, Vec::with_capacity(self.spf));
        let ts = Duration::from_micros(self.start.saturating_mul(1_000_000) / u64::from(self.rate));
        self.start = self.start.saturating_add(self.spf as u64);
        Frame {
            rate: self.rate,
            ts,
            samples,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(r: &mut Reframer, chunks: &[usize]) -> Vec<Frame> {
        let mut out = Vec::new();
        let mut next = 0i16;
        for &n in chunks {
            let s: Vec<i16> = (0..n)
                .map(|_| {
                    next = next.wrapping_add(1);
                    next
                })
                .collect();
            r.push(&s, |f| out.push(f));
        }
        out
    }

    #[test]
    fn pieces_of_any_size_become_whole_frames_in_order() {
        let mut r = Reframer::new(8000);
        let out = frames(&mut r, &[1, 159, 7, 300, 13]);
        assert_eq!(out.len(), 3);
        let all: Vec<i16> = out.iter().flat_map(|f| f.samples.clone()).collect();
        assert_eq!(all, (1..=480).map(|x| x as i16).collect::<Vec<_>>());
        assert_eq!(
            out.iter().map(|f| f.ts).collect::<Vec<_>>(),
            [0, 20, 40].map(Duration::from_millis)
        );
        assert_eq!(r.pending(), 480 % 160);
        assert_eq!(r.position(), 480);
    }

    #[test]
    fn flush_pads_the_last_frame_and_empty_flushes_nothing() {
        let mut r = Reframer::new(16000);
        frames(&mut r, &[100]);
        let f = r.flush().expect("held audio");
        assert_eq!(f.samples.len(), 320);
        assert_eq!(
            &f.samples[..100],
            &(1..=100).map(|x| x as i16).collect::<Vec<_>>()[..]
        );
        assert!(f.samples[100..].iter().all(|&s| s == 0));
        assert_eq!(r.flush(), None);
        assert_eq!(r.position(), 320);
    }

    #[test]
    fn silence_keeps_the_timeline_and_a_jump_moves_it() {
        let mut r = Reframer::new(8000);
        let mut out = Vec::new();
        r.push(&[5; 80], |f| out.push(f));
        r.push_silence(240, |f| out.push(f));
        assert_eq!(out.len(), 2);
        assert_eq!(&out[0].samples[..80], &[5; 80]);
        assert!(out[0].samples[80..].iter().all(|&s| s == 0));
        r.push(&[7; 10], |f| out.push(f));
        let held = r.jump_to(8000).expect("the 10 samples before the gap");
        assert_eq!(held.ts, Duration::from_millis(40));
        r.push(&[9; 160], |f| out.push(f));
        assert_eq!(out.last().map(|f| f.ts), Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_decoder_that_miscounts_does_not_shift_the_timeline() {
        let mut r = Reframer::new(8000);
        let mut out = Vec::new();
        r.push_with(200, |_, v| v.push(1), |f| out.push(f));
        assert_eq!(out.len(), 1);
        assert_eq!(r.position(), 200);
    }
}

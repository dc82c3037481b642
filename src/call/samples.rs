//! The reconnect ring's storage: samples appended at the back and dropped from the front, kept
//! in fixed blocks so that memory follows what is held (at most two blocks more), growing never
//! copies what is there, and a frame costs no allocation of its own.

use std::collections::VecDeque;

/// Samples per block: 2048 (bytes of `call::kept`: 256 ms of a G.711 leg, 64 ms of 16 kHz PCM).
const BLOCK: usize = 2048;

/// A queue of samples in blocks of [`BLOCK`].
#[derive(Debug)]
pub struct Samples<S> {
    blocks: VecDeque<Vec<S>>,
    /// Samples of the front block already dropped.
    head: usize,
    len: usize,
}

impl<S> Default for Samples<S> {
    fn default() -> Self {
        Samples {
            blocks: VecDeque::new(),
            head: 0,
            len: 0,
        }
    }
}

impl<S: Copy> Samples<S> {
    /// Samples held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `samples` at the back.
    pub fn push(&mut self, mut samples: &[S]) {
        self.len += samples.len();
        while !samples.is_empty() {
            if self.blocks.back().is_none_or(|b| b.len() == BLOCK) {
                self.blocks.push_back(Vec::with_capacity(BLOCK));
            }
            let Some(back) = self.blocks.back_mut() else {
                break;
            };
            let take = (BLOCK - back.len()).min(samples.len());
            back.extend_from_slice(&samples[..take]);
            samples = &samples[take..];
        }
    }

    /// Drops the oldest `n` samples (all of them if fewer are held). A block emptied is freed,
    /// except the last one, which is kept for what comes next.
    pub fn drop_front(&mut self, mut n: usize) {
        n = n.min(self.len);
        self.len -= n;
        while n > 0 {
            let Some(front) = self.blocks.front_mut() else {
                break;
            };
            let take = (front.len() - self.head).min(n);
            self.head += take;
            n -= take;
            if self.head == front.len() {
                front.clear();
                self.head = 0;
                if self.blocks.len() > 1 {
                    self.blocks.pop_front();
                }
            }
        }
    }

    /// Every sample held, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = S> + '_ {
        self.blocks
            .iter()
            .enumerate()
            .flat_map(move |(i, b)| b[if i == 0 { self.head } else { 0 }..].iter().copied())
    }

    /// Blocks allocated (for the memory test).
    #[cfg(test)]
    fn blocks(&self) -> usize {
        self.blocks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_across_blocks_and_drops_from_the_front() {
        let mut s = Samples::default();
        let all: Vec<u32> = (0..10_000).collect();
        for chunk in all.chunks(160) {
            s.push(chunk);
        }
        assert_eq!(s.len(), 10_000);
        assert!(s.iter().eq(all.iter().copied()));
        s.drop_front(4_321);
        assert_eq!(s.len(), 10_000 - 4_321);
        assert!(s.iter().eq(all[4_321..].iter().copied()));
        s.drop_front(1_000_000);
        assert!(s.is_empty());
        assert_eq!(s.iter().count(), 0);
        s.push(&[7, 8]);
        assert!(s.iter().eq([7, 8]));
    }

    #[test]
    fn memory_follows_what_is_held() {
        let mut s = Samples::default();
        let frame = [0i16; 160];
        // Ten seconds at 8 kHz held, then all but one frame dropped.
        for _ in 0..500 {
            s.push(&frame);
        }
        assert_eq!(s.blocks(), 80_000usize.div_ceil(BLOCK));
        s.drop_front(s.len() - 160);
        assert!(s.blocks() <= 2, "{} blocks kept", s.blocks());
        // A steady state of a second held never grows past its own blocks plus two.
        for _ in 0..5_000 {
            s.push(&frame);
            if s.len() > 8_000 {
                s.drop_front(160);
            }
            assert!(s.blocks() <= 8_000 / BLOCK + 2, "{} blocks", s.blocks());
        }
    }
}

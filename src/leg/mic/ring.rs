//! The audio-callback halves of the microphone leg: [`Capture`] goes into a device's input
//! callback, [`Playback`] into its output callback. Each touches only a lock-free single-producer
//! single-consumer ring (rtrb) and atomics: no allocation, no lock, no waiting, no waking. When a
//! ring is full or empty the callback drops or pads and counts it, and returns at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Counters shared between the callbacks and the leg.
#[derive(Debug, Default)]
pub struct MicCounters {
    /// Mono samples captured from the device.
    pub captured: AtomicU64,
    /// Captured samples dropped because the leg did not drain the ring in time.
    pub capture_overflow: AtomicU64,
    /// Samples played to the device from the ring.
    pub played: AtomicU64,
    /// Output callbacks that ran out of audio part-way: the end of each reply, or a glitch.
    pub partial_callbacks: AtomicU64,
    /// Agent samples dropped because the playback ring was full.
    pub playback_overflow: AtomicU64,
    /// Samples discarded from the playback ring by a barge-in.
    pub cleared: AtomicU64,
}

/// A snapshot of [`MicCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MicStats {
    pub captured: u64,
    pub capture_overflow: u64,
    pub played: u64,
    pub partial_callbacks: u64,
    pub playback_overflow: u64,
    pub cleared: u64,
    /// 20 ms frames dropped because the call did not take them.
    pub frames_dropped: u64,
}

impl MicCounters {
    pub fn snapshot(&self, frames_dropped: u64) -> MicStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MicStats {
            captured: g(&self.captured),
            capture_overflow: g(&self.capture_overflow),
            played: g(&self.played),
            partial_callbacks: g(&self.partial_callbacks),
            playback_overflow: g(&self.playback_overflow),
            cleared: g(&self.cleared),
            frames_dropped,
        }
    }
}

/// The input callback's half: interleaved device samples in, mono PCM16 into the ring.
pub struct Capture {
    pub(super) ring: rtrb::Producer<i16>,
    pub(super) channels: usize,
    pub(super) counters: Arc<MicCounters>,
}

impl Capture {
    /// Device channels per frame of interleaved input.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// One input callback's worth of interleaved `f32` samples (−1.0..1.0), mixed down to mono.
    pub fn write_f32(&mut self, interleaved: &[f32]) {
        let ch = self.channels.max(1);
        let mut dropped = 0u64;
        let frames = interleaved.chunks_exact(ch);
        let n = frames.len() as u64;
        for frame in frames {
            let mono = frame.iter().sum::<f32>() / ch as f32;
            let s = (mono * 32767.0).clamp(-32768.0, 32767.0) as i16;
            if self.ring.push(s).is_err() {
                dropped += 1;
            }
        }
        self.counters.captured.fetch_add(n, Ordering::Relaxed);
        if dropped > 0 {
            self.counters
                .capture_overflow
                .fetch_add(dropped, Ordering::Relaxed);
        }
    }

    /// The same for interleaved PCM16.
    pub fn write_i16(&mut self, interleaved: &[i16]) {
        let ch = self.channels.max(1);
        let mut dropped = 0u64;
        let frames = interleaved.chunks_exact(ch);
        let n = frames.len() as u64;
        for frame in frames {
            let mono = frame.iter().map(|&s| i32::from(s)).sum::<i32>() / ch as i32;
            if self.ring.push(mono as i16).is_err() {
                dropped += 1;
            }
        }
        self.counters.captured.fetch_add(n, Ordering::Relaxed);
        if dropped > 0 {
            self.counters
                .capture_overflow
                .fetch_add(dropped, Ordering::Relaxed);
        }
    }
}

/// The output callback's half: mono PCM16 from the ring out, copied to every channel.
pub struct Playback {
    pub(super) ring: rtrb::Consumer<i16>,
    pub(super) channels: usize,
    pub(super) clear: Arc<AtomicBool>,
    pub(super) counters: Arc<MicCounters>,
}

impl Playback {
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Fills one output callback's interleaved `f32` buffer; silence where the ring is empty.
    pub fn read_f32(&mut self, out: &mut [f32]) {
        self.read_with(out, |s| f32::from(s) / 32768.0, 0.0);
    }

    /// The same for interleaved PCM16.
    pub fn read_i16(&mut self, out: &mut [i16]) {
        self.read_with(out, |s| s, 0);
    }

    fn read_with<T: Copy>(&mut self, out: &mut [T], conv: impl Fn(i16) -> T, silence: T) {
        if self.clear.swap(false, Ordering::AcqRel) {
            let n = self.ring.slots();
            if let Ok(chunk) = self.ring.read_chunk(n) {
                chunk.commit_all();
            }
            self.counters.cleared.fetch_add(n as u64, Ordering::Relaxed);
        }
        let ch = self.channels.max(1);
        let (mut played, mut missing) = (0u64, 0u64);
        for frame in out.chunks_mut(ch) {
            let v = match self.ring.pop() {
                Ok(s) => {
                    played += 1;
                    conv(s)
                }
                Err(_) => {
                    missing += 1;
                    silence
                }
            };
            frame.fill(v);
        }
        self.counters.played.fetch_add(played, Ordering::Relaxed);
        if played > 0 && missing > 0 {
            self.counters
                .partial_callbacks
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn halves(
        len: usize,
        channels: usize,
    ) -> (
        Capture,
        rtrb::Consumer<i16>,
        Playback,
        rtrb::Producer<i16>,
        Arc<AtomicBool>,
        Arc<MicCounters>,
    ) {
        let counters = Arc::new(MicCounters::default());
        let (cap_tx, cap_rx) = rtrb::RingBuffer::new(len);
        let (play_tx, play_rx) = rtrb::RingBuffer::new(len);
        let clear = Arc::new(AtomicBool::new(false));
        let cap = Capture {
            ring: cap_tx,
            channels,
            counters: counters.clone(),
        };
        let play = Playback {
            ring: play_rx,
            channels,
            clear: clear.clone(),
            counters: counters.clone(),
        };
        (cap, cap_rx, play, play_tx, clear, counters)
    }

    #[test]
    fn capture_mixes_down_and_drops_when_full_without_waiting() {
        let (mut cap, mut rx, _, _, _, counters) = halves(4, 2);
        // Stereo frames (L, R): mono is their mean.
        cap.write_f32(&[0.5, -0.5, 0.5, 0.5, 1.0, 1.0]);
        assert_eq!(rx.pop(), Ok(0));
        assert_eq!(rx.pop(), Ok(16383));
        assert_eq!(rx.pop(), Ok(32767));
        // Nobody drains: the ring fills, the rest is dropped and counted, and the call returns.
        let started = std::time::Instant::now();
        cap.write_i16(&[1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]);
        assert!(started.elapsed() < std::time::Duration::from_millis(5));
        let s = counters.snapshot(0);
        assert_eq!((s.captured, s.capture_overflow), (9, 2));
    }

    #[test]
    fn playback_fills_every_channel_pads_with_silence_and_clears() {
        let (_, _, mut play, mut tx, clear, counters) = halves(16, 2);
        for s in [100i16, 200, 300] {
            tx.push(s).unwrap();
        }
        let mut out = [9i16; 8];
        play.read_i16(&mut out);
        assert_eq!(out, [100, 100, 200, 200, 300, 300, 0, 0]);
        assert_eq!(counters.snapshot(0).partial_callbacks, 1);
        for s in 0..10 {
            tx.push(s).unwrap();
        }
        clear.store(true, Ordering::Release);
        let mut out = [1.0f32; 4];
        play.read_f32(&mut out);
        assert_eq!(out, [0.0; 4], "a barge-in empties the ring before playing");
        let s = counters.snapshot(0);
        assert_eq!((s.played, s.cleared), (3, 10));
    }
}

//! The receive side's small adaptive jitter buffer: the caller's decoded audio, put back in
//! timestamp order and handed out one 20 ms frame per tick of the leg's clock. Sans-IO: packets
//! and ticks come in with the time they happened; nothing here reads a clock.
//!
//! * **Position by timestamp.** Audio is kept by (extended) RTP timestamp, so any packet size
//!   plays, reordered packets land where they belong and a duplicate is recognised.
//! * **Start and gaps.** Playing starts once `target` of audio is buffered (or a packet has
//!   waited that long); after 60 ms with nothing to play (the peer stopped sending: hold,
//!   silence suppression, a DTMF event) the buffer waits again and restarts at the next packet.
//! * **Loss.** A frame with no audio while later audio is buffered, or with the buffer empty, is
//!   concealed: the last good frame repeated with a fade (gain 1 → 0 over three frames), then
//!   silence. A packet arriving after its time has played is counted late and dropped.
//! * **Adaptation.** The target delay follows the RFC 3550 jitter estimate (`frame + 3·J`,
//!   rounded up to whole frames) within `[min, max]`; each late packet raises it one frame, and
//!   that raise decays one frame per 5 s without late packets. Buffered audio more than three
//!   frames over the target for half a second is trimmed by one frame, so delay never creeps.
//! * **Encoded payloads.** A codec with a stateful decoder (Opus) hands its payloads over
//!   undecoded ([`JitterBuffer::encoded`]): each is decoded when it first plays, so the decoder
//!   runs in timestamp order whatever order the network used, and a missing frame is concealed
//!   by the decoder itself — from the next packet's in-band FEC when that packet is already
//!   here, else its packet-loss concealment — instead of the fade. Timestamps may then run on a
//!   faster RTP clock than the audio (Opus: 48 kHz), `clock_div` ticks per sample.

use std::collections::BTreeMap;

use bytes::Bytes;
use tokio::time::Instant;

/// Settings of one buffer.
#[derive(Clone, Copy, Debug)]
pub struct JitterConfig {
    /// PCM rate in Hz (the codec's clock rate).
    pub rate: u32,
    /// Lowest and highest target delay, in ms.
    pub min_delay_ms: u32,
    pub max_delay_ms: u32,
}

impl Default for JitterConfig {
    fn default() -> Self {
        JitterConfig {
            rate: 8000,
            min_delay_ms: 40,
            max_delay_ms: 200,
        }
    }
}

/// What the buffer counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct JitterStats {
    /// Audio packets taken into the buffer.
    pub packets: u64,
    pub duplicates: u64,
    /// Packets that arrived after a later one, still in time to play.
    pub reordered: u64,
    /// Packets that arrived after their time had played (dropped).
    pub late: u64,
    /// Frames (20 ms) filled by concealment, whole or in part.
    pub concealed_frames: u64,
    /// Samples filled by concealment.
    pub concealed_samples: u64,
    /// Frames of buffered audio dropped to bring the delay back to the target.
    pub trimmed_frames: u64,
    /// Packets dropped because the buffer already held `MAX_CHUNKS`.
    pub overflow: u64,
    /// Times the timeline was restarted (a jump in timestamps, or a restart after a gap).
    pub restarts: u64,
    /// Concealed frames rebuilt from the next packet's in-band FEC (encoded payloads only).
    pub fec_frames: u64,
    /// Payloads the decoder could not read (their time is concealed).
    pub bad_payloads: u64,
    /// The target delay now, and its highest value, in ms.
    pub target_ms: u32,
    pub max_target_ms: u32,
}

impl JitterStats {
    /// Adds the counts of the buffer an earlier codec of the same call used.
    pub fn absorb(&mut self, earlier: &JitterStats) {
        self.packets += earlier.packets;
        self.duplicates += earlier.duplicates;
        self.reordered += earlier.reordered;
        self.late += earlier.late;
        self.concealed_frames += earlier.concealed_frames;
        self.trimmed_frames += earlier.trimmed_frames;
        self.overflow += earlier.overflow;
        self.restarts += earlier.restarts;
        self.fec_frames += earlier.fec_frames;
        self.bad_payloads += earlier.bad_payloads;
        self.max_target_ms = self.max_target_ms.max(earlier.max_target_ms);
    }
}

/// What one frame is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// Received audio (possibly with a few concealed samples).
    Audio,
    /// Nothing received for it: concealment.
    Concealed,
    /// Nothing to play (not started, or the peer is not sending).
    Silence,
}

/// One frame out of the buffer.
#[derive(Clone, Debug)]
pub struct Popped {
    pub samples: Vec<i16>,
    pub kind: FrameKind,
    /// When the newest packet in it arrived.
    pub arrived: Option<Instant>,
}

#[derive(Debug)]
struct Chunk {
    /// The audio; silence of the right length while `payload` is still to be decoded.
    samples: Vec<i16>,
    payload: Option<Bytes>,
    arrived: Instant,
}

/// A decoder the buffer runs when encoded payloads play (see [`JitterBuffer::encoded`]).
pub trait Decoder: Send + std::fmt::Debug {
    /// The samples (at the buffer's rate) `payload` holds; `None` when it is not a packet of
    /// this codec.
    fn samples(&self, payload: &[u8]) -> Option<usize>;
    /// Decodes `payload` into `out` (exactly its length); `false` when the decoder refused it.
    fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> bool;
    /// Fills `out` for audio that never came; `next` is the packet right after the gap when it
    /// is already here. Returns whether `next`'s in-band FEC rebuilt it.
    fn conceal(&mut self, next: Option<&[u8]>, out: &mut [i16]) -> bool;
}

/// Timestamps further than this from the play position start a new timeline.
const JUMP_S: u32 = 5;
/// Frames of concealment with nothing buffered before the buffer waits for the next packet.
const GAP_FRAMES: u32 = 3;
/// Frames over the target, and ticks of that, before trimming starts; then one frame is
/// trimmed every `TRIM_EVERY` ticks until at most one frame over the target is left.
const TRIM_OVER_FRAMES: u64 = 3;
const TRIM_AFTER_TICKS: u32 = 25;
const TRIM_EVERY: u32 = 5;
/// Packets held at most (a flood of timestamps never grows the buffer past this).
const MAX_CHUNKS: usize = 512;
/// Ticks without a late packet before the late raise decays one frame (5 s).
const DECAY_TICKS: u32 = 250;

/// The buffer.
#[derive(Debug)]
pub struct JitterBuffer {
    cfg: JitterConfig,
    frame: u64,
    /// RTP timestamp ticks per sample.
    clock_div: u64,
    decoder: Option<Box<dyn Decoder>>,
    chunks: BTreeMap<u64, Chunk>,
    /// Last raw and extended timestamps seen (the unwrap reference).
    last_ts: Option<(u32, u64)>,
    /// Highest timestamp taken so far (for reorder counting).
    max_start: Option<u64>,
    /// The next sample to play; `None` while waiting to start.
    play: Option<u64>,
    waiting_ticks: u64,
    empty_run: u32,
    over_ticks: u32,
    trimming: bool,
    /// Target delay in samples, from the jitter estimate, and the raise from late packets.
    jitter_target: u64,
    late_raise: u64,
    ticks_since_late: u32,
    /// Timestamp ranges that are silent on purpose (DTMF events replace audio).
    silent: Vec<(u64, u64)>,
    concealer: Concealer,
    stats: JitterStats,
}

impl JitterBuffer {
    pub fn new(cfg: JitterConfig) -> JitterBuffer {
        let frame = u64::from(cfg.rate / 50);
        let mut b = JitterBuffer {
            cfg,
            frame,
            clock_div: 1,
            decoder: None,
            chunks: BTreeMap::new(),
            last_ts: None,
            max_start: None,
            play: None,
            waiting_ticks: 0,
            empty_run: 0,
            over_ticks: 0,
            trimming: false,
            jitter_target: 0,
            late_raise: 0,
            ticks_since_late: 0,
            silent: Vec::new(),
            concealer: Concealer::default(),
            stats: JitterStats::default(),
        };
        b.stats.target_ms = b.ms(b.target());
        b.stats.max_target_ms = b.stats.target_ms;
        b
    }

    /// A buffer of encoded payloads (pushed with [`push_encoded`](Self::push_encoded)) that
    /// `decoder` turns into audio at `cfg.rate` as they play; the RTP clock runs `clock_div`
    /// ticks per sample.
    pub fn encoded(cfg: JitterConfig, clock_div: u32, decoder: Box<dyn Decoder>) -> JitterBuffer {
        let mut b = JitterBuffer::new(cfg);
        b.clock_div = u64::from(clock_div.max(1));
        b.decoder = Some(decoder);
        b
    }

    /// The audio's rate.
    pub fn rate(&self) -> u32 {
        self.cfg.rate
    }

    fn ms(&self, samples: u64) -> u32 {
        u32::try_from(samples * 1000 / u64::from(self.cfg.rate.max(1))).unwrap_or(u32::MAX)
    }

    fn samples(&self, ms: u32) -> u64 {
        u64::from(ms) * u64::from(self.cfg.rate) / 1000
    }

    /// The target delay in samples.
    fn target(&self) -> u64 {
        let lo = self.samples(self.cfg.min_delay_ms);
        let hi = self.samples(self.cfg.max_delay_ms).max(lo);
        (self.jitter_target.max(lo) + self.late_raise).clamp(lo, hi)
    }

    fn note_target(&mut self) {
        let t = self.ms(self.target());
        self.stats.target_ms = t;
        self.stats.max_target_ms = self.stats.max_target_ms.max(t);
    }

    /// The RFC 3550 jitter estimate changed (in RTP timestamp units).
    pub fn set_jitter(&mut self, jitter: u32) {
        let want = self.frame + 3 * (u64::from(jitter) / self.clock_div);
        self.jitter_target = want.div_ceil(self.frame) * self.frame;
        self.note_target();
    }

    /// The position, in samples, of RTP timestamp `ts`.
    fn position(&mut self, ts: u32) -> u64 {
        self.extend(ts) / self.clock_div
    }

    /// Extends a 32-bit timestamp against the last one seen (wraps both ways).
    fn extend(&mut self, ts: u32) -> u64 {
        match self.last_ts {
            None => {
                // Offset so that timestamps a little before the first do not underflow.
                let ext = u64::from(ts) + (1 << 32);
                self.last_ts = Some((ts, ext));
                ext
            }
            Some((raw, ext)) => {
                let delta = i64::from(ts.wrapping_sub(raw) as i32);
                let e = ext.saturating_add_signed(delta);
                if delta > 0 {
                    self.last_ts = Some((ts, e));
                }
                e
            }
        }
    }

    /// Forgets everything buffered and waits for the next packet to start again.
    pub fn restart(&mut self) {
        self.chunks.clear();
        self.last_ts = None;
        self.max_start = None;
        self.play = None;
        self.waiting_ticks = 0;
        self.empty_run = 0;
        self.silent.clear();
        self.stats.restarts += 1;
    }

    /// Takes a packet's decoded audio, stamped `ts`, arrived at `now`.
    pub fn push(&mut self, ts: u32, samples: Vec<i16>, now: Instant) {
        self.insert(ts, samples, None, now);
    }

    /// Takes an encoded payload (a buffer made by [`encoded`](Self::encoded)), stamped `ts`,
    /// arrived at `now`; it is decoded when it plays.
    pub fn push_encoded(&mut self, ts: u32, payload: Bytes, now: Instant) {
        let Some(d) = self.decoder.as_ref() else {
            return;
        };
        // At most 120 ms, Opus's longest packet.
        let max = self.samples(120) as usize;
        match d.samples(&payload).filter(|n| (1..=max).contains(n)) {
            Some(n) => self.insert(ts, vec![0; n], Some(payload), now),
            None => self.stats.bad_payloads += 1,
        }
    }

    fn insert(&mut self, ts: u32, samples: Vec<i16>, payload: Option<Bytes>, now: Instant) {
        if samples.is_empty() {
            return;
        }
        let mut ext = self.position(ts);
        let jump = self.samples(JUMP_S * 1000);
        if let Some(play) = self.play {
            if ext > play + jump || ext + jump < play {
                self.restart();
                ext = self.position(ts);
            } else if ext + samples.len() as u64 <= play {
                self.late(now);
                return;
            }
        }
        if self.chunks.contains_key(&ext) {
            self.stats.duplicates += 1;
            return;
        }
        if self.chunks.len() >= MAX_CHUNKS {
            self.stats.overflow += 1;
            return;
        }
        match self.max_start {
            Some(m) if ext < m => self.stats.reordered += 1,
            _ => self.max_start = Some(ext),
        }
        self.stats.packets += 1;
        self.chunks.insert(
            ext,
            Chunk {
                samples,
                payload,
                arrived: now,
            },
        );
    }

    fn late(&mut self, _now: Instant) {
        self.stats.late += 1;
        self.ticks_since_late = 0;
        self.late_raise += self.frame;
        self.note_target();
    }

    /// Marks `len` samples from RTP timestamp `ts` as silent on purpose (the peer sends a DTMF
    /// event instead of audio): no concealment there.
    pub fn silent(&mut self, ts: u32, len: u32) {
        let start = self.position(ts);
        let end = start + u64::from(len);
        if let Some(last) = self.silent.last_mut()
            && last.0 == start
        {
            last.1 = last.1.max(end);
            return;
        }
        self.silent.push((start, end));
        if self.silent.len() > 16 {
            self.silent.remove(0);
        }
    }

    fn buffered_end(&self) -> Option<u64> {
        self.chunks
            .iter()
            .map(|(k, c)| k + c.samples.len() as u64)
            .max()
    }

    /// The next 20 ms frame (one call per tick of the leg's clock).
    pub fn pop(&mut self) -> Popped {
        let frame = self.frame as usize;
        self.ticks_since_late = self.ticks_since_late.saturating_add(1);
        if self.ticks_since_late >= DECAY_TICKS && self.late_raise > 0 {
            self.ticks_since_late = 0;
            self.late_raise -= self.frame;
            self.note_target();
        }
        let target = self.target();
        let play = match self.play {
            Some(p) => p,
            None => {
                let Some((&first, _)) = self.chunks.first_key_value() else {
                    return self.quiet(frame);
                };
                self.waiting_ticks += 1;
                let depth = self.buffered_end().unwrap_or(first) - first;
                if depth < target && self.waiting_ticks * self.frame < target {
                    return self.quiet(frame);
                }
                self.waiting_ticks = 0;
                self.play = Some(first);
                first
            }
        };
        // Too much buffered for too long: drop a frame's worth.
        let mut play = play;
        let depth = self.buffered_end().map_or(0, |e| e.saturating_sub(play));
        let allowed = if self.trimming { 1 } else { TRIM_OVER_FRAMES };
        if depth > target + allowed * self.frame {
            self.over_ticks += 1;
            if self.over_ticks >= TRIM_AFTER_TICKS {
                self.trimming = true;
                if (self.over_ticks - TRIM_AFTER_TICKS).is_multiple_of(TRIM_EVERY) {
                    self.stats.trimmed_frames += 1;
                    play += self.frame;
                    self.drop_before(play);
                }
            }
        } else {
            self.over_ticks = 0;
            self.trimming = false;
        }
        let end = play + self.frame;
        self.decode_before(end);
        let mut out = vec![0i16; frame];
        let mut have = vec![false; frame];
        let mut covered = 0usize;
        let mut arrived: Option<Instant> = None;
        for (&k, c) in self.chunks.range(..end) {
            let ce = k + c.samples.len() as u64;
            if ce <= play {
                continue;
            }
            let from = k.max(play);
            let to = ce.min(end);
            for pos in from..to {
                let i = (pos - play) as usize;
                if !have[i] {
                    out[i] = c.samples[(pos - k) as usize];
                    have[i] = true;
                    covered += 1;
                }
            }
            arrived = Some(arrived.map_or(c.arrived, |a: Instant| a.max(c.arrived)));
        }
        self.drop_before(end);
        self.play = Some(end);
        self.silent.retain(|(_, e)| *e > play);
        let silent_here = |pos: u64, s: &[(u64, u64)]| s.iter().any(|(a, b)| pos >= *a && pos < *b);
        if covered == frame {
            self.empty_run = 0;
            self.concealer.good(&out);
            return Popped {
                samples: out,
                kind: FrameKind::Audio,
                arrived,
            };
        }
        if covered == 0 && silent_here(play, &self.silent) {
            self.concealer.reset();
            return Popped {
                samples: out,
                kind: FrameKind::Silence,
                arrived: None,
            };
        }
        if covered == 0 && self.chunks.is_empty() {
            self.empty_run += 1;
            if self.empty_run > GAP_FRAMES {
                // The peer is not sending: wait for its next packet.
                self.play = None;
                self.empty_run = 0;
                self.concealer.reset();
                return self.quiet(frame);
            }
        }
        let mut patch = vec![0i16; frame];
        match self.decoder.as_mut() {
            Some(d) => {
                // The packet right after a wholly missing frame may carry it as FEC.
                let next = if covered == 0 {
                    self.chunks.get(&end).and_then(|c| c.payload.as_deref())
                } else {
                    None
                };
                if d.conceal(next, &mut patch) {
                    self.stats.fec_frames += 1;
                }
            }
            None => self.concealer.conceal(&mut patch),
        }
        let mut filled = 0u64;
        for i in 0..frame {
            if !have[i] {
                out[i] = patch[i];
                filled += 1;
            }
        }
        self.stats.concealed_frames += 1;
        self.stats.concealed_samples += filled;
        if covered > 0 {
            self.concealer.good(&out);
        }
        Popped {
            samples: out,
            kind: if covered == 0 {
                FrameKind::Concealed
            } else {
                FrameKind::Audio
            },
            arrived,
        }
    }

    fn quiet(&self, frame: usize) -> Popped {
        Popped {
            samples: vec![0; frame],
            kind: FrameKind::Silence,
            arrived: None,
        }
    }

    /// Decodes, in timestamp order, every encoded payload starting before `pos`.
    fn decode_before(&mut self, pos: u64) {
        let Some(d) = self.decoder.as_mut() else {
            return;
        };
        for c in self.chunks.range_mut(..pos).map(|(_, c)| c) {
            if let Some(p) = c.payload.take()
                && !d.decode(&p, &mut c.samples)
            {
                self.stats.bad_payloads += 1;
                let mut missing = std::mem::take(&mut c.samples);
                d.conceal(None, &mut missing);
                c.samples = missing;
            }
        }
    }

    fn drop_before(&mut self, pos: u64) {
        // Trimmed payloads still go through the decoder, which keeps its state in order.
        self.decode_before(pos);
        let keep = self.chunks.split_off(&pos);
        let older = std::mem::replace(&mut self.chunks, keep);
        // A chunk starting before `pos` but reaching past it keeps its tail.
        if let Some((k, c)) = older.into_iter().next_back()
            && k + c.samples.len() as u64 > pos
        {
            let tail = c.samples[(pos - k) as usize..].to_vec();
            self.chunks.insert(
                pos,
                Chunk {
                    samples: tail,
                    payload: None,
                    arrived: c.arrived,
                },
            );
        }
    }

    /// Audio buffered ahead of the play position, in ms.
    pub fn depth_ms(&self) -> u32 {
        match (self.play, self.buffered_end()) {
            (Some(p), Some(e)) => self.ms(e.saturating_sub(p)),
            _ => 0,
        }
    }

    pub fn stats(&self) -> &JitterStats {
        &self.stats
    }
}

/// Loss concealment: the last good frame again, fading out over three frames.
#[derive(Debug, Default)]
struct Concealer {
    last: Vec<i16>,
    run: u32,
}

impl Concealer {
    fn good(&mut self, frame: &[i16]) {
        self.last.clear();
        self.last.extend_from_slice(frame);
        self.run = 0;
    }

    fn reset(&mut self) {
        self.last.clear();
        self.run = 0;
    }

    fn conceal(&mut self, out: &mut [i16]) {
        let from = 1.0 - self.run as f32 / GAP_FRAMES as f32;
        self.run += 1;
        let to = 1.0 - self.run as f32 / GAP_FRAMES as f32;
        if self.last.len() != out.len() || from <= 0.0 {
            out.fill(0);
            return;
        }
        let n = out.len() as f32;
        for (i, (o, s)) in out.iter_mut().zip(&self.last).enumerate() {
            let g = (from + (to - from) * i as f32 / n).max(0.0);
            *o = (f32::from(*s) * g) as i16;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn frame_of(v: i16) -> Vec<i16> {
        vec![v; 160]
    }

    fn buffer() -> (JitterBuffer, Instant) {
        (JitterBuffer::new(JitterConfig::default()), Instant::now())
    }

    #[test]
    fn waits_for_the_target_then_plays_in_order() {
        let (mut b, t0) = buffer();
        assert_eq!(b.pop().kind, FrameKind::Silence, "nothing yet");
        b.push(1000, frame_of(1), t0);
        assert_eq!(
            b.pop().kind,
            FrameKind::Silence,
            "20 ms of the 40 ms target"
        );
        b.push(1160, frame_of(2), t0);
        let p = b.pop();
        assert_eq!((p.kind, p.samples[0]), (FrameKind::Audio, 1));
        assert_eq!(p.arrived, Some(t0));
        b.push(1320, frame_of(3), t0);
        assert_eq!(b.pop().samples[0], 2);
        assert_eq!(b.pop().samples[0], 3);
        assert_eq!(b.stats().packets, 3);
    }

    #[test]
    fn reordered_and_duplicate_packets_are_put_right() {
        let (mut b, t0) = buffer();
        b.push(0, frame_of(1), t0);
        b.push(320, frame_of(3), t0);
        b.push(160, frame_of(2), t0);
        b.push(160, frame_of(9), t0);
        let got: Vec<i16> = (0..3).map(|_| b.pop().samples[0]).collect();
        assert_eq!(got, [1, 2, 3]);
        assert_eq!((b.stats().reordered, b.stats().duplicates), (1, 1));
    }

    /// A trunk that swaps every 12th packet with the next and loses some, sent on time and
    /// popped on time (in either order within a tick): every swapped packet is still in time
    /// to play, whatever the loss around it.
    #[test]
    fn a_one_packet_swap_is_never_late_at_the_minimum_target() {
        for pop_first in [true, false] {
            let (mut b, t0) = buffer();
            let mut held: Option<u32> = None;
            let mut lcg: u64 = 0x2545_f491_4f6c_dd1d;
            let (mut swaps, mut lost) = (0, 0);
            for slot in 0..400u32 {
                let now = t0 + Duration::from_millis(20 * u64::from(slot));
                if pop_first && slot > 0 {
                    b.pop();
                }
                let ts = slot * 160;
                lcg = lcg
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let mut sent = vec![];
                if (lcg >> 33).is_multiple_of(25) {
                    lost += 1;
                    sent.extend(held.take());
                } else if (slot + 1).is_multiple_of(12) && held.is_none() {
                    held = Some(ts);
                    swaps += 1;
                } else {
                    sent.push(ts);
                    sent.extend(held.take());
                }
                for ts in sent {
                    b.push(ts, frame_of(1), now);
                }
                if !pop_first {
                    b.pop();
                }
            }
            let s = b.stats();
            assert!(
                swaps >= 30 && lost >= 8,
                "the trunk swapped and lost: {swaps}, {lost}"
            );
            assert_eq!(s.late, 0, "pop first {pop_first}: {s:?}");
            assert_eq!(s.target_ms, 40, "no late packet raised the target: {s:?}");
            // A swap whose later packet was lost is no reordering (the held one goes alone).
            assert!(s.reordered >= swaps - 2, "pop first {pop_first}: {s:?}");
            // Every loss is concealed: with this seed none falls in the last two slots, which
            // are still buffered when the trunk stops.
            assert_eq!(s.concealed_frames, lost, "pop first {pop_first}: {s:?}");
        }
    }

    #[test]
    fn a_lost_packet_is_concealed_with_a_fade_and_a_late_one_raises_the_target() {
        let (mut b, t0) = buffer();
        b.push(0, frame_of(1000), t0);
        b.push(160, frame_of(1000), t0);
        b.push(480, frame_of(3), t0); // 320 is missing
        b.pop();
        b.pop();
        let c = b.pop();
        assert_eq!(c.kind, FrameKind::Concealed);
        assert_eq!(c.samples[0], 1000, "starts at full level");
        assert!(c.samples[159] < 700, "and fades");
        assert_eq!(b.pop().samples[0], 3);
        let before = b.stats().target_ms;
        b.push(320, frame_of(2), t0 + Duration::from_millis(100));
        assert_eq!(b.stats().late, 1);
        assert_eq!(b.stats().target_ms, before + 20);
        assert_eq!(b.stats().concealed_frames, 1);
    }

    #[test]
    fn any_packet_size_plays_as_20_ms_frames() {
        let (mut b, t0) = buffer();
        // 30 ms packets.
        for i in 0..4u32 {
            b.push(i * 240, vec![i as i16 + 1; 240], t0);
        }
        let f: Vec<Vec<i16>> = (0..7).map(|_| b.pop().samples).collect();
        assert_eq!(f[0], vec![1; 160]);
        assert_eq!(&f[1][..80], &[1; 80][..]);
        assert_eq!(&f[1][80..], &[2; 80][..]);
        assert_eq!(f[2], vec![2; 160]);
        assert_eq!(f[5], vec![4; 160]);
        assert_eq!(b.stats().concealed_frames, 1, "past the end");
    }

    #[test]
    fn a_stopped_peer_is_silence_after_60_ms_and_a_restart_plays_at_once() {
        let (mut b, t0) = buffer();
        b.push(0, frame_of(5), t0);
        b.push(160, frame_of(5), t0);
        b.pop();
        b.pop();
        let kinds: Vec<FrameKind> = (0..5).map(|_| b.pop().kind).collect();
        assert_eq!(
            kinds,
            [
                FrameKind::Concealed,
                FrameKind::Concealed,
                FrameKind::Concealed,
                FrameKind::Silence,
                FrameKind::Silence
            ]
        );
        // Talking again 10 s of timestamps later: a new timeline.
        b.push(80_000, frame_of(7), t0);
        b.push(80_160, frame_of(8), t0);
        assert_eq!(b.pop().samples[0], 7);
        assert_eq!(b.pop().samples[0], 8);
    }

    #[test]
    fn a_dtmf_event_is_silence_not_loss() {
        let (mut b, t0) = buffer();
        b.push(0, frame_of(5), t0);
        b.push(160, frame_of(5), t0);
        b.pop();
        b.pop();
        b.silent(320, 480);
        for _ in 0..3 {
            assert_eq!(b.pop().kind, FrameKind::Silence);
        }
        b.push(800, frame_of(6), t0);
        b.push(960, frame_of(6), t0);
        assert_eq!(b.stats().concealed_frames, 0);
    }

    #[test]
    fn timestamps_wrap() {
        let (mut b, t0) = buffer();
        b.push(u32::MAX - 159, frame_of(1), t0);
        b.push(0, frame_of(2), t0);
        b.push(160, frame_of(3), t0);
        let got: Vec<i16> = (0..3).map(|_| b.pop().samples[0]).collect();
        assert_eq!(got, [1, 2, 3]);
    }

    #[test]
    fn the_target_follows_jitter_and_excess_delay_is_trimmed() {
        let (mut b, t0) = buffer();
        b.set_jitter(160); // 20 ms of jitter: 20 + 60 = 80 ms
        assert_eq!(b.stats().target_ms, 80);
        b.set_jitter(0);
        assert_eq!(b.stats().target_ms, 40, "never under the minimum");
        // A burst of 300 ms arrives at once: it is played, then trimmed back over time.
        for i in 0..15u32 {
            b.push(i * 160, frame_of(1), t0);
        }
        for i in 15..120u32 {
            b.pop();
            b.push(i * 160, frame_of(1), t0);
        }
        assert!(b.stats().trimmed_frames >= 10, "{:?}", b.stats());
        assert!(b.depth_ms() <= 40 + 60, "{} ms buffered", b.depth_ms());
        assert_eq!(b.stats().concealed_frames, 0);
    }
}

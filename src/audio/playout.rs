//! The playout clock: a sans-IO state machine that queues the model's bursty audio and releases
//! exactly one 20 ms frame per tick to the caller leg, whatever arrives when.
//!
//! It never reads a clock; every call that depends on time takes `now`. Ticks fall every 20 ms
//! from `start`, and a frame's media timestamp is its tick's time since `start`.
//!
//! A talkspurt starts when its audio arrives, not at the next tick: while the playout is idle
//! (the last frame released was plain silence, which legs do not send) audio pushed at `t`
//! moves the clock so that a tick falls at `t` and every later tick 20 ms after it. Idle silence
//! is never sent on the wire, so nothing the caller has heard is overlapped; a turn's padded last
//! frame *was* sent, so audio arriving while it plays waits for its end.
//!
//! Queued audio is kept as a sample ring (linear PCM, or on a G.711 leg the codes the leg
//! sends anyway: half the memory, and what the caller hears sample for sample) plus two small
//! side queues: one mark per pushed chunk
//! (for [`ChunkStart`] latency reporting) and one segment per run of consecutive audio from the
//! same turn (for underrun accounting and turn boundaries). The tick path does not allocate except
//! for the returned frame's buffer, which [`Playout::recycle`] lets the caller hand back.
//!
//! Rules:
//! * Within a turn, chunks are played back to back: a frame can hold the tail of one chunk and the
//!   head of the next.
//! * Turns join sample to sample: when a turn's audio runs out mid-frame and another turn's audio
//!   is queued behind it, the frame goes on with that audio (a handoff or two replies in a row
//!   insert no silence; [`Played::joined`] says where the next turn starts). When the turn has
//!   ended and nothing follows, the partial frame is padded with silence ([`Played::audio`] says
//!   how much of it is audio). If the turn is still open and nothing else is queued, the partial
//!   frame is held back for the rest of the turn's audio and the tick is an underrun: a hole inside
//!   a frame would be a click, the underrun is a gap either way.
//! * A turn is being spoken from its first pushed audio until it has ended ([`Playout::end_turn`])
//!   and its audio has been played, or until a later turn's audio starts playing. A tick with no
//!   playable audio while a turn is being spoken is an [`PlayedKind::Underrun`]; otherwise it is
//!   plain [`PlayedKind::Silence`].
//! * Only [`Playout::flush`] discards audio; a handoff to another turn or agent never does.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::frame::{FRAME_MS, Frame, samples_per_frame};
use super::g711::Law;

const TICK: Duration = Duration::from_millis(FRAME_MS as u64);

/// Which agent and which model turn produced some audio.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TurnTag {
    /// The agent (model session) that spoke.
    pub agent: u32,
    /// The model turn within that agent's session.
    pub turn: u64,
}

/// What a released frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlayedKind {
    /// Model audio (possibly padded with silence at the end of a turn).
    Voice,
    /// Silence while no turn is being spoken.
    Silence,
    /// Silence because a turn being spoken has no audio ready: a glitch the caller hears.
    Underrun,
}

/// Reported on the frame that plays the first sample of a pushed chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkStart {
    /// When the chunk arrived at baton.
    pub received_at: Instant,
    /// Audio that was queued ahead of the chunk when it was pushed.
    pub ahead: Duration,
}

/// One released frame.
#[derive(Clone, Debug, PartialEq)]
pub struct Played {
    /// The 20 ms of audio for this tick, at the playout rate.
    pub frame: Frame,
    /// Voice, silence or underrun.
    pub kind: PlayedKind,
    /// For `Voice`, the turn whose audio the frame carries (the first one, when another joins
    /// it); for `Underrun`, the turn that ran dry; `None` for `Silence`.
    pub tag: Option<TurnTag>,
    /// Samples of model audio at the start of the frame (the rest is padding): the whole frame
    /// unless a turn ended in it with nothing queued behind; 0 for silence and underruns.
    pub audio: usize,
    /// Another turn's audio starts in this frame, at this sample, right after `tag`'s last.
    pub joined: Option<(TurnTag, usize)>,
    /// Set on the frame holding the first sample of a pushed chunk, so that
    /// `downlink_added = (tick time - received_at) - ahead`. If one frame holds the starts of
    /// several chunks, the earliest chunk is reported.
    pub chunk_start: Option<ChunkStart>,
}

/// Running counts; `frames == voice_frames + silence_frames + underruns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlayoutStats {
    /// Frames released.
    pub frames: u64,
    /// Frames carrying model audio.
    pub voice_frames: u64,
    /// Frames of plain silence (no turn being spoken); underruns are not included.
    pub silence_frames: u64,
    /// Silent frames released while a turn was being spoken.
    pub underruns: u64,
    /// Frames released a full tick or more after their deadline (idle silence, silence after
    /// silence, excepted: no leg that lets it wait sends it).
    pub late_ticks: u64,
    /// Samples discarded by [`Playout::flush`].
    pub flushed_samples: u64,
}

/// The first sample of a pushed chunk, by absolute sample position.
#[derive(Clone, Copy, Debug)]
struct Mark {
    pos: u64,
    received_at: Instant,
    ahead: Duration,
}

/// Frames' worth of queue capacity a call keeps between replies (one second).
const KEPT_FRAMES: usize = 50;

/// A run of consecutive queued audio from one turn, ending at absolute position `end`.
#[derive(Clone, Copy, Debug)]
struct Segment {
    tag: TurnTag,
    end: u64,
    ended: bool,
}

/// The playout clock for one caller leg.
#[derive(Debug)]
pub struct Playout {
    rate: u32,
    spf: usize,
    start: Instant,
    /// When the next tick falls.
    next_at: Instant,
    /// The last frame released was plain silence, or none was released yet: a push may move
    /// the clock.
    idle: bool,
    /// When the model audio in the last released frame ends (the caller is still hearing it
    /// until then).
    heard_until: Option<Instant>,
    queue: Queue,
    /// Absolute position of `queue[0]` (samples pushed before it were played or flushed).
    head: u64,
    marks: VecDeque<Mark>,
    segments: VecDeque<Segment>,
    /// The most recent turn `end_turn` was called for, so audio pushed for it afterwards does not
    /// reopen it.
    last_ended: Option<TurnTag>,
    speaking: Option<TurnTag>,
    stats: PlayoutStats,
    spare: Option<Vec<i16>>,
}

impl Playout {
    /// A playout clock at `rate` Hz (the leg's rate; a multiple of 1000 Hz, as `samples_per_frame`
    /// assumes) whose ticks fall at `start`, `start + 20 ms`, ...
    pub fn new(rate: u32, start: Instant) -> Self {
        Self::holding(rate, start, None)
    }

    /// A playout clock as [`new`](Self::new) whose queue holds its audio in `law` when given:
    /// for a leg whose wire is G.711, which quantises every frame to that law anyway.
    pub fn holding(rate: u32, start: Instant, law: Option<Law>) -> Self {
        let spf = samples_per_frame(rate);
        Self {
            rate: rate.max(1),
            spf,
            start,
            next_at: start,
            idle: true,
            heard_until: None,
            queue: Queue::with_capacity(law, spf * KEPT_FRAMES),
            head: 0,
            marks: VecDeque::with_capacity(16),
            segments: VecDeque::with_capacity(4),
            last_ended: None,
            speaking: None,
            stats: PlayoutStats::default(),
            spare: None,
        }
    }

    /// Queues model audio (already at the playout rate) produced by turn `tag`. `received_at` is
    /// when the model chunk arrived at baton.
    pub fn push(&mut self, samples: &[i16], tag: TurnTag, received_at: Instant) {
        if samples.is_empty() {
            return;
        }
        if self.idle && self.segments.is_empty() && received_at < self.next_at {
            // A talkspurt starts: tick at its arrival, never before the last tick released.
            let last = self
                .next_at
                .checked_sub(TICK)
                .unwrap_or(self.start)
                .max(self.start);
            self.next_at = received_at.max(last);
        }
        let pos = self.tail();
        self.marks.push_back(Mark {
            pos,
            received_at,
            ahead: self.samples_to_duration(self.queue.len()),
        });
        let need = self.queue.len() + samples.len();
        if need > self.queue.capacity() {
            // Grow by half again (at least a second) rather than doubling: a long reply that
            // arrives faster than it plays would otherwise hold up to twice its length; growing
            // geometrically keeps the copying linear in the reply's length.
            let step = (self.spf * KEPT_FRAMES).max(self.queue.len() / 2);
            self.queue.reserve_exact(samples.len().max(step));
        }
        self.queue.push(samples);
        let end = self.tail();
        match self.segments.back_mut() {
            Some(seg) if seg.tag == tag => seg.end = end,
            _ => self.segments.push_back(Segment {
                tag,
                end,
                ended: self.last_ended == Some(tag),
            }),
        }
    }

    /// The model finished generating `tag`'s turn: running dry after its queued audio is not an
    /// underrun.
    pub fn end_turn(&mut self, tag: TurnTag) {
        for seg in self.segments.iter_mut().filter(|s| s.tag == tag) {
            seg.ended = true;
        }
        self.last_ended = Some(tag);
    }

    /// The next tick deadline: 20 ms after the last one, or when an idle playout's new audio
    /// arrived.
    pub fn poll_timeout(&self) -> Instant {
        self.next_at
    }

    /// Nothing is queued or being spoken and the last frame released was silence: the next
    /// tick is plain silence unless audio arrives, and audio arriving moves the clock to itself.
    /// A shell whose leg does not send idle silence may run such a tick late, with its next
    /// input, instead of waking for it (it is not counted late).
    pub fn is_idle(&self) -> bool {
        self.idle && self.segments.is_empty() && self.queue.is_empty()
    }

    /// Releases the frame for the next tick if it is due (`now >= poll_timeout()`), else `None`.
    /// When `now` is several ticks late, each call releases one frame (call again until `None`);
    /// a frame released a full tick or more past its deadline counts in `stats().late_ticks`
    /// (idle silence excepted).
    pub fn poll_frame(&mut self, now: Instant) -> Option<Played> {
        let deadline = self.next_at;
        if now < deadline {
            return None;
        }
        let late = now >= deadline + TICK;
        let ts = deadline.saturating_duration_since(self.start);
        self.next_at = deadline + TICK;

        self.prune();
        let mut samples = self.spare.take().unwrap_or_default();
        samples.clear();
        let (kind, tag, taken, joined) = match self.segments.front() {
            None => (PlayedKind::Silence, None, 0, None),
            Some(seg) => {
                let avail = seg.end.saturating_sub(self.head) as usize;
                let turn_complete = seg.ended || self.segments.len() > 1;
                if avail >= self.spf {
                    (PlayedKind::Voice, Some(seg.tag), self.spf, None)
                } else if avail > 0 && turn_complete {
                    // The turn's last samples; a turn queued behind follows at once.
                    let next = self.segments.get(1).map(|n| {
                        let more = (n.end.saturating_sub(seg.end) as usize).min(self.spf - avail);
                        (n.tag, more)
                    });
                    match next {
                        Some((t, more)) if more > 0 => (
                            PlayedKind::Voice,
                            Some(seg.tag),
                            avail + more,
                            Some((t, avail)),
                        ),
                        _ => (PlayedKind::Voice, Some(seg.tag), avail, None),
                    }
                } else {
                    (PlayedKind::Underrun, Some(seg.tag), 0, None)
                }
            }
        };
        self.queue.take(taken, &mut samples);
        samples.resize(self.spf, 0);
        self.head += taken as u64;
        if self.queue.is_empty() {
            self.give_back_memory();
        }

        let mut chunk_start = None;
        while let Some(mark) = self.marks.front().copied() {
            if mark.pos >= self.head {
                break;
            }
            self.marks.pop_front();
            chunk_start.get_or_insert(ChunkStart {
                received_at: mark.received_at,
                ahead: mark.ahead,
            });
        }

        // Idle silence (silence after silence) is sent by no leg that lets its tick wait
        // (see `is_idle`): only a frame someone hears can be late.
        if late && !(kind == PlayedKind::Silence && self.idle) {
            self.stats.late_ticks += 1;
        }
        self.stats.frames += 1;
        match kind {
            PlayedKind::Voice => self.stats.voice_frames += 1,
            PlayedKind::Silence => self.stats.silence_frames += 1,
            PlayedKind::Underrun => self.stats.underruns += 1,
        }
        self.idle = kind == PlayedKind::Silence;
        self.heard_until =
            (kind == PlayedKind::Voice).then(|| deadline + self.samples_to_duration(taken));
        self.speaking = match (kind, joined) {
            (PlayedKind::Voice, Some((t, _))) => Some(t),
            (PlayedKind::Voice, None) => tag,
            _ => None,
        };
        Some(Played {
            frame: Frame {
                rate: self.rate,
                ts,
                samples,
            },
            kind,
            tag,
            audio: taken,
            joined,
            chunk_start,
        })
    }

    /// Barge-in: drops everything queued and forgets the turns being spoken, so the next tick is
    /// plain silence. Returns the number of samples dropped. The only way audio is discarded.
    pub fn flush(&mut self) -> usize {
        let dropped = self.queue.len();
        self.queue.clear();
        self.give_back_memory();
        self.head += dropped as u64;
        self.marks.clear();
        self.segments.clear();
        self.speaking = None;
        self.stats.flushed_samples += dropped as u64;
        dropped
    }

    /// Audio queued and not yet released.
    pub fn queued(&self) -> Duration {
        self.samples_to_duration(self.queue.len())
    }

    /// Audio the caller has still to hear at `now`: what is queued, plus the rest of the model
    /// audio in the frame released last (it went out at its tick and plays for 20 ms).
    pub fn unheard(&self, now: Instant) -> Duration {
        let playing = self
            .heard_until
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now));
        self.queued() + playing
    }

    /// Counters since construction.
    pub fn stats(&self) -> PlayoutStats {
        self.stats
    }

    /// The turn whose audio the last released frame carried, if it carried voice (`None` after a
    /// flush).
    pub fn speaking(&self) -> Option<TurnTag> {
        self.speaking
    }

    /// Hands a released frame's buffer back so a later tick can reuse it instead of allocating.
    pub fn recycle(&mut self, frame: Frame) {
        if frame.samples.capacity() >= self.spf {
            self.spare = Some(frame.samples);
        }
    }

    /// With the queue empty: a long reply that arrived faster than it played grew the queue;
    /// the memory goes back, so an idle call holds about a second of buffer, not its longest
    /// reply.
    fn give_back_memory(&mut self) {
        if self.queue.capacity() > self.spf * KEPT_FRAMES * 2 {
            self.queue.shrink_to(self.spf * KEPT_FRAMES);
        }
    }

    /// Drops front segments that are fully played and no longer being spoken: ended, or followed
    /// by a later turn's audio.
    fn prune(&mut self) {
        while let Some(seg) = self.segments.front() {
            if seg.end <= self.head && (seg.ended || self.segments.len() > 1) {
                self.segments.pop_front();
            } else {
                break;
            }
        }
    }

    fn tail(&self) -> u64 {
        self.head + self.queue.len() as u64
    }

    fn samples_to_duration(&self, n: usize) -> Duration {
        Duration::from_nanos(n as u64 * 1_000_000_000 / u64::from(self.rate))
    }
}

/// The queued samples: linear, or the codes of the leg's G.711 law (decoded as they are taken,
/// so a frame carries the very samples the caller's side decodes).
#[derive(Debug)]
enum Queue {
    Linear(VecDeque<i16>),
    Coded(Law, VecDeque<u8>),
}

impl Queue {
    fn with_capacity(law: Option<Law>, n: usize) -> Queue {
        match law {
            None => Queue::Linear(VecDeque::with_capacity(n)),
            Some(law) => Queue::Coded(law, VecDeque::with_capacity(n)),
        }
    }

    fn len(&self) -> usize {
        match self {
            Queue::Linear(q) => q.len(),
            Queue::Coded(_, q) => q.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Room for this many samples without growing.
    fn capacity(&self) -> usize {
        match self {
            Queue::Linear(q) => q.capacity(),
            Queue::Coded(_, q) => q.capacity(),
        }
    }

    fn reserve_exact(&mut self, n: usize) {
        match self {
            Queue::Linear(q) => q.reserve_exact(n),
            Queue::Coded(_, q) => q.reserve_exact(n),
        }
    }

    fn shrink_to(&mut self, n: usize) {
        match self {
            Queue::Linear(q) => q.shrink_to(n),
            Queue::Coded(_, q) => q.shrink_to(n),
        }
    }

    fn clear(&mut self) {
        match self {
            Queue::Linear(q) => q.clear(),
            Queue::Coded(_, q) => q.clear(),
        }
    }

    fn push(&mut self, samples: &[i16]) {
        match self {
            Queue::Linear(q) => q.extend(samples),
            Queue::Coded(law, q) => q.extend(samples.iter().map(|&s| law.encode(s))),
        }
    }

    /// Moves the first `n` samples to the end of `out`.
    fn take(&mut self, n: usize, out: &mut Vec<i16>) {
        match self {
            Queue::Linear(q) => {
                // Copied slice by slice (a drained iterator extends one sample at a time).
                let (front, back) = q.as_slices();
                let from_front = n.min(front.len());
                out.extend_from_slice(&front[..from_front]);
                out.extend_from_slice(&back[..n - from_front]);
                q.drain(..n);
            }
            Queue::Coded(law, q) => out.extend(q.drain(..n).map(|c| law.decode(c))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_g711_playout_releases_what_the_leg_would_have_sent() {
        let t0 = Instant::now();
        let tag = TurnTag { agent: 0, turn: 1 };
        let audio: Vec<i16> = (0..8000 * 2 + 77)
            .map(|i: i32| ((i * 7919) % 65536 - 32768) as i16)
            .collect();
        for law in [Law::Ulaw, Law::Alaw] {
            let mut linear = Playout::new(8000, t0);
            let mut coded = Playout::holding(8000, t0, Some(law));
            for p in [&mut linear, &mut coded] {
                p.push(&audio[..5000], tag, t0);
                p.push(&audio[5000..], tag, t0 + TICK);
                p.end_turn(tag);
            }
            assert_eq!(linear.queued(), coded.queued());
            let mut now = t0;
            let mut voiced = 0;
            loop {
                let (a, b) = (linear.poll_frame(now), coded.poll_frame(now));
                let (Some(a), Some(b)) = (a, b) else {
                    panic!("{law:?}: one playout released a frame the other did not at {now:?}");
                };
                assert_eq!((a.kind, a.audio, a.frame.ts), (b.kind, b.audio, b.frame.ts));
                if a.kind == PlayedKind::Silence {
                    break;
                }
                voiced += 1;
                let (sent, held) = (&a.frame.samples, &b.frame.samples);
                for i in 0..a.audio {
                    assert_eq!(
                        held[i],
                        law.decode(law.encode(sent[i])),
                        "{law:?} sample {i}"
                    );
                }
                assert_eq!(sent[a.audio..], held[a.audio..], "{law:?}: padding");
                now += TICK;
            }
            assert_eq!(voiced, audio.len().div_ceil(160), "{law:?}");
        }
    }

    #[test]
    fn a_long_reply_gives_its_memory_back_once_played() {
        let t0 = Instant::now();
        let mut p = Playout::new(8000, t0);
        let kept = p.queue.capacity();
        let tag = TurnTag { agent: 0, turn: 1 };
        p.push(&vec![1; 8000 * 10], tag, t0);
        p.end_turn(tag);
        assert!(p.queue.capacity() >= 8000 * 10);
        let mut now = t0;
        while p.queued() > Duration::ZERO {
            assert!(p.poll_frame(now).is_some());
            now += TICK;
        }
        assert!(
            p.queue.capacity() <= 2 * kept,
            "{} > 2 × {kept}",
            p.queue.capacity()
        );
        p.push(&vec![1; 8000 * 10], tag, now);
        p.flush();
        assert!(p.queue.capacity() <= 2 * kept);
    }
}

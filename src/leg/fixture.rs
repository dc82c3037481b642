//! The fixture caller: replays a WAV (any rate) in real-time 20 ms frames, optionally through a
//! telephony codec, and records what the caller hears. The recording is a stereo WAV sample-aligned
//! on the caller's timeline: left = the caller, right = the agent's audio as played out.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep, sleep_until};

use super::{LegCommand, LegEvent, LegHandle, LegIo, Refused, StopReason};
use crate::audio::{Frame, g711, resample, samples_per_frame, vad, wav};

/// How the fixture's audio travels, as a real caller's would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LegCodec {
    /// Linear PCM16 at 16 kHz (a browser or app leg).
    L16k16,
    /// G.711 μ-law at 8 kHz (a phone leg): both directions pass through the codec.
    Pcmu8k,
}

impl LegCodec {
    pub fn rate(self) -> u32 {
        match self {
            LegCodec::L16k16 => 16_000,
            LegCodec::Pcmu8k => 8_000,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            LegCodec::L16k16 => "l16-16k",
            LegCodec::Pcmu8k => "pcmu8k",
        }
    }
    /// What the caller actually hears/sends after the codec.
    fn through(self, samples: &mut [i16]) {
        if self == LegCodec::Pcmu8k {
            for s in samples {
                *s = g711::ulaw_decode(g711::ulaw_encode(*s));
            }
        }
    }
}

impl FromStr for LegCodec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "l16-16k" => Ok(LegCodec::L16k16),
            "pcmu8k" => Ok(LegCodec::Pcmu8k),
            other => Err(format!(
                "unknown leg codec {other:?}: use l16-16k or pcmu8k"
            )),
        }
    }
}

/// A fixture could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error(transparent)]
    Wav(#[from] wav::WavError),
    #[error("{path}: cannot resample from {from} Hz: {reason}")]
    Resample {
        path: String,
        from: u32,
        reason: String,
    },
    #[error("{0}: the fixture holds no audio")]
    Empty(String),
}

/// The caller's side of a finished fixture call.
#[derive(Clone, Debug, Default)]
pub struct Recording {
    pub rate: u32,
    /// What the caller sent (after the codec).
    pub caller: Vec<i16>,
    /// What the caller heard, placed at each frame's playout timestamp.
    pub agent: Vec<i16>,
    /// Frames received from the call.
    pub frames_heard: u64,
    /// `Clear` commands received (barge-ins).
    pub clears: u64,
}

impl Recording {
    pub fn write(&self, path: &Path) -> Result<(), wav::WavError> {
        wav::write_stereo(path, self.rate, &self.caller, &self.agent)
    }
}

/// A prepared fixture caller.
#[derive(Clone, Debug)]
pub struct FixtureCaller {
    codec: LegCodec,
    /// Shared by every call of the fixture.
    samples: Arc<[i16]>,
    /// After the fixture ends, keep the line open until the agent has been quiet this long.
    pub quiet_after: Duration,
    /// ... but never longer than this past the end of the fixture.
    pub max_tail: Duration,
    /// Whether calls record both sides ([`Recording`]'s tracks); off, a call still counts the
    /// frames it heard and the clears (a benchmark that reads only the call's report).
    pub record: bool,
}

impl FixtureCaller {
    /// Loads a WAV of any rate and converts it for `codec` (resampled and passed through the codec).
    pub fn from_wav(path: &Path, codec: LegCodec) -> Result<Self, FixtureError> {
        let pcm = wav::read(path)?;
        Self::from_pcm(&pcm.samples, pcm.rate, codec, &path.display().to_string())
    }

    pub fn from_pcm(
        samples: &[i16],
        rate: u32,
        codec: LegCodec,
        name: &str,
    ) -> Result<Self, FixtureError> {
        if samples.is_empty() {
            return Err(FixtureError::Empty(name.to_owned()));
        }
        let mut samples = resample::resample_all(samples, rate, codec.rate()).map_err(|e| {
            FixtureError::Resample {
                path: name.to_owned(),
                from: rate,
                reason: e.to_string(),
            }
        })?;
        codec.through(&mut samples);
        Ok(FixtureCaller {
            codec,
            samples: samples.into(),
            quiet_after: Duration::from_millis(1500),
            max_tail: Duration::from_secs(20),
            record: true,
        })
    }

    pub fn codec(&self) -> LegCodec {
        self.codec
    }

    /// Length of the caller's audio.
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.samples.len() as f64 / f64::from(self.codec.rate()))
    }

    /// The caller's audio as sent.
    pub fn samples(&self) -> &[i16] {
        &self.samples
    }

    /// The G.711 law the leg carries for the whole call, if it does (`pcmu8k`).
    pub fn law(&self) -> Option<crate::audio::g711::Law> {
        (self.codec == LegCodec::Pcmu8k).then_some(crate::audio::g711::Law::Ulaw)
    }

    /// Starts replaying at real-time pace (tokio's clock, so a paused clock accelerates it).
    /// Returns the call's end of the leg — driven from the call's own task, with no task or
    /// channel of its own — and the recording, delivered when the call hangs up or lets go of
    /// the leg.
    pub fn start(self) -> (LegHandle, oneshot::Receiver<Recording>) {
        let (done, recording) = oneshot::channel();
        let started_at = Instant::now();
        let rate = self.codec.rate();
        let law = self.law();
        let spf = samples_per_frame(rate);
        let leg = FixtureLeg {
            start: started_at,
            fixture_frames: self.samples.len().div_ceil(spf),
            next: 0,
            tick: Box::pin(sleep_until(started_at + FRAME)),
            last_voiced_heard: None,
            stopped: false,
            agent: if self.record {
                Vec::with_capacity(self.samples.len() + spf)
            } else {
                Vec::new()
            },
            frames_heard: 0,
            clears: 0,
            done: Some(done),
            caller: self,
        };
        let handle = LegHandle::direct(rate, started_at, Box::new(leg)).with_law(law);
        (handle, recording)
    }
}

const FRAME: Duration = Duration::from_millis(crate::audio::FRAME_MS as u64);

/// The fixture's side of a live call: frame `n` is complete (fully "received") at the end of
/// its 20 ms; what the call plays is placed at each frame's timestamp.
struct FixtureLeg {
    caller: FixtureCaller,
    start: Instant,
    fixture_frames: usize,
    /// The next caller frame.
    next: usize,
    /// Due when the next caller frame is.
    tick: Pin<Box<Sleep>>,
    last_voiced_heard: Option<Instant>,
    /// `Stop` was reported; frames the call still plays are taken until it hangs up.
    stopped: bool,
    agent: Vec<i16>,
    frames_heard: u64,
    clears: u64,
    /// Taken when the recording is delivered (hang-up, or the call let go of the leg).
    done: Option<oneshot::Sender<Recording>>,
}

impl FixtureLeg {
    fn rate(&self) -> u32 {
        self.caller.codec.rate()
    }

    /// Delivers the recording: both tracks as long as the call, the caller's padded with the
    /// silence sent after the fixture ended.
    fn deliver(&mut self) {
        let Some(done) = self.done.take() else {
            return;
        };
        let spf = samples_per_frame(self.rate());
        let (caller, agent) = if self.caller.record {
            let mut caller = self.caller.samples.to_vec();
            let mut agent = std::mem::take(&mut self.agent);
            let len = (self.next * spf).max(caller.len()).max(agent.len());
            caller.resize(len, 0);
            agent.resize(len, 0);
            (caller, agent)
        } else {
            Default::default()
        };
        let _ = done.send(Recording {
            rate: self.rate(),
            caller,
            agent,
            frames_heard: self.frames_heard,
            clears: self.clears,
        });
    }
}

impl Drop for FixtureLeg {
    fn drop(&mut self) {
        self.deliver();
    }
}

impl LegIo for FixtureLeg {
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<LegEvent>> {
        if self.done.is_none() {
            return Poll::Ready(None);
        }
        if self.stopped {
            return Poll::Pending;
        }
        ready!(self.tick.as_mut().poll(cx));
        let now = Instant::now();
        let n = self.next;
        if n >= self.fixture_frames {
            let fixture_end = self.start + FRAME * self.fixture_frames as u32;
            let quiet_since = self
                .last_voiced_heard
                .map_or(fixture_end, |t| t.max(fixture_end));
            if now >= quiet_since + self.caller.quiet_after
                || now >= fixture_end + self.caller.max_tail
            {
                self.stopped = true;
                return Poll::Ready(Some(LegEvent::Stop(StopReason::HungUp)));
            }
        }
        let rate = self.rate();
        let spf = samples_per_frame(rate);
        let all = &self.caller.samples;
        let lo = (n * spf).min(all.len());
        let hi = ((n + 1) * spf).min(all.len());
        let mut samples = Vec::with_capacity(spf);
        samples.extend_from_slice(&all[lo..hi]);
        samples.resize(spf, 0);
        // The frame arrived when it was due, however late the call's task came to read it:
        // that wait is the call's, and counts in its uplink figures.
        let arrived = self.tick.deadline();
        self.next = n + 1;
        self.tick
            .as_mut()
            .reset(self.start + FRAME * (self.next as u32 + 1));
        let frame = Frame {
            rate,
            ts: FRAME * n as u32,
            samples,
        };
        Poll::Ready(Some(LegEvent::Frame {
            frame,
            received_at: arrived,
        }))
    }

    fn command(&mut self, cmd: LegCommand) -> Result<Option<Frame>, Refused> {
        if self.done.is_none() {
            return Err(Refused::Gone(cmd));
        }
        match cmd {
            LegCommand::Play { mut frame, .. } => {
                self.caller.codec.through(&mut frame.samples);
                if !self.stopped && vad::rms_dbfs(&frame.samples) > vad::DEFAULT_THRESHOLD_DBFS {
                    self.last_voiced_heard = Some(Instant::now());
                }
                if self.caller.record {
                    let rate = self.rate();
                    place(&mut self.agent, &frame, rate);
                }
                self.frames_heard += 1;
                // Copied into the recording: the buffer goes back to the call's playout.
                Ok(Some(frame))
            }
            LegCommand::Clear => {
                self.clears += 1;
                Ok(None)
            }
            LegCommand::Hangup => {
                self.deliver();
                Ok(None)
            }
        }
    }
}

/// Writes a played frame at its media timestamp.
fn place(track: &mut Vec<i16>, frame: &Frame, rate: u32) {
    let at = (frame.ts.as_micros() as u64 * u64::from(rate) / 1_000_000) as usize;
    let end = at + frame.samples.len();
    if track.len() < end {
        track.resize(end, 0);
    }
    track[at..end].copy_from_slice(&frame.samples);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::leg::PlayedKind;

    fn caller(frames: usize) -> FixtureCaller {
        let samples: Vec<i16> = (0..frames * 320).map(|i| (i % 1000) as i16).collect();
        let mut c = FixtureCaller::from_pcm(&samples, 16_000, LegCodec::L16k16, "t").unwrap();
        c.quiet_after = Duration::from_millis(100);
        c
    }

    fn voice(ts_ms: u64) -> LegCommand {
        let samples = (0..320)
            .map(|i| if i % 2 == 0 { 8000 } else { -8000 })
            .collect();
        LegCommand::Play {
            frame: Frame {
                rate: 16_000,
                ts: Duration::from_millis(ts_ms),
                samples,
            },
            kind: PlayedKind::Voice,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn frames_come_on_the_20_ms_clock_and_stop_once_the_agent_is_quiet() {
        let fixture = caller(3);
        let (mut leg, recording) = fixture.start();
        let t0 = Instant::now();
        for n in 0..3u64 {
            let Some(LegEvent::Frame { frame, received_at }) = leg.recv().await else {
                panic!("frame {n}");
            };
            assert_eq!(frame.ts, Duration::from_millis(20 * n));
            assert_eq!(received_at - t0, Duration::from_millis(20 * (n + 1)));
            assert_eq!(frame.samples.len(), 320);
            assert_eq!(frame.samples[1], (n as i16 * 320 + 1) % 1000);
        }
        // The agent speaks past the fixture's end: the line stays open (silent frames) until
        // it has been quiet for `quiet_after`.
        assert!(
            matches!(leg.send(voice(60)), Ok(Some(_))),
            "the buffer comes back"
        );
        let mut silent = 0;
        let stopped_at = loop {
            match leg.recv().await {
                Some(LegEvent::Frame { frame, .. }) => {
                    assert!(frame.samples.iter().all(|&s| s == 0));
                    silent += 1;
                }
                Some(LegEvent::Stop(_)) => break Instant::now() - t0,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(silent, 4);
        assert_eq!(stopped_at, Duration::from_millis(160));
        // Frames the call still releases are taken until it hangs up; then the leg is gone.
        assert!(leg.send(voice(80)).is_ok());
        assert!(leg.send(LegCommand::Clear).is_ok());
        assert!(leg.send(LegCommand::Hangup).is_ok());
        assert!(matches!(leg.send(voice(100)), Err(Refused::Gone(_))));
        assert!(leg.recv().await.is_none());
        let rec = recording.await.unwrap();
        assert_eq!((rec.frames_heard, rec.clears), (2, 1));
        // Both tracks span the call: 3 fixture frames and 4 silent ones.
        assert_eq!((rec.caller.len(), rec.agent.len()), (7 * 320, 7 * 320));
        assert_eq!(rec.caller[2 * 320 + 1], 641);
        assert_eq!(&rec.agent[60 * 16..60 * 16 + 2], &[8000, -8000]);
        assert!(rec.agent[..60 * 16].iter().all(|&s| s == 0));
    }

    #[tokio::test(start_paused = true)]
    async fn the_recording_comes_when_the_call_lets_go_and_can_be_left_out() {
        let (leg, recording) = caller(2).start();
        drop(leg);
        let rec = recording.await.unwrap();
        assert_eq!(rec.rate, 16_000);
        assert_eq!(
            rec.caller.len(),
            2 * 320,
            "the fixture, though no frame was sent"
        );

        let mut quiet = caller(2);
        quiet.record = false;
        let (mut leg, recording) = quiet.start();
        let _ = leg.recv().await;
        assert!(leg.send(voice(0)).is_ok());
        drop(leg);
        let rec = recording.await.unwrap();
        assert_eq!(rec.frames_heard, 1);
        assert!(rec.caller.is_empty() && rec.agent.is_empty());
    }
}

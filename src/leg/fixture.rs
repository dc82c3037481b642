//! The fixture caller: replays a WAV (any rate) in real-time 20 ms frames, optionally through a
//! telephony codec, and records what the caller hears. The recording is a stereo WAV sample-aligned
//! on the caller's timeline: left = the caller, right = the agent's audio as played out.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use super::{LegCommand, LegEvent, LegHandle};
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
    samples: Vec<i16>,
    /// After the fixture ends, keep the line open until the agent has been quiet this long.
    pub quiet_after: Duration,
    /// ... but never longer than this past the end of the fixture.
    pub max_tail: Duration,
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
            samples,
            quiet_after: Duration::from_millis(1500),
            max_tail: Duration::from_secs(20),
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

    /// Starts replaying at real-time pace (tokio's clock, so a paused clock accelerates it).
    /// Returns the call's end of the leg and a task that yields the recording when the call ends.
    pub fn spawn(self) -> (LegHandle, tokio::task::JoinHandle<Recording>) {
        let (ev_tx, ev_rx) = mpsc::channel(64);
        let (cmd_tx, cmd_rx) = crate::leg::command_channel();
        let started_at = Instant::now();
        let law = (self.codec == LegCodec::Pcmu8k).then_some(crate::audio::g711::Law::Ulaw);
        let handle = LegHandle::new(self.codec.rate(), started_at, ev_rx, cmd_tx).with_law(law);
        let task = tokio::spawn(self.run(started_at, ev_tx, cmd_rx));
        (handle, task)
    }

    async fn run(
        self,
        start: Instant,
        events: mpsc::Sender<LegEvent>,
        mut commands: mpsc::Receiver<LegCommand>,
    ) -> Recording {
        let rate = self.codec.rate();
        let spf = samples_per_frame(rate);
        let frame_len = Duration::from_millis(u64::from(crate::audio::FRAME_MS));
        let mut rec = Recording {
            rate,
            caller: self.samples.clone(),
            ..Default::default()
        };
        let fixture_frames = self.samples.len().div_ceil(spf);
        let mut last_voiced_heard: Option<Instant> = None;
        let mut n: usize = 0;
        loop {
            // Frame n is complete (fully "received") at the end of its 20 ms.
            let due = start + frame_len * (n as u32 + 1);
            tokio::select! {
                biased;
                cmd = commands.recv() => match cmd {
                    Some(LegCommand::Play { mut frame, .. }) => {
                        self.codec.through(&mut frame.samples);
                        if vad::rms_dbfs(&frame.samples) > vad::DEFAULT_THRESHOLD_DBFS {
                            last_voiced_heard = Some(Instant::now());
                        }
                        place(&mut rec.agent, &frame, rate);
                        rec.frames_heard += 1;
                    }
                    Some(LegCommand::Clear) => rec.clears += 1,
                    Some(LegCommand::Hangup) | None => break,
                },
                _ = sleep_until(due) => {
                    let now = Instant::now();
                    if n >= fixture_frames {
                        let fixture_end = start + frame_len * fixture_frames as u32;
                        let quiet_since = last_voiced_heard.map_or(fixture_end, |t| t.max(fixture_end));
                        if now >= quiet_since + self.quiet_after || now >= fixture_end + self.max_tail {
                            let _ = events.send(LegEvent::Stop).await;
                            // Keep taking frames the call already released until it hangs up.
                            while let Some(cmd) = commands.recv().await {
                                match cmd {
                                    LegCommand::Play { mut frame, .. } => {
                                        self.codec.through(&mut frame.samples);
                                        place(&mut rec.agent, &frame, rate);
                                        rec.frames_heard += 1;
                                    }
                                    LegCommand::Clear => rec.clears += 1,
                                    LegCommand::Hangup => break,
                                }
                            }
                            break;
                        }
                    }
                    let lo = (n * spf).min(self.samples.len());
                    let hi = ((n + 1) * spf).min(self.samples.len());
                    let mut samples = self.samples[lo..hi].to_vec();
                    samples.resize(spf, 0);
                    if hi - lo < spf && n >= fixture_frames {
                        rec.caller.resize((n + 1) * spf, 0);
                    }
                    let frame = Frame { rate, ts: frame_len * n as u32, samples };
                    if events.send(LegEvent::Frame { frame, received_at: now }).await.is_err() {
                        break;
                    }
                    n += 1;
                }
            }
        }
        let len = rec.caller.len().max(rec.agent.len());
        rec.caller.resize(len, 0);
        rec.agent.resize(len, 0);
        rec
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

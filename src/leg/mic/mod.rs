//! The local microphone and speaker as a caller leg (`baton talk`).
//!
//! Everything here but the device itself is independent of any audio library and is tested with
//! a fake device:
//! * an [`AudioDevice`] runs the hardware (cpal behind the `mic` feature, see `cpal_device`)
//!   on a thread of its own, calling [`Capture`] from its input callback and [`Playback`] from its
//!   output callback;
//! * those two halves only touch lock-free rings and atomics (see [`ring`]): the audio callback
//!   never allocates, locks, waits or wakes a task;
//! * the **pump** (a tokio task) drains the capture ring every [`POLL`], resamples device rate →
//!   leg rate, cuts 20 ms [`LegEvent::Frame`]s, and turns the call's `Play` frames into device-rate
//!   audio in the playback ring (leg rate → device rate). A barge-in (`Clear`) raises a flag the
//!   output callback sees on its next run: it empties the ring itself, so the pump never touches
//!   the consumer side.
//!
//! Idle silence is not queued: the output callback plays silence when the ring is empty.

pub mod ring;

#[cfg(feature = "mic")]
pub mod cpal_device;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{LegCommand, LegEvent, LegHandle, StopReason};
use crate::audio::playout::PlayedKind;
use crate::audio::resample::StreamResampler;
use crate::audio::{Frame, Reframer};
pub use ring::{Capture, MicCounters, MicStats, Playback};

/// How often the pump drains the capture ring.
pub const POLL: Duration = Duration::from_millis(5);

/// A device's native format on one side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceFormat {
    pub rate: u32,
    pub channels: usize,
}

/// The device failed or could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("no {0} device")]
    NoDevice(&'static str),
    #[error("{what}: {reason}")]
    Backend { what: String, reason: String },
    #[error("cannot resample between {from} Hz and {to} Hz: {reason}")]
    Resample { from: u32, to: u32, reason: String },
}

/// Something that plays and records: real hardware, or a fake in tests.
pub trait AudioDevice: Send + 'static {
    fn input_format(&self) -> DeviceFormat;
    fn output_format(&self) -> DeviceFormat;
    /// Runs the device until `stop` is set (or it fails), calling `capture` from the input
    /// callback and `playback` from the output callback. Called on a thread of its own.
    fn run(
        self: Box<Self>,
        capture: Capture,
        playback: Playback,
        stop: Arc<AtomicBool>,
    ) -> Result<(), DeviceError>;
}

/// Settings of the microphone leg.
#[derive(Clone, Debug)]
pub struct MicOptions {
    /// The rate frames are cut at (the call resamples to the model from there).
    pub leg_rate: u32,
    /// Capture ring size, as audio time.
    pub capture_buffer: Duration,
    /// Playback ring size, as audio time (agent audio queued ahead of the speaker at most).
    pub playback_buffer: Duration,
    /// Events queued toward the call at most.
    pub event_queue: usize,
}

impl Default for MicOptions {
    fn default() -> Self {
        MicOptions {
            leg_rate: 16_000,
            capture_buffer: Duration::from_millis(500),
            playback_buffer: Duration::from_secs(2),
            event_queue: 50,
        }
    }
}

/// A running microphone leg.
pub struct MicLeg {
    pub handle: LegHandle,
    /// Yields the counters when the leg ends.
    pub task: JoinHandle<MicStats>,
    /// Counters, readable at any time.
    pub counters: Arc<MicCounters>,
}

fn ring_len(rate: u32, d: Duration) -> usize {
    ((u64::from(rate) * d.as_millis() as u64 / 1000) as usize).max(1024)
}

fn resampler(from: u32, to: u32) -> Result<StreamResampler, DeviceError> {
    StreamResampler::new(from, to).map_err(|e| DeviceError::Resample {
        from,
        to,
        reason: e.to_string(),
    })
}

/// Starts `device` on its own thread and the pump on the tokio runtime.
pub fn start(device: Box<dyn AudioDevice>, opts: MicOptions) -> Result<MicLeg, DeviceError> {
    let (inp, outp) = (device.input_format(), device.output_format());
    let up = resampler(inp.rate, opts.leg_rate)?;
    let down = resampler(opts.leg_rate, outp.rate)?;
    let counters = Arc::new(MicCounters::default());
    let (cap_tx, cap_rx) = rtrb::RingBuffer::new(ring_len(inp.rate, opts.capture_buffer));
    let (play_tx, play_rx) = rtrb::RingBuffer::new(ring_len(outp.rate, opts.playback_buffer));
    let clear = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let capture = Capture {
        ring: cap_tx,
        channels: inp.channels,
        counters: counters.clone(),
    };
    let playback = Playback {
        ring: play_rx,
        channels: outp.channels,
        clear: clear.clone(),
        counters: counters.clone(),
    };
    let (dev_tx, dev_rx) = tokio::sync::oneshot::channel();
    let dev_stop = stop.clone();
    std::thread::Builder::new()
        .name("baton-audio".into())
        .spawn(move || {
            let _ = dev_tx.send(device.run(capture, playback, dev_stop));
        })
        .map_err(|e| DeviceError::Backend {
            what: "audio thread".into(),
            reason: e.to_string(),
        })?;
    let (ev_tx, ev_rx) = mpsc::channel(opts.event_queue.max(1));
    let (cmd_tx, cmd_rx) = crate::leg::command_channel();
    let started_at = Instant::now();
    let pump = Pump {
        capture: cap_rx,
        playback: play_tx,
        clear,
        stop,
        up,
        down,
        leg_rate: opts.leg_rate,
        reframer: Reframer::new(opts.leg_rate),
        raw: Vec::with_capacity(4096),
        resampled: Vec::with_capacity(4096),
        frames_dropped: 0,
        counters: counters.clone(),
        events: ev_tx,
    };
    let task = tokio::spawn(pump.run(cmd_rx, dev_rx));
    Ok(MicLeg {
        handle: LegHandle::new(opts.leg_rate, started_at, ev_rx, cmd_tx),
        task,
        counters,
    })
}

struct Pump {
    capture: rtrb::Consumer<i16>,
    playback: rtrb::Producer<i16>,
    clear: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    up: StreamResampler,
    down: StreamResampler,
    leg_rate: u32,
    reframer: Reframer,
    raw: Vec<i16>,
    resampled: Vec<i16>,
    frames_dropped: u64,
    counters: Arc<MicCounters>,
    events: mpsc::Sender<LegEvent>,
}

impl Pump {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<LegCommand>,
        mut device: tokio::sync::oneshot::Receiver<Result<(), DeviceError>>,
    ) -> MicStats {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                cmd = commands.recv() => match cmd {
                    Some(LegCommand::Play { frame, kind }) => self.play(&frame, kind),
                    Some(LegCommand::Clear) => self.barge_in(),
                    Some(LegCommand::Hangup) | None => break,
                },
                r = &mut device => {
                    let why = match r {
                        Ok(Err(e)) => {
                            tracing::error!(error = %e, "audio device failed");
                            StopReason::Failed(format!("the audio device failed: {e}"))
                        }
                        Ok(Ok(())) => {
                            tracing::info!("audio device stopped");
                            StopReason::HungUp
                        }
                        Err(_) => {
                            tracing::error!("the audio device's thread ended without a word");
                            StopReason::Failed("the audio device's thread ended".into())
                        }
                    };
                    let _ = self.events.send(LegEvent::Stop(why)).await;
                    // Wait for the call to hang up, taking its last commands.
                    while let Some(cmd) = commands.recv().await {
                        if matches!(cmd, LegCommand::Hangup) {
                            break;
                        }
                    }
                    break;
                }
                _ = tick.tick() => self.drain_capture(Instant::now()),
            }
        }
        self.stop.store(true, Ordering::Release);
        self.counters.snapshot(self.frames_dropped)
    }

    /// Takes what the input callback captured and cuts it into frames for the call.
    fn drain_capture(&mut self, now: Instant) {
        let n = self.capture.slots();
        if n == 0 {
            return;
        }
        self.raw.clear();
        if let Ok(chunk) = self.capture.read_chunk(n) {
            let (a, b) = chunk.as_slices();
            self.raw.extend_from_slice(a);
            self.raw.extend_from_slice(b);
            chunk.commit_all();
        }
        self.resampled.clear();
        self.up.process(&self.raw, &mut self.resampled);
        let (events, dropped) = (&self.events, &mut self.frames_dropped);
        self.reframer.push(&self.resampled, |frame| {
            let ev = LegEvent::Frame {
                frame,
                received_at: now,
            };
            if let Err(mpsc::error::TrySendError::Full(_)) = events.try_send(ev) {
                *dropped += 1;
            }
        });
    }

    /// Queues one agent frame for the speaker (idle silence is not queued).
    fn play(&mut self, frame: &Frame, kind: PlayedKind) {
        if kind == PlayedKind::Silence || frame.rate != self.leg_rate {
            return;
        }
        self.resampled.clear();
        self.down.process(&frame.samples, &mut self.resampled);
        let (_, rest) = self.playback.push_partial_slice(&self.resampled);
        if !rest.is_empty() {
            self.counters
                .playback_overflow
                .fetch_add(rest.len() as u64, Ordering::Relaxed);
        }
    }

    /// Barge-in: the output callback empties its ring on its next run; the cut reply's tail in
    /// the resampler is dropped too.
    fn barge_in(&mut self) {
        self.clear.store(true, Ordering::Release);
        self.resampled.clear();
        self.down.flush(&mut self.resampled);
        self.resampled.clear();
    }
}

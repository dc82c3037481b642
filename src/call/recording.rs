//! An optional per-call stereo recording (left: the caller, right: the agent as played out),
//! written by a blocking writer task fed through a bounded queue: the call offers each frame with
//! `try_send` and never waits for the disk. A full queue loses frames (counted; the recording
//! then has silence there). A WAV file holds at most 4 GiB of audio (its sizes are 32-bit: about
//! 37 hours of an 8 kHz call, 6 hours at 48 kHz): a call that outlasts it keeps a valid file of
//! its first part, and the writer says where it stopped instead of wrapping the header around.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::audio::Frame;

/// One side runs at most this far ahead of the other before the other is padded with silence.
const MAX_LAG: Duration = Duration::from_secs(10);

/// Stereo sample frames (4 bytes each) one WAV file can hold: its data size and its RIFF size
/// (the data plus the header) are both 32-bit.
const MAX_SAMPLES: u64 = (u32::MAX as u64 - 1024) / 4;

/// Which side of the call a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Caller,
    Agent,
}

struct Tapped {
    side: Side,
    ts: Duration,
    samples: Vec<i16>,
}

/// The call's end of the recording queue (cheap to clone).
#[derive(Clone, Debug)]
pub struct AudioTap {
    tx: mpsc::Sender<Tapped>,
    dropped: Arc<AtomicU64>,
}

/// What the writer produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordingInfo {
    pub path: PathBuf,
    /// Stereo sample frames written.
    pub samples: u64,
    /// Frames lost because the queue was full.
    pub dropped_frames: u64,
    /// The file reached the most a WAV can hold: what came after is not in it.
    pub full: bool,
}

/// The recording could not be written.
#[derive(Debug, thiserror::Error)]
#[error("recording {path}: {reason}")]
pub struct RecordingError {
    pub path: PathBuf,
    pub reason: String,
}

impl AudioTap {
    /// Offers a caller frame.
    pub fn caller(&self, f: &Frame) {
        self.offer(Side::Caller, f);
    }

    /// Offers a frame handed to the caller (voice or silence).
    pub fn agent(&self, f: &Frame) {
        self.offer(Side::Agent, f);
    }

    fn offer(&self, side: Side, f: &Frame) {
        let t = Tapped {
            side,
            ts: f.ts,
            samples: f.samples.clone(),
        };
        if self.tx.try_send(t).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Starts a recording of a call at `rate` Hz into `path`; the writer ends (and finalises the
/// file) when every [`AudioTap`] clone is dropped.
pub fn spawn(
    path: &Path,
    rate: u32,
    capacity: usize,
) -> (
    AudioTap,
    tokio::task::JoinHandle<Result<RecordingInfo, RecordingError>>,
) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let dropped = Arc::new(AtomicU64::new(0));
    let tap = AudioTap {
        tx,
        dropped: dropped.clone(),
    };
    let path = path.to_path_buf();
    let task = tokio::task::spawn_blocking(move || write(&path, rate, rx, &dropped, MAX_SAMPLES));
    (tap, task)
}

/// Writes what arrives on `rx` until every tap is dropped, at most `max_samples` stereo sample
/// frames (the rest is read and let go, so the call's taps never fill up).
fn write(
    path: &Path,
    rate: u32,
    mut rx: mpsc::Receiver<Tapped>,
    dropped: &AtomicU64,
    max_samples: u64,
) -> Result<RecordingInfo, RecordingError> {
    let err = |reason: String| RecordingError {
        path: path.to_path_buf(),
        reason,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
    }
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).map_err(|e| err(e.to_string()))?;
    let mut mix = Interleaver::new(rate);
    let mut kept = 0u64;
    let mut sample = |l: i16, r: i16| {
        if kept >= max_samples {
            return Ok(());
        }
        kept += 1;
        if kept == max_samples {
            tracing::warn!(
                path = %path.display(),
                after_s = kept / u64::from(rate.max(1)),
                "the recording is as long as a WAV file can hold (4 GiB): the rest of the call \
                 is not recorded"
            );
        }
        w.write_sample(l).and_then(|()| w.write_sample(r))
    };
    while let Some(t) = rx.blocking_recv() {
        mix.push(t.side, t.ts, &t.samples);
        mix.drain(false, &mut sample)
            .map_err(|e| err(e.to_string()))?;
    }
    mix.drain(true, &mut sample)
        .map_err(|e| err(e.to_string()))?;
    w.finalize().map_err(|e| err(e.to_string()))?;
    Ok(RecordingInfo {
        path: path.to_path_buf(),
        samples: kept,
        dropped_frames: dropped.load(Ordering::Relaxed),
        full: kept >= max_samples,
    })
}

/// Places each side's frames at their media time and releases both sides together.
struct Interleaver {
    rate: u32,
    /// Sample frames already written (both sides).
    written: u64,
    left: VecDeque<i16>,
    right: VecDeque<i16>,
}

impl Interleaver {
    fn new(rate: u32) -> Interleaver {
        Interleaver {
            rate,
            written: 0,
            left: VecDeque::new(),
            right: VecDeque::new(),
        }
    }

    fn push(&mut self, side: Side, ts: Duration, samples: &[i16]) {
        let pos = (ts.as_nanos() * u128::from(self.rate) / 1_000_000_000) as u64;
        let buf = match side {
            Side::Caller => &mut self.left,
            Side::Agent => &mut self.right,
        };
        let mut skip = 0usize;
        let start = if pos < self.written {
            // Already written past (a late frame): keep only its tail.
            skip = (self.written - pos) as usize;
            self.written
        } else {
            pos
        };
        let Some(samples) = samples.get(skip..) else {
            return;
        };
        let offset = (start - self.written) as usize;
        if buf.len() < offset {
            buf.resize(offset, 0);
        }
        for (i, &s) in samples.iter().enumerate() {
            match buf.get_mut(offset + i) {
                Some(slot) => *slot = s,
                None => buf.push_back(s),
            }
        }
    }

    /// Writes what both sides have; at the end (or when one side lags too far) pads the other.
    fn drain<E>(
        &mut self,
        end: bool,
        mut out: impl FnMut(i16, i16) -> Result<(), E>,
    ) -> Result<(), E> {
        let lag = (MAX_LAG.as_millis() as u64 * u64::from(self.rate) / 1000) as usize;
        let longest = self.left.len().max(self.right.len());
        let shortest = self.left.len().min(self.right.len());
        let n = if end || longest - shortest > lag {
            longest - if end { 0 } else { lag }
        } else {
            shortest
        };
        for _ in 0..n {
            let l = self.left.pop_front().unwrap_or(0);
            let r = self.right.pop_front().unwrap_or(0);
            out(l, r)?;
        }
        self.written += n as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drained(m: &mut Interleaver, end: bool) -> Vec<(i16, i16)> {
        let mut v = Vec::new();
        let _ = m.drain::<()>(end, |l, r| {
            v.push((l, r));
            Ok(())
        });
        v
    }

    #[test]
    fn sides_meet_at_their_media_time() {
        let mut m = Interleaver::new(1000); // 1 sample per ms
        m.push(Side::Caller, Duration::from_millis(0), &[1, 1]);
        m.push(Side::Agent, Duration::from_millis(1), &[2, 2]);
        assert_eq!(drained(&mut m, false), vec![(1, 0), (1, 2)]);
        m.push(Side::Caller, Duration::from_millis(4), &[3]);
        assert_eq!(drained(&mut m, false), vec![(0, 2)]);
        assert_eq!(drained(&mut m, true), vec![(0, 0), (3, 0)]);
        assert_eq!(m.written, 5);
    }

    #[test]
    fn a_silent_side_does_not_hold_the_other_forever() {
        let mut m = Interleaver::new(100);
        m.push(Side::Caller, Duration::ZERO, &vec![7; 1500]); // 15 s, the agent silent
        let out = drained(&mut m, false);
        assert_eq!(out.len(), 500, "all but the last 10 s are written");
        assert!(out.iter().all(|&(l, r)| l == 7 && r == 0));
    }

    #[tokio::test]
    async fn writes_a_stereo_wav() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec/call.wav");
        let (tap, task) = spawn(&path, 8000, 16);
        let f = |ts: u64, v: i16| Frame {
            rate: 8000,
            ts: Duration::from_millis(ts),
            samples: vec![v; 160],
        };
        tap.caller(&f(0, 100));
        tap.agent(&f(20, -100));
        drop(tap);
        let info = task.await.unwrap().unwrap();
        assert_eq!(info.samples, 320);
        let r = hound::WavReader::open(&path).unwrap();
        assert_eq!(r.spec().channels, 2);
        let s: Vec<i16> = r.into_samples().map(Result::unwrap).collect();
        assert_eq!(s[0..2], [100, 0]);
        assert_eq!(s[320..322], [0, -100]);
    }

    /// Past the most a file can hold (here 300 sample frames instead of 4 GiB), the file stays
    /// valid with the first part, the info says it is full, and the taps are still drained.
    #[test]
    fn a_recording_stops_whole_at_the_most_a_wav_can_hold() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.wav");
        let (tx, rx) = mpsc::channel(64);
        for n in 0..20u64 {
            for side in [Side::Caller, Side::Agent] {
                let samples = vec![n as i16 + 1; 160];
                tx.try_send(Tapped {
                    side,
                    ts: Duration::from_millis(n * 20),
                    samples,
                })
                .unwrap();
            }
        }
        drop(tx);
        let info = write(&path, 8000, rx, &AtomicU64::new(0), 300).unwrap();
        assert!(info.full);
        assert_eq!(info.samples, 300);
        let r = hound::WavReader::open(&path).unwrap();
        assert_eq!(r.duration(), 300);
        let s: Vec<i16> = r.into_samples().map(Result::unwrap).collect();
        assert_eq!(s.len(), 600);
        assert_eq!(s[..2], [1, 1]);
        assert_eq!(
            s[598..],
            [2, 2],
            "the second frame's first 140 samples close the file"
        );
        assert!(s.iter().all(|&v| v == 1 || v == 2));

        let (tx, rx) = mpsc::channel(4);
        tx.try_send(Tapped {
            side: Side::Caller,
            ts: Duration::ZERO,
            samples: vec![5; 160],
        })
        .unwrap();
        drop(tx);
        let info = write(&path, 8000, rx, &AtomicU64::new(0), 300).unwrap();
        assert!(!info.full, "160 sample frames are not the limit");
        assert_eq!(info.samples, 160);
    }
}

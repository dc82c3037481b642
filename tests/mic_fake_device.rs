//! The microphone leg and `baton talk` with a fake audio device (no hardware, no audio library):
//! device-rate ↔ leg-rate resampling, 20 ms frames at real pace, playback through the ring, a
//! barge-in emptying it, and a whole conversation with the embedded mock printed as it comes.

use crate::support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton::audio::Frame;
use baton::audio::playout::PlayedKind;
use baton::leg::mic::{
    self, AudioDevice, Capture, DeviceError, DeviceFormat, MicOptions, Playback,
};
use baton::leg::{LegCommand, LegEvent};
use support::{ROOT, dominant_hz, voiced_segments, wait_until};

/// A device with a 10 ms callback period at real time: it records `source` (interleaved, at the
/// input format) and keeps what it plays (first channel) in `played`.
struct FakeDevice {
    input: DeviceFormat,
    output: DeviceFormat,
    source: Vec<f32>,
    played: Arc<Mutex<Vec<i16>>>,
}

impl AudioDevice for FakeDevice {
    fn input_format(&self) -> DeviceFormat {
        self.input
    }
    fn output_format(&self) -> DeviceFormat {
        self.output
    }
    fn run(
        self: Box<Self>,
        mut capture: Capture,
        mut playback: Playback,
        stop: Arc<AtomicBool>,
    ) -> Result<(), DeviceError> {
        let in_block = self.input.rate as usize / 100 * self.input.channels;
        let out_block = self.output.rate as usize / 100 * self.output.channels;
        let mut out = vec![0f32; out_block];
        let silence = vec![0f32; in_block];
        let t0 = std::time::Instant::now();
        let mut n = 0usize;
        while !stop.load(Ordering::Acquire) {
            let due = t0 + Duration::from_millis(10 * (n as u64 + 1));
            std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
            let lo = (n * in_block).min(self.source.len());
            let hi = ((n + 1) * in_block).min(self.source.len());
            capture.write_f32(if hi > lo {
                &self.source[lo..hi]
            } else {
                &silence
            });
            playback.read_f32(&mut out);
            let mut played = self.played.lock().unwrap();
            played.extend(
                out.chunks(self.output.channels)
                    .map(|f| (f[0] * 32767.0) as i16),
            );
            n += 1;
        }
        Ok(())
    }
}

fn tone(hz: f64, rate: u32, secs: f64, channels: usize) -> Vec<f32> {
    (0..(f64::from(rate) * secs) as usize)
        .flat_map(|n| {
            let v = 0.3 * (2.0 * std::f64::consts::PI * hz * n as f64 / f64::from(rate)).sin();
            std::iter::repeat_n(v as f32, channels)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_playback_and_barge_in_through_a_fake_device() {
    let played = Arc::new(Mutex::new(Vec::new()));
    let device = FakeDevice {
        input: DeviceFormat {
            rate: 44_100,
            channels: 2,
        },
        output: DeviceFormat {
            rate: 48_000,
            channels: 2,
        },
        source: tone(440.0, 44_100, 2.0, 2),
        played: played.clone(),
    };
    let mut leg = mic::start(Box::new(device), MicOptions::default()).unwrap();
    assert_eq!(leg.handle.rate, 16_000);

    // One second of capture: 20 ms frames at 16 kHz, in order, at real pace, carrying the tone.
    let started = tokio::time::Instant::now();
    let mut heard = Vec::new();
    let mut ts = Vec::new();
    while started.elapsed() < Duration::from_secs(1) {
        match tokio::time::timeout(Duration::from_secs(1), leg.handle.recv()).await {
            Ok(Some(LegEvent::Frame { frame, .. })) => {
                assert_eq!((frame.rate, frame.samples.len()), (16_000, 320));
                ts.push(frame.ts.as_millis() as u64);
                heard.extend_from_slice(&frame.samples);
            }
            other => panic!("no frame: {other:?}"),
        }
    }
    assert!((40..=56).contains(&ts.len()), "{} frames in 1 s", ts.len());
    assert!(
        ts.iter().enumerate().all(|(i, &t)| t == 20 * i as u64),
        "{ts:?}"
    );
    let hz = dominant_hz(&heard, 16_000, 250.0, 1250.0);
    assert!((hz - 440.0).abs() < 10.0, "captured {hz} Hz");

    // The agent speaks 600 Hz for 0.6 s, one frame per 20 ms: the speaker plays it at 48 kHz.
    let agent = tone(600.0, 16_000, 0.6, 1);
    for (i, block) in agent.chunks(320).enumerate() {
        let frame = Frame {
            rate: 16_000,
            ts: Duration::from_millis(20 * i as u64),
            samples: block.iter().map(|&v| (v * 32767.0) as i16).collect(),
        };
        leg.handle
            .send(LegCommand::Play {
                frame,
                kind: PlayedKind::Voice,
            })
            .unwrap();
        // The agent's frames arrive at their real pace, as from a model.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Until the ring has played the reply (all but the resampler's few ms), then 0.3 s more of
    // the device's output, so that anything played after the reply would be in `played` too.
    let reply = 48_000 * 55 / 100;
    let secs = Duration::from_secs(10);
    wait_until("the reply played", secs, || {
        leg.counters.snapshot(0).played >= reply
    })
    .await;
    let end = played.lock().unwrap().len() + 48_000 * 3 / 10;
    wait_until("0.3 s more played", secs, || {
        played.lock().unwrap().len() >= end
    })
    .await;
    let out = played.lock().unwrap().clone();
    let segs = voiced_segments(&out, 48_000);
    let voiced: f64 = segs.iter().map(|(s, e)| e - s).sum();
    assert!((0.5..=0.8).contains(&voiced), "played {voiced} s: {segs:?}");
    let hz = dominant_hz(&out, 48_000, 250.0, 1250.0);
    assert!((hz - 600.0).abs() < 10.0, "played {hz} Hz");

    // Two seconds queued at once, then a barge-in after 200 ms: the rest is never played.
    let before = leg.counters.snapshot(0).played;
    for i in 0..100u64 {
        let frame = Frame {
            rate: 16_000,
            ts: Duration::from_millis(20 * i),
            samples: vec![5000; 320],
        };
        leg.handle
            .send(LegCommand::Play {
                frame,
                kind: PlayedKind::Voice,
            })
            .unwrap();
    }
    // The caller barges in 200 ms into the reply.
    tokio::time::sleep(Duration::from_millis(200)).await;
    leg.handle.send(LegCommand::Clear).unwrap();
    wait_until("the ring emptied", secs, || {
        leg.counters.snapshot(0).cleared > 0
    })
    .await;
    let s = leg.counters.snapshot(0);
    let played_ms = (s.played - before) * 1000 / 48_000;
    assert!(played_ms < 600, "{played_ms} ms of the cut reply played");
    assert!(s.cleared > 48_000, "{s:?}");

    leg.handle.send(LegCommand::Hangup).unwrap();
    let stats = leg.task.await.unwrap();
    assert_eq!(stats.capture_overflow, 0, "{stats:?}");
    // Frames the test stopped reading after the first second are dropped, not queued without end.
    assert!(stats.frames_dropped > 0, "{stats:?}");
}

/// A shared buffer standing in for the terminal.
#[derive(Clone, Default)]
struct Terminal(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Terminal {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn talk_holds_a_conversation_through_a_fake_device() {
    let config = support::mock_config("audio-fixtures/scenarios/demo.toml", "");
    let loaded = baton::config::parse(&config, &Path::new(ROOT).join("config/test.toml")).unwrap();
    let app = baton::server::state(loaded).unwrap();
    let c1 = baton::audio::wav::read(&Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav"))
        .unwrap();
    let mut pcm = vec![0i16; 8000];
    pcm.extend_from_slice(&c1.samples);
    let mic_pcm = baton::audio::resample::resample_all(&pcm, 16_000, 48_000).unwrap();
    let played = Arc::new(Mutex::new(Vec::new()));
    let device = FakeDevice {
        input: DeviceFormat {
            rate: 48_000,
            channels: 1,
        },
        output: DeviceFormat {
            rate: 48_000,
            channels: 1,
        },
        source: mic_pcm.iter().map(|&s| f32::from(s) / 32768.0).collect(),
        played: played.clone(),
    };
    let (hang_tx, hang_rx) = tokio::sync::watch::channel(false);
    let term = Terminal::default();
    // The caller hangs up once the agent's reply is on the terminal and has been played to its
    // end (0.7 s of quiet after it), or after 30 s.
    let (shown, heard) = (term.0.clone(), played.clone());
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while tokio::time::Instant::now() < deadline {
            let said = String::from_utf8_lossy(&shown.lock().unwrap()).contains("\nagent: ");
            let out = heard.lock().unwrap().clone();
            let end = out.len() as f64 / 48_000.0;
            let replied = voiced_segments(&out, 48_000)
                .iter()
                .any(|(s, e)| *s > 3.0 && e - s > 1.5 && end - e >= 0.7);
            if said && replied {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = hang_tx.send(true);
    });
    let report = baton::talk::talk(app, Box::new(device), hang_rx, term.clone())
        .await
        .unwrap();
    let text = String::from_utf8(term.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("\nyou: "), "{text}");
    assert!(text.contains("\nagent: Happy to help."), "{text}");
    assert!(text.contains("turn 1: you:"), "{text}");
    assert_eq!(report.turns.len(), 1, "{text}");
    let out = played.lock().unwrap().clone();
    let segs = voiced_segments(&out, 48_000);
    assert!(
        segs.iter().any(|(s, e)| *s > 3.0 && e - s > 1.5),
        "reply not played: {segs:?}"
    );
}

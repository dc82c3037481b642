//! An AudioSocket caller: a client that behaves like Asterisk's side of a connection, so tests,
//! `baton dial audiosocket` and benchmarks can drive any AudioSocket server.
//!
//! It connects, sends the UUID (`0x01`), then one 20 ms slin message per tick at real time
//! (tokio's clock) carrying the fixture at 8 kHz (`0x10`) or 16 kHz (`0x12`), and silence once
//! the fixture has ended; DTMF digits (`0x03`) go out at their offsets. What the server sends is
//! played **like Asterisk plays it**: at once, on arrival (appended after what is already playing,
//! so nothing overlaps). Each audio message's receive time is kept, and the intervals between
//! consecutive ones within a burst are the server's output pacing as the caller sees it.
//!
//! After the fixture, the caller waits until the agent has been quiet for `quiet_after` (at most
//! `max_tail`), sends hang-up (`00 00 00`) and closes. One call is one future: a tick timer and the
//! socket, selected in a loop.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, sleep_until, timeout};

use super::wire::{self, Decoder, Message};
use crate::audio::{samples_per_frame, vad};
use crate::leg::fixture::Recording;
use crate::leg::twilio::cadence::Cadence;

const TICK: Duration = Duration::from_millis(20);

/// How the caller behaves.
#[derive(Clone, Debug)]
pub struct CallerOptions {
    /// The caller's audio at `rate`.
    pub samples: Vec<i16>,
    /// 8000 (`0x10`) or 16000 (`0x12`), or any other slin rate.
    pub rate: u32,
    pub uuid: [u8; 16],
    /// Keys pressed, each at its offset from the start of the call.
    pub dtmf: Vec<(Duration, char)>,
    /// After the fixture, hang up once the agent has been quiet this long ...
    pub quiet_after: Duration,
    /// ... or this long after the fixture ended, whichever comes first.
    pub max_tail: Duration,
    pub connect_timeout: Duration,
    /// A pause between audio messages from the server longer than this starts a new burst (a new
    /// agent turn); pauses between bursts are not pacing samples.
    pub burst_gap: Duration,
    /// The caller's jitter buffer: an audio message that arrives at most this long after the
    /// audio before it has finished playing plays right after it; one that arrives later plays
    /// at its arrival, after silence. (With none, a frame a millisecond late would put a
    /// millisecond of silence into the recording, and a key's tone chopped that way is not
    /// heard as a key.)
    pub jitter: Duration,
}

impl CallerOptions {
    /// A caller saying `samples` at `rate`, with a fixed made-up UUID.
    pub fn new(samples: Vec<i16>, rate: u32) -> Self {
        CallerOptions {
            samples,
            rate,
            uuid: [
                0x0b, 0x6e, 0x4d, 0x2a, 0x8f, 0x1c, 0x4e, 0x55, 0x9a, 0x3b, 0x2c, 0x7d, 0x1e, 0x0f,
                0x9a, 0x88,
            ],
            dtmf: Vec::new(),
            quiet_after: Duration::from_millis(1500),
            max_tail: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(5),
            burst_gap: Duration::from_millis(200),
            jitter: Duration::from_millis(10),
        }
    }
}

/// The call could not be placed.
#[derive(Debug, thiserror::Error)]
pub enum CallerError {
    #[error("{addr}: cannot connect: {reason}")]
    Connect { addr: String, reason: String },
    #[error("{addr}: no connection within {after:?}")]
    ConnectTimeout { addr: String, after: Duration },
    #[error("{rate} Hz has no slin kind")]
    BadRate { rate: u32 },
}

/// How the call ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallerEnd {
    /// The caller sent hang-up and closed.
    HungUp,
    /// The server sent hang-up (`00 00 00`).
    ServerHungUp,
    /// The server closed the connection without a hang-up message.
    ServerClosed,
    /// The connection failed, or the server sent something Asterisk would refuse.
    ConnectionLost(String),
}

/// What the caller sent, heard and saw.
#[derive(Clone, Debug)]
pub struct CallerReport {
    /// Left: the caller; right: the agent as heard; at `rate`, on the caller's timeline.
    pub recording: Recording,
    pub frames_sent: u64,
    pub dtmf_sent: u64,
    /// Audio messages received.
    pub audio_received: u64,
    /// When each audio message arrived, in ms since the UUID was sent.
    pub arrivals_ms: Vec<f64>,
    /// Runs of audio messages separated by pauses longer than `burst_gap`.
    pub bursts: u64,
    /// Intervals between consecutive audio messages within a burst, in µs.
    pub intervals_us: Vec<u32>,
    /// Their deviation from 20 ms.
    pub cadence: Cadence,
    /// Audio messages whose length was not 20 ms.
    pub odd_sized: u64,
    pub end: CallerEnd,
}

/// Connects to `addr` (`host:port`) and runs one call to its end.
pub async fn dial(addr: &str, opts: CallerOptions) -> Result<CallerReport, CallerError> {
    let tcp = match timeout(opts.connect_timeout, tokio::net::TcpStream::connect(addr)).await {
        Err(_) => {
            return Err(CallerError::ConnectTimeout {
                addr: addr.to_owned(),
                after: opts.connect_timeout,
            });
        }
        Ok(Err(e)) => {
            return Err(CallerError::Connect {
                addr: addr.to_owned(),
                reason: e.to_string(),
            });
        }
        Ok(Ok(t)) => t,
    };
    // Asterisk sets TCP_NODELAY too: every 20 ms message goes out at once.
    let _ = tcp.set_nodelay(true);
    run(tcp, opts).await
}

/// Runs one call over any byte stream.
pub async fn run<S>(io: S, opts: CallerOptions) -> Result<CallerReport, CallerError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let kind = wire::slin_kind(opts.rate).ok_or(CallerError::BadRate { rate: opts.rate })?;
    let spf = samples_per_frame(opts.rate);
    let (mut rd, mut wr) = tokio::io::split(io);
    let fixture_frames = opts.samples.len().div_ceil(spf);
    let mut rep = CallerReport {
        recording: Recording {
            rate: opts.rate,
            ..Default::default()
        },
        frames_sent: 0,
        dtmf_sent: 0,
        audio_received: 0,
        arrivals_ms: Vec::new(),
        bursts: 0,
        intervals_us: Vec::new(),
        cadence: Cadence::default(),
        odd_sized: 0,
        end: CallerEnd::HungUp,
    };
    let mut out = BytesMut::new();
    let mut decoder = Decoder::new(u16::MAX as usize);
    let mut buf = vec![0u8; 8192];
    let mut dtmf = opts.dtmf.clone();
    dtmf.sort_by_key(|(at, _)| *at);
    let mut dtmf = dtmf.into_iter().peekable();
    let mut last_audio: Option<Instant> = None;
    let mut last_voiced: Option<Instant> = None;
    // Where the next agent sample plays on the caller's timeline.
    let mut play_cursor = 0usize;
    let jitter = (opts.jitter.as_secs_f64() * f64::from(opts.rate)) as usize;
    let mut frame = vec![0i16; spf];

    let t0 = Instant::now();
    wire::encode_raw(wire::KIND_UUID, &opts.uuid, &mut out);
    let fixture_end = t0 + TICK * fixture_frames as u32;
    let mut n = 0usize;
    let end = 'call: loop {
        if !out.is_empty()
            && let Err(e) = wr.write_all(&out.split()).await
        {
            break CallerEnd::ConnectionLost(e.to_string());
        }
        let due = t0 + TICK * (n as u32 + 1);
        let key_due = dtmf.peek().map(|(at, _)| t0 + *at);
        tokio::select! {
            biased;
            r = rd.read(&mut buf) => {
                let now = Instant::now();
                let n_read = match r {
                    Ok(0) => break CallerEnd::ServerClosed,
                    Ok(k) => k,
                    Err(e) => break CallerEnd::ConnectionLost(e.to_string()),
                };
                decoder.push(&buf[..n_read]);
                loop {
                    match decoder.next_message() {
                        Ok(None) => break,
                        Ok(Some(Message::Hangup)) => break 'call CallerEnd::ServerHungUp,
                        Ok(Some(Message::Audio { rate, payload, .. })) if rate == opts.rate => {
                            let at_ms = now.saturating_duration_since(t0).as_secs_f64() * 1000.0;
                            rep.arrivals_ms.push(at_ms);
                            rep.audio_received += 1;
                            if payload.len() != spf * 2 {
                                rep.odd_sized += 1;
                            }
                            match last_audio {
                                Some(prev) if now.saturating_duration_since(prev) <= opts.burst_gap => {
                                    let us = now.saturating_duration_since(prev).as_micros();
                                    rep.intervals_us.push(u32::try_from(us).unwrap_or(u32::MAX));
                                }
                                _ => rep.bursts += 1,
                            }
                            last_audio = Some(now);
                            // Played at once: at its arrival, or right after what is still
                            // playing or has just finished (within the jitter buffer).
                            let arrival = (at_ms * f64::from(opts.rate) / 1000.0) as usize;
                            let at = play_at(play_cursor, arrival, jitter);
                            let agent = &mut rep.recording.agent;
                            agent.resize(at, 0);
                            wire::decode_samples(&payload, agent);
                            play_cursor = agent.len();
                            if vad::rms_dbfs(&agent[at..]) > vad::DEFAULT_THRESHOLD_DBFS {
                                last_voiced = Some(now);
                            }
                        }
                        Ok(Some(m)) => {
                            break 'call CallerEnd::ConnectionLost(format!(
                                "the server sent a {} message Asterisk would refuse",
                                m.name()
                            ));
                        }
                        Err(e) => break 'call CallerEnd::ConnectionLost(e.to_string()),
                    }
                }
            }
            _ = sleep_until_opt(key_due) => {
                if let Some((_, digit)) = dtmf.next() {
                    let mut b = [0u8; 4];
                    wire::encode_raw(wire::KIND_DTMF, digit.encode_utf8(&mut b).as_bytes(), &mut out);
                    rep.dtmf_sent += 1;
                }
            }
            _ = sleep_until(due) => {
                let now = Instant::now();
                if n >= fixture_frames {
                    let quiet_since = last_voiced.map_or(fixture_end, |t| t.max(fixture_end));
                    if now >= quiet_since + opts.quiet_after || now >= fixture_end + opts.max_tail {
                        break CallerEnd::HungUp;
                    }
                }
                let lo = (n * spf).min(opts.samples.len());
                let hi = ((n + 1) * spf).min(opts.samples.len());
                frame.fill(0);
                frame[..hi - lo].copy_from_slice(&opts.samples[lo..hi]);
                rep.recording.caller.extend_from_slice(&frame);
                wire::encode_audio(kind, &frame, &mut out);
                rep.frames_sent += 1;
                n += 1;
            }
        }
    };
    if end == CallerEnd::HungUp {
        out.extend_from_slice(&wire::HANGUP);
        let _ = wr.write_all(&out.split()).await;
    }
    let _ = wr.shutdown().await;
    // Drain until the server closes (briefly).
    let _ = timeout(Duration::from_secs(1), async {
        while let Ok(k) = rd.read(&mut buf).await {
            if k == 0 {
                break;
            }
        }
    })
    .await;
    rep.cadence = Cadence::from_intervals_us(&rep.intervals_us);
    rep.recording.frames_heard = rep.audio_received;
    let len = rep.recording.caller.len().max(rep.recording.agent.len());
    rep.recording.caller.resize(len, 0);
    rep.recording.agent.resize(len, 0);
    rep.end = end;
    Ok(rep)
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Where an audio message arriving at sample `arrival` of the caller's timeline starts playing,
/// when what came before plays until `cursor`: right after it if it arrives no more than
/// `jitter` samples after that (or before), else at its arrival, after silence.
fn play_at(cursor: usize, arrival: usize, jitter: usize) -> usize {
    if arrival <= cursor + jitter {
        cursor
    } else {
        arrival
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_a_little_late_plays_on_from_the_one_before() {
        // 8 kHz: 10 ms of jitter buffer is 80 samples; the previous audio ends at 1000.
        assert_eq!(play_at(1000, 900, 80), 1000, "early: after what is playing");
        assert_eq!(
            play_at(1000, 1008, 80),
            1000,
            "1 ms late: no silence inserted"
        );
        assert_eq!(play_at(1000, 1080, 80), 1000);
        assert_eq!(
            play_at(1000, 1081, 80),
            1081,
            "later: a pause, played at arrival"
        );
        assert_eq!(
            play_at(0, 8968, 80),
            8968,
            "the first message at its arrival"
        );
        assert_eq!(play_at(1000, 1008, 0), 1008, "no jitter buffer");
    }
}

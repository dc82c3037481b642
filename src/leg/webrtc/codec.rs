//! The sans-IO media core of a WebRTC leg: Opus RTP payloads in, 20 ms PCM frames out, and back.
//!
//! [`OpusInbound`] takes each RTP packet's sequence number, timestamp and payload (one Opus packet,
//! RFC 7587) and emits 20 ms [`Frame`]s at the leg's rate on a continuous media timeline:
//!
//! * **Gaps** are found from the RTP timestamp (48 kHz clock for every Opus mode): the audio
//!   between where the previous packet ended and where this one starts is missing. A sequence
//!   jump says it was lost (rather than DTX silence).
//! * **Loss** is concealed when the next packet arrives, so nothing waits for a jitter buffer:
//!   the last lost 20 ms is decoded from this packet's in-band FEC (`decode_fec = 1`; libopus
//!   falls back to concealment when the packet carries none), anything before it with the
//!   decoder's packet-loss concealment (`decode` with no input), and stretches beyond
//!   [`PLC_LIMIT`] as plain silence. Gaps longer than [`RESYNC_GAP`] are not filled: the
//!   timeline jumps (a peer that paused, or restarted its timestamps).
//! * **Late and duplicate** packets (sequence at or behind the last one decoded) are dropped:
//!   their time was already concealed.
//! * Opus packets of any duration (2.5–120 ms) are re-framed into 20 ms frames.
//!
//! [`OpusOutbound`] encodes one 20 ms frame into one Opus packet (mono, VoIP, in-band FEC on).
//! RTP timestamps of the packets sent are counted in samples by the packetizer (+960 per
//! 20 ms), never taken from a clock.

use std::time::Duration;

use crate::audio::{FRAME_MS, Frame, samples_per_frame};

/// The RTP clock of Opus (RFC 7587 §4.1): always 48 kHz.
pub const RTP_CLOCK: u32 = 48_000;
/// Missing audio concealed by the decoder; the rest of a longer gap is silence.
pub const PLC_LIMIT: Duration = Duration::from_millis(200);
/// Gaps longer than this are not filled at all.
pub const RESYNC_GAP: Duration = Duration::from_secs(5);
/// The longest Opus packet (120 ms) at 48 kHz, the most one decode can return per channel.
const MAX_PACKET_SAMPLES_48K: usize = 5760;

/// The codec could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("Opus does not run at {0} Hz (use 8, 12, 16, 24 or 48 kHz)")]
    Rate(u32),
    #[error("libopus: {0}")]
    Opus(String),
}

impl From<opus::Error> for CodecError {
    fn from(e: opus::Error) -> Self {
        CodecError::Opus(e.to_string())
    }
}

fn check_rate(rate: u32) -> Result<(), CodecError> {
    match rate {
        8_000 | 12_000 | 16_000 | 24_000 | 48_000 => Ok(()),
        other => Err(CodecError::Rate(other)),
    }
}

/// What the inbound side saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct InboundStats {
    /// RTP packets decoded.
    pub packets: u64,
    /// Packets missing by sequence number.
    pub lost: u64,
    /// Packets dropped because their time had already passed (late or duplicate).
    pub late: u64,
    /// Packets libopus refused (the time they covered was concealed).
    pub bad: u64,
    /// Empty payloads ignored.
    pub empty: u64,
    /// Milliseconds concealed with the decoder's PLC.
    pub plc_ms: u64,
    /// Milliseconds decoded from the next packet's in-band FEC.
    pub fec_ms: u64,
    /// Milliseconds of a gap filled with silence (beyond [`PLC_LIMIT`]).
    pub silence_ms: u64,
    /// Gaps beyond [`RESYNC_GAP`] that made the timeline jump.
    pub resyncs: u64,
    /// 20 ms frames emitted.
    pub frames: u64,
}

/// Where the last decoded packet left the stream.
#[derive(Clone, Copy, Debug)]
struct Position {
    seq: u16,
    /// RTP timestamp just after the last decoded audio.
    next_ts: u32,
}

/// Opus RTP payloads → 20 ms frames at the leg's rate.
pub struct OpusInbound {
    dec: opus::Decoder,
    rate: u32,
    spf: usize,
    /// RTP clock ticks per output sample.
    ticks_per_sample: u32,
    pos: Option<Position>,
    acc: Vec<i16>,
    pcm: Vec<i16>,
    next_ts: Duration,
    stats: InboundStats,
}

impl OpusInbound {
    /// A mono decoder producing frames at `rate` (8, 12, 16, 24 or 48 kHz).
    pub fn new(rate: u32) -> Result<Self, CodecError> {
        check_rate(rate)?;
        Ok(OpusInbound {
            dec: opus::Decoder::new(rate, opus::Channels::Mono)?,
            rate,
            spf: samples_per_frame(rate),
            ticks_per_sample: RTP_CLOCK / rate,
            pos: None,
            acc: Vec::with_capacity(samples_per_frame(rate) * 8),
            pcm: vec![0; MAX_PACKET_SAMPLES_48K],
            next_ts: Duration::ZERO,
            stats: InboundStats::default(),
        })
    }

    pub fn stats(&self) -> InboundStats {
        self.stats
    }

    /// Output samples in `ms` milliseconds.
    fn samples(&self, ms: u64) -> usize {
        (u64::from(self.rate) * ms / 1000) as usize
    }

    /// One RTP packet; complete frames are appended to `out`.
    pub fn push(&mut self, seq: u16, ts: u32, payload: &[u8], out: &mut Vec<Frame>) {
        if payload.is_empty() {
            self.stats.empty += 1;
            return;
        }
        if let Some(pos) = self.pos {
            let step = seq.wrapping_sub(pos.seq) as i16;
            if step <= 0 {
                self.stats.late += 1;
                return;
            }
            let lost = u64::from(step.unsigned_abs() - 1);
            self.stats.lost += lost;
            // Missing audio by the RTP clock; negative means the sender moved its timestamps back.
            let missing = ts.wrapping_sub(pos.next_ts) as i32;
            let resync = self.samples(RESYNC_GAP.as_millis() as u64) as i64
                * i64::from(self.ticks_per_sample);
            if missing < 0 || i64::from(missing) > resync {
                self.stats.resyncs += 1;
            } else if missing > 0 {
                let samples = missing as usize / self.ticks_per_sample as usize;
                self.conceal(samples, (lost > 0).then_some(payload));
            }
        }
        let max = self.samples(120);
        match self.dec.decode(payload, &mut self.pcm[..max], false) {
            Ok(n) => {
                self.stats.packets += 1;
                self.acc.extend_from_slice(&self.pcm[..n]);
                let ticks = n as u32 * self.ticks_per_sample;
                self.pos = Some(Position {
                    seq,
                    next_ts: ts.wrapping_add(ticks),
                });
            }
            Err(_) => {
                // A packet libopus cannot read still covers time: conceal it, by its declared
                // length when the TOC byte is readable, else one frame.
                self.stats.bad += 1;
                let n = opus::packet::get_nb_samples(payload, self.rate)
                    .ok()
                    .filter(|&n| n > 0 && n <= max)
                    .unwrap_or(self.spf);
                self.conceal(n, None);
                self.pos = Some(Position {
                    seq,
                    next_ts: ts.wrapping_add(n as u32 * self.ticks_per_sample),
                });
            }
        }
        self.emit(out);
    }

    /// Fills `samples` of missing audio: silence beyond the PLC limit first, then PLC, and the
    /// last frame's worth from `fec_from`'s in-band FEC when the gap was a loss.
    fn conceal(&mut self, samples: usize, fec_from: Option<&[u8]>) {
        // Opus decodes whole 2.5 ms units.
        let unit = self.samples(5) / 2;
        let mut left = samples - samples % unit.max(1);
        let plc_cap = self.samples(PLC_LIMIT.as_millis() as u64);
        if left > plc_cap {
            let silent = left - plc_cap;
            self.acc.extend(std::iter::repeat_n(0, silent));
            self.stats.silence_ms += (silent * 1000 / self.rate as usize) as u64;
            left = plc_cap;
        }
        let fec = match fec_from {
            Some(_) => left.min(self.spf),
            None => 0,
        };
        while left > fec {
            let n = (left - fec).min(self.spf);
            let got = self.dec.decode(&[], &mut self.pcm[..n], false).unwrap_or(0);
            self.fill(n, got);
            self.stats.plc_ms += (n * 1000 / self.rate as usize) as u64;
            left -= n;
        }
        if let Some(packet) = fec_from
            && fec > 0
        {
            let got = self
                .dec
                .decode(packet, &mut self.pcm[..fec], true)
                .unwrap_or(0);
            self.fill(fec, got);
            self.stats.fec_ms += (fec * 1000 / self.rate as usize) as u64;
        }
    }

    /// Appends `n` concealed samples, of which the decoder produced `got` (silence for the rest).
    fn fill(&mut self, n: usize, got: usize) {
        let got = got.min(n);
        self.acc.extend_from_slice(&self.pcm[..got]);
        self.acc.extend(std::iter::repeat_n(0, n - got));
    }

    fn emit(&mut self, out: &mut Vec<Frame>) {
        let mut start = 0;
        while self.acc.len() - start >= self.spf {
            out.push(Frame {
                rate: self.rate,
                ts: self.next_ts,
                samples: self.acc[start..start + self.spf].to_vec(),
            });
            start += self.spf;
            self.next_ts += Duration::from_millis(u64::from(FRAME_MS));
            self.stats.frames += 1;
        }
        self.acc.drain(..start);
    }
}

/// 20 ms frames at the leg's rate → Opus packets.
pub struct OpusOutbound {
    enc: opus::Encoder,
    spf: usize,
    buf: Vec<u8>,
    pcm: Vec<i16>,
}

impl OpusOutbound {
    /// A mono VoIP encoder at `rate`, `bitrate` bits per second, in-band FEC on (the browser uses
    /// it when it loses a packet).
    pub fn new(rate: u32, bitrate: u32) -> Result<Self, CodecError> {
        check_rate(rate)?;
        let mut enc = opus::Encoder::new(rate, opus::Channels::Mono, opus::Application::Voip)?;
        enc.set_bitrate(opus::Bitrate::Bits(bitrate.clamp(6_000, 510_000) as i32))?;
        enc.set_inband_fec(true)?;
        enc.set_packet_loss_perc(5)?;
        Ok(OpusOutbound {
            enc,
            spf: samples_per_frame(rate),
            buf: vec![0; 1500],
            pcm: vec![0; samples_per_frame(rate)],
        })
    }

    /// One 20 ms frame as one Opus packet. A frame of the wrong length is padded or cut.
    pub fn encode(&mut self, samples: &[i16]) -> Result<Vec<u8>, CodecError> {
        let input = if samples.len() == self.spf {
            samples
        } else {
            let n = samples.len().min(self.spf);
            self.pcm[..n].copy_from_slice(&samples[..n]);
            self.pcm[n..].fill(0);
            &self.pcm[..]
        };
        let n = self.enc.encode(input, &mut self.buf)?;
        Ok(self.buf[..n].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: u32 = 24_000;

    fn tone(frames: usize) -> Vec<Vec<i16>> {
        let spf = samples_per_frame(RATE);
        (0..frames)
            .map(|f| {
                (0..spf)
                    .map(|i| {
                        let n = (f * spf + i) as f64;
                        (8000.0 * (2.0 * std::f64::consts::PI * 440.0 * n / f64::from(RATE)).sin())
                            as i16
                    })
                    .collect()
            })
            .collect()
    }

    fn packets(frames: usize) -> Vec<Vec<u8>> {
        let mut enc = OpusOutbound::new(RATE, 32_000).unwrap();
        tone(frames)
            .iter()
            .map(|f| enc.encode(f).unwrap())
            .collect()
    }

    #[test]
    fn a_clean_stream_is_one_frame_per_packet_on_a_continuous_timeline() {
        let pk = packets(50);
        let mut rx = OpusInbound::new(RATE).unwrap();
        let mut out = Vec::new();
        for (i, p) in pk.iter().enumerate() {
            rx.push(1000 + i as u16, 7 + 960 * i as u32, p, &mut out);
        }
        assert_eq!(out.len(), 50);
        for (i, f) in out.iter().enumerate() {
            assert_eq!(f.ts, Duration::from_millis(20 * i as u64));
            assert_eq!(f.samples.len(), 480);
        }
        let s = rx.stats();
        assert_eq!((s.packets, s.lost, s.plc_ms, s.fec_ms), (50, 0, 0, 0));
        // The tone comes through (after the codec's warm-up).
        let level = crate::audio::vad::rms_dbfs(&out[40].samples);
        assert!(level > -20.0, "{level} dBFS");
    }

    #[test]
    fn losses_are_concealed_with_fec_and_plc_and_time_is_kept() {
        let pk = packets(60);
        let mut rx = OpusInbound::new(RATE).unwrap();
        let mut out = Vec::new();
        // Packets 10 and 20..=22 are lost; the sequence and timestamps wrap on the way.
        for (i, p) in pk.iter().enumerate() {
            if i == 10 || (20..=22).contains(&i) {
                continue;
            }
            let seq = 65_530u16.wrapping_add(i as u16);
            let ts = (u32::MAX - 5000).wrapping_add(960 * i as u32);
            rx.push(seq, ts, p, &mut out);
        }
        assert_eq!(out.len(), 60, "every lost 20 ms is filled");
        let s = rx.stats();
        assert_eq!(s.lost, 4);
        assert_eq!(
            s.fec_ms, 40,
            "the last lost frame of each gap comes from FEC"
        );
        assert_eq!(s.plc_ms, 40);
        assert_eq!(out.last().unwrap().ts, Duration::from_millis(59 * 20));
        // Concealment keeps the tone going rather than dropping to silence.
        assert!(crate::audio::vad::rms_dbfs(&out[21].samples) > -30.0);
    }

    #[test]
    fn late_duplicate_and_garbage_packets_do_not_break_the_stream() {
        let pk = packets(20);
        let mut rx = OpusInbound::new(RATE).unwrap();
        let mut out = Vec::new();
        for (i, p) in pk.iter().enumerate().take(10) {
            rx.push(i as u16, 960 * i as u32, p, &mut out);
        }
        rx.push(9, 960 * 9, &pk[9], &mut out); // duplicate
        rx.push(5, 960 * 5, &pk[5], &mut out); // late
        rx.push(10, 960 * 10, &[], &mut out); // empty
        rx.push(10, 960 * 10, &[0xFF, 0xFF, 0xFF], &mut out); // not Opus
        for (i, p) in pk.iter().enumerate().skip(11) {
            rx.push(i as u16, 960 * i as u32, p, &mut out);
        }
        let s = rx.stats();
        assert_eq!((s.late, s.empty), (2, 1));
        assert_eq!(s.packets + s.bad, 20);
        assert_eq!(out.len(), 20);
    }

    #[test]
    fn dtx_gaps_are_filled_and_long_pauses_resync() {
        let pk = packets(4);
        let mut rx = OpusInbound::new(RATE).unwrap();
        let mut out = Vec::new();
        rx.push(1, 0, &pk[0], &mut out);
        // Contiguous sequence, 1 s later by the clock: DTX, not loss.
        rx.push(2, 48_000, &pk[1], &mut out);
        assert_eq!(out.len(), 51);
        let s = rx.stats();
        assert_eq!((s.lost, s.fec_ms, s.plc_ms, s.silence_ms), (0, 0, 200, 780));
        // 10 s later: the timeline jumps instead of filling.
        rx.push(3, 48_000 * 11, &pk[2], &mut out);
        assert_eq!(out.len(), 52);
        assert_eq!(rx.stats().resyncs, 1);
    }

    #[test]
    fn longer_packets_are_reframed() {
        let mut enc =
            opus::Encoder::new(RATE, opus::Channels::Mono, opus::Application::Voip).unwrap();
        let pcm: Vec<i16> = tone(3).concat();
        let mut buf = vec![0u8; 1500];
        let n = enc.encode(&pcm[..1440], &mut buf).unwrap(); // one 60 ms packet
        let mut rx = OpusInbound::new(RATE).unwrap();
        let mut out = Vec::new();
        rx.push(1, 0, &buf[..n], &mut out);
        assert_eq!(out.len(), 3);
        assert!(OpusInbound::new(44_100).is_err());
    }
}

//! Keypad tones on a SIP call: RFC 4733 `telephone-event` packets both ways, SIP INFO bodies
//! (`application/dtmf-relay`, `application/dtmf`) in, and dual tones for a peer that took no
//! event payload. Pure code: packets and frames in, digits and payloads out.

use std::collections::VecDeque;
use std::f32::consts::TAU;

/// The digits RFC 4733 events 0–15 stand for.
const DIGITS: &[u8; 16] = b"0123456789*#ABCD";

/// The digit of a telephone-event code, if it is one (16, flash, and above are not keys).
pub fn digit_of(event: u8) -> Option<char> {
    DIGITS.get(usize::from(event)).map(|b| char::from(*b))
}

/// The telephone-event code of a key (`0-9 * # A-D`, case-insensitive).
pub fn event_of(digit: char) -> Option<u8> {
    let d = digit.to_ascii_uppercase() as u8;
    DIGITS.iter().position(|b| *b == d).map(|p| p as u8)
}

/// One RFC 4733 event payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub code: u8,
    pub end: bool,
    pub volume: u8,
    /// In timestamp units, from the event's start.
    pub duration: u16,
}

/// A payload that is not an RFC 4733 event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error("a telephone-event payload is 4 bytes (or a multiple), not {0}")]
    Length(usize),
}

/// Reads a telephone-event payload (the first event of a redundant block).
pub fn parse_event(payload: &[u8]) -> Result<Event, EventError> {
    if payload.len() < 4 || !payload.len().is_multiple_of(4) {
        return Err(EventError::Length(payload.len()));
    }
    Ok(Event {
        code: payload[0],
        end: payload[1] & 0x80 != 0,
        volume: payload[1] & 0x3f,
        duration: u16::from_be_bytes([payload[2], payload[3]]),
    })
}

/// Writes a telephone-event payload.
pub fn event_payload(e: Event) -> [u8; 4] {
    let d = e.duration.to_be_bytes();
    [
        e.code,
        (if e.end { 0x80 } else { 0 }) | (e.volume & 0x3f),
        d[0],
        d[1],
    ]
}

/// Turns a stream of event packets into one digit per key press: an event is identified by
/// its RTP timestamp, so its updates and the three copies of its end packet count once, and a
/// press whose first packets were lost still counts at the first packet that arrives.
#[derive(Debug, Default)]
pub struct Receiver {
    last: Option<u32>,
}

impl Receiver {
    /// The digit this packet starts, if it starts one.
    pub fn on_packet(&mut self, ts: u32, e: &Event) -> Option<char> {
        if self.last == Some(ts) {
            return None;
        }
        self.last = Some(ts);
        digit_of(e.code)
    }
}

/// A digit from a SIP INFO body: `application/dtmf-relay` (`Signal=5` and `Duration=160`
/// lines) or `application/dtmf` (the digit alone).
pub fn parse_info(content_type: &str, body: &[u8]) -> Option<char> {
    let ct = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let text = std::str::from_utf8(body).ok()?;
    let value = match ct.as_str() {
        "application/dtmf-relay" => text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            k.trim().eq_ignore_ascii_case("signal").then(|| v.trim())
        })?,
        "application/dtmf" => text.trim(),
        _ => return None,
    };
    let mut chars = value.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => event_of(c).map(|_| c.to_ascii_uppercase()),
        // `Signal=10` / `11` is how some peers write * and #.
        _ => match value {
            "10" => Some('*'),
            "11" => Some('#'),
            _ => None,
        },
    }
}

/// What an outgoing key press looks like.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How long each key is held, in ms.
    pub tone_ms: u32,
    /// Silence after each key, in ms.
    pub gap_ms: u32,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            tone_ms: 100,
            gap_ms: 100,
        }
    }
}

/// A key press or a pause waiting to be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Key(u8),
    Pause { frames: u32 },
}

/// What to put in the next 20 ms packet instead of (or as) audio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outgoing {
    /// Send the frame's audio as usual.
    Audio,
    /// Send silence (a gap between keys, or a requested pause).
    Silence,
    /// Send this event packet: `start` says it is the event's first (marker bit), `ts_offset`
    /// is how far back, in samples, the event started (its RTP timestamp).
    Event {
        event: Event,
        start: bool,
        ts_offset: u32,
    },
    /// Send this dual tone (no event payload negotiated).
    Tone { code: u8, offset: u32 },
}

/// Plays digits out one 20 ms frame at a time: as RFC 4733 events (updates every frame, the
/// end packet three times) or, where the peer takes no events, as the keys' dual tones.
#[derive(Debug)]
pub struct Sender {
    queue: VecDeque<Step>,
    timing: Timing,
    current: Option<Current>,
    rate: u32,
    /// Keys sent so far.
    pub sent: u64,
}

#[derive(Debug)]
struct Current {
    code: u8,
    /// Frames of the key sent so far.
    frames: u32,
    /// End packets sent so far.
    ends: u32,
    /// Gap frames left after the key.
    gap: u32,
}

impl Sender {
    pub fn new(rate: u32) -> Sender {
        Sender {
            queue: VecDeque::new(),
            timing: Timing::default(),
            current: None,
            rate,
            sent: 0,
        }
    }

    /// The clock durations count in changed (a re-INVITE moved the call to another codec or
    /// event payload); keys already queued are sent in the new one.
    pub fn set_rate(&mut self, rate: u32) {
        self.rate = rate;
    }

    /// Queues `digits` (`0-9 * # A-D`; `,` is a 500 ms pause, `w` a 1 s wait); returns how many
    /// keys were queued, or the first character that is neither a key nor a pause.
    pub fn queue(&mut self, digits: &str, timing: Timing) -> Result<usize, char> {
        let mut steps = Vec::new();
        for c in digits.chars() {
            match c {
                ',' => steps.push(Step::Pause { frames: 25 }),
                'w' | 'W' => steps.push(Step::Pause { frames: 50 }),
                ' ' | '-' => {}
                c => steps.push(Step::Key(event_of(c).ok_or(c)?)),
            }
        }
        self.timing = Timing {
            tone_ms: timing.tone_ms.clamp(40, 2000),
            gap_ms: timing.gap_ms.clamp(40, 5000),
        };
        let keys = steps.iter().filter(|s| matches!(s, Step::Key(_))).count();
        self.queue.extend(steps);
        Ok(keys)
    }

    /// Whether anything is queued or being sent.
    pub fn busy(&self) -> bool {
        self.current.is_some() || !self.queue.is_empty()
    }

    /// What the next frame carries. `events` says whether the peer takes RFC 4733 events.
    pub fn next_frame(&mut self, events: bool) -> Outgoing {
        let frame = self.rate / 50;
        let tone_frames = self.timing.tone_ms.div_ceil(20);
        let gap_frames = self.timing.gap_ms.div_ceil(20);
        loop {
            let Some(cur) = self.current.as_mut() else {
                match self.queue.pop_front() {
                    None => return Outgoing::Audio,
                    Some(Step::Pause { frames }) => {
                        self.current = Some(Current {
                            code: u8::MAX,
                            frames: tone_frames,
                            ends: 3,
                            gap: frames,
                        });
                    }
                    Some(Step::Key(code)) => {
                        self.sent += 1;
                        self.current = Some(Current {
                            code,
                            frames: 0,
                            ends: 0,
                            gap: gap_frames,
                        });
                    }
                }
                continue;
            };
            if cur.frames < tone_frames {
                cur.frames += 1;
                let duration = cur.frames * frame;
                return if events {
                    Outgoing::Event {
                        event: Event {
                            code: cur.code,
                            end: false,
                            volume: 10,
                            duration: u16::try_from(duration).unwrap_or(u16::MAX),
                        },
                        start: cur.frames == 1,
                        ts_offset: duration - frame,
                    }
                } else {
                    Outgoing::Tone {
                        code: cur.code,
                        offset: duration - frame,
                    }
                };
            }
            if events && cur.ends < 3 {
                cur.ends += 1;
                let duration = tone_frames * frame;
                // The end packets repeat the event's timestamp; audio time still moves on, so
                // the offset grows with each.
                return Outgoing::Event {
                    event: Event {
                        code: cur.code,
                        end: true,
                        volume: 10,
                        duration: u16::try_from(duration).unwrap_or(u16::MAX),
                    },
                    start: false,
                    ts_offset: duration + (cur.ends - 1) * frame,
                };
            }
            if cur.gap > 0 {
                cur.gap -= 1;
                return Outgoing::Silence;
            }
            self.current = None;
        }
    }
}

/// The two frequencies of a key (Hz), low and high.
pub fn tone_pair(code: u8) -> Option<(f32, f32)> {
    const LOW: [f32; 4] = [697.0, 770.0, 852.0, 941.0];
    const HIGH: [f32; 4] = [1209.0, 1336.0, 1477.0, 1633.0];
    let (row, col) = match code {
        1..=9 => ((code - 1) / 3, (code - 1) % 3),
        0 => (3, 1),
        10 => (3, 0), // *
        11 => (3, 2), // #
        12..=15 => (code - 12, 3),
        _ => return None,
    };
    Some((LOW[usize::from(row)], HIGH[usize::from(col)]))
}

/// Writes a key's dual tone into `out` (each tone at −9 dBFS), `offset` samples into the key.
pub fn tone(code: u8, rate: u32, offset: u32, out: &mut [i16]) {
    let Some((lo, hi)) = tone_pair(code) else {
        out.fill(0);
        return;
    };
    let amp = 32767.0 * 0.355;
    for (i, s) in out.iter_mut().enumerate() {
        let t = (offset as f32 + i as f32) / rate as f32;
        *s = (amp * ((TAU * lo * t).sin() + (TAU * hi * t).sin())) as i16;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_garbage_is_refused() {
        let e = Event {
            code: 11,
            end: true,
            volume: 10,
            duration: 800,
        };
        assert_eq!(parse_event(&event_payload(e)), Ok(e));
        assert_eq!(parse_event(&[1, 2, 3]), Err(EventError::Length(3)));
        assert_eq!(digit_of(11), Some('#'));
        assert_eq!(digit_of(16), None, "flash is not a key");
        assert_eq!(event_of('d'), Some(15));
        assert_eq!(event_of('x'), None);
    }

    #[test]
    fn each_press_counts_once_whatever_its_packets() {
        let mut r = Receiver::default();
        let start = Event {
            code: 5,
            end: false,
            volume: 10,
            duration: 160,
        };
        let end = Event { end: true, ..start };
        let got: Vec<Option<char>> = [
            (1000, start),
            (1000, start),
            (1000, end),
            (1000, end),
            (1000, end),
            (3000, end), // its start packets lost
            (5000, Event { code: 16, ..start }),
        ]
        .iter()
        .map(|(ts, e)| r.on_packet(*ts, e))
        .collect();
        assert_eq!(got, [Some('5'), None, None, None, None, Some('5'), None]);
    }

    #[test]
    fn info_bodies_in_both_shapes() {
        assert_eq!(
            parse_info("application/dtmf-relay", b"Signal=5\r\nDuration=160\r\n"),
            Some('5')
        );
        assert_eq!(
            parse_info("Application/DTMF-Relay", b"Signal= #\r\n"),
            Some('#')
        );
        assert_eq!(
            parse_info("application/dtmf-relay", b"Signal=11\r\n"),
            Some('#')
        );
        assert_eq!(parse_info("application/dtmf", b"9"), Some('9'));
        assert_eq!(parse_info("application/dtmf", b"x"), None);
        assert_eq!(parse_info("text/plain", b"Signal=5"), None);
        assert_eq!(parse_info("application/dtmf-relay", &[0xff]), None);
    }

    #[test]
    fn a_key_goes_out_as_events_then_three_ends_then_a_gap() {
        let mut s = Sender::new(8000);
        assert_eq!(s.queue("1", Timing::default()), Ok(1));
        let out: Vec<Outgoing> = (0..14).map(|_| s.next_frame(true)).collect();
        // 100 ms = 5 updates.
        for (i, o) in out[..5].iter().enumerate() {
            let Outgoing::Event {
                event,
                start,
                ts_offset,
            } = o
            else {
                panic!("{o:?}")
            };
            assert_eq!((event.code, event.end), (1, false));
            assert_eq!(event.duration as usize, (i + 1) * 160);
            assert_eq!(*start, i == 0);
            assert_eq!(*ts_offset as usize, i * 160);
        }
        for o in &out[5..8] {
            assert!(
                matches!(o, Outgoing::Event { event, .. } if event.end && event.duration == 800),
                "{o:?}"
            );
        }
        assert!(
            out[8..13].iter().all(|o| *o == Outgoing::Silence),
            "{out:?}"
        );
        assert_eq!(out[13], Outgoing::Audio);
        assert!(!s.busy());
    }

    #[test]
    fn without_events_a_key_is_its_tone() {
        let mut s = Sender::new(8000);
        s.queue("#", Timing::default()).unwrap();
        assert!(matches!(
            s.next_frame(false),
            Outgoing::Tone {
                code: 11,
                offset: 0
            }
        ));
        let mut pcm = vec![0i16; 1600];
        tone(11, 8000, 0, &mut pcm);
        let peak = pcm.iter().map(|s| s.unsigned_abs()).max().unwrap();
        assert!(peak > 15_000 && peak < 24_000, "{peak}");
        assert_eq!(s.queue("12x", Timing::default()), Err('x'));
        assert_eq!(tone_pair(1), Some((697.0, 1209.0)));
        assert_eq!(tone_pair(0), Some((941.0, 1336.0)));
        assert_eq!(tone_pair(15), Some((941.0, 1633.0)));
    }

    #[test]
    fn pauses_are_silence() {
        let mut s = Sender::new(8000);
        assert_eq!(s.queue(",", Timing::default()), Ok(0));
        let out: Vec<Outgoing> = (0..26).map(|_| s.next_frame(true)).collect();
        assert!(out[..25].iter().all(|o| *o == Outgoing::Silence));
        assert_eq!(out[25], Outgoing::Audio);
    }
}

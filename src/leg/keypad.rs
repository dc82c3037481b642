//! Keypad tones between a caller's leg and its agent, the parts that decide: the `[keypad]`
//! config section, the [`Collector`] that turns key presses into what the agent is told (each
//! key as a turn, or keys gathered until a terminator or a quiet spell), and [`Tones`], which
//! plays keys into a leg's outgoing frames as dual tones where the protocol has no event channel.
//! Sans-IO: keys and ticks in with their time, deliveries and frames out. The shell that runs
//! them beside a call is `crate::server::keypad`.

use serde::Deserialize;
use tokio::time::{Duration, Instant};

use super::sip::dtmf::{self, Outgoing, Timing};

/// How keys reach the agent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Deliver {
    /// Each key as a short text turn.
    #[default]
    Turn,
    /// Keys gathered until the terminator, a quiet spell or `max_digits`, then one turn (or the
    /// configured tool).
    Collect,
    /// Not delivered (still in the call's event stream).
    Off,
}

/// `[keypad]`: keys pressed on the caller's phone (Twilio `dtmf`, AudioSocket DTMF, SIP RFC 4733
/// and INFO), and keys the agent presses (`send_tool`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeypadConfig {
    pub deliver: Deliver,
    /// The key that ends a collection (`collect`); empty: none.
    pub terminator: String,
    /// A collection ends after this long without a key.
    pub timeout_ms: u64,
    /// ... or at this many keys.
    pub max_digits: usize,
    /// `collect`: a tool of the call's agent set the keys go to as `{"digits": "…"}`; the agent
    /// is told its answer (not the keys). Empty: the agent is told the keys.
    pub tool: String,
    /// Keys are sensitive (card numbers, PINs): never written to logs.
    pub sensitive: bool,
    /// The agent set's tool whose calls press keys toward the caller (`digits`, and
    /// `pause_ms` between keys); empty: the agent cannot press keys.
    pub send_tool: String,
    /// How long each key sounds, and the silence after it.
    pub tone_ms: u32,
    pub gap_ms: u32,
}

impl Default for KeypadConfig {
    fn default() -> Self {
        KeypadConfig {
            deliver: Deliver::Turn,
            terminator: "#".into(),
            timeout_ms: 3000,
            max_digits: 32,
            tool: String::new(),
            sensitive: false,
            send_tool: "send_dtmf".into(),
            tone_ms: 100,
            gap_ms: 100,
        }
    }
}

impl KeypadConfig {
    /// Outgoing key timing.
    pub fn timing(&self) -> Timing {
        Timing {
            tone_ms: self.tone_ms,
            gap_ms: self.gap_ms,
        }
    }
}

/// Checks `[keypad]`.
pub fn validate(k: &KeypadConfig, problem: &mut impl FnMut(&str, String, &str)) {
    let t = k.terminator.chars().collect::<Vec<_>>();
    if t.len() > 1 || t.first().is_some_and(|c| dtmf::event_of(*c).is_none()) {
        problem(
            "keypad.terminator",
            format!("{:?} is not one key", k.terminator),
            "one of 0-9 * # A-D (usually \"#\"), or \"\" for none",
        );
    }
    if !(100..=60_000).contains(&k.timeout_ms) {
        problem(
            "keypad.timeout_ms",
            format!("{} ms is outside 100–60000", k.timeout_ms),
            "the default is 3000",
        );
    }
    if !(1..=256).contains(&k.max_digits) {
        problem(
            "keypad.max_digits",
            format!("{} is outside 1–256", k.max_digits),
            "the default is 32",
        );
    }
    if !k.tool.is_empty() && k.deliver != Deliver::Collect {
        problem(
            "keypad.tool",
            "keys go to a tool only when they are collected".into(),
            "set deliver = \"collect\", or remove tool",
        );
    }
    for (key, ms, lo, hi) in [
        ("keypad.tone_ms", k.tone_ms, 40, 2000),
        ("keypad.gap_ms", k.gap_ms, 40, 5000),
    ] {
        if !(lo..=hi).contains(&ms) {
            problem(
                key,
                format!("{ms} ms is outside {lo}–{hi}"),
                "the default is 100",
            );
        }
    }
}

/// Why a collection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// One key (`turn`).
    Key,
    Terminator,
    Quiet,
    Full,
}

/// Keys to tell the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collected {
    /// The keys, without the terminator.
    pub digits: String,
    pub ended: Ended,
}

impl Collected {
    /// What the agent is told (the tool's answer is told instead when a tool takes the keys).
    pub fn text(&self) -> String {
        match self.ended {
            Ended::Key => format!("[keypad] The caller pressed {} on the keypad.", self.digits),
            Ended::Terminator => format!(
                "[keypad] The caller entered {} on the keypad (ended with the terminator key).",
                if self.digits.is_empty() {
                    "nothing"
                } else {
                    &self.digits
                }
            ),
            Ended::Quiet => format!(
                "[keypad] The caller entered {} on the keypad, then stopped.",
                self.digits
            ),
            Ended::Full => format!("[keypad] The caller entered {} on the keypad.", self.digits),
        }
    }
}

/// Turns key presses into deliveries.
#[derive(Debug)]
pub struct Collector {
    deliver: Deliver,
    terminator: Option<char>,
    quiet: Duration,
    max: usize,
    keys: String,
    deadline: Option<Instant>,
}

impl Collector {
    pub fn new(cfg: &KeypadConfig) -> Collector {
        Collector {
            deliver: cfg.deliver,
            terminator: cfg.terminator.chars().next(),
            quiet: Duration::from_millis(cfg.timeout_ms),
            max: cfg.max_digits.max(1),
            keys: String::new(),
            deadline: None,
        }
    }

    /// A key was pressed.
    pub fn on_key(&mut self, key: char, now: Instant) -> Option<Collected> {
        match self.deliver {
            Deliver::Off => None,
            Deliver::Turn => Some(Collected {
                digits: key.to_string(),
                ended: Ended::Key,
            }),
            Deliver::Collect => {
                if Some(key) == self.terminator {
                    self.deadline = None;
                    return Some(Collected {
                        digits: std::mem::take(&mut self.keys),
                        ended: Ended::Terminator,
                    });
                }
                self.keys.push(key);
                if self.keys.chars().count() >= self.max {
                    self.deadline = None;
                    return Some(Collected {
                        digits: std::mem::take(&mut self.keys),
                        ended: Ended::Full,
                    });
                }
                self.deadline = Some(now + self.quiet);
                None
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// The quiet spell ended a collection.
    pub fn handle_timeout(&mut self, now: Instant) -> Option<Collected> {
        match self.deadline {
            Some(d) if now >= d => {
                self.deadline = None;
                Some(Collected {
                    digits: std::mem::take(&mut self.keys),
                    ended: Ended::Quiet,
                })
                .filter(|c| !c.digits.is_empty())
            }
            _ => None,
        }
    }
}

/// Keys played into a leg's outgoing PCM as dual tones, one 20 ms frame at a time.
#[derive(Debug)]
pub struct Tones {
    sender: dtmf::Sender,
    rate: u32,
}

impl Tones {
    pub fn new(rate: u32) -> Tones {
        Tones {
            sender: dtmf::Sender::new(rate),
            rate,
        }
    }

    /// Queues keys (`,` pauses 500 ms, `w` 1 s); the number of keys, or the first character
    /// that is not one.
    pub fn queue(&mut self, digits: &str, timing: Timing) -> Result<usize, char> {
        self.sender.queue(digits, timing)
    }

    pub fn busy(&self) -> bool {
        self.sender.busy()
    }

    /// Rewrites one outgoing frame: a key's tone, the silence between keys, or the frame as
    /// it was. `true` when it now holds a tone (a leg that skips idle silence must send it).
    pub fn apply(&mut self, samples: &mut [i16]) -> bool {
        if !self.sender.busy() {
            return false;
        }
        match self.sender.next_frame(false) {
            Outgoing::Audio => false,
            Outgoing::Silence => {
                samples.fill(0);
                false
            }
            Outgoing::Tone { code, offset } => {
                dtmf::tone(code, self.rate, offset, samples);
                true
            }
            // Never asked for (no event channel here).
            Outgoing::Event { .. } => false,
        }
    }
}

/// The keys and pause of a `send_dtmf` tool call's arguments: `digits` (required) and
/// `pause_ms` between keys (optional).
pub fn send_args(args: &serde_json::Value) -> Result<(String, Option<u32>), String> {
    let digits = args
        .get("digits")
        .and_then(|d| d.as_str())
        .ok_or("the call has no \"digits\" string")?;
    if digits.chars().count() > 64 {
        return Err("more than 64 keys in one call".into());
    }
    let pause = args
        .get("pause_ms")
        .and_then(|p| p.as_u64())
        .map(|p| p.clamp(40, 5000) as u32);
    Ok((digits.to_owned(), pause))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(deliver: Deliver) -> KeypadConfig {
        KeypadConfig {
            deliver,
            ..KeypadConfig::default()
        }
    }

    #[test]
    fn each_key_is_a_turn() {
        let mut c = Collector::new(&cfg(Deliver::Turn));
        let t0 = Instant::now();
        let got = c.on_key('5', t0).unwrap();
        assert_eq!(got.text(), "[keypad] The caller pressed 5 on the keypad.");
        assert!(c.poll_timeout().is_none());
        assert!(Collector::new(&cfg(Deliver::Off)).on_key('1', t0).is_none());
    }

    #[test]
    fn keys_are_collected_until_the_terminator_a_quiet_spell_or_the_limit() {
        let t0 = Instant::now();
        let mut c = Collector::new(&cfg(Deliver::Collect));
        for k in "1234".chars() {
            assert!(c.on_key(k, t0).is_none());
        }
        let got = c.on_key('#', t0).unwrap();
        assert_eq!(
            (got.digits.as_str(), got.ended),
            ("1234", Ended::Terminator)
        );
        c.on_key('9', t0);
        assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(3)));
        assert!(c.handle_timeout(t0 + Duration::from_secs(2)).is_none());
        let got = c.handle_timeout(t0 + Duration::from_secs(3)).unwrap();
        assert_eq!((got.digits.as_str(), got.ended), ("9", Ended::Quiet));
        let mut small = Collector::new(&KeypadConfig {
            max_digits: 2,
            ..cfg(Deliver::Collect)
        });
        small.on_key('1', t0);
        assert_eq!(small.on_key('2', t0).unwrap().ended, Ended::Full);
    }

    #[test]
    fn tones_replace_the_frames_while_keys_play() {
        let mut t = Tones::new(8000);
        assert_eq!(t.queue("1", Timing::default()), Ok(1));
        let mut frames = Vec::new();
        for _ in 0..11 {
            let mut f = vec![100i16; 160];
            t.apply(&mut f);
            frames.push(f);
        }
        let loud = |f: &[i16]| f.iter().map(|s| s.unsigned_abs()).max().unwrap_or(0) > 5000;
        assert!(frames[..5].iter().all(|f| loud(f)), "100 ms of tone");
        assert!(
            frames[5..10].iter().all(|f| f.iter().all(|s| *s == 0)),
            "100 ms gap"
        );
        assert_eq!(frames[10], vec![100; 160], "then the agent's audio again");
    }

    #[test]
    fn send_arguments_are_read() {
        let (d, p) = send_args(&serde_json::json!({"digits": "1#", "pause_ms": 300})).unwrap();
        assert_eq!((d.as_str(), p), ("1#", Some(300)));
        assert!(send_args(&serde_json::json!({"keys": "1"})).is_err());
    }
}

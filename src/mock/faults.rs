//! Fault modes of the mock model (reference §12.1 items 10–12): what the real service does to a
//! long call — `goAway` then a close at the connection's end of life, silence after `goAway`,
//! closes with 1011 / 1008, abrupt drops without a close frame (1006), a socket that simply goes
//! quiet, late pongs, garbage frames, and the resumption rules (a handle is refused while the
//! socket that issued it is still open, unknown or expired handles are refused). Scripted by a
//! scenario's `[faults]` table; `baton mock-model` flags override it.
//!
//! ```toml
//! [faults]
//! seed = 7                     # randomness of every range below, per connection
//! go_away_after_s = [3.0, 6.0] # goAway this long after setupComplete (a number or a [min, max] range)
//! go_away_time_left_s = 50     # the timeLeft it announces; the connection closes 1011 when it runs out
//! silent_after_go_away = false # send nothing more after goAway (pongs still answered)
//! late_pong_ms = 30000         # answer every WebSocket ping this late (the service: 8000–30000)
//! garbage_every_s = 0          # send a frame that is not JSON this often (0: never)
//! refuse_resume = false        # refuse every resumption handle as unknown (forces a fresh session)
//! handle_ttl_s = 7200          # how long a handle stays valid after its session ended
//! max_faults = 0               # goAways + drops injected over the server's life (0: no limit)
//!
//! [[faults.drop]]              # any number
//! when = "mid_model_turn"      # after | mid_caller_utterance | mid_tool_call | mid_model_turn
//! after_s = [0.5, 4.0]         # earliest moment (for `after`: the moment), from the server's
//!                              # first setupComplete (the call's start)
//! close = "1011"               # "1011" | "1008" | "1006" (no close frame) | "silent" (stop
//!                              # answering anything, pongs included; the socket stays open)
//! every_connection = false     # true: fire once on every connection, `after_s` counted from
//!                              # that connection's setupComplete (false: once per server)
//! ```
//!
//! Moments: `mid_caller_utterance` fires on the first caller audio frame at or after the earliest
//! moment while the mock's VAD is inside a caller turn; `mid_tool_call` right after a `toolCall`
//! is sent (before any response can arrive); `mid_model_turn` right after a burst of reply audio
//! that is not the reply's last.

use std::time::Duration;

use serde::Deserialize;

/// When a drop happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    After,
    MidCallerUtterance,
    MidToolCall,
    MidModelTurn,
}

/// How the connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// A close frame with this code (1011, 1008).
    Close(u16),
    /// The TCP connection is dropped without a close frame (the client sees 1006).
    Abrupt,
    /// Nothing more is read or written; the socket stays open (a dead socket).
    Silent,
}

/// One scripted drop.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DropRule {
    pub when: When,
    /// Earliest moment after `setupComplete`, uniform in `[.0, .1]`.
    pub after: (Duration, Duration),
    pub ending: Ending,
    /// Armed again on every connection (else it fires once per server).
    pub every_connection: bool,
}

/// The fault modes of one mock server.
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    pub seed: u64,
    pub go_away_after: Option<(Duration, Duration)>,
    pub go_away_time_left: Duration,
    pub silent_after_go_away: bool,
    pub late_pong: Option<Duration>,
    pub garbage_every: Option<Duration>,
    pub refuse_resume: bool,
    pub handle_ttl: Duration,
    /// goAways + drops over the server's life; `None`: no limit.
    pub max_faults: Option<u32>,
    pub drops: Vec<DropRule>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            seed: 1,
            go_away_after: None,
            go_away_time_left: Duration::from_secs(50),
            silent_after_go_away: false,
            late_pong: None,
            garbage_every: None,
            refuse_resume: false,
            handle_ttl: Duration::from_secs(7200),
            max_faults: None,
            drops: Vec::new(),
        }
    }
}

impl Faults {
    /// Nothing is injected (resumption rules still apply).
    pub fn none(&self) -> bool {
        self.go_away_after.is_none()
            && self.late_pong.is_none()
            && self.garbage_every.is_none()
            && self.drops.is_empty()
            && !self.refuse_resume
    }

    /// The earliest and latest moment of a range.
    pub fn pick(range: (Duration, Duration), rng: &mut super::rng::Rng) -> Duration {
        range.0 + rng.duration_up_to(range.1.saturating_sub(range.0))
    }
}

/// A number of seconds, or a `[min, max]` range.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum RawRange {
    One(f64),
    Two([f64; 2]),
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFaults {
    seed: Option<u64>,
    go_away_after_s: Option<RawRange>,
    go_away_time_left_s: Option<f64>,
    silent_after_go_away: Option<bool>,
    late_pong_ms: Option<u64>,
    garbage_every_s: Option<f64>,
    refuse_resume: Option<bool>,
    handle_ttl_s: Option<f64>,
    max_faults: Option<u32>,
    #[serde(default)]
    drop: Vec<RawDrop>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDrop {
    when: String,
    after_s: Option<RawRange>,
    close: Option<String>,
    every_connection: Option<bool>,
}

/// A `[faults]` problem: the key (under `faults.`) and what is wrong.
pub type Problem = (String, String);

fn secs(key: &str, v: f64) -> Result<Duration, Problem> {
    if v.is_finite() && (0.0..=86_400.0).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err((
            key.into(),
            "must be a number of seconds between 0 and 86400".into(),
        ))
    }
}

fn range(key: &str, r: &RawRange) -> Result<(Duration, Duration), Problem> {
    let (a, b) = match r {
        RawRange::One(x) => (*x, *x),
        RawRange::Two([a, b]) => (*a, *b),
    };
    let (a, b) = (secs(key, a)?, secs(key, b)?);
    if a > b {
        return Err((
            key.into(),
            "the range's first value is above its second".into(),
        ));
    }
    Ok((a, b))
}

/// Parses the contents of `[faults]`.
pub fn parse(raw: RawFaults) -> Result<Faults, Problem> {
    let d = Faults::default();
    let positive = |key: &str, v: Option<f64>| -> Result<Option<Duration>, Problem> {
        match v {
            None => Ok(None),
            Some(x) => Ok(Some(secs(key, x)?).filter(|d| !d.is_zero())),
        }
    };
    let mut drops = Vec::with_capacity(raw.drop.len());
    for (i, r) in raw.drop.iter().enumerate() {
        let key = |k: &str| format!("faults.drop[{i}].{k}");
        let when = match r.when.as_str() {
            "after" => When::After,
            "mid_caller_utterance" => When::MidCallerUtterance,
            "mid_tool_call" => When::MidToolCall,
            "mid_model_turn" => When::MidModelTurn,
            other => {
                return Err((
                    key("when"),
                    format!(
                        "{other:?}: use after, mid_caller_utterance, mid_tool_call or mid_model_turn"
                    ),
                ));
            }
        };
        let ending = match r.close.as_deref().unwrap_or("1011") {
            "1006" => Ending::Abrupt,
            "silent" => Ending::Silent,
            code => match code.parse::<u16>() {
                Ok(c @ (1000..=1003 | 1007..=1014 | 4000..=4999)) => Ending::Close(c),
                _ => {
                    return Err((
                        key("close"),
                        format!("{code:?}: use \"1011\", \"1008\", \"1006\" or \"silent\""),
                    ));
                }
            },
        };
        let after = match &r.after_s {
            Some(a) => range(&key("after_s"), a)?,
            None => (Duration::ZERO, Duration::ZERO),
        };
        drops.push(DropRule {
            when,
            after,
            ending,
            every_connection: r.every_connection.unwrap_or(false),
        });
    }
    Ok(Faults {
        seed: raw.seed.unwrap_or(d.seed),
        go_away_after: raw
            .go_away_after_s
            .as_ref()
            .map(|r| range("faults.go_away_after_s", r))
            .transpose()?,
        go_away_time_left: match raw.go_away_time_left_s {
            Some(v) => secs("faults.go_away_time_left_s", v)?,
            None => d.go_away_time_left,
        },
        silent_after_go_away: raw.silent_after_go_away.unwrap_or(false),
        late_pong: raw
            .late_pong_ms
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis),
        garbage_every: positive("faults.garbage_every_s", raw.garbage_every_s)?,
        refuse_resume: raw.refuse_resume.unwrap_or(false),
        handle_ttl: match raw.handle_ttl_s {
            Some(v) => secs("faults.handle_ttl_s", v)?,
            None => d.handle_ttl,
        },
        max_faults: raw.max_faults.filter(|&n| n > 0),
        drops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_toml(t: &str) -> Result<Faults, Problem> {
        parse(toml::from_str::<RawFaults>(t).map_err(|e| ("toml".into(), e.to_string()))?)
    }

    #[test]
    fn every_key() {
        let f = parse_toml(
            r#"
seed = 9
go_away_after_s = [3.0, 6.0]
go_away_time_left_s = 10
silent_after_go_away = true
late_pong_ms = 30000
garbage_every_s = 2.5
refuse_resume = true
handle_ttl_s = 60
max_faults = 4
[[drop]]
when = "mid_tool_call"
close = "1006"
[[drop]]
when = "after"
after_s = 12
close = "silent"
"#,
        )
        .unwrap();
        assert_eq!(f.seed, 9);
        assert_eq!(
            f.go_away_after,
            Some((Duration::from_secs(3), Duration::from_secs(6)))
        );
        assert_eq!(f.go_away_time_left, Duration::from_secs(10));
        assert!(f.silent_after_go_away && f.refuse_resume);
        assert_eq!(f.late_pong, Some(Duration::from_secs(30)));
        assert_eq!(f.garbage_every, Some(Duration::from_millis(2500)));
        assert_eq!(f.max_faults, Some(4));
        assert_eq!(f.drops[0].when, When::MidToolCall);
        assert_eq!(f.drops[0].ending, Ending::Abrupt);
        assert_eq!(f.drops[1].after.0, Duration::from_secs(12));
        assert_eq!(f.drops[1].ending, Ending::Silent);
        assert!(Faults::default().none());
    }

    #[test]
    fn problems_name_the_key() {
        let e = parse_toml("[[drop]]\nwhen = \"soon\"\n").unwrap_err();
        assert_eq!(e.0, "faults.drop[0].when");
        let e = parse_toml("[[drop]]\nwhen = \"after\"\nclose = \"1234\"\n").unwrap_err();
        assert_eq!(e.0, "faults.drop[0].close");
        let e = parse_toml("go_away_after_s = [5, 1]\n").unwrap_err();
        assert_eq!(e.0, "faults.go_away_after_s");
        assert!(parse_toml("typo = 1\n").is_err());
    }
}

//! A human agent's settings as configured: where the person is reached (a SIP URI, or an E.164
//! number dialled on a trunk or through Twilio), how long their phone rings, what happens when
//! nobody answers, blind or warm, and whether the answered leg is screened for a machine. Parsed
//! and validated here, every problem named by key with the form that would be accepted.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Where the person is reached.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Destination {
    /// `sip:user@host[:port][;params]` or `sips:`, as written (validated).
    Sip(String),
    /// `+` and 7 to 15 digits, spaces and punctuation removed.
    Number(String),
}

impl Destination {
    /// Parses `text` as a SIP URI or an E.164 number; the error says which form was meant.
    pub fn parse(text: &str) -> Result<Destination, DestinationError> {
        let t = text.trim();
        if t.is_empty() {
            return Err(DestinationError::Empty);
        }
        let lower = t.to_ascii_lowercase();
        if lower.starts_with("sip:") || lower.starts_with("sips:") {
            return sip_uri(t).map(Destination::Sip);
        }
        if lower.starts_with("tel:") {
            return Err(DestinationError::Tel(t.to_owned()));
        }
        if let Some(rest) = t.strip_prefix('+') {
            return e164(t, rest).map(Destination::Number);
        }
        if t.contains('@') {
            return Err(DestinationError::NoScheme(t.to_owned()));
        }
        if t.chars().all(|c| c.is_ascii_digit() || " -.()".contains(c)) {
            let digits = t.chars().filter(char::is_ascii_digit).count();
            return Err(if digits <= 6 {
                DestinationError::Extension(t.to_owned())
            } else {
                DestinationError::NoCountryCode(t.to_owned())
            });
        }
        Err(DestinationError::Unrecognised(t.to_owned()))
    }

    /// The text a SIP INVITE or Twilio's `<Dial>` takes.
    pub fn as_str(&self) -> &str {
        match self {
            Destination::Sip(s) | Destination::Number(s) => s,
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn sip_uri(t: &str) -> Result<String, DestinationError> {
    let bad = |why: &str| DestinationError::BadSipUri {
        uri: t.to_owned(),
        why: why.to_owned(),
    };
    if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("it contains whitespace"));
    }
    let uri = rsipstack::sip::Uri::try_from(t).map_err(|e| bad(&e.to_string()))?;
    let host = uri.host_with_port.host.to_string();
    if host.is_empty() {
        return Err(bad("it has no host"));
    }
    Ok(t.to_owned())
}

fn e164(t: &str, digits_part: &str) -> Result<String, DestinationError> {
    let mut digits = String::with_capacity(16);
    for c in digits_part.chars() {
        match c {
            '0'..='9' => digits.push(c),
            ' ' | '-' | '.' | '(' | ')' => {}
            _ => {
                return Err(DestinationError::BadNumber {
                    number: t.to_owned(),
                    why: format!("{c:?} is not a digit"),
                });
            }
        }
    }
    if !(7..=15).contains(&digits.len()) {
        return Err(DestinationError::BadNumber {
            number: t.to_owned(),
            why: format!("{} digits; E.164 numbers have 7 to 15", digits.len()),
        });
    }
    if digits.starts_with('0') {
        return Err(DestinationError::BadNumber {
            number: t.to_owned(),
            why: "a country code never starts with 0".to_owned(),
        });
    }
    Ok(format!("+{digits}"))
}

/// Why a destination was not understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    #[error(
        "no destination: give a SIP URI (sip:priya@pbx.example.com) or an E.164 number (+441234567890)"
    )]
    Empty,
    #[error("{uri:?} is not a SIP URI baton can call ({why}); the form is sip:user@host[:port]")]
    BadSipUri { uri: String, why: String },
    #[error(
        "{number:?} is not an E.164 number: {why}; the form is + then the country code and number, e.g. +441234567890"
    )]
    BadNumber { number: String, why: String },
    #[error(
        "{0:?} has no country code: write it in E.164 form, + then the country code and number (e.g. +441234567890)"
    )]
    NoCountryCode(String),
    #[error(
        "{0:?} looks like an extension: on a PBX, write it as a SIP URI (sip:{0}@pbx.example.com); a phone number is written in E.164 form (+441234567890)"
    )]
    Extension(String),
    #[error("{0:?} looks like a SIP address without its scheme: write sip:{0}")]
    NoScheme(String),
    #[error(
        "{0:?}: tel: URIs are not dialled; write the number itself in E.164 form (+441234567890)"
    )]
    Tel(String),
    #[error("{0:?} is neither a SIP URI (sip:user@host) nor an E.164 number (+441234567890)")]
    Unrecognised(String),
}

/// How the caller reaches the person.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Handover {
    /// The caller's leg is sent on (SIP REFER, or Twilio's `<Dial>`) after the announcement;
    /// baton leaves the call.
    Blind,
    /// baton dials the person while the caller stays with the agent, briefs them, and bridges
    /// on their accept.
    Warm,
}

/// What happens when the person's phone rings out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnNoAnswer {
    /// The caller is back with the agent that asked, told why.
    Return,
    /// The caller is handed to this agent of the set.
    Agent(String),
    /// The agent says why and the call ends.
    HangUp,
}

impl OnNoAnswer {
    /// `"return"`, `"hang_up"` or `"agent:<name>"`; the error says what to write.
    pub fn parse(text: &str) -> Result<OnNoAnswer, String> {
        match text.trim() {
            "return" => Ok(OnNoAnswer::Return),
            "hang_up" => Ok(OnNoAnswer::HangUp),
            t => match t.strip_prefix("agent:") {
                Some(name) if !name.trim().is_empty() => Ok(OnNoAnswer::Agent(name.trim().into())),
                Some(_) => Err("\"agent:\" needs the agent's name: \"agent:front_desk\"".into()),
                None => {
                    let near = ["return", "hang_up"]
                        .into_iter()
                        .find(|k| strsim::levenshtein(k, t) <= 2)
                        .map(|k| format!(" (did you mean {k:?}?)"))
                        .unwrap_or_default();
                    Err(format!(
                        "{t:?} is not one of \"return\", \"hang_up\", \"agent:<name>\"{near}"
                    ))
                }
            },
        }
    }
}

/// A human agent's settings as written in an agent set.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanAgentConfig {
    /// A SIP URI or an E.164 number.
    #[serde(default)]
    pub to: String,
    /// The SIP trunk a number is dialled on (`[sip.trunks.<name>]`); checked against the
    /// daemon's trunks by the caller of [`validate`].
    pub trunk: Option<String>,
    /// Seconds the person's phone rings before the transfer counts as unanswered.
    pub ring_timeout_s: Option<u64>,
    /// `"return"` (default), `"hang_up"`, or `"agent:<name>"`.
    pub on_no_answer: Option<String>,
    /// `"warm"` (default) or `"blind"`.
    pub transfer: Option<String>,
    /// Screen the answered leg with the answering-machine heuristic before the brief.
    #[serde(default)]
    pub screen: bool,
    /// Seconds the person has after the brief to accept or decline.
    pub decision_timeout_s: Option<u64>,
    /// Warm only: a WAV (relative to the agent set's file) the caller hears, looped, while the
    /// person is dialled and briefed and the agent is silent. Without it: no hold music.
    pub hold_audio: Option<String>,
}

/// A human agent, validated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HumanAgent {
    pub destination: Destination,
    pub trunk: Option<String>,
    pub ring_timeout: Duration,
    pub on_no_answer: OnNoAnswer,
    pub handover: Handover,
    pub screen: bool,
    pub decision_timeout: Duration,
    /// Warm: the hold audio's path as written (`hold_audio`), and its samples once the agent
    /// set's loader has read it.
    pub hold_audio: Option<String>,
    #[serde(skip)]
    pub hold: Option<HoldAudio>,
}

/// Hold audio, read when the agent set is loaded (never on a call's path): mono PCM at `rate`.
#[derive(Clone, Debug)]
pub struct HoldAudio {
    pub rate: u32,
    pub samples: std::sync::Arc<[i16]>,
}

impl PartialEq for HoldAudio {
    fn eq(&self, other: &Self) -> bool {
        self.rate == other.rate && self.samples == other.samples
    }
}

impl Eq for HoldAudio {}

/// Ring timeout when none is set.
pub const DEFAULT_RING_TIMEOUT: Duration = Duration::from_secs(30);
/// Time to accept or decline after the brief when none is set.
pub const DEFAULT_DECISION_TIMEOUT: Duration = Duration::from_secs(15);
const MAX_RING_TIMEOUT_S: u64 = 300;
const MAX_DECISION_TIMEOUT_S: u64 = 120;

/// A human agent's setting that is wrong, named by its key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct HumanAgentError {
    /// The full key, e.g. `agents.priya.to`.
    pub key: String,
    pub message: String,
}

/// Every wrong setting of one human agent, each named by its key (one per line).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct HumanAgentErrors(pub Vec<HumanAgentError>);

/// Validates `raw`, the table at `key` (e.g. `agents.priya`): every wrong setting is reported at
/// once, in the order of the keys below.
pub fn validate(raw: &HumanAgentConfig, key: &str) -> Result<HumanAgent, HumanAgentErrors> {
    let mut errors = Vec::new();
    let mut err = |field: &str, message: String| {
        errors.push(HumanAgentError {
            key: format!("{key}.{field}"),
            message,
        });
    };
    let destination = Destination::parse(&raw.to)
        .map_err(|e| err("to", e.to_string()))
        .ok();
    if let (Some(Destination::Sip(_)), Some(trunk)) = (&destination, &raw.trunk) {
        err(
            "trunk",
            format!(
                "a SIP URI is called directly; trunk {trunk:?} applies to numbers only (remove it, \
                 or give a number in `to`)"
            ),
        );
    } else if let Some(t) = &raw.trunk
        && t.trim().is_empty()
    {
        err(
            "trunk",
            "empty; name a [sip.trunks.<name>] or remove it".into(),
        );
    }
    let ring_timeout = match raw.ring_timeout_s {
        None => DEFAULT_RING_TIMEOUT,
        Some(0) => {
            err(
                "ring_timeout_s",
                "0 would never ring; give 5 to 300 seconds".into(),
            );
            DEFAULT_RING_TIMEOUT
        }
        Some(s) if s < 5 => {
            err(
                "ring_timeout_s",
                format!("{s} s is too short for anyone to answer; give 5 to 300 seconds"),
            );
            DEFAULT_RING_TIMEOUT
        }
        Some(s) if s > MAX_RING_TIMEOUT_S => {
            err(
                "ring_timeout_s",
                format!(
                    "{s} s is over the {MAX_RING_TIMEOUT_S} s limit; the caller waits all that time"
                ),
            );
            DEFAULT_RING_TIMEOUT
        }
        Some(s) => Duration::from_secs(s),
    };
    // The kind of transfer, read once; a wrong one is reported in its place below and leaves
    // the checks that depend on it unasked.
    let kind = match raw.transfer.as_deref().map(str::trim) {
        None | Some("warm") => Ok(Handover::Warm),
        Some("blind") => Ok(Handover::Blind),
        Some(other) => Err(format!("{other:?} is not \"warm\" or \"blind\"")),
    };
    let blind = kind == Ok(Handover::Blind);
    let decision_timeout = match raw.decision_timeout_s {
        None => DEFAULT_DECISION_TIMEOUT,
        // A blind transfer has no decision to time (said once, below).
        Some(_) if blind => DEFAULT_DECISION_TIMEOUT,
        Some(s) if s == 0 || s > MAX_DECISION_TIMEOUT_S => {
            err(
                "decision_timeout_s",
                format!("{s} s; give 1 to {MAX_DECISION_TIMEOUT_S} seconds"),
            );
            DEFAULT_DECISION_TIMEOUT
        }
        Some(s) => Duration::from_secs(s),
    };
    let on_no_answer = match &raw.on_no_answer {
        None => OnNoAnswer::Return,
        Some(t) => OnNoAnswer::parse(t).unwrap_or_else(|m| {
            err("on_no_answer", m);
            OnNoAnswer::Return
        }),
    };
    let handover = kind.map_err(|m| err("transfer", m)).ok();
    if blind && raw.screen {
        err(
            "screen",
            "screening needs a warm transfer: a blind transfer hands the call away before anyone \
             answers (set transfer = \"warm\", or remove screen)"
                .into(),
        );
    }
    if blind && raw.hold_audio.is_some() {
        err(
            "hold_audio",
            "applies to warm transfers only: in a blind one the caller's call is handed away"
                .into(),
        );
    } else if raw
        .hold_audio
        .as_deref()
        .is_some_and(|h| h.trim().is_empty())
    {
        err(
            "hold_audio",
            "is empty; name a WAV file (relative to the agent set) or remove it".into(),
        );
    }
    if blind && raw.decision_timeout_s.is_some() {
        err(
            "decision_timeout_s",
            "applies to warm transfers only: nobody is briefed in a blind transfer".into(),
        );
    }
    match (destination, handover) {
        (Some(destination), Some(handover)) if errors.is_empty() => Ok(HumanAgent {
            destination,
            trunk: raw.trunk.clone(),
            ring_timeout,
            on_no_answer,
            handover,
            screen: raw.screen,
            decision_timeout,
            hold_audio: raw.hold_audio.clone(),
            hold: None,
        }),
        _ => Err(HumanAgentErrors(errors)),
    }
}

/// Parses and validates a human agent's table written alone as TOML (tests, the bad-input
/// corpus); `key` names the table in errors.
pub fn parse(text: &str, key: &str) -> Result<HumanAgent, HumanAgentErrors> {
    let raw: HumanAgentConfig = toml::from_str(text).map_err(|e| {
        HumanAgentErrors(vec![HumanAgentError {
            key: key.to_owned(),
            message: e.message().to_owned(),
        }])
    })?;
    validate(&raw, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sip_uris_and_numbers() {
        assert_eq!(
            Destination::parse("sip:priya@pbx.example.com").unwrap(),
            Destination::Sip("sip:priya@pbx.example.com".into())
        );
        assert_eq!(
            Destination::parse("sips:priya@10.0.0.1:5061;transport=tls").unwrap(),
            Destination::Sip("sips:priya@10.0.0.1:5061;transport=tls".into())
        );
        assert_eq!(
            Destination::parse(" +44 (20) 7946-0018 ").unwrap(),
            Destination::Number("+442079460018".into())
        );
    }

    #[test]
    fn each_wrong_form_says_what_to_write() {
        let msg = |t: &str| Destination::parse(t).unwrap_err().to_string();
        assert!(msg("").contains("no destination"));
        assert!(
            msg("5550100").contains("no country code"),
            "{}",
            msg("5550100")
        );
        assert!(msg("100").contains(
            "looks like an extension: on a PBX, write it as a SIP URI (sip:100@pbx.example.com)"
        ));
        assert!(msg("priya@pbx.example.com").contains("write sip:priya@pbx.example.com"));
        assert!(msg("tel:+15550100").contains("tel: URIs"));
        assert!(msg("+1555").contains("4 digits"), "{}", msg("+1555"));
        assert!(msg("+1234567890123456").contains("16 digits"));
        assert!(msg("+0441234567").contains("never starts with 0"));
        assert!(msg("+1555x0100").contains("'x' is not a digit"));
        assert!(msg("sip:pri ya@host").contains("whitespace"));
        assert!(msg("sip:").contains("not a SIP URI"), "{}", msg("sip:"));
        assert!(msg("priya").contains("neither a SIP URI"));
    }

    #[test]
    fn a_full_table() {
        let h = parse(
            "to = \"+15550100199\"\ntrunk = \"carrier\"\nring_timeout_s = 20\n\
             on_no_answer = \"agent:front_desk\"\nscreen = true\ndecision_timeout_s = 10\n",
            "agents.priya",
        )
        .unwrap();
        assert_eq!(h.destination, Destination::Number("+15550100199".into()));
        assert_eq!(h.trunk.as_deref(), Some("carrier"));
        assert_eq!(h.ring_timeout, Duration::from_secs(20));
        assert_eq!(h.on_no_answer, OnNoAnswer::Agent("front_desk".into()));
        assert_eq!(h.handover, Handover::Warm);
        assert!(h.screen);
        assert_eq!(h.decision_timeout, Duration::from_secs(10));
    }

    #[test]
    fn the_readme_example_is_valid() {
        let readme = include_str!("../../README.md");
        let section = readme
            .split("## Handing the caller to a person")
            .nth(1)
            .expect("the README section");
        // The block of a human agent's settings (the section shows an agent set first).
        let toml = section
            .split("```toml\n")
            .skip(1)
            .filter_map(|b| b.split("```").next())
            .find(|b| b.starts_with("to = "))
            .expect("its TOML block of settings");
        let h = parse(toml, "agents.priya").unwrap();
        assert_eq!(h.destination, Destination::Number("+442079460018".into()));
        assert!(h.screen);
    }

    #[test]
    fn defaults() {
        let h = parse("to = \"sip:priya@pbx\"\n", "agents.priya").unwrap();
        assert_eq!(h.ring_timeout, DEFAULT_RING_TIMEOUT);
        assert_eq!(h.on_no_answer, OnNoAnswer::Return);
        assert_eq!(h.handover, Handover::Warm);
        assert!(!h.screen);
    }

    #[test]
    fn errors_name_the_key() {
        let e = |t: &str| parse(t, "agents.priya").unwrap_err().to_string();
        assert!(e("to = \"100\"").starts_with("agents.priya.to: "));
        assert!(
            e("to = \"+15550100199\"\nring_timeout_s = 0")
                .starts_with("agents.priya.ring_timeout_s: 0 would never ring")
        );
        assert!(e("to = \"+15550100199\"\nring_timeout_s = 900").contains("over the 300 s limit"));
        assert!(e("to = \"+15550100199\"\nring_timeout_s = 2").contains("too short"));
        assert!(
            e("to = \"+15550100199\"\non_no_answer = \"retrun\"")
                .contains("did you mean \"return\"")
        );
        assert!(
            e("to = \"+15550100199\"\non_no_answer = \"agent:\"")
                .contains("needs the agent's name")
        );
        assert!(
            e("to = \"+15550100199\"\ntransfer = \"cold\"").contains("not \"warm\" or \"blind\"")
        );
        assert!(
            e("to = \"+15550100199\"\ntransfer = \"blind\"\nscreen = true")
                .contains("agents.priya.screen: screening needs a warm transfer")
        );
        assert!(
            e("to = \"sip:priya@pbx\"\ntrunk = \"carrier\"").contains("applies to numbers only")
        );
        assert!(e("to = \"+15550100199\"\nring_timout_s = 5").contains("unknown field"));
        assert!(e("to = 5").starts_with("agents.priya: "));
    }

    #[test]
    fn every_wrong_setting_at_once() {
        let errors = parse(
            "to = \"100\"\nring_timeout_s = 0\non_no_answer = \"retrun\"\n\
             transfer = \"blind\"\nscreen = true\ndecision_timeout_s = 10\n",
            "agents.priya",
        )
        .unwrap_err()
        .0;
        let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "agents.priya.to",
                "agents.priya.ring_timeout_s",
                "agents.priya.on_no_answer",
                "agents.priya.screen",
                "agents.priya.decision_timeout_s",
            ]
        );
        // A kind of transfer that is wrong is reported once, not through what depends on it.
        let errors = parse(
            "to = \"+15550100199\"\ntransfer = \"cold\"\nscreen = true\n",
            "agents.priya",
        )
        .unwrap_err()
        .0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].key, "agents.priya.transfer"); // A blind transfer's decision timeout is one mistake, not two.
        let errors = parse(
            "to = \"+15550100199\"\ntransfer = \"blind\"\ndecision_timeout_s = 0\n",
            "agents.priya",
        )
        .unwrap_err()
        .0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].message.contains("applies to warm transfers only"));
    }
}

//! `baton dial twilio|telnyx|plivo|exotel|vonage`: place one call to a server speaking that
//! bridge's protocol (baton or another) the way the bridge would, from a WAV fixture, and report
//! what the caller heard and how evenly it arrived.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::leg::audiosocket::wire as asw;
use crate::leg::bridge::Dialect;
use crate::leg::bridge::audio::{AudioFormat, Encoding};
use crate::leg::bridge::caller::CallerEvent;
use crate::leg::twilio::cadence::Cadence;
use crate::leg::twilio::caller::{self, CallerEnd, CallerError, CallerOptions};
use crate::leg::twilio::signature::AuthToken;

/// Options of `baton dial twilio`.
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    baton dial twilio ws://127.0.0.1:8080/twilio\n  \
    baton dial twilio ws://127.0.0.1:8080/twilio --fixture my-call.wav --param From=+15550100\n  \
    TWILIO_AUTH_TOKEN=... baton dial twilio wss://baton.example.com/twilio --auth-token-env TWILIO_AUTH_TOKEN\n  \
    baton dial twilio ws://127.0.0.1:8080/twilio --header \"Authorization=Bearer $BATON_TOKEN\"")]
pub struct DialTwilioArgs {
    /// The server's Media Streams WebSocket URL.
    pub url: String,
    /// What the caller says: a WAV of any rate (sent as 8 kHz μ-law). Default: the bundled
    /// four-turn conversation.
    #[arg(long, value_name = "WAV")]
    pub fixture: Option<PathBuf>,
    /// Where to write call.wav (left caller, right agent as heard) and report.json.
    #[arg(long, value_name = "DIR", default_value = "out/dial")]
    pub out: PathBuf,
    /// A custom parameter for `start.customParameters`, as NAME=VALUE (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// Sign the upgrade with X-Twilio-Signature using the token in this environment variable.
    #[arg(long, value_name = "VAR")]
    pub auth_token_env: Option<String>,
    /// The URL to sign, when the server validates against a different public URL.
    #[arg(long, value_name = "URL")]
    pub signed_url: Option<String>,
    /// An extra upgrade header, NAME=VALUE (repeatable; e.g. `Authorization=Bearer TOKEN` for a
    /// baton that checks no signature but has API tokens).
    #[arg(long = "header", value_name = "NAME=VALUE")]
    pub headers: Vec<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of `baton dial telnyx|plivo|exotel|vonage`.
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    baton dial telnyx ws://127.0.0.1:8080/telnyx --encoding pcma\n  \
    baton dial vonage ws://127.0.0.1:8080/vonage --rate 8000\n  \
    baton dial exotel 'ws://127.0.0.1:8080/exotel?sample-rate=16000' --rate 16000\n  \
    baton dial plivo ws://127.0.0.1:8080/media-stream      # detected on the shared path")]
pub struct DialBridgeArgs {
    /// The server's WebSocket URL for this bridge.
    pub url: String,
    /// What the caller says: a WAV of any rate. Default: the bundled four-turn conversation.
    #[arg(long, value_name = "WAV")]
    pub fixture: Option<PathBuf>,
    /// Where to write call.wav (left caller, right agent as heard) and report.json.
    #[arg(long, value_name = "DIR", default_value = "out/dial")]
    pub out: PathBuf,
    /// Payload encoding: pcmu, pcma (Telnyx) or l16. Default: the bridge's usual one (Telnyx
    /// PCMU; Plivo, Exotel and Vonage L16).
    #[arg(long, value_name = "ENC")]
    pub encoding: Option<String>,
    /// Sample rate for L16: 8000, 16000 or 24000. Default: 16000 for Vonage, else 8000.
    #[arg(long, value_name = "HZ")]
    pub rate: Option<u32>,
    /// A custom parameter for `start` (Vonage: a header beside `websocket:connected`), NAME=VALUE.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// An extra upgrade header, NAME=VALUE (e.g. x-telnyx-streaming-auth-token=...).
    #[arg(long = "header", value_name = "NAME=VALUE")]
    pub headers: Vec<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `baton dial` could not run.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error(transparent)]
    Fixture(#[from] crate::leg::fixture::FixtureError),
    #[error(transparent)]
    Caller(#[from] CallerError),
    #[error("{url}: {hint}")]
    BadUrl { url: String, hint: String },
    #[error(
        "a --param/--header starting {0:?} is not NAME=VALUE: write e.g. --header \
         \"Authorization=Bearer TOKEN\" (an = after the name, not a colon)"
    )]
    BadParam(String),
    #[error("{0}")]
    BadFormat(String),
    #[error("{0} is not set or empty (named by --auth-token-env)")]
    MissingToken(String),
    #[error("cannot write {path}: {reason}")]
    Output { path: PathBuf, reason: String },
    #[error("cannot start the runtime: {0}")]
    Runtime(String),
}

/// `report.json`.
#[derive(Clone, Debug, Serialize)]
pub struct DialReport {
    pub url: String,
    pub end: String,
    /// Why the call did not end as a call should (the caller hanging up, or the server closing
    /// normally, code 1000): a refusal or a lost connection. `baton dial` then exits 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    pub frames_sent: u64,
    pub media_received: u64,
    pub played_ms: u64,
    pub dropped_ms: u64,
    pub marks_received: u64,
    pub marks_echoed: u64,
    pub clears_received: u64,
    pub bad_messages: u64,
    /// Deviation of the inbound `media` interval from `cadence_period_ms`, within bursts of
    /// agent speech.
    pub cadence: Cadence,
    /// The dialect's interval between agent `media` messages: 20 ms, Exotel's 100 ms chunks.
    pub cadence_period_ms: u16,
    /// Each caller turn (found by voice activity in the fixture) and how long after the caller
    /// stopped speaking the agent was heard: what the caller experienced.
    pub turns: Vec<DialTurn>,
    /// Over the answered turns: p50 and max of `turns[].first_audio_ms`.
    pub first_audio_ms: Option<FirstAudio>,
    pub recording: String,
}

/// One caller turn, on the caller's timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DialTurn {
    /// When the caller's speech ended (its last voiced frame), ms from the call's first frame.
    pub caller_stopped_ms: u64,
    /// Caller stopped → agent audio heard, ms; `None`: the agent said nothing before the
    /// caller's next turn (or the end of the call).
    pub first_audio_ms: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FirstAudio {
    pub p50: u64,
    pub max: u64,
    pub answered: usize,
}

/// Silence that ends a caller turn when the fixture is split into turns (the mock's and
/// baton's default voice-activity window).
const TURN_SILENCE: Duration = Duration::from_millis(500);

/// Where each caller turn of `samples` (mono at `rate`) ends: the end of its last voiced frame.
pub fn caller_turn_ends(samples: &[i16], rate: u32) -> Vec<Duration> {
    use crate::audio::vad::{TurnDetector, VadEvent};
    let frame = (rate as usize / 50).max(1);
    let mut vad = TurnDetector::new(TURN_SILENCE);
    let mut ends = Vec::new();
    let len = Duration::from_millis(20);
    let chunks = samples.chunks(frame).chain(
        // Trailing silence so the last turn's end is reported.
        std::iter::repeat_n(&[0i16; 0][..], (TURN_SILENCE.as_millis() / 20 + 2) as usize),
    );
    let silent = vec![0i16; frame];
    for (i, chunk) in chunks.enumerate() {
        let chunk = if chunk.is_empty() { &silent[..] } else { chunk };
        if let Some(VadEvent::SpeechEnd(at)) = vad.push(chunk, len * i as u32, len) {
            ends.push(at);
        }
    }
    ends
}

/// The caller turn agent audio starting at `at` answers: the last one that ended at or before it.
pub fn turn_answered(ends: &[Duration], at: Duration) -> Option<usize> {
    ends.iter().rposition(|&e| e <= at)
}

/// Per caller turn, how long after it ended the agent was first heard (`starts`: when agent
/// audio began after a silence, sorted); the first start after a turn's end and before the next
/// turn's end answers it.
pub fn first_audio(ends: &[Duration], starts: &[Duration]) -> Vec<DialTurn> {
    let mut turns: Vec<DialTurn> = ends
        .iter()
        .map(|e| DialTurn {
            caller_stopped_ms: e.as_millis() as u64,
            first_audio_ms: None,
        })
        .collect();
    for &s in starts {
        if let Some(k) = turn_answered(ends, s) {
            let t = &mut turns[k];
            if t.first_audio_ms.is_none() {
                t.first_audio_ms = Some(s.saturating_sub(ends[k]).as_millis() as u64);
            }
        }
    }
    turns
}

fn summary(turns: &[DialTurn]) -> Option<FirstAudio> {
    let mut v: Vec<u64> = turns.iter().filter_map(|t| t.first_audio_ms).collect();
    v.sort_unstable();
    Some(FirstAudio {
        p50: v[(v.len().checked_sub(1)?) / 2],
        max: *v.last()?,
        answered: v.len(),
    })
}

/// `url` without its `user:password@`, and those as an `Authorization: Basic` value (the
/// URL's percent-encoding undone). A URL that does not parse loses whatever precedes an `@` in
/// what looks like its authority, so no message can say it.
fn split_credentials(url: &str) -> (String, Option<String>) {
    // Without `://` it is no URL of any scheme we take (`KEY:TOKEN@host` would parse as scheme
    // `key`): the fallback below strips it.
    let parsed = url
        .contains("://")
        .then(|| url::Url::parse(url).ok())
        .flatten();
    let Some(mut parsed) = parsed else {
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let Some(at) = rest[..authority_end].rfind('@') else {
            return (url.to_owned(), None);
        };
        let bare = &rest[at + 1..];
        let url = if scheme.is_empty() {
            bare.to_owned()
        } else {
            format!("{scheme}://{bare}")
        };
        return (url, None);
    };
    if parsed.username().is_empty() && parsed.password().is_none() {
        return (url.to_owned(), None);
    }
    let decode = |s: &str| {
        url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    let user = decode(parsed.username());
    let password = decode(parsed.password().unwrap_or(""));
    let basic = format!(
        "Basic {}",
        base64::Engine::encode(&*crate::b64::STANDARD, format!("{user}:{password}"))
    );
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    (parsed.to_string(), Some(basic))
}

/// A media-stream URL `baton dial` can use, or what to type instead.
pub fn check_url(url: &str) -> Result<(), DialError> {
    let bad = |hint: String| {
        Err(DialError::BadUrl {
            url: url.to_owned(),
            hint,
        })
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return bad(format!(
            "not a URL; a media stream is a WebSocket: ws://{url} (or wss:// with TLS)"
        ));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "ws" | "wss" => Ok(()),
        "http" => bad(format!(
            "a media stream is a WebSocket, not HTTP: use ws://{rest}"
        )),
        "https" => bad(format!(
            "a media stream is a WebSocket, not HTTPS: use wss://{rest}"
        )),
        other => bad(format!(
            "{other}:// is not a WebSocket scheme: use ws://{rest} (or wss:// with TLS)"
        )),
    }
}

fn pairs(list: &[String]) -> Result<BTreeMap<String, String>, DialError> {
    let mut out = BTreeMap::new();
    for p in list {
        let (k, v) = p
            .split_once('=')
            // Only the name is echoed: a header's value may be a credential.
            .ok_or_else(|| {
                DialError::BadParam(p.split([':', ' ']).next().unwrap_or_default().to_owned())
            })?;
        out.insert(k.to_owned(), v.to_owned());
    }
    Ok(out)
}

fn fixture_or_bundled(f: &Option<PathBuf>) -> PathBuf {
    f.clone()
        .unwrap_or_else(|| crate::demo::bundled("audio-fixtures/clips/caller_conversation.wav"))
}

/// The stream format `baton dial <dialect>` uses.
pub fn bridge_format(
    dialect: Dialect,
    encoding: Option<&str>,
    rate: Option<u32>,
) -> Result<AudioFormat, DialError> {
    let default = match dialect {
        Dialect::Twilio | Dialect::Telnyx => "pcmu",
        _ => "l16",
    };
    let enc = match (encoding.unwrap_or(default), dialect) {
        ("pcmu", Dialect::Vonage) | ("pcma", Dialect::Vonage) => {
            return Err(DialError::BadFormat("Vonage carries only l16".into()));
        }
        ("pcmu", _) => Encoding::Pcmu,
        ("pcma", Dialect::Telnyx) => Encoding::Pcma,
        ("l16", Dialect::Telnyx) => Encoding::L16Be,
        ("l16", Dialect::Plivo | Dialect::Exotel | Dialect::Vonage) => Encoding::L16Le,
        (other, d) => {
            return Err(DialError::BadFormat(format!(
                "--encoding {other} is not spoken by {d}: use pcmu, pcma (Telnyx) or l16"
            )));
        }
    };
    let default_rate = if dialect == Dialect::Vonage {
        16000
    } else {
        8000
    };
    let rate = match (enc, rate) {
        (Encoding::Pcmu | Encoding::Pcma, Some(r)) if r != 8000 => {
            return Err(DialError::BadFormat("G.711 runs at 8000 Hz".into()));
        }
        (Encoding::Pcmu | Encoding::Pcma, _) => 8000,
        (_, r) => r.unwrap_or(default_rate),
    };
    if !crate::leg::bridge::audio::RATES.contains(&rate) {
        return Err(DialError::BadFormat(format!(
            "--rate {rate}: use 8000, 16000 or 24000"
        )));
    }
    Ok(AudioFormat::new(enc, rate))
}

/// `baton dial telnyx|plivo|exotel|vonage`.
pub fn run_bridge(dialect: Dialect, args: &DialBridgeArgs) -> Result<DialReport, DialError> {
    let format = bridge_format(dialect, args.encoding.as_deref(), args.rate)?;
    let mut opts =
        CallerOptions::from_wav_for(dialect, format, &fixture_or_bundled(&args.fixture))?;
    opts.custom_parameters = pairs(&args.params)?;
    opts.headers = pairs(&args.headers)?.into_iter().collect();
    finish(&args.url, opts, &args.out)
}

pub fn run(args: &DialTwilioArgs) -> Result<DialReport, DialError> {
    let mut opts = CallerOptions::from_wav(&fixture_or_bundled(&args.fixture))?;
    opts.custom_parameters = pairs(&args.params)?;
    opts.headers = pairs(&args.headers)?.into_iter().collect();
    if let Some(var) = &args.auth_token_env {
        let token = std::env::var(var)
            .ok()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| DialError::MissingToken(var.clone()))?;
        opts.auth_token = Some(AuthToken::new(token));
        opts.signed_url = args.signed_url.clone();
    }
    finish(&args.url, opts, &args.out)
}

/// Prints a line to stderr as each caller turn ends and as the agent answers it, while the call
/// runs; returns when the agent began speaking each time (the caller's timeline).
async fn progress(
    mut events: tokio::sync::mpsc::UnboundedReceiver<CallerEvent>,
    ends: Vec<Duration>,
    fixture: Duration,
) -> Vec<Duration> {
    let mut starts = Vec::new();
    let mut t0: Option<tokio::time::Instant> = None;
    let mut next_end = 0;
    let mut answered = vec![false; ends.len()];
    let n = ends.len();
    loop {
        let due = t0.and_then(|t| Some(t + *ends.get(next_end)?));
        let event = tokio::select! {
            e = events.recv() => match e {
                Some(e) => e,
                None => break,
            },
            _ = async { tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)).await }, if due.is_some() => {
                eprintln!(
                    "dial: turn {}/{n}: the caller stopped speaking at {:.1} s",
                    next_end + 1,
                    ends[next_end].as_secs_f64()
                );
                next_end += 1;
                continue;
            }
        };
        match event {
            CallerEvent::Started => {
                t0 = Some(tokio::time::Instant::now());
                eprintln!(
                    "dial: connected; the caller says {n} turn{} over {:.1} s",
                    if n == 1 { "" } else { "s" },
                    fixture.as_secs_f64()
                );
            }
            CallerEvent::AgentSpeaking { at } => {
                starts.push(at);
                match turn_answered(&ends, at) {
                    Some(k) if !answered[k] => {
                        answered[k] = true;
                        eprintln!(
                            "dial: turn {}/{n}: agent heard {} ms after the caller stopped",
                            k + 1,
                            at.saturating_sub(ends[k]).as_millis()
                        );
                    }
                    None => eprintln!(
                        "dial: agent speaking at {:.1} s, before the caller's first turn ended",
                        at.as_secs_f64()
                    ),
                    Some(_) => {}
                }
            }
        }
    }
    starts
}

fn finish(
    url: &str,
    mut opts: CallerOptions,
    out: &std::path::Path,
) -> Result<DialReport, DialError> {
    // Credentials in the URL (`wss://KEY:TOKEN@host/exotel`, as Exotel's console gives it) go
    // as `Authorization: Basic`, as Exotel sends them; the URL said, dialled and reported has
    // none.
    let (url, basic) = split_credentials(url);
    let url = url.as_str();
    if let Some(basic) = basic
        && !opts
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
    {
        opts.headers.push(("authorization".to_owned(), basic));
    }
    check_url(url)?;
    // Where the report goes is checked before the call, not found unwritable after it.
    std::fs::create_dir_all(out).map_err(|e| DialError::Output {
        path: out.to_path_buf(),
        reason: e.to_string(),
    })?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| DialError::Runtime(e.to_string()))?;
    let rate = opts.format.rate;
    let ends = caller_turn_ends(opts.said(), rate);
    let fixture = Duration::from_secs_f64(opts.said().len() as f64 / f64::from(rate.max(1)));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    opts.events = Some(tx);
    let (r, starts) = rt.block_on(async {
        let printer = tokio::spawn(progress(rx, ends.clone(), fixture));
        let r = caller::dial(url, opts).await;
        (r, printer.await.unwrap_or_default())
    });
    let r = r?;
    let turns = first_audio(&ends, &starts);
    let wav = out.join("call.wav");
    r.recording.write(&wav).map_err(|e| DialError::Output {
        path: wav.clone(),
        reason: e.to_string(),
    })?;
    let end = match &r.end {
        CallerEnd::HungUp => "caller hung up".into(),
        CallerEnd::ServerClosed { code, reason } => format!(
            "the server {}",
            crate::leg::socket::closed_words(*code, reason)
        ),
        CallerEnd::ConnectionLost(e) => format!("connection lost: {e}"),
    };
    let failure = match &r.end {
        CallerEnd::HungUp
        | CallerEnd::ServerClosed {
            code: Some(1000), ..
        } => None,
        CallerEnd::ServerClosed { .. } | CallerEnd::ConnectionLost(_) => Some(end.clone()),
    };
    let report = DialReport {
        url: url.to_owned(),
        end,
        failure,
        frames_sent: r.frames_sent,
        media_received: r.media_received,
        played_ms: r.played_ms,
        dropped_ms: r.dropped_ms,
        marks_received: r.marks_received,
        marks_echoed: r.marks_echoed,
        clears_received: r.clears_received,
        bad_messages: r.bad_messages,
        cadence: r.cadence,
        cadence_period_ms: r.cadence_period_ms,
        first_audio_ms: summary(&turns),
        turns,
        recording: wav.display().to_string(),
    };
    let json_path = out.join("report.json");
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
    )
    .map_err(|e| DialError::Output {
        path: json_path.clone(),
        reason: e.to_string(),
    })?;
    Ok(report)
}

/// The human-readable report.
pub fn render(r: &DialReport) -> String {
    let per_turn: Vec<String> = r
        .turns
        .iter()
        .map(|t| t.first_audio_ms.map_or("—".to_owned(), |ms| ms.to_string()))
        .collect();
    let first_audio = match &r.first_audio_ms {
        Some(f) => format!(
            "caller-side first audio (caller stops → agent heard): p50 {} ms, max {} ms; {} of {} turns answered; per turn: {} ms\n",
            f.p50,
            f.max,
            f.answered,
            r.turns.len(),
            per_turn.join(", ")
        ),
        None => format!(
            "caller-side first audio: the agent answered none of the caller's {} turns\n",
            r.turns.len()
        ),
    };
    format!(
        "call to {}: {}\n\
         {first_audio}\
         sent {} frames; heard {} media messages ({} ms played, {} ms dropped by clear)\n\
         marks {} received / {} echoed; clears {}; unusable messages {}\n\
         agent audio cadence: {} intervals, deviation from {} ms p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms\n\
         recording: {} (left = caller, right = agent as heard)\n",
        r.url,
        r.end,
        r.frames_sent,
        r.media_received,
        r.played_ms,
        r.dropped_ms,
        r.marks_received,
        r.marks_echoed,
        r.clears_received,
        r.bad_messages,
        r.cadence.intervals,
        r.cadence_period_ms,
        f64::from(r.cadence.p50_dev_us) / 1000.0,
        f64::from(r.cadence.p99_dev_us) / 1000.0,
        f64::from(r.cadence.max_dev_us) / 1000.0,
        r.recording
    )
}

/// Options of `baton dial audiosocket`.
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    baton dial audiosocket 127.0.0.1:9092\n  \
    baton dial audiosocket 127.0.0.1:9092 --rate 16000 --dtmf 5@1.5 --json\n  \
    baton dial audiosocket 127.0.0.1:9092 --uuid 3f2504e0-4f89-41d3-9a0c-0305e82c3301")]
pub struct DialAudioSocketArgs {
    /// The server's AudioSocket address, HOST:PORT.
    pub addr: String,
    /// What the caller says: a WAV of any rate. Default: the bundled four-turn conversation.
    #[arg(long, value_name = "WAV")]
    pub fixture: Option<PathBuf>,
    /// slin rate: 8000 (kind 0x10, the AudioSocket() application), 16000 (0x12, c(slin16)), or
    /// another slin kind's rate baton takes: 12000, 24000, 32000, 48000, 96000, 192000.
    #[arg(long, default_value_t = 8000)]
    pub rate: u32,
    /// A key pressed at an offset in seconds, as DIGIT@SECONDS (repeatable).
    #[arg(long, value_name = "DIGIT@SECONDS")]
    pub dtmf: Vec<String>,
    /// Where to write call.wav (left caller, right agent as heard) and report.json.
    #[arg(long, value_name = "DIR", default_value = "out/dial-audiosocket")]
    pub out: PathBuf,
    /// The call's UUID, as the dialplan's AudioSocket(UUID,…) gives it (8-4-4-4-12 hex).
    /// Default: a fresh random one for every call, as the server tells calls apart by it.
    #[arg(long, value_name = "UUID")]
    pub uuid: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `baton dial audiosocket` could not run.
#[derive(Debug, thiserror::Error)]
pub enum DialAudioSocketError {
    #[error(transparent)]
    Wav(#[from] crate::audio::wav::WavError),
    #[error("cannot resample the fixture to {rate} Hz: {reason}")]
    Resample { rate: u32, reason: String },
    #[error(transparent)]
    Caller(#[from] crate::leg::audiosocket::CallerError),
    #[error("--dtmf {0:?} is not DIGIT@SECONDS (e.g. 5@1.5; keys 0-9, *, #, A-D)")]
    BadDtmf(String),
    #[error("--rate {0}: an AudioSocket call runs at {1}")]
    BadRate(u32, String),
    #[error(
        "--uuid {0:?} is not a UUID: write 32 hex digits as 8-4-4-4-12, e.g. 3f2504e0-4f89-41d3-9a0c-0305e82c3301"
    )]
    BadUuid(String),
    #[error("cannot make a random call UUID: {0}")]
    Random(String),
    #[error("cannot write {path}: {reason}")]
    Output { path: PathBuf, reason: String },
    #[error("cannot start the runtime: {0}")]
    Runtime(String),
}

/// `report.json` of an AudioSocket call.
#[derive(Clone, Debug, Serialize)]
pub struct DialAudioSocketReport {
    pub addr: String,
    /// The call's UUID as sent, 8-4-4-4-12 hex.
    pub uuid: String,
    pub rate: u32,
    pub end: String,
    /// Why the call did not run to its end, when it did not (the connection lost, or closed
    /// without the server's hang-up): `baton dial audiosocket` then exits 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    pub frames_sent: u64,
    pub dtmf_sent: u64,
    pub audio_received: u64,
    pub bursts: u64,
    /// Inter-arrival of baton's audio messages within bursts, in ms: p1, p50, p99, max.
    pub interval_ms: [f64; 4],
    /// Deviation of those intervals from 20 ms.
    pub cadence: Cadence,
    pub recording: String,
}

pub fn run_audiosocket(
    args: &DialAudioSocketArgs,
) -> Result<DialAudioSocketReport, DialAudioSocketError> {
    use crate::leg::audiosocket::caller as asc;
    use crate::leg::audiosocket::session::{supported_kinds, supported_rate};
    if !supported_rate(args.rate) || crate::leg::audiosocket::wire::slin_kind(args.rate).is_none() {
        return Err(DialAudioSocketError::BadRate(args.rate, supported_kinds()));
    }
    let uuid = call_uuid(args.uuid.as_deref())?;
    let fixture = args
        .fixture
        .clone()
        .unwrap_or_else(|| crate::demo::bundled("audio-fixtures/clips/caller_conversation.wav"));
    let pcm = crate::audio::wav::read(&fixture)?;
    let samples =
        crate::audio::resample::resample_all(&pcm.samples, pcm.rate, args.rate).map_err(|e| {
            DialAudioSocketError::Resample {
                rate: args.rate,
                reason: e.to_string(),
            }
        })?;
    let mut opts = asc::CallerOptions::new(samples, args.rate);
    opts.uuid = uuid;
    for d in &args.dtmf {
        let bad = || DialAudioSocketError::BadDtmf(d.clone());
        let (digit, at) = d.split_once('@').ok_or_else(bad)?;
        let mut chars = digit.chars();
        let (Some(c @ ('0'..='9' | '*' | '#' | 'A'..='D')), None) = (chars.next(), chars.next())
        else {
            return Err(bad());
        };
        let secs: f64 = at.parse().map_err(|_| bad())?;
        let at = std::time::Duration::try_from_secs_f64(secs).map_err(|_| bad())?;
        opts.dtmf.push((at, c));
    }
    let out = |path: &std::path::Path, e: String| DialAudioSocketError::Output {
        path: path.to_path_buf(),
        reason: e,
    };
    // Where the report goes is checked before the call, not found unwritable after it.
    std::fs::create_dir_all(&args.out).map_err(|e| out(&args.out, e.to_string()))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| DialAudioSocketError::Runtime(e.to_string()))?;
    let r = rt.block_on(asc::dial(&args.addr, opts))?;
    let wav = args.out.join("call.wav");
    r.recording
        .write(&wav)
        .map_err(|e| out(&wav, e.to_string()))?;
    let mut iv: Vec<f64> = r
        .intervals_us
        .iter()
        .map(|&u| f64::from(u) / 1000.0)
        .collect();
    iv.sort_by(f64::total_cmp);
    let pct =
        |q: f64| crate::call::metrics::percentile(&iv, q).map_or(0.0, crate::call::metrics::round2);
    let end = match &r.end {
        asc::CallerEnd::HungUp => "caller hung up".to_owned(),
        asc::CallerEnd::ServerHungUp => "server hung up".to_owned(),
        asc::CallerEnd::ServerClosed => "server closed the connection".to_owned(),
        asc::CallerEnd::ConnectionLost(e) => format!("connection lost: {e}"),
    };
    let report = DialAudioSocketReport {
        addr: args.addr.clone(),
        uuid: uuid_text(&uuid),
        rate: args.rate,
        end: end.clone(),
        failure: match &r.end {
            asc::CallerEnd::HungUp | asc::CallerEnd::ServerHungUp => None,
            asc::CallerEnd::ServerClosed | asc::CallerEnd::ConnectionLost(_) => Some(end),
        },
        frames_sent: r.frames_sent,
        dtmf_sent: r.dtmf_sent,
        audio_received: r.audio_received,
        bursts: r.bursts,
        interval_ms: [pct(1.0), pct(50.0), pct(99.0), pct(100.0)],
        cadence: r.cadence,
        recording: wav.display().to_string(),
    };
    let json_path = args.out.join("report.json");
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
    )
    .map_err(|e| out(&json_path, e.to_string()))?;
    Ok(report)
}

/// The UUID a call sends: `given` (`--uuid`), else a fresh random (version 4) one, so that
/// every dial is a call of its own to the server.
fn call_uuid(given: Option<&str>) -> Result<[u8; 16], DialAudioSocketError> {
    if let Some(text) = given {
        return parse_uuid(text).ok_or_else(|| DialAudioSocketError::BadUuid(text.to_owned()));
    }
    let mut u = [0u8; 16];
    getrandom::fill(&mut u).map_err(|e| DialAudioSocketError::Random(e.to_string()))?;
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    Ok(u)
}

/// A UUID written 8-4-4-4-12 in hex digits (either case): the form a dialplan gives (the
/// server also takes 32 digits without dashes; a dial is held to the usual form).
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    if !text.split('-').map(str::len).eq([8, 4, 4, 4, 12]) {
        return None;
    }
    asw::parse_uuid(text)
}

/// A UUID as 8-4-4-4-12 lower-case hex.
fn uuid_text(u: &[u8; 16]) -> String {
    asw::uuid_string(u)
}

/// The human-readable AudioSocket report.
pub fn render_audiosocket(r: &DialAudioSocketReport) -> String {
    format!(
        "AudioSocket call {} to {} at {} Hz: {}\n\
         sent {} frames and {} DTMF; heard {} audio messages in {} bursts\n\
         agent audio inter-arrival (ms): p1 {:.2}, p50 {:.2}, p99 {:.2}, max {:.2}\n\
         recording: {} (left = caller, right = agent as heard)\n",
        r.uuid,
        r.addr,
        r.rate,
        r.end,
        r.frames_sent,
        r.dtmf_sent,
        r.audio_received,
        r.bursts,
        r.interval_ms[0],
        r.interval_ms[1],
        r.interval_ms[2],
        r.interval_ms[3],
        r.recording
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_url_become_a_basic_header_and_leave_the_url() {
        let (url, basic) =
            split_credentials("wss://KEY:TO%2Bk+en@bridge.example.com:8443/exotel?x=1");
        assert_eq!(url, "wss://bridge.example.com:8443/exotel?x=1");
        // base64("KEY:TO+k+en")
        assert_eq!(basic.as_deref(), Some("Basic S0VZOlRPK2srZW4="));
        let (url, basic) = split_credentials("ws://127.0.0.1:8080/exotel");
        assert_eq!((url.as_str(), basic), ("ws://127.0.0.1:8080/exotel", None));
        let (url, basic) = split_credentials("127.0.0.1:8080/exotel");
        assert_eq!((url.as_str(), basic), ("127.0.0.1:8080/exotel", None));
        // Not a URL: what precedes an `@` in its authority is dropped all the same.
        let (url, basic) = split_credentials("KEY:TOKEN@127.0.0.1:8080/exotel");
        assert_eq!((url.as_str(), basic), ("127.0.0.1:8080/exotel", None));
        let (url, _) = split_credentials("ws://KEY:TO#KEN@127.0.0.1:8080/exotel");
        assert!(!url.contains("KEY") && !url.contains("TO#"), "{url}");
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn each_turn_is_answered_by_the_first_agent_audio_after_it() {
        let ends = [ms(1000), ms(4000), ms(9000)];
        // Agent before any turn ended, twice after turn 1, none after turn 2, once after turn 3.
        let starts = [ms(500), ms(1800), ms(2500), ms(9700)];
        let turns = first_audio(&ends, &starts);
        let got: Vec<Option<u64>> = turns.iter().map(|t| t.first_audio_ms).collect();
        assert_eq!(got, [Some(800), None, Some(700)]);
        assert_eq!(
            summary(&turns),
            Some(FirstAudio {
                p50: 700,
                max: 800,
                answered: 2
            })
        );
        assert_eq!(summary(&first_audio(&ends, &[])), None);
    }

    #[test]
    fn caller_turns_are_found_in_the_fixture() {
        let tone = |n: usize| -> Vec<i16> {
            (0..n)
                .map(|i| if i % 8 < 4 { 6000 } else { -6000 })
                .collect()
        };
        let mut s = tone(8000);
        s.extend(vec![0; 8000]);
        s.extend(tone(4000));
        // Ends at the last voiced frame, also when the file stops mid-speech.
        assert_eq!(caller_turn_ends(&s, 8000), [ms(1000), ms(2500)]);
    }

    #[test]
    fn every_call_gets_a_fresh_uuid_unless_one_is_given() {
        let a = call_uuid(None).unwrap();
        let b = call_uuid(None).unwrap();
        assert_ne!(a, b);
        for u in [a, b] {
            let t = uuid_text(&u);
            assert_eq!(parse_uuid(&t), Some(u), "{t}");
            // Version 4, RFC 4122 variant.
            assert_eq!((u[6] >> 4, u[8] >> 6), (4, 2), "{t}");
        }
        let given = "3F2504E0-4f89-41d3-9a0c-0305e82c3301";
        assert_eq!(
            uuid_text(&call_uuid(Some(given)).unwrap()),
            given.to_lowercase()
        );
        for bad in [
            "",
            "3f2504e04f8941d39a0c0305e82c3301",
            "3f2504e0-4f89-41d3-9a0c-0305e82c330",
            "3f2504e0-4f89-41d3-9a0c-0305e82c330g",
            "+f2504e0-4f89-41d3-9a0c-0305e82c3301",
            "3f2504é-4f89-41d3-9a0c-0305e82c3301",
        ] {
            assert!(
                matches!(call_uuid(Some(bad)), Err(DialAudioSocketError::BadUuid(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn urls_that_are_not_websockets_get_the_one_to_use() {
        assert!(check_url("ws://127.0.0.1:8080/twilio").is_ok());
        assert!(check_url("WSS://example.com/twilio").is_ok());
        let e = check_url("http://h:1/twilio").unwrap_err().to_string();
        assert!(e.ends_with("use ws://h:1/twilio"), "{e}");
        let e = check_url("h:1/twilio").unwrap_err().to_string();
        assert!(e.contains("ws://h:1/twilio"), "{e}");
    }

    #[test]
    fn a_header_written_with_a_colon_is_refused_without_its_value() {
        let e = pairs(&["Authorization: Bearer sk-secret-123".into()])
            .unwrap_err()
            .to_string();
        assert!(!e.contains("sk-secret-123"), "{e}");
        assert!(
            e.contains("\"Authorization\"") && e.contains("Authorization=Bearer"),
            "{e}"
        );
        assert_eq!(
            pairs(&["Authorization=Bearer t".into()]).unwrap()["Authorization"],
            "Bearer t"
        );
    }
}

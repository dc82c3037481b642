//! How a bridge caller behaves: its dialect and format, what it says, its ids, and when it hangs up.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::audio::resample;
use crate::leg::bridge::Dialect;
use crate::leg::bridge::audio::AudioFormat;
use crate::leg::fixture::{FixtureCaller, FixtureError, LegCodec};
use crate::leg::twilio::signature::AuthToken;

/// How the caller behaves.
#[derive(Clone, Debug)]
pub struct CallerOptions {
    /// Which bridge the caller behaves like.
    pub dialect: Dialect,
    /// The stream's format, both directions (Twilio: μ-law 8 kHz).
    pub format: AudioFormat,
    /// The caller's audio, mono at `format.rate` (shared: the callers of a load run say parts
    /// of one looped fixture).
    pub samples: Arc<[i16]>,
    /// The part of `samples` this caller says, in samples (default: all of it).
    pub span: Option<Range<usize>>,
    /// Extra headers on the upgrade request (a Telnyx streaming token, Basic auth, ...).
    pub headers: Vec<(String, String)>,
    /// Every this many media messages, send a pair in swapped order (0: never), as a bridge that
    /// does not keep order would.
    pub swap_every: usize,
    /// Sent in `start.customParameters`, like TwiML `<Parameter>`s.
    pub custom_parameters: BTreeMap<String, String>,
    /// Sign the upgrade with `X-Twilio-Signature` using this token.
    pub auth_token: Option<AuthToken>,
    /// The URL to sign: the server's configured public URL, when it differs from the one dialled
    /// (e.g. behind a proxy). Defaults to the dialled URL.
    pub signed_url: Option<String>,
    pub account_sid: String,
    pub call_sid: String,
    pub stream_sid: String,
    /// After the fixture, hang up once the agent has been quiet this long ...
    pub quiet_after: Duration,
    /// ... or this long after the fixture ended, whichever comes first.
    pub max_tail: Duration,
    /// Bound on the WebSocket handshake.
    pub connect_timeout: Duration,
    /// A pause between agent `media` messages longer than this starts a new burst (a new agent
    /// turn); pauses between bursts are not cadence samples.
    pub burst_gap: Duration,
    /// Keep what was said and heard in [`CallerReport::recording`](super::CallerReport). Load
    /// runs turn it off: a recording costs 32 KB per call-second at 8 kHz.
    pub record_audio: bool,
    /// Incremented once the stream has started (the dialect's opening sent), so a load client
    /// can tell when its calls are all up.
    pub started: Option<Arc<std::sync::atomic::AtomicUsize>>,
    /// Told when the stream starts and each time the agent starts speaking (`baton dial`'s
    /// progress); dropped events cost nothing.
    pub events: Option<tokio::sync::mpsc::UnboundedSender<super::CallerEvent>>,
}

impl CallerOptions {
    /// What the caller says: [`span`](Self::span) of [`samples`](Self::samples) (a span that
    /// lies outside them is a caller's mistake: nothing is said).
    pub fn said(&self) -> &[i16] {
        match &self.span {
            Some(r) => {
                let said = self.samples.get(r.clone());
                debug_assert!(
                    said.is_some(),
                    "span {r:?} of {} samples",
                    self.samples.len()
                );
                said.unwrap_or(&[])
            }
            None => &self.samples,
        }
    }

    /// A caller saying `samples_8k` (8 kHz mono), with made-up account, call and stream ids.
    pub fn new(samples_8k: Vec<i16>) -> Self {
        CallerOptions {
            dialect: Dialect::Twilio,
            format: AudioFormat::PCMU_8K,
            samples: samples_8k.into(),
            span: None,
            headers: Vec::new(),
            swap_every: 0,
            custom_parameters: BTreeMap::new(),
            auth_token: None,
            signed_url: None,
            account_sid: "AC00000000000000000000000000000000".into(),
            call_sid: "CA00000000000000000000000000000000".into(),
            stream_sid: "MZ00000000000000000000000000000000".into(),
            quiet_after: Duration::from_millis(1500),
            max_tail: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(10),
            burst_gap: Duration::from_millis(200),
            record_audio: true,
            started: None,
            events: None,
        }
    }

    /// Loads a WAV of any rate, resampled to 8 kHz and passed through μ-law, as a phone caller.
    pub fn from_wav(path: &Path) -> Result<Self, FixtureError> {
        let f = FixtureCaller::from_wav(path, LegCodec::Pcmu8k)?;
        Ok(Self::new(f.samples().to_vec()))
    }

    /// Same, from PCM at `rate`; `name` labels errors.
    pub fn from_pcm(samples: &[i16], rate: u32, name: &str) -> Result<Self, FixtureError> {
        let f = FixtureCaller::from_pcm(samples, rate, LegCodec::Pcmu8k, name)?;
        Ok(Self::new(f.samples().to_vec()))
    }

    /// A caller of `dialect` saying `samples` (PCM at `rate`), resampled to `format.rate` and
    /// passed through its encoding, as that bridge would carry it.
    pub fn for_dialect(
        dialect: Dialect,
        format: AudioFormat,
        samples: &[i16],
        rate: u32,
        name: &str,
    ) -> Result<Self, FixtureError> {
        let mut pcm = if rate == format.rate {
            samples.to_vec()
        } else {
            resample::resample_all(samples, rate, format.rate).map_err(|e| {
                FixtureError::Resample {
                    path: name.to_owned(),
                    from: rate,
                    reason: e.to_string(),
                }
            })?
        };
        if pcm.is_empty() {
            return Err(FixtureError::Empty(name.to_owned()));
        }
        let mut coded = Vec::with_capacity(pcm.len() * 2);
        format.encode(&pcm, &mut coded);
        pcm.clear();
        format.decode(&coded, &mut pcm);
        let mut o = Self::new(pcm);
        o.dialect = dialect;
        o.format = format;
        o.stream_sid = match dialect {
            Dialect::Twilio => o.stream_sid,
            _ => format!("{}-stream-0001", dialect.name()),
        };
        Ok(o)
    }

    /// Same, from a WAV of any rate.
    pub fn from_wav_for(
        dialect: Dialect,
        format: AudioFormat,
        path: &Path,
    ) -> Result<Self, FixtureError> {
        let wav = crate::audio::wav::read(path)?;
        Self::for_dialect(
            dialect,
            format,
            &wav.samples,
            wav.rate,
            &path.display().to_string(),
        )
    }
}

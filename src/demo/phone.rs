//! The warm-transfer demo's SIP side, on loopback: baton's own user agent that dials the person
//! (the call's [`Dialer`]), and the person's phone — a second user agent on the same SIP stack
//! that rings, answers, listens to the brief, presses 1 (RFC 4733) and says its lines, keeping
//! what the person heard and said for `person.wav`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rsipstack::sip::StatusCode;
use rsipstack::transaction::transaction::Transaction;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::args::DemoError;
use crate::audio::Frame;
use crate::audio::playout::PlayedKind;
use crate::call::warm::progress::{self, ProgressSender};
use crate::call::warm::{ACCEPT_KEY, DialRequest, Dialer, Dialing, PersonProgress};
use crate::leg::sip::call::{self, CallSettings, Dial};
use crate::leg::sip::config::{SipConfig, Transport};
use crate::leg::sip::leg::Signal;
use crate::leg::sip::ua::{self, UserAgent};
use crate::leg::sip::uas::{Capacity, Nonces, Policy};
use crate::leg::{LegCommand, LegEvent, LegHandle};
use crate::transfer::Destination;

/// How long the person's phone rings before it answers.
pub const RING: Duration = Duration::from_secs(1);
/// Silence after speech that ends what the person is listening to (the brief, a caller's turn).
const PAUSE: Duration = Duration::from_millis(700);
/// A frame at least this loud (dBFS) is speech.
const VOICED_DBFS: f32 = -45.0;
/// Speech shorter than this (voiced frames) is not yet something to answer.
const MIN_VOICED_FRAMES: u32 = 10;

/// What the person's phone heard and said, one sample of each per sample of its leg.
#[derive(Clone, Debug, Default)]
pub struct PersonRecording {
    pub rate: u32,
    /// What the person said (left channel of `person.wav`).
    pub said: Vec<i16>,
    /// What the person heard: the brief, then the caller (right channel).
    pub heard: Vec<i16>,
    /// When the person pressed the accept key, from the answer.
    pub key_at: Option<Duration>,
}

/// The person's lines: the first after accepting, the next after each turn the caller speaks.
#[derive(Clone, Debug)]
pub struct Lines {
    pub rate: u32,
    pub lines: Vec<Vec<i16>>,
}

/// The two user agents, and the phone's task.
pub struct Phone {
    /// Where the phone is reached (`sip:<user>@127.0.0.1:<port>`).
    pub port: u16,
    pub dialer: Arc<dyn Dialer>,
    baton: Arc<UserAgent>,
    person: Arc<UserAgent>,
    tasks: Vec<JoinHandle<()>>,
    played: JoinHandle<Option<PersonRecording>>,
}

/// The loopback SIP settings both user agents use.
fn sip_config() -> SipConfig {
    SipConfig {
        listen: vec!["udp:127.0.0.1:0".into()],
        rtp_ip: "127.0.0.1".into(),
        ..SipConfig::default()
    }
}

fn settings(c: &SipConfig, ring: Duration, cname: &str) -> CallSettings {
    CallSettings {
        ring,
        media: crate::leg::sip::media::MediaConfig {
            jitter: crate::leg::sip::jitter::JitterConfig {
                rate: 8000,
                min_delay_ms: c.jitter_min_ms,
                max_delay_ms: c.jitter_max_ms,
            },
            cname: cname.into(),
            ..Default::default()
        },
        codecs: c.codec_list(),
        rtp_ports: (c.rtp_port_min, c.rtp_port_max),
    }
}

async fn agent(
    c: &SipConfig,
) -> Result<(Arc<UserAgent>, rsipstack::transaction::TransactionReceiver), DemoError> {
    UserAgent::start(c, None, None)
        .await
        .map_err(|e| DemoError::Usage(format!("the demo's SIP user agent cannot start: {e}")))
}

impl Phone {
    /// Starts baton's user agent and the person's phone on loopback ports of their own.
    pub async fn start(lines: Lines) -> Result<Phone, DemoError> {
        let c = sip_config();
        let (baton, baton_in) = agent(&c).await?;
        let (person, person_in) = agent(&c).await?;
        let port = person
            .addr(Transport::Udp)
            .map(|a| a.port())
            .ok_or_else(|| DemoError::Usage("the person's phone bound no UDP port".into()))?;
        let (invites, incoming) = oneshot::channel();
        let tasks = vec![
            tokio::spawn(baton.clone().serve()),
            tokio::spawn(person.clone().serve()),
            tokio::spawn(ua::dispatch(baton.clone(), baton_in, Arc::new(Refuse))),
            tokio::spawn(ua::dispatch(
                person.clone(),
                person_in,
                Arc::new(Ring(Mutex::new(Some(invites)))),
            )),
        ];
        let phone_ua = person.clone();
        let phone_settings = settings(&c, RING, "person@demo");
        let played = tokio::spawn(async move {
            let tx = incoming.await.ok()?;
            let policy = Policy {
                codecs: phone_settings.codecs.clone(),
                ..Default::default()
            };
            let nonces = Mutex::new(Nonces::default());
            let connected = call::answer(
                phone_ua,
                tx,
                &policy,
                Capacity::Open,
                &nonces,
                &phone_settings,
            )
            .await
            .inspect_err(|e| tracing::warn!(error = %e, "the person's phone did not answer"))
            .ok()?;
            let call::Connected { leg, dialog, .. } = connected;
            let control = leg.control.clone();
            let dialog = tokio::spawn(dialog.run(leg.control, leg.task));
            let recording = converse(leg.handle, control, lines).await;
            let _ = dialog.await;
            Some(recording)
        });
        Ok(Phone {
            port,
            dialer: Arc::new(DemoDialer {
                ua: baton.clone(),
                settings: settings(&c, Duration::ZERO, "baton@demo"),
            }),
            baton,
            person,
            tasks,
            played,
        })
    }

    /// Waits for the person's call to end (it ends with the caller's) and for what baton's
    /// user agent still settles, then stops both user agents. `None` when the phone was never called.
    pub async fn finish(self) -> Option<PersonRecording> {
        let played = self.played;
        let recording = match tokio::time::timeout(Duration::from_secs(5), played).await {
            Ok(r) => r.ok().flatten(),
            Err(_) => None,
        };
        // A CANCEL baton sent (the person's phone given up on) and what may cross it go out
        // before the transports close.
        self.baton.settled(crate::leg::sip::ua::SETTLE_LIMIT).await;
        self.baton.shutdown();
        self.person.shutdown();
        for t in self.tasks {
            t.abort();
        }
        recording
    }
}

/// baton's user agent takes no calls in the demo.
struct Refuse;

impl ua::Handler for Refuse {
    fn invite(&self, mut tx: Transaction) {
        tokio::spawn(async move {
            let _ = tx.reply(StatusCode::NotAcceptableHere).await;
        });
    }
    fn taking_calls(&self) -> bool {
        false
    }
}

/// The person's phone takes one call; a second INVITE hears busy.
struct Ring(Mutex<Option<oneshot::Sender<Transaction>>>);

impl ua::Handler for Ring {
    fn invite(&self, mut tx: Transaction) {
        let first = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        match first {
            Some(invites) => {
                let _ = invites.send(tx);
            }
            None => {
                tokio::spawn(async move {
                    let _ = tx.reply(StatusCode::BusyHere).await;
                });
            }
        }
    }
    fn taking_calls(&self) -> bool {
        true
    }
}

/// What the person is doing.
enum Step {
    /// Listening to the brief; the key goes when it is over.
    Brief,
    /// Pressed the key at this instant; speaks a moment later.
    Pressed(Instant),
    /// Saying line `n` from sample `at`.
    Saying { n: usize, at: usize },
    /// Listening to the caller before line `n`.
    Listening(usize),
    /// Said everything; listens until the call ends.
    Done,
}

/// Speech then a pause, as heard frame by frame.
#[derive(Default)]
struct Ear {
    voiced: u32,
    last_voiced: Option<Instant>,
}

impl Ear {
    fn hear(&mut self, samples: &[i16], now: Instant) {
        if crate::audio::vad::rms_dbfs(samples) > VOICED_DBFS {
            self.voiced += 1;
            self.last_voiced = Some(now);
        }
    }
    /// Enough speech was heard and it has paused.
    fn finished(&self, now: Instant) -> bool {
        self.voiced >= MIN_VOICED_FRAMES
            && self
                .last_voiced
                .is_some_and(|t| now.saturating_duration_since(t) >= PAUSE)
    }
}

/// The person's side of the call, on a 20 ms clock: hears the brief, presses the accept key,
/// says the first line, then one more line after each turn the caller speaks; records both ways.
async fn converse(
    mut leg: LegHandle,
    control: mpsc::Sender<Signal>,
    lines: Lines,
) -> PersonRecording {
    let rate = leg.rate;
    let n = crate::audio::frame::samples_per_frame(rate);
    let lines: Vec<Vec<i16>> = lines
        .lines
        .iter()
        .map(|l| crate::audio::resample::resample_all(l, lines.rate, rate).unwrap_or_default())
        .collect();
    let answered = Instant::now();
    let mut rec = PersonRecording {
        rate,
        ..Default::default()
    };
    let mut step = Step::Brief;
    let mut ear = Ear::default();
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ts = Duration::ZERO;
    loop {
        tokio::select! {
            ev = leg.recv() => match ev {
                Some(LegEvent::Frame { frame, .. }) => {
                    ear.hear(&frame.samples, Instant::now());
                    rec.heard.extend_from_slice(&frame.samples);
                }
                Some(LegEvent::Stop(_)) | None => break,
                Some(_) => {}
            },
            _ = tick.tick() => {
                let now = Instant::now();
                // What was heard keeps to the clock: a gap of more than a few frames (the call
                // sends nothing) is silence; a late frame inside speech is not.
                let due = now.saturating_duration_since(answered).as_millis() as usize * n / 20;
                if rec.heard.len() + 3 * n < due {
                    rec.heard.resize(due, 0);
                }
                step = match step {
                    Step::Brief if ear.finished(now) => {
                        let (reply, _) = oneshot::channel();
                        let _ = control
                            .send(Signal::SendDtmf {
                                digits: ACCEPT_KEY.to_string(),
                                timing: None,
                                reply,
                            })
                            .await;
                        rec.key_at = Some(now.saturating_duration_since(answered));
                        tracing::info!("the person pressed {ACCEPT_KEY} after the brief");
                        Step::Pressed(now)
                    }
                    Step::Pressed(at) if now.saturating_duration_since(at) >= PAUSE => {
                        ear = Ear::default();
                        Step::Saying { n: 0, at: 0 }
                    }
                    Step::Listening(next) if ear.finished(now) => Step::Saying { n: next, at: 0 },
                    s => s,
                };
                let mut samples = vec![0i16; n];
                let mut kind = PlayedKind::Silence;
                if let Step::Saying { n: line, at } = step {
                    let clip = lines.get(line).map(Vec::as_slice).unwrap_or_default();
                    let end = (at + n).min(clip.len());
                    samples[..end - at.min(end)].copy_from_slice(&clip[at.min(end)..end]);
                    kind = PlayedKind::Voice;
                    step = if end >= clip.len() {
                        ear = Ear::default();
                        if line + 1 < lines.len() { Step::Listening(line + 1) } else { Step::Done }
                    } else {
                        Step::Saying { n: line, at: end }
                    };
                }
                rec.said.extend_from_slice(&samples);
                let frame = Frame { rate, ts, samples };
                ts += Duration::from_millis(20);
                if leg.send(LegCommand::Play { frame, kind }).is_err() {
                    break;
                }
                leg.flush().await;
            }
        }
    }
    let len = rec.said.len().max(rec.heard.len());
    rec.said.resize(len, 0);
    rec.heard.resize(len, 0);
    rec
}

/// Dials the person from baton's demo user agent: what the daemon's SIP dialer does for a SIP
/// URI, without trunks.
struct DemoDialer {
    ua: Arc<UserAgent>,
    settings: CallSettings,
}

impl std::fmt::Debug for DemoDialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DemoDialer")
    }
}

impl Dialer for DemoDialer {
    fn dial(&self, req: DialRequest) -> Dialing {
        let (tx, progress) = progress::channel();
        let (cancel, cancelled) = oneshot::channel();
        tokio::spawn(dial(
            self.ua.clone(),
            self.settings.clone(),
            req,
            tx,
            cancelled,
        ));
        Dialing { progress, cancel }
    }
}

async fn dial(
    ua: Arc<UserAgent>,
    settings: CallSettings,
    req: DialRequest,
    mut tx: ProgressSender,
    cancelled: oneshot::Receiver<()>,
) {
    let Destination::Sip(uri) = &req.target else {
        tx.send(PersonProgress::Failed(format!(
            "{}: the demo dials SIP URIs only",
            req.target.as_str()
        )));
        return;
    };
    let target = match rsipstack::sip::Uri::try_from(uri.as_str()) {
        Ok(t) => t,
        Err(e) => {
            tx.send(PersonProgress::Failed(format!("{uri}: {e}")));
            return;
        }
    };
    let from = match rsipstack::sip::Uri::try_from(format!("sip:baton@{}", ua.media_ip).as_str()) {
        Ok(f) => f,
        Err(e) => {
            tx.send(PersonProgress::Failed(e.to_string()));
            return;
        }
    };
    let dial = Dial {
        target,
        from,
        credential: None,
        ring_timeout: req.ring_timeout,
        transport: Transport::Udp,
    };
    call::place_and_run(ua, dial, &settings, cancelled, |p| {
        tx.send(p.into());
    })
    .await;
}

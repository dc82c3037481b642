//! What a mock server remembers across connections: resumption handles and the state they
//! restore, which connections are open (a resume is refused while a socket of the same session is
//! open, as the service does), the fault budget, and — for tests — the caller audio each session
//! lineage received and what each connection did.
//!
//! A *lineage* is one model conversation: a fresh session starts one, and every session resumed
//! from one of its handles continues it. Its audio record follows the server's state exactly: a
//! handle remembers how much caller audio the lineage had consumed when it was issued, a resume
//! cuts the record back to that point, and the resumed connection's audio continues from there.
//! So a client that replays everything the handle does not cover produces a record equal to what
//! its caller said, with at most some duplicated audio at each resume point (replayed audio the
//! handle did cover); a client that loses a frame produces a record with a hole.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::inbound::Rejection;
use super::listen::Listener;
use crate::model::gemini::wire::Content;

/// The caller audio one lineage's model state is built on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LineageAudio {
    /// PCM16 as received, at `rate`.
    pub samples: Vec<i16>,
    /// The rate the audio was declared at (the latest chunk's; 0 before any).
    pub rate: u32,
    /// Where each resume cut the record (sample index).
    pub resumes: Vec<usize>,
    /// The record's length when the latest resumable handle was issued.
    pub last_handle: Option<usize>,
}

/// What one connection did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConnectionLog {
    pub lineage: Option<usize>,
    /// The handle its setup resumed.
    pub resumed: Option<String>,
    /// The close code its setup was refused with.
    pub refused: Option<u16>,
    /// Turns of initial history received.
    pub history_turns: usize,
    /// It greeted the caller on its own.
    pub greeted: bool,
    /// The transcription of every reply, in order.
    pub said: Vec<String>,
    /// The fault that ended it (`go_away`, `drop:1011`, …).
    pub fault: Option<String>,
}

struct Saved {
    state: Arc<ResumeState>,
    lineage: usize,
    audio_at: usize,
}

#[derive(Default)]
struct Store {
    open: HashSet<u64>,
    ended: HashMap<u64, Instant>,
    handles: HashMap<String, (u64, Saved)>,
    next_handle: u64,
    faults: u32,
    /// The first connection's setup: once-per-server drops count from here.
    origin: Option<Instant>,
    /// Once-per-server drop rules that fired.
    fired: HashSet<usize>,
    lineages: Vec<LineageAudio>,
    conns: Vec<ConnectionLog>,
}

/// Shared by every connection of one mock server.
#[derive(Default)]
pub struct Resumption {
    inner: Mutex<Store>,
    /// Lineages' caller audio is recorded (fixed at creation, so the 50-a-second caller frames of
    /// a server that does not record take no lock).
    capture: bool,
}

impl std::fmt::Debug for Resumption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Resumption")
    }
}

/// Why a resume is refused.
fn refused_unknown() -> Rejection {
    Rejection::invalid("Session resumption handle is unknown or has expired.")
}

impl Resumption {
    /// A store that also records every lineage's caller audio (for tests: it grows without
    /// bound).
    pub fn capturing() -> Arc<Self> {
        Arc::new(Resumption {
            capture: true,
            ..Resumption::default()
        })
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection; returns its id.
    pub fn register(&self) -> u64 {
        let mut s = self.lock();
        let id = s.conns.len() as u64;
        s.conns.push(ConnectionLog::default());
        s.open.insert(id);
        id
    }

    /// The connection's socket is closed (its handles stay valid for the TTL from `now`).
    pub fn closed(&self, conn: u64, now: Instant) {
        let mut s = self.lock();
        if s.open.remove(&conn) {
            s.ended.insert(conn, now);
        }
    }

    /// The connection starts a new lineage.
    pub fn start_fresh(&self, conn: u64) {
        let mut s = self.lock();
        let lineage = s.lineages.len();
        s.lineages.push(LineageAudio::default());
        if let Some(c) = s.conns.get_mut(conn as usize) {
            c.lineage = Some(lineage);
        }
    }

    /// Issues a handle for `state` (the connection's lineage as it is now).
    pub fn issue(&self, conn: u64, state: ResumeState) -> String {
        let mut s = self.lock();
        s.next_handle += 1;
        let handle = format!("mock-handle-{}-{}", conn, s.next_handle);
        let lineage = s.lineage_of(conn);
        let audio_at = s.lineages.get(lineage).map_or(0, |l| l.samples.len());
        if let Some(l) = s.lineages.get_mut(lineage) {
            l.last_handle = Some(audio_at);
        }
        let saved = Saved {
            state: Arc::new(state),
            lineage,
            audio_at,
        };
        s.handles.insert(handle.clone(), (conn, saved));
        handle
    }

    /// Resumes `handle` on `conn`: the state to restore, or why not.
    pub fn resume(
        &self,
        handle: &str,
        conn: u64,
        model: &str,
        refuse_all: bool,
        ttl: Duration,
        now: Instant,
    ) -> Result<Arc<ResumeState>, Rejection> {
        let mut s = self.lock();
        let result = s.resume(handle, conn, model, refuse_all, ttl, now);
        if let (Err(r), Some(c)) = (&result, s.conns.get_mut(conn as usize)) {
            c.refused = Some(r.code);
        }
        result
    }

    /// Caller audio the connection consumed.
    pub fn capture(&self, conn: u64, samples: &[i16], rate: u32) {
        if !self.capture {
            return;
        }
        let mut s = self.lock();
        let lineage = s.lineage_of(conn);
        if let Some(l) = s.lineages.get_mut(lineage) {
            l.samples.extend_from_slice(samples);
            l.rate = rate;
        }
    }

    /// Takes one fault from the budget; false when it is spent.
    pub fn take_fault(&self, max: Option<u32>) -> bool {
        let mut s = self.lock();
        if max.is_some_and(|m| s.faults >= m) {
            return false;
        }
        s.faults += 1;
        true
    }

    /// The server's first setup (set by the first caller).
    pub fn origin(&self, now: Instant) -> Instant {
        *self.lock().origin.get_or_insert(now)
    }

    /// Whether once-per-server drop rule `i` has fired; marks it fired when `fire`.
    pub fn drop_fired(&self, i: usize, fire: bool) -> bool {
        let mut s = self.lock();
        if fire {
            !s.fired.insert(i)
        } else {
            s.fired.contains(&i)
        }
    }

    /// Updates what the connection did.
    pub fn note(&self, conn: u64, f: impl FnOnce(&mut ConnectionLog)) {
        if let Some(c) = self.lock().conns.get_mut(conn as usize) {
            f(c);
        }
    }

    /// Every lineage's audio record (empty unless [`Resumption::capturing`]).
    pub fn lineages(&self) -> Vec<LineageAudio> {
        self.lock().lineages.clone()
    }

    /// Every socket upgraded so far, sessions or not (a client's standby sockets too).
    pub fn sockets(&self) -> usize {
        self.lock().conns.len()
    }

    /// What each connection that sent a setup did, in connection order (a socket dialed ahead
    /// and never set up, or closed unused, was no session).
    pub fn connections(&self) -> Vec<ConnectionLog> {
        self.lock()
            .conns
            .iter()
            .filter(|c| c.lineage.is_some() || c.refused.is_some() || c.resumed.is_some())
            .cloned()
            .collect()
    }
}

impl Store {
    fn lineage_of(&self, conn: u64) -> usize {
        self.conns
            .get(conn as usize)
            .and_then(|c| c.lineage)
            .unwrap_or(usize::MAX)
    }

    fn resume(
        &mut self,
        handle: &str,
        conn: u64,
        model: &str,
        refuse_all: bool,
        ttl: Duration,
        now: Instant,
    ) -> Result<Arc<ResumeState>, Rejection> {
        let Some((issuer, saved)) = self.handles.get(handle).filter(|_| !refuse_all) else {
            return Err(refused_unknown());
        };
        let lineage = saved.lineage;
        let open = self.conns.iter().enumerate().any(|(i, c)| {
            i as u64 != conn && c.lineage == Some(lineage) && self.open.contains(&(i as u64))
        });
        if open {
            return Err(Rejection::new(
                1011,
                "Internal error occurred. (the session's previous connection is still open)",
            ));
        }
        if let Some(&ended) = self.ended.get(issuer)
            && now.saturating_duration_since(ended) > ttl
        {
            return Err(refused_unknown());
        }
        if saved.state.model() != model {
            return Err(Rejection::invalid(format!(
                "setup.model {model:?} differs from the resumed session's {:?}",
                saved.state.model()
            )));
        }
        let (state, audio_at) = (saved.state.clone(), saved.audio_at);
        if let Some(l) = self.lineages.get_mut(lineage) {
            l.samples.truncate(audio_at);
            l.resumes.push(audio_at);
        }
        if let Some(c) = self.conns.get_mut(conn as usize) {
            c.lineage = Some(lineage);
            c.resumed = Some(handle.to_owned());
        }
        Ok(state)
    }
}
/// What a resumption handle restores: the conversation as it was when the handle was issued.
#[derive(Debug)]
pub struct ResumeState {
    pub(super) model: String,
    pub(super) active: Option<usize>,
    pub(super) voice: Option<Option<usize>>,
    pub(super) caller_turns: usize,
    pub(super) history: Vec<Content>,
    pub(super) prompt_tokens: u64,
    pub(super) next_call_id: u64,
    pub(super) listener: Option<Listener>,
    pub(super) wedged: bool,
}

impl ResumeState {
    /// The model the resumed session was set up with (a resume may not change it).
    pub(crate) fn model(&self) -> &str {
        &self.model
    }
}

//! Helpers of the SIP tests: real SIP peers from Debian (SIPp, baresip) run as child processes
//! on loopback, SIPp scenarios written for each test, and a Rust RTP peer that plays a trunk's
//! media (with loss and reordering when asked) and records what baton sends.
#![allow(dead_code)]

use std::net::{SocketAddr, UdpSocket as StdUdp};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use baton::leg::sip::config::Transport;
use baton::leg::sip::{dtmf, rtp};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::support::{Daemon, ROOT};

/// Whether `tool` is installed. Missing under CI fails the test; elsewhere the test says
/// SKIPPED and passes.
pub fn require(tool: &str, package: &str) -> bool {
    let found = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{tool} is not installed (Debian package {package}; scripts/setup.sh installs it)");
    }
    eprintln!("SKIPPED: {tool} is not installed (Debian package {package}; run scripts/setup.sh)");
    false
}

/// A free UDP port on loopback.
pub fn free_udp() -> u16 {
    StdUdp::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A port `p` free for SIP over UDP and TCP, with `p + 1` free over TCP too (baresip's TLS).
pub fn free_sip_ports() -> u16 {
    for _ in 0..200 {
        let p = free_udp();
        if (1024..=65000).contains(&p)
            && std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()
            && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok()
        {
            return p;
        }
    }
    panic!("no free SIP ports");
}

/// A free even port `p` with `p + 1`, `p + 2` and `p + 3` free too (SIPp's media and echo
/// ports).
pub fn free_media_ports() -> u16 {
    for _ in 0..200 {
        let a = StdUdp::bind("127.0.0.1:0").unwrap();
        let p = a.local_addr().unwrap().port() & !1;
        drop(a);
        if !(1024..=65000).contains(&p) {
            continue;
        }
        let ok = (0..4).all(|i| StdUdp::bind(("127.0.0.1", p + i)).is_ok());
        if ok {
            return p;
        }
    }
    panic!("no four free UDP ports in a row");
}

/// A daemon on the embedded mock with SIP on an ephemeral UDP and TCP port; `sip_extra` is
/// added to `[sip]`, `extra` after it.
pub async fn daemon(scenario: &str, sip_extra: &str, extra: &str) -> (Daemon, SocketAddr) {
    daemon_with(scenario, sip_extra, extra, 50).await
}

/// [`daemon`] taking at most `max_calls` calls.
pub async fn daemon_with(
    scenario: &str,
    sip_extra: &str,
    extra: &str,
    max_calls: usize,
) -> (Daemon, SocketAddr) {
    let listen = r#"["udp:127.0.0.1:0", "tcp:127.0.0.1:0"]"#;
    let d = daemon_on(scenario, listen, sip_extra, extra, max_calls).await;
    let addr = d.app.sip.get().and_then(|s| s.addr(Transport::Udp));
    (d, addr.expect("the SIP listener has a UDP transport"))
}

/// A daemon on the embedded mock with `model_extra` in its `[model]` (e.g. a profile), SIP on
/// an ephemeral UDP and TCP port, and `extra` after `[sip]`.
pub async fn daemon_on_model(scenario: &str, model_extra: &str, extra: &str) -> Daemon {
    let listen = r#"["udp:127.0.0.1:0", "tcp:127.0.0.1:0"]"#;
    let config = format!(
        "{}\n[sip]\nlisten = {listen}\n{extra}\n",
        super::support::mock_config(scenario, model_extra)
    );
    sip_bound(Daemon::start(&config).await).await
}

/// A daemon on the embedded mock answering SIP on `listen` (a TOML list), once it is bound.
pub async fn daemon_on(
    scenario: &str,
    listen: &str,
    sip_extra: &str,
    extra: &str,
    max_calls: usize,
) -> Daemon {
    let config = format!(
        "{}\n[sip]\nlisten = {listen}\n{sip_extra}\n{extra}\n",
        super::support::mock_config(scenario, "")
            .replace("max_calls = 50", &format!("max_calls = {max_calls}"))
    );
    sip_bound(Daemon::start(&config).await).await
}

/// `d` once its SIP listener is bound.
async fn sip_bound(d: Daemon) -> Daemon {
    d.bound("the SIP listener", |app| app.sip.get().map(|_| ()))
        .await;
    d
}

/// Waits until SIPp, started by `peer`, listens on UDP `port`: at most 20 s. Panics with SIPp's
/// run if it ended first (a callee's scenario cannot end before it is called). It reads the
/// kernel's socket table rather than trying the port, which could take it from SIPp for a moment.
pub async fn until_listening(peer: &mut tokio::task::JoinHandle<SippRun>, port: u16) {
    let mut ended = false;
    super::support::eventually(&format!("SIPp to listen on UDP {port}"), || {
        ended = peer.is_finished();
        ended || udp_bound(port)
    })
    .await;
    if ended && !udp_bound(port) {
        panic!(
            "SIPp ended before it listened on UDP {port}: {:#?}",
            peer.await
        );
    }
}

/// Whether a UDP socket of this machine is bound to `port` (`/proc/net/udp` and `udp6`, whose
/// second column is `ADDRESS:PORT` with the port in hex).
fn udp_bound(port: u16) -> bool {
    let want = format!(":{port:04X}");
    let bound_in = |table: &str| {
        table.lines().skip(1).any(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|a| a.ends_with(&want))
        })
    };
    let v4 = std::fs::read_to_string("/proc/net/udp")
        .expect("the UDP socket table (/proc/net/udp) is readable");
    bound_in(&v4) || std::fs::read_to_string("/proc/net/udp6").is_ok_and(|v6| bound_in(&v6))
}

/// What a SIPp run did.
#[derive(Debug)]
pub struct SippRun {
    /// SIPp's exit code: 0 when every call followed the scenario.
    pub code: i32,
    /// Every SIP message sent and received.
    pub messages: String,
    pub errors: String,
    pub stdout: String,
    pub stderr: String,
}

impl SippRun {
    /// SIPp could not bind one of these sockets (`"main socket"`, `"audio RTP socket"`, …, as
    /// its error names them) because another process had its port, and so exchanged no message.
    fn lost_a_port(&self, sockets: &[&str]) -> bool {
        let said = |log: &str| {
            log.contains("errno = 98")
                && sockets
                    .iter()
                    .any(|s| log.contains(&format!("Unable to bind {s}")))
        };
        self.code != 0
            && !self.messages.contains("SIP/2.0")
            && (said(&self.stderr) || said(&self.errors))
    }

    /// Panics with SIPp's logs unless every call followed the scenario.
    pub fn assert_ok(&self) {
        assert_eq!(
            self.code, 0,
            "SIPp failed (exit {}):\nerrors:\n{}\nmessages:\n{}",
            self.code, self.errors, self.messages
        );
    }
}

/// Which scenario SIPp runs.
#[derive(Clone)]
pub enum Scenario<'a> {
    /// One of SIPp's embedded scenarios (`-sn uac`).
    Builtin(&'a str),
    /// A scenario file's text.
    Xml(String),
}

/// Runs SIPp against `target` in `dir` (where media files are) until its calls end.
pub async fn sipp(
    dir: &Path,
    scenario: Scenario<'_>,
    target: SocketAddr,
    extra: &[&str],
) -> SippRun {
    for attempt in 1.. {
        let run = sipp_on(dir, scenario.clone(), free_udp(), Some(target), extra).await;
        if attempt == TRIES || !run.lost_a_port(&["main socket"]) {
            return run;
        }
    }
    unreachable!()
}

/// How often SIPp or baresip is started when another process took a port it was to bind.
const TRIES: u32 = 4;

/// Runs SIPp on SIP port `port` of loopback, calling `target` (a caller's scenario) or, with
/// none, waiting for calls (a callee's: `-m 1` ends it after one).
pub async fn sipp_on(
    dir: &Path,
    scenario: Scenario<'_>,
    port: u16,
    target: Option<SocketAddr>,
    extra: &[&str],
) -> SippRun {
    // Ports chosen free can be taken by another test before SIPp binds them; SIPp then exits
    // at once saying so, having sent and taken no SIP message, and runs again on fresh media
    // and control ports (its SIP port is the caller's: `sipp` chooses another for a caller's
    // scenario). A request sent to a callee's SIP port meanwhile reaches the next run by the
    // sender's retransmission.
    let lost = [
        "audio RTP socket",
        "video RTP socket",
        "remote control socket",
    ];
    for attempt in 1.. {
        let run = sipp_once(dir, &scenario, port, target, extra).await;
        if attempt == TRIES || !run.lost_a_port(&lost) {
            return run;
        }
    }
    unreachable!()
}

async fn sipp_once(
    dir: &Path,
    scenario: &Scenario<'_>,
    port: u16,
    target: Option<SocketAddr>,
    extra: &[&str],
) -> SippRun {
    let mp = free_media_ports();
    let control = free_udp();
    let msg = dir.join(format!("msg-{port}.log"));
    let err = dir.join(format!("err-{port}.log"));
    // Nothing of an earlier run on this port (SIPp writes its error file only when it has one).
    let _ = std::fs::remove_file(&msg);
    let _ = std::fs::remove_file(&err);
    let mut cmd = tokio::process::Command::new("sipp");
    match scenario {
        Scenario::Builtin(name) => {
            cmd.args(["-sn", name]);
        }
        Scenario::Xml(text) => {
            let f = dir.join(format!("scenario-{port}.xml"));
            std::fs::write(&f, text).unwrap();
            cmd.arg("-sf").arg(f);
        }
    }
    cmd.args(["-i", "127.0.0.1", "-mi", "127.0.0.1", "-nostdin"])
        .args(["-p", &port.to_string(), "-mp", &mp.to_string()])
        .args(["-cp", &control.to_string()])
        .args(["-timeout", "40s", "-timeout_error"])
        .arg("-trace_msg")
        .arg("-message_file")
        .arg(&msg)
        .arg("-trace_err")
        .arg("-error_file")
        .arg(&err)
        .args(extra)
        .args(target.map(|t| t.to_string()))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("SIPp ran over 60 s")
        .expect("SIPp did not start");
    SippRun {
        code: out.status.code().unwrap_or(-1),
        messages: std::fs::read_to_string(&msg).unwrap_or_default(),
        errors: std::fs::read_to_string(&err).unwrap_or_default(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// An INVITE of a SIPp scenario with `m=audio <port> RTP/AVP <pts>` and these attribute lines.
pub fn invite(media_port: &str, pts: &str, attrs: &str) -> String {
    let body = format!(
        "v=0\no=user1 53655765 2353687637 IN IP[local_ip_type] [local_ip]\ns=-\nc=IN IP[media_ip_type] [media_ip]\nt=0 0\nm=audio {media_port} RTP/AVP {pts}\n{attrs}"
    );
    format!(
        r#"  <send retrans="500">
    <![CDATA[
      INVITE sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: [service] <sip:[service]@[remote_ip]:[remote_port]>
      Call-ID: [call_id]
      CSeq: 1 INVITE
      Contact: sip:sipp@[local_ip]:[local_port]
      Max-Forwards: 70
      Content-Type: application/sdp
      Content-Length: [len]

{body}
    ]]>
  </send>
"#
    )
}

/// An in-dialog request of a SIPp scenario (`ACK`, `BYE`, a re-INVITE), CSeq `cseq`.
pub fn in_dialog(method: &str, cseq: u32, body: Option<&str>) -> String {
    let (ct, body) = match body {
        Some(b) => ("Content-Type: application/sdp\n      ", b.to_owned()),
        None => ("", String::new()),
    };
    let retrans = if method == "ACK" {
        ""
    } else {
        r#" retrans="500""#
    };
    format!(
        r#"  <send{retrans}>
    <![CDATA[
      {method} sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: [service] <sip:[service]@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: {cseq} {method}
      Contact: sip:sipp@[local_ip]:[local_port]
      Max-Forwards: 70
      {ct}Content-Length: [len]

{body}
    ]]>
  </send>
"#
    )
}

/// An SDP body for a re-INVITE from SIPp with this direction attribute.
pub fn sdp_body(media_port: &str, direction: &str) -> String {
    format!(
        "v=0\no=user1 53655765 2353687638 IN IP[local_ip_type] [local_ip]\ns=-\nc=IN IP[media_ip_type] [media_ip]\nt=0 0\nm=audio {media_port} RTP/AVP 0\na=rtpmap:0 PCMU/8000\na={direction}\n"
    )
}

/// `<recv response="…"/>`, optional or not.
pub fn recv(status: u16, optional: bool) -> String {
    if optional {
        format!("  <recv response=\"{status}\" optional=\"true\"/>\n")
    } else {
        format!("  <recv response=\"{status}\"/>\n")
    }
}

/// A whole scenario from its steps.
pub fn scenario(name: &str, steps: &[String]) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n<scenario name=\"{name}\">\n{}</scenario>\n",
        steps.concat()
    )
}

/// The first turn of the bundled caller conversation at 8 kHz: 0.5 s of silence, the caller's
/// question (to 3.14 s).
pub fn caller_turn_8k() -> Vec<i16> {
    let clip = baton::audio::wav::read(
        &Path::new(ROOT).join("audio-fixtures/clips/caller_conversation.wav"),
    )
    .unwrap();
    let first = &clip.samples[..(clip.rate as usize * 3140 / 1000)];
    baton::audio::resample::resample_all(first, clip.rate, 8000).unwrap()
}

/// G.711 bytes of `pcm` (μ-law for payload type 0, A-law for 8).
pub fn g711(pcm: &[i16], pt: u8) -> Vec<u8> {
    let mut out = Vec::new();
    if pt == 8 {
        baton::audio::g711::encode_alaw(pcm, &mut out);
    } else {
        baton::audio::g711::encode_ulaw(pcm, &mut out);
    }
    out
}

/// What a [`MediaPeer`] heard.
#[derive(Debug, Default)]
pub struct Heard {
    /// baton's audio placed by RTP timestamp from its first packet (8 kHz).
    pub pcm: Vec<i16>,
    pub packets: u64,
    /// Digits from RFC 4733 events, once per press.
    pub digits: Vec<char>,
    /// baton's source address.
    pub from: Option<SocketAddr>,
    /// Arrival intervals of audio packets, in µs.
    pub intervals_us: Vec<u64>,
    pub ssrcs: Vec<u32>,
}

impl Heard {
    /// The median arrival interval of baton's audio packets, in µs (0 with none).
    pub fn median_interval_us(&self) -> u64 {
        let mut iv = self.intervals_us.clone();
        iv.sort_unstable();
        iv.get(iv.len() / 2).copied().unwrap_or(0)
    }
}

/// How a [`MediaPeer`] mistreats its stream on the way to baton.
#[derive(Clone, Copy, Debug, Default)]
pub struct Impairment {
    /// Drop this share of packets (0–1), chosen by a fixed pseudo-random sequence.
    pub loss: f64,
    /// Swap every n-th packet with the next (0: never).
    pub reorder_every: usize,
}

/// A trunk's media, played by the test: streams PCM to baton as 20 ms G.711 packets in real
/// time and records what baton sends.
pub struct MediaPeer {
    pub sock: UdpSocket,
}

impl MediaPeer {
    pub async fn bind() -> MediaPeer {
        MediaPeer {
            sock: UdpSocket::bind("127.0.0.1:0").await.unwrap(),
        }
    }

    pub fn port(&self) -> u16 {
        self.sock.local_addr().unwrap().port()
    }

    /// Waits for baton's first packet (it sends from the answer on), then sends `pcm` back to
    /// where it came from with payload type `pt`, and records until `listen` has passed since
    /// the first packet. Returns what was heard.
    pub async fn converse(&self, pcm: &[i16], pt: u8, imp: Impairment, listen: Duration) -> Heard {
        self.converse_keys(pcm, pt, imp, listen, &[]).await
    }

    /// [`converse`](Self::converse), pressing `keys` (time after the first packet, key) as
    /// RFC 4733 events on payload type 101 in place of the audio (100 ms each, the end packet
    /// three times).
    pub async fn converse_keys(
        &self,
        pcm: &[i16],
        pt: u8,
        imp: Impairment,
        listen: Duration,
        keys: &[(Duration, char)],
    ) -> Heard {
        self.converse_with(None, pcm, pt, imp, listen, keys).await
    }

    /// [`converse_keys`](Self::converse_keys); with `to`, it speaks to that address from the
    /// start (as a phone that answered does) instead of waiting for baton's first packet.
    pub async fn converse_with(
        &self,
        to: Option<SocketAddr>,
        pcm: &[i16],
        pt: u8,
        imp: Impairment,
        listen: Duration,
        keys: &[(Duration, char)],
    ) -> Heard {
        let mut buf = [0u8; 2048];
        let mut heard = Heard::default();
        let first = match to {
            Some(_) => None,
            None => {
                match tokio::time::timeout(Duration::from_secs(30), self.sock.recv_from(&mut buf))
                    .await
                {
                    Ok(got) => Some(got.unwrap()),
                    // Nothing heard: the caller's assertions (SIPp's exit, the call's events,
                    // what was heard) say why, which a panic here would hide.
                    Err(_) => {
                        eprintln!("baton sent no RTP to port {} within 30 s", self.port());
                        return heard;
                    }
                }
            }
        };
        let from = match (to, first) {
            (Some(to), _) => to,
            (None, Some((_, from))) => from,
            (None, None) => unreachable!(),
        };
        heard.from = Some(from);
        let start = Instant::now();
        let mut base_ts = None;
        let mut last_arrival: Option<Instant> = None;
        let mut events = dtmf::Receiver::default();
        let mut take = |bytes: &[u8], heard: &mut Heard, at: Instant| {
            let Ok(p) = rtp::parse(bytes) else { return };
            heard.packets += 1;
            if !heard.ssrcs.contains(&p.ssrc) {
                heard.ssrcs.push(p.ssrc);
            }
            if p.pt == 101 {
                if let Ok(e) = dtmf::parse_event(&p.payload)
                    && let Some(d) = events.on_packet(p.ts, &e)
                {
                    heard.digits.push(d);
                }
                return;
            }
            if let Some(prev) = last_arrival {
                heard.intervals_us.push((at - prev).as_micros() as u64);
            }
            last_arrival = Some(at);
            let base = *base_ts.get_or_insert(p.ts);
            let off = p.ts.wrapping_sub(base) as usize;
            if off > 8000 * 120 {
                return;
            }
            let mut pcm = Vec::new();
            if p.pt == 8 {
                baton::audio::g711::decode_alaw(&p.payload, &mut pcm);
            } else {
                baton::audio::g711::decode_ulaw(&p.payload, &mut pcm);
            }
            if heard.pcm.len() < off + pcm.len() {
                heard.pcm.resize(off + pcm.len(), 0);
            }
            heard.pcm[off..off + pcm.len()].copy_from_slice(&pcm);
        };
        if let Some((n, _)) = first {
            take(&buf[..n], &mut heard, start);
        }
        // One stream (one SSRC and sequence) for audio and key events, as a phone sends.
        let mut sender = rtp::Sender::new(0x5eed, 1000, 160_000);
        let chunks: Vec<Vec<u8>> = g711(pcm, pt).chunks(160).map(<[u8]>::to_vec).collect();
        let mut next = 0usize;
        let mut held: Option<Vec<u8>> = None;
        let mut key_next = 0usize;
        let mut pressing: Option<(u8, u32, u32)> = None;
        let mut lcg: u64 = 0x2545_f491_4f6c_dd1d;
        let mut tick = tokio::time::interval_at(start, Duration::from_millis(20));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let end = start + listen;
        loop {
            tokio::select! {
                r = self.sock.recv_from(&mut buf) => {
                    if let Ok((n, _)) = r {
                        take(&buf[..n], &mut heard, Instant::now());
                    }
                }
                _ = tick.tick() => {
                    let slot_ts = 160_000 + next as u32 * 160;
                    if pressing.is_none()
                        && let Some(k) = keys.get(key_next)
                        && Instant::now() >= start + k.0
                    {
                        key_next += 1;
                        pressing = dtmf::event_of(k.1).map(|code| (code, slot_ts, 0u32));
                    }
                    if let Some((code, ts, n)) = pressing.as_mut() {
                        *n += 1;
                        let e = dtmf::Event {
                            code: *code,
                            end: *n > 5,
                            volume: 10,
                            duration: (5.min(*n) * 160) as u16,
                        };
                        let p = sender.packet(101, *ts, *n == 1, &dtmf::event_payload(e));
                        let _ = self.sock.send_to(&p, from).await;
                        if *n >= 8 {
                            pressing = None;
                        }
                        // The audio the event replaces is not sent; its time moves on.
                        next += 1;
                        continue;
                    }
                    let Some(chunk) = chunks.get(next) else { continue };
                    let p = sender.packet(pt, slot_ts, false, chunk);
                    next += 1;
                    lcg = lcg.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let roll = (lcg >> 33) as f64 / (1u64 << 31) as f64;
                    if roll < imp.loss {
                        // A held packet goes out in this slot all the same: a swap delays it
                        // by one packet, never by the loss that follows it.
                        if let Some(h) = held.take() {
                            let _ = self.sock.send_to(&h, from).await;
                        }
                        continue;
                    }
                    if imp.reorder_every > 0 && next.is_multiple_of(imp.reorder_every) && held.is_none() {
                        held = Some(p);
                        continue;
                    }
                    let _ = self.sock.send_to(&p, from).await;
                    if let Some(h) = held.take() {
                        let _ = self.sock.send_to(&h, from).await;
                    }
                }
                _ = tokio::time::sleep_until(end) => break,
            }
        }
        heard
    }
}

/// A SIP test's scratch folder under `target/sip-tests/` (SIPp's logs, media files,
/// recordings), removed when the test passes and kept when it fails.
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn scratch(name: &str) -> Scratch {
    let d = Path::new(ROOT)
        .join("target/sip-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

/// Power of `f` Hz in `x` (Goertzel), normalised by length.
fn power(x: &[i16], f: f64, rate: u32) -> f64 {
    let w = 2.0 * std::f64::consts::PI * f / f64::from(rate);
    let (mut s1, mut s2) = (0.0f64, 0.0f64);
    for &v in x {
        let s0 = f64::from(v) + 2.0 * w.cos() * s1 - s2;
        s2 = s1;
        s1 = s0;
    }
    (s1 * s1 + s2 * s2 - 2.0 * w.cos() * s1 * s2) / (x.len() as f64).powi(2)
}

/// The keys sounding in `pcm`, in order: each 20 ms block whose strongest row and column tones
/// stand well above the rest, a run of one key counted once.
pub fn keys_heard(pcm: &[i16], rate: u32) -> Vec<char> {
    const LOW: [f64; 4] = [697.0, 770.0, 852.0, 941.0];
    const HIGH: [f64; 4] = [1209.0, 1336.0, 1477.0, 1633.0];
    const KEYS: [[char; 4]; 4] = [
        ['1', '2', '3', 'A'],
        ['4', '5', '6', 'B'],
        ['7', '8', '9', 'C'],
        ['*', '0', '#', 'D'],
    ];
    let mut out = Vec::new();
    let mut last = None;
    let mut quiet = 0u32;
    let mut prev = None;
    for block in pcm.chunks((rate / 50) as usize) {
        let lp: Vec<f64> = LOW.iter().map(|f| power(block, *f, rate)).collect();
        let hp: Vec<f64> = HIGH.iter().map(|f| power(block, *f, rate)).collect();
        let best = |p: &[f64]| {
            let (i, m) = p
                .iter()
                .enumerate()
                .fold((0, 0.0), |a, (i, v)| if *v > a.1 { (i, *v) } else { a });
            let rest = p.iter().sum::<f64>() - m;
            (i, m, rest)
        };
        let (li, lm, lr) = best(&lp);
        let (hi, hm, hr) = best(&hp);
        let key = (lm > 1e5 && hm > 1e5 && lm > 10.0 * lr && hm > 10.0 * hr).then(|| KEYS[li][hi]);
        // A key counts once it has sounded for 40 ms (speech does not hold two pure tones that
        // long), and again only after 40 ms without it (a detector's inter-digit pause), so one
        // block lost inside a tone does not make two presses.
        match key {
            Some(k) if prev == Some(k) && (last != Some(k) || quiet >= 2) => {
                out.push(k);
                quiet = 0;
                last = Some(k);
            }
            Some(k) if last == Some(k) => quiet = 0,
            _ => quiet += 1,
        }
        prev = key;
    }
    out
}

/// baresip (Debian package `baresip-core`), a real softphone, run headless on loopback: it plays a
/// WAV as its microphone (and hangs up when the WAV ends), answers calls at once, records what
/// it hears, and is driven and watched over its TCP control socket (`ctrl_tcp`: commands such
/// as `dial` and `sndcode` in, call events such as `CALL_DTMF_START` out).
pub struct Baresip {
    child: tokio::process::Child,
    /// Its SIP port (UDP).
    pub port: u16,
    ctrl: tokio::net::tcp::OwnedWriteHalf,
    events: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    dir: PathBuf,
}

impl Baresip {
    /// Starts baresip in `dir` with `mic` (8 kHz) as its microphone; quits after `run_s`.
    pub async fn start(dir: &Path, mic: &[i16], run_s: u32) -> Baresip {
        Self::start_with(dir, mic, run_s, "").await
    }

    /// [`start`](Self::start) with more lines for its config file (`sip_cafile …`).
    pub async fn start_with(dir: &Path, mic: &[i16], run_s: u32, config_extra: &str) -> Baresip {
        Self::start_opts(dir, mic, run_s, config_extra, "PCMU").await
    }

    /// [`start_with`](Self::start_with) offering and taking `codecs` (baresip's
    /// `audio_codecs`, e.g. `"opus/48000/2,PCMU"`). With a `sip_certificate` in `config_extra`
    /// it also takes TLS, on its SIP port + 1.
    pub async fn start_opts(
        dir: &Path,
        mic: &[i16],
        run_s: u32,
        config_extra: &str,
        codecs: &str,
    ) -> Baresip {
        let dir = dir.join(format!("baresip-{}", free_udp()));
        std::fs::create_dir_all(&dir).unwrap();
        // baresip's file source must run at the codec's rate and channels: 48 kHz stereo for
        // Opus (each 8 kHz sample held six times, on both channels).
        let (repeat, channels) = if codecs.starts_with("opus") {
            (6, 2)
        } else {
            (1, 1)
        };
        let spec = hound::WavSpec {
            channels,
            sample_rate: 8000 * repeat,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(dir.join("mic.wav"), spec).unwrap();
        for s in mic {
            for _ in 0..repeat * u32::from(channels) {
                w.write_sample(*s).unwrap();
            }
        }
        w.finalize().unwrap();
        // A port chosen free can be taken by another process before baresip binds it: baresip
        // then says so ("Address already in use") and exits (a SIP transport) or runs on
        // without the module (the control socket, whose port another process may then be
        // answering on), and it is started again on fresh ports.
        let mut attempt = 0;
        let (child, port, stream) = loop {
            attempt += 1;
            let port = free_sip_ports();
            let ctrl_port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let rtp = free_media_ports();
            // The ALSA "null" device plays nothing; sndfile dumps what is heard.
            let config = format!(
                "poll_method\tepoll\nsip_listen\t127.0.0.1:{port}\naudio_player\talsa,null\n\
                 audio_alert\talsa,null\naudio_source\taufile,{mic}\nrtp_ports\t{rtp}-{}\n\
                 module_path\t/usr/lib/baresip/modules\nmodule\tg711.so\nmodule\topus.so\n\
                 module\taufile.so\n\
                 module\talsa.so\nmodule\tsndfile.so\nmodule_app\taccount.so\nmodule_app\tmenu.so\n\
                 module_app\tctrl_tcp.so\nctrl_tcp_listen\t127.0.0.1:{ctrl_port}\nsnd_path\t{dir}\n\
                 {config_extra}",
                rtp + 3,
                mic = dir.join("mic.wav").display(),
                dir = dir.display(),
            );
            std::fs::write(dir.join("config"), config).unwrap();
            std::fs::write(
                dir.join("accounts"),
                format!(
                    "<sip:phone@127.0.0.1:{port}>;regint=0;answermode=auto;audio_codecs={codecs}\n"
                ),
            )
            .unwrap();
            let mut child = tokio::process::Command::new("baresip")
                .args(["-n", "127.0.0.1", "-f"])
                .arg(&dir)
                .args(["-t", &run_s.to_string()])
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(dir.join("stdout.log")).unwrap())
                .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
                .kill_on_drop(true)
                .spawn()
                .expect("baresip did not start");
            let log = || std::fs::read_to_string(dir.join("stdout.log")).unwrap_or_default();
            let lost = || log().contains("Address already in use");
            // baresip says it is ready once every module has loaded (its control socket
            // listening); only then is a connection to that port surely baresip's.
            // A loaded machine may take seconds to start it: it gets 20 s.
            let said_ready = || log().contains("baresip is ready");
            super::support::holds_soon(|| {
                said_ready() || lost() || child.try_wait().ok().flatten().is_some()
            })
            .await;
            let ready = said_ready();
            let stream = if ready && !lost() {
                tokio::net::TcpStream::connect(("127.0.0.1", ctrl_port))
                    .await
                    .ok()
            } else {
                None
            };
            match stream {
                Some(s) => break (child, port, s),
                None if attempt < TRIES && lost() => {
                    let _ = child.kill().await;
                }
                None => panic!(
                    "baresip did not open its control socket and say it was ready within 20 s: {}",
                    log()
                ),
            }
        };
        let (mut read, ctrl) = stream.into_split();
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = events.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while let Ok(n) = read.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                // Netstrings: <length>:<json>,
                while let Some(colon) = buf.iter().position(|b| *b == b':') {
                    let Some(len) = std::str::from_utf8(&buf[..colon])
                        .ok()
                        .and_then(|s| s.parse::<usize>().ok())
                    else {
                        buf.clear();
                        break;
                    };
                    if buf.len() < colon + 1 + len + 1 {
                        break;
                    }
                    if let Ok(v) = serde_json::from_slice(&buf[colon + 1..colon + 1 + len]) {
                        sink.lock().unwrap().push(v);
                    }
                    buf.drain(..colon + 1 + len + 1);
                }
            }
        });
        Baresip {
            child,
            port,
            ctrl,
            events,
            dir,
        }
    }

    /// Sends a command (`dial`, `sndcode`, `hangup`) over the control socket.
    pub async fn command(&mut self, command: &str, params: &str) {
        use tokio::io::AsyncWriteExt;
        let j =
            serde_json::json!({"command": command, "params": params, "token": command}).to_string();
        self.ctrl
            .write_all(format!("{}:{j},", j.len()).as_bytes())
            .await
            .unwrap();
    }

    /// The call events so far (`CALL_ESTABLISHED`, `CALL_DTMF_START`, `CALL_CLOSED`, …).
    pub fn events(&self) -> Vec<serde_json::Value> {
        self.events.lock().unwrap().clone()
    }

    /// Waits (at most `timeout`) for an event of this type.
    pub async fn wait_event(&self, kind: &str, timeout: Duration) -> Option<serde_json::Value> {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if let Some(e) = self.events().into_iter().find(|e| e["type"] == kind) {
                return Some(e);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// The keys baresip was sent, in order (RFC 4733 events or INFO).
    pub fn keys_received(&self) -> Vec<char> {
        self.events()
            .iter()
            .filter(|e| e["type"] == "CALL_DTMF_START")
            .filter_map(|e| e["param"].as_str().and_then(|p| p.chars().next()))
            .collect()
    }

    /// What baresip heard (its decoder's output), once its call has ended.
    pub fn heard(&self) -> Vec<i16> {
        self.heard_at().0
    }

    /// What baresip heard and its sample rate (48000 on an Opus call).
    pub fn heard_at(&self) -> (Vec<i16>, u32) {
        let mut out = Vec::new();
        let mut rate = 8000;
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("dump-")
                    && name.ends_with("-dec.wav")
                    && let Ok(mut r) = hound::WavReader::open(e.path())
                {
                    rate = r.spec().sample_rate;
                    let channels = usize::from(r.spec().channels.max(1));
                    out = r
                        .samples::<i16>()
                        .map_while(Result::ok)
                        .step_by(channels)
                        .collect();
                }
            }
        }
        (out, rate)
    }

    /// Its log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stdout.log"))
            .unwrap_or_default()
            .replace('\r', "\n")
            .lines()
            .filter(|l| !l.contains("audio=") && !l.starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits for baresip to quit (its `-t`), at most `timeout`.
    pub async fn wait(&mut self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.child.wait()).await;
    }
}

/// `POST <path>` on baton's HTTP address with a JSON body: the status and the JSON answer.
pub async fn post(addr: SocketAddr, path: &str, body: &str) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out))
        .await
        .unwrap_or_else(|_| panic!("POST {path} answered within 20 s"))
        .unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not HTTP: {text}"));
    let json = text
        .split("\r\n\r\n")
        .nth(1)
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or_else(|| panic!("no JSON: {text}"));
    (status, json)
}

/// The next finished SIP call (at most 30 s away).
pub async fn next_record(
    rx: &mut tokio::sync::broadcast::Receiver<baton::server::sip::SipCallRecord>,
) -> baton::server::sip::SipCallRecord {
    tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("no SIP call finished within 30 s")
        .expect("the finished-call feed closed")
}

/// The first listed call's event stream, from its start until it ends (collected in a task).
pub async fn follow(d: &Daemon) -> tokio::task::JoinHandle<Vec<serde_json::Value>> {
    let mut live = None;
    for _ in 0..500 {
        if let Some(c) = d.app.calls.list().first() {
            live = Some(c.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let live = live.expect("the call is listed");
    let (history, mut rx) = live.subscribe();
    tokio::spawn(async move {
        let mut out: Vec<serde_json::Value> = history
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !out.iter().any(|e| e["type"] == "call_end") {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Ok(l)) => out.extend(serde_json::from_str::<serde_json::Value>(&l).ok()),
                _ => break,
            }
        }
        out
    })
}

/// 20 ms blocks above −45 dBFS in 8 kHz audio.
pub fn voiced_blocks(pcm: &[i16]) -> usize {
    pcm.chunks(160)
        .filter(|b| baton::audio::vad::rms_dbfs(b) > -45.0)
        .count()
}

/// A seed-000 clip's voiced blocks as a phone caller hears it (8 kHz through μ-law).
pub fn clip_blocks(name: &str) -> usize {
    let clip = baton::audio::wav::read(
        &Path::new(ROOT)
            .join("audio-fixtures/clips/seed000")
            .join(name),
    )
    .unwrap();
    let narrow = baton::audio::resample::resample_all(&clip.samples, clip.rate, 8000).unwrap();
    voiced_blocks(&g711_roundtrip(&narrow))
}

/// `pcm` through μ-law and back, as a phone line carries it.
fn g711_roundtrip(pcm: &[i16]) -> Vec<i16> {
    let mut out = Vec::new();
    baton::audio::g711::decode_ulaw(&g711(pcm, 0), &mut out);
    out
}

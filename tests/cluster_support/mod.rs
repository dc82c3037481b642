//! Real parts for the cluster tests and the cluster benchmark, all on loopback: a PostgreSQL
//! server of their own (`scripts/postgres.sh` on a fresh folder and port, so restarting it
//! disturbs no other test), `baton serve` processes, and HAProxy in front of them. With `CI` set
//! a missing tool fails the test; without it the test says SKIPPED.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Where `tool` is installed: on `PATH`, or in `/usr/sbin` (HAProxy's place on Debian, not on
/// every user's `PATH`).
pub fn tool(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Whether `tool` is installed; `false` (after printing SKIPPED) when it is not and `CI` is
/// not set; a panic when it is not and `CI` is set.
pub fn have(name: &str, test: &str) -> bool {
    let found = tool(name).is_some();
    let tool = name;
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: {tool} is not installed (scripts/setup.sh installs it)"
        );
        eprintln!("SKIPPED {test}: {tool} is not installed (run scripts/setup.sh)");
    }
    found
}

/// A free loopback port (free when asked; the caller binds it soon after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A folder under the system's temporary folder that other users may enter (PostgreSQL runs as
/// its own user), removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("baton-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("a scratch folder");
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A PostgreSQL server of the test's own.
pub struct Postgres {
    pub url: String,
    dir: Scratch,
    port: u16,
}

impl Postgres {
    /// Starts one (installing Debian's `postgresql` when missing, as `scripts/postgres.sh` does).
    pub fn start() -> Postgres {
        let dir = Scratch::new("pg");
        let port = free_port();
        let mut pg = Postgres {
            url: String::new(),
            dir,
            port,
        };
        let line = pg.script(&[]);
        let url = line
            .trim()
            .strip_prefix("export BATON_TEST_POSTGRES_URL=")
            .unwrap_or_else(|| panic!("scripts/postgres.sh printed {line:?}"))
            .to_owned();
        pg.url = url;
        pg
    }

    fn script(&self, args: &[&str]) -> String {
        let out = Command::new(Path::new(ROOT).join("scripts/postgres.sh"))
            .args(args)
            .env("BATON_PG_DIR", self.dir.0.join("pg"))
            .env("BATON_PG_PORT", self.port.to_string())
            .stderr(Stdio::null())
            .output()
            .expect("scripts/postgres.sh runs");
        assert!(out.status.success(), "scripts/postgres.sh {args:?} failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Stops the server (fast shutdown: open connections are cut).
    pub fn stop(&self) {
        self.script(&["stop"]);
    }

    /// Starts it again on the same folder and port.
    pub fn start_again(&self) {
        self.script(&[]);
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = Command::new(Path::new(ROOT).join("scripts/postgres.sh"))
            .arg("stop")
            .env("BATON_PG_DIR", self.dir.0.join("pg"))
            .env("BATON_PG_PORT", self.port.to_string())
            .stderr(Stdio::null())
            .stdout(Stdio::null())
            .status();
    }
}

/// One `baton serve` process.
pub struct Instance {
    pub name: String,
    pub addr: SocketAddr,
    pub config: PathBuf,
    pub log: PathBuf,
    child: Child,
}

impl Instance {
    /// Starts `baton serve --config <config>` (listening on `listen`, e.g. "127.0.0.1:0") and
    /// waits until it listens.
    pub fn spawn(name: &str, config: &Path, listen: &str, log: &Path) -> Instance {
        let log_file = std::fs::File::create(log).expect("a log file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["serve", "--config"])
            .arg(config)
            .args(["--listen", listen])
            .env("BATON_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .expect("baton serve starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            for line in lines.by_ref().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_owned();
                    let _ = tx.send(addr);
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                panic!(
                    "{name} did not start listening; its log:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                )
            })
            .parse()
            .expect("an address");
        Instance {
            name: name.to_owned(),
            addr,
            config: config.to_owned(),
            log: log.to_owned(),
            child,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {}", self.pid());
    }

    /// SIGTERM: the drain.
    pub fn terminate(&self) {
        self.signal("-TERM");
    }

    /// SIGKILL: the instance dies without a word.
    pub fn kill(&mut self) {
        self.signal("-KILL");
        let _ = self.child.wait();
    }

    /// Waits for the process to exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// HAProxy in front of instances: `/i/<name>/…` reaches that instance (its advertised URL), any
/// other path the least loaded instance whose `/readyz` answers 200, with a 503 or a refused
/// connection retried on another one.
pub struct Haproxy {
    pub addr: SocketAddr,
    /// Its log: one line per request (server, retries, status).
    pub log: PathBuf,
    child: Child,
}

impl Haproxy {
    /// The configuration for `port` and `(name, address)` backends.
    pub fn config(port: u16, backends: &[(String, SocketAddr)]) -> String {
        let mut c = format!(
            "global\n  maxconn 4000\n  log stderr format raw local0 info\n\
             defaults\n  mode http\n  log global\n  option httplog\n  timeout connect 2s\n  \
             timeout client 60s\n  timeout server 60s\n  timeout tunnel 1h\n  timeout check 2s\n  \
             retries 6\n  option redispatch 1\n  retry-on conn-failure empty-response 503\n\
             frontend calls\n  bind 127.0.0.1:{port}\n"
        );
        for (name, _) in backends {
            c.push_str(&format!(
                "  use_backend only_{name} if {{ path_beg /i/{name}/ }}\n"
            ));
        }
        c.push_str(
            "  default_backend ready\n\
             backend ready\n  balance leastconn\n  option httpchk GET /readyz\n  \
             http-check expect status 200\n  default-server inter 200ms fall 2 rise 2\n",
        );
        for (name, addr) in backends {
            c.push_str(&format!("  server {name} {addr} check\n"));
        }
        for (name, addr) in backends {
            c.push_str(&format!(
                "backend only_{name}\n  http-request set-path %[path,regsub(^/i/{name}/,/)]\n  \
                 server {name} {addr}\n"
            ));
        }
        c
    }

    pub fn start(dir: &Path, port: u16, backends: &[(String, SocketAddr)]) -> Haproxy {
        let cfg = dir.join("haproxy.cfg");
        std::fs::write(&cfg, Self::config(port, backends)).expect("haproxy.cfg");
        let haproxy = tool("haproxy").expect("haproxy is installed (scripts/setup.sh)");
        let check = Command::new(&haproxy)
            .arg("-c")
            .arg("-f")
            .arg(&cfg)
            .output()
            .expect("haproxy runs");
        assert!(
            check.status.success(),
            "haproxy refuses its config: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        let child = Command::new(&haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("haproxy.log")).expect("a log"))
            .spawn()
            .expect("haproxy starts");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("an address");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "haproxy does not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Haproxy {
            addr,
            log: dir.join("haproxy.log"),
            child,
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP/1.1 answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
}

/// One request (blocking, the connection closed after it), `None` when nothing answers.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: &[u8],
) -> Option<Reply> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(15))).ok()?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !extra
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("connection"))
    {
        req.push_str("Connection: close\r\n");
    }
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).ok()?;
    s.write_all(body).ok()?;
    // The head, then as much body as it announces (or all until the connection closes).
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut body_bytes = buf[head_end + 4..].to_vec();
    let length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    match length {
        Some(n) => {
            while body_bytes.len() < n {
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => body_bytes.extend_from_slice(&chunk[..k]),
                }
            }
        }
        None => {
            let _ = s.read_to_end(&mut body_bytes);
        }
    }
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some(Reply {
        status,
        head,
        body: String::from_utf8_lossy(&body_bytes).into_owned(),
    })
}

/// A WebSocket upgrade request to `path` (the answer, when it is not 101).
pub fn upgrade(addr: SocketAddr, path: &str) -> Option<Reply> {
    request(
        addr,
        "GET",
        path,
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ],
        b"",
    )
}

pub fn get(addr: SocketAddr, path: &str) -> Option<Reply> {
    request(addr, "GET", path, &[], b"")
}

pub fn post(addr: SocketAddr, path: &str) -> Option<Reply> {
    request(addr, "POST", path, &[], b"")
}

/// Polls `f` every 50 ms until it gives a value, at most `limit`.
pub fn until<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    until_seen(what, limit, || f().ok_or_else(String::new))
}

/// [`until`], where `f` says what it saw instead (the timeout's message ends with the last).
pub fn until_seen<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        let seen = match f() {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        let seen = if seen.is_empty() {
            seen
        } else {
            format!("; {seen}")
        };
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}{seen}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A short Twilio-protocol caller: `speech_ms` of `caller_01.wav` after 0.2 s, then silence; it
/// hangs up once the agent has been quiet for 0.6 s (at most `max_tail` after its audio).
pub fn short_caller(
    stream_sid: &str,
    speech_ms: usize,
    tail_ms: usize,
    max_tail: Duration,
) -> baton::leg::twilio::caller::CallerOptions {
    let clip = baton::audio::wav::read(&Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav"))
        .expect("the caller clip");
    let rate = clip.rate as usize;
    let mut pcm = vec![0i16; rate / 5];
    pcm.extend_from_slice(&clip.samples[..clip.samples.len().min(rate * speech_ms / 1000)]);
    pcm.extend(std::iter::repeat_n(0, rate * tail_ms / 1000));
    let mut o = baton::leg::twilio::caller::CallerOptions::from_pcm(&pcm, clip.rate, stream_sid)
        .expect("a caller");
    o.stream_sid = stream_sid.to_owned();
    o.quiet_after = Duration::from_millis(600);
    o.max_tail = max_tail;
    o.record_audio = false;
    o
}

/// A valid WHIP offer (one audio section with Opus, sendrecv).
pub const OFFER: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n\
    m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\n\
    a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n\
    a=fingerprint:sha-256 00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF\r\n\
    a=setup:actpass\r\na=rtpmap:111 opus/48000/2\r\na=sendrecv\r\n";

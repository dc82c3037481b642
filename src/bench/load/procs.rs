//! The processes of a load sweep: children that are killed whenever their guard drops (every
//! exit path, panics included), their first stdout line, `/proc` CPU and memory readings, and a
//! minimal HTTP GET for `/metrics` and `/healthz`.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use super::LoadError;

/// Pids of the children alive now, for [`kill_on_signal`].
static LIVE: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// On SIGTERM, SIGINT or SIGHUP, kills every live child and exits: a signal would otherwise end
/// this process without running the guards' destructors and leave the children running.
pub fn kill_on_signal() {
    std::thread::spawn(|| {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
                signal(SignalKind::hangup()),
            ) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
                _ = hup.recv() => {}
            }
            let pids: Vec<u32> = LIVE
                .lock()
                .map(|l| l.iter().copied().collect())
                .unwrap_or_default();
            for pid in pids {
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(pid.to_string())
                    .status();
            }
            eprintln!("bench load: interrupted; child processes killed");
            std::process::exit(130);
        });
    });
}

/// A child process killed (and reaped) when dropped.
pub struct ChildGuard {
    pub name: String,
    child: Child,
}

impl ChildGuard {
    /// Spawns `exe args…` with stderr appended to `log` and stdout piped.
    pub fn spawn(name: &str, exe: &Path, args: &[String], log: &Path) -> Result<Self, LoadError> {
        let err = std::fs::File::create(log)
            .map_err(|e| LoadError::Io(format!("cannot create {}: {e}", log.display())))?;
        let child = Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .map_err(|e| LoadError::Spawn {
                what: name.to_owned(),
                reason: e.to_string(),
            })?;
        if let Ok(mut live) = LIVE.lock() {
            live.insert(child.id());
        }
        Ok(ChildGuard {
            name: name.to_owned(),
            child,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// Whether the child has exited (and reaps it).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Asks the child to stop (SIGTERM: `baton serve` drains and flushes its store) and waits
    /// for it at most `limit`; the guard kills it after that.
    pub fn terminate(mut self, limit: Duration) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + limit;
        while !self.exited() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if let Ok(mut live) = LIVE.lock() {
            live.remove(&self.child.id());
        }
    }
}

/// Reads `stdout` line by line on a thread; each line arrives with the instant it was read.
pub fn lines(stdout: ChildStdout) -> mpsc::Receiver<(Instant, String)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for the first line containing `marker` and returns the text after it up to the next
/// space or the end.
pub fn wait_for_url(
    rx: &mpsc::Receiver<(Instant, String)>,
    who: &mut ChildGuard,
    marker: &str,
    limit: Duration,
) -> Result<String, LoadError> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left.min(Duration::from_millis(100))) {
            Ok((_, line)) => {
                if let Some(i) = line.find(marker) {
                    let rest = &line[i + marker.len()..];
                    return Ok(rest.split_whitespace().next().unwrap_or("").to_owned());
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if who.exited() {
                    return Err(LoadError::Spawn {
                        what: who.name.clone(),
                        reason: "exited before it was ready (see its log)".into(),
                    });
                }
                if left.is_zero() {
                    return Err(LoadError::Spawn {
                        what: who.name.clone(),
                        reason: format!("not ready within {limit:?} (see its log)"),
                    });
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(LoadError::Spawn {
                    what: who.name.clone(),
                    reason: "closed its output before it was ready (see its log)".into(),
                });
            }
        }
    }
}

/// One reading of a process.
#[derive(Clone, Copy, Debug)]
pub struct ProcSample {
    pub at: Instant,
    /// User + system CPU time, ms.
    pub cpu_ms: f64,
    /// Resident set, KiB.
    pub rss_kib: u64,
    /// Peak resident set so far (VmHWM), KiB.
    pub hwm_kib: u64,
    /// The private part of the resident set (RssAnon: heap, stacks; not the executable's pages,
    /// which are shared, clean and counted in `rss_kib` once first run), KiB.
    pub anon_kib: u64,
}

/// Clock ticks per second of `/proc/<pid>/stat` times.
pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// Reads `/proc/<pid>/stat` (utime + stime) and `/proc/<pid>/status` (VmRSS, VmHWM, RssAnon).
pub fn sample(pid: u32, ticks_per_s: f64) -> Option<ProcSample> {
    let at = Instant::now();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is f[0]; utime is field 14, stime field 15.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(ProcSample {
        at,
        cpu_ms: (utime + stime) * 1000.0 / ticks_per_s,
        rss_kib: kib("VmRSS:"),
        hwm_kib: kib("VmHWM:"),
        anon_kib: kib("RssAnon:"),
    })
}

/// CPU time of the whole machine (every core, every process): the busy jiffies of the first line
/// of `/proc/stat`, as a sample with no memory.
pub fn system_sample(ticks_per_s: f64) -> Option<ProcSample> {
    let at = Instant::now();
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let f: Vec<f64> = line
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let busy = f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)? + f.get(7)?;
    Some(ProcSample {
        at,
        cpu_ms: busy * 1000.0 / ticks_per_s,
        rss_kib: 0,
        hwm_kib: 0,
        anon_kib: 0,
    })
}

/// The 1-minute load average.
pub fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The soft limit on open files of this process (children inherit it).
pub fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// `GET path` over plain HTTP/1.1; the body of a 200 response.
pub fn http_get(addr: SocketAddr, host: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Some(dechunk(body));
    }
    Some(body.to_owned())
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The value of an unlabelled sample `name` in a Prometheus text body.
pub fn prom_value(body: &str, name: &str) -> Option<f64> {
    body.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (series, v) = l.rsplit_once(' ')?;
        (series == name).then(|| v.parse().ok())?
    })
}

/// Sum of every sample of `name` (any labels).
pub fn prom_sum(body: &str, name: &str) -> Option<f64> {
    let mut found = false;
    let mut sum = 0.0;
    for l in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, v)) = l.rsplit_once(' ') else {
            continue;
        };
        let family = series.split('{').next().unwrap_or("");
        if family == name
            && let Ok(v) = v.parse::<f64>()
        {
            found = true;
            sum += v;
        }
    }
    found.then_some(sum)
}

/// Cumulative buckets `(le, count)` of histogram `name`, in order.
pub fn prom_buckets(body: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    body.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (le, rest) = rest.split_once('"')?;
            let v: f64 = rest.rsplit_once(' ')?.1.parse().ok()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let s = sample(std::process::id(), clock_ticks()).unwrap();
        assert!(s.rss_kib > 0 && s.hwm_kib >= s.rss_kib);
        assert!(s.anon_kib > 0 && s.anon_kib <= s.rss_kib);
        assert!(open_files_limit().unwrap() > 0);
        assert!(system_sample(clock_ticks()).unwrap().cpu_ms > 0.0);
        assert!(loadavg().is_some());
    }

    #[test]
    fn prometheus_text() {
        let body = "# TYPE a counter\na 3\nb{x=\"1\"} 2\nb{x=\"2\"} 5\nh_bucket{le=\"1\"} 4\nh_bucket{le=\"+Inf\"} 6\n";
        assert_eq!(prom_value(body, "a"), Some(3.0));
        assert_eq!(prom_sum(body, "b"), Some(7.0));
        assert_eq!(prom_sum(body, "c"), None);
        assert_eq!(
            prom_buckets(body, "h"),
            vec![(1.0, 4.0), (f64::INFINITY, 6.0)]
        );
        assert_eq!(dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), "abcde");
    }
}

//! Progress of a sweep on stderr: a bar on a terminal (indicatif), a plain line every few seconds
//! otherwise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use super::{Step, Trace};

/// Progress on stderr: a bar on a terminal, a plain line every few seconds otherwise.
pub(super) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    steps: usize,
    step: usize,
    calls: usize,
    last_line: Instant,
}

impl Progress {
    pub(super) fn new(steps: usize) -> Progress {
        Progress {
            bar: None,
            steps,
            step: 0,
            calls: 0,
            last_line: Instant::now(),
        }
    }

    pub(super) fn begin(&mut self, i: usize, calls: usize, secs: f64) {
        self.step = i;
        self.calls = calls;
        if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new((secs * 10.0) as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {elapsed:>4} {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar.set_prefix(format!("step {}/{} · {calls} calls", i + 1, self.steps));
            self.bar = Some(bar);
        } else {
            eprintln!(
                "bench load: step {}/{}: {calls} calls for {secs:.0} s",
                i + 1,
                self.steps
            );
            self.last_line = Instant::now();
        }
    }

    pub(super) fn tick(&mut self, elapsed: Duration, trace: &Trace) {
        let rss = trace.baton.last().map(|s| s.rss_kib / 1024);
        let cpu = match trace.baton.as_slice() {
            [.., a, b] => {
                let wall = b.at.saturating_duration_since(a.at).as_secs_f64();
                (wall > 0.0).then(|| (b.cpu_ms - a.cpu_ms) / wall / 10.0)
            }
            _ => None,
        };
        let msg = match (cpu, rss) {
            (Some(c), Some(r)) => format!("baton {c:.0}% CPU, {r} MiB"),
            _ => String::new(),
        };
        if let Some(bar) = &self.bar {
            bar.set_position((elapsed.as_secs_f64() * 10.0) as u64);
            bar.set_message(msg);
        } else if self.last_line.elapsed() >= Duration::from_secs(5) {
            self.last_line = Instant::now();
            eprintln!(
                "bench load: step {}/{} ({} calls): {:.0} s {msg}",
                self.step + 1,
                self.steps,
                self.calls,
                elapsed.as_secs_f64()
            );
        }
    }

    pub(super) fn end(&mut self, s: &Step) {
        let line = format!(
            "{} calls: jitter p99 {:.2} ms, underruns {}, baton {} CPU, RSS {}: {}",
            s.calls,
            s.jitter_ms.p99,
            s.underruns.map_or("n/a".into(), |u| u.to_string()),
            s.baton.cpu_pct.map_or("n/a".into(), |c| format!("{c:.0}%")),
            s.baton
                .rss_steady_kib
                .map_or("n/a".into(), |r| format!("{:.1} MiB", r as f64 / 1024.0)),
            if s.held {
                "held".to_owned()
            } else {
                format!("did not hold ({})", s.failed_because.join("; "))
            }
        );
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        eprintln!("bench load: {line}");
    }
}

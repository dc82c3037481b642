//! One step of the sweep: the server under load started (or the `--target` taken), the load
//! client run for the step's duration while the three processes and the machine are sampled from
//! /proc, and the step's figures worked out from the client's report, the samples and the
//! server's `/metrics`.

use super::*;

/// Samples of the processes over one step.
#[derive(Default)]
pub(super) struct Trace {
    pub(super) baton: Vec<ProcSample>,
    pub(super) mock: Vec<ProcSample>,
    pub(super) client: Vec<ProcSample>,
    pub(super) system: Vec<ProcSample>,
}

impl Trace {
    fn take(&mut self, under: &Under, client: u32, ticks: f64) {
        if let Some(s) = under.pid.and_then(|p| procs::sample(p, ticks)) {
            self.baton.push(s);
        }
        if let Some(s) = under.mock_pid.and_then(|p| procs::sample(p, ticks)) {
            self.mock.push(s);
        }
        if let Some(s) = procs::sample(client, ticks) {
            self.client.push(s);
        }
        if let Some(s) = procs::system_sample(ticks) {
            self.system.push(s);
        }
    }
}

/// CPU % of one core between the samples nearest `from` and `to`.
fn cpu_pct(samples: &[ProcSample], from: Instant, to: Instant) -> Option<f64> {
    let a = samples
        .iter()
        .rev()
        .find(|s| s.at <= from)
        .or(samples.first())?;
    let b = samples.iter().find(|s| s.at >= to).or(samples.last())?;
    let wall = b.at.saturating_duration_since(a.at).as_secs_f64();
    (wall > 0.0).then(|| (b.cpu_ms - a.cpu_ms) / (wall * 1000.0) * 100.0)
}

fn round(x: f64, places: i32) -> f64 {
    let m = 10f64.powi(places);
    (x * m).round() / m
}

/// How long after its last call the daemon's memory is read again (`rss_after_kib`).
pub const SETTLE: Duration = Duration::from_secs(10);

pub(super) fn run_step(
    args: &LoadArgs,
    exe: &Path,
    n: usize,
    ticks: f64,
    progress: &mut Progress,
) -> Result<Step, LoadError> {
    let under = match &args.target {
        None => spawn_baton(args, exe, n)?,
        Some(url) => target(args, url),
    };
    std::thread::sleep(Duration::from_millis(300));
    let idle = under.pid.and_then(|p| procs::sample(p, ticks));
    let warm = warm_up(exe, &under, &args.report, n, ticks);
    let loadavg_before = procs::loadavg();
    let before = scrape(&under);

    let mut cargs = vec![
        "bench".to_owned(),
        "load-client".into(),
        under.url.clone(),
        "--calls".into(),
        n.to_string(),
        "--duration".into(),
        args.duration.to_string(),
        "--ramp".into(),
        args.ramp.to_string(),
    ];
    if let Some(f) = &args.fixture {
        cargs.push("--fixture".into());
        cargs.push(f.display().to_string());
    }
    if let Some(t) = args.client_threads {
        cargs.push("--threads".into());
        cargs.push(t.to_string());
    }
    if let Some(c) = args.call_seconds {
        cargs.push("--call-seconds".into());
        cargs.push(c.to_string());
    }
    if args.client_batch_us > 0 {
        cargs.push("--batch-us".into());
        cargs.push(args.client_batch_us.to_string());
    }
    let log = args.report.join("logs").join(format!("client-{n}.log"));
    let mut client = ChildGuard::spawn("baton bench load-client", exe, &cargs, &log)?;
    let rx = procs::lines(client.take_stdout().expect("piped"));
    let client_pid = client.pid();
    let t0 = Instant::now();
    let mut trace = Trace::default();
    trace.take(&under, client_pid, ticks);
    let (mut w_start, mut w_end, mut result) = (None, None, None);
    let limit = Duration::from_secs_f64(args.duration + args.ramp) + Duration::from_secs(120);
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok((at, line)) => match serde_json::from_str::<ClientLine>(&line) {
                Ok(ClientLine::Started { .. }) => {
                    trace.take(&under, client_pid, ticks);
                    w_start = Some(at);
                }
                Ok(ClientLine::FirstEnd) => {
                    trace.take(&under, client_pid, ticks);
                    w_end = Some(at);
                }
                Ok(ClientLine::Report(r)) => result = Some(r),
                Err(_) => {}
            },
            Err(mpsc::RecvTimeoutError::Timeout) => trace.take(&under, client_pid, ticks),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        progress.tick(t0.elapsed(), &trace);
        if t0.elapsed() > limit {
            return Err(LoadError::Client(format!(
                "step of {n} calls still running after {limit:?}; see {}",
                log.display()
            )));
        }
    }
    let t_end = Instant::now();
    let _ = client.exited();
    let Some(r) = result else {
        return Err(LoadError::Client(format!(
            "no report from the load client; see {}",
            log.display()
        )));
    };
    wait_idle(&under, Duration::from_secs(15));
    let after = scrape(&under);
    trace.take(&under, client_pid, ticks);
    // What the daemon holds once its calls are over: read SETTLE after the last call ended.
    std::thread::sleep(SETTLE.saturating_sub(t_end.elapsed()));
    let settled = under.pid.and_then(|p| procs::sample(p, ticks));
    // The daemon first, gracefully: it flushes what its store has queued.
    for child in under._children {
        child.terminate(Duration::from_secs(10));
    }

    let from = w_start.unwrap_or(t0);
    let to = match w_end {
        Some(e) if e > from => e,
        _ => t_end,
    };
    let window_s = to.saturating_duration_since(from).as_secs_f64();
    let in_window = |s: &&ProcSample| s.at >= from && s.at <= to;
    let mut steady: Vec<u64> = trace
        .baton
        .iter()
        .filter(in_window)
        .map(|s| s.rss_kib)
        .collect();
    steady.sort_unstable();
    let rss_steady = steady.get(steady.len() / 2).copied();
    let mut anon: Vec<u64> = trace
        .baton
        .iter()
        .filter(in_window)
        .map(|s| s.anon_kib)
        .collect();
    anon.sort_unstable();
    let anon_steady = anon.get(anon.len() / 2).copied();
    let rss_peak = trace
        .baton
        .iter()
        .map(|s| {
            if under.fresh {
                s.hwm_kib.max(s.rss_kib)
            } else {
                s.rss_kib
            }
        })
        .max();
    let cpu = cpu_pct(&trace.baton, from, to);
    let mock_cpu = cpu_pct(&trace.mock, from, to);
    let client_cpu = cpu_pct(&trace.client, from, to);
    // Calls up at once: a churning step places more than `n` but holds `n`.
    let calls_up = r.started.min(n).max(1) as f64;
    // % of a core → ms per second, per call.
    let per_call_s = |c: Option<f64>| c.map(|c| round(c * 10.0 / calls_up, 3));
    let baton = ProcFigures {
        cpu_pct: cpu.map(|c| round(c, 1)),
        cpu_ms_per_call_s: per_call_s(cpu),
        rss_idle_kib: idle.map(|s| s.rss_kib),
        rss_warm_kib: warm.map(|s| s.rss_kib),
        anon_warm_kib: warm.map(|s| s.anon_kib),
        rss_steady_kib: rss_steady,
        rss_peak_kib: rss_peak,
        rss_after_kib: settled.map(|s| s.rss_kib),
        anon_idle_kib: idle.map(|s| s.anon_kib),
        anon_steady_kib: anon_steady,
        anon_after_kib: settled.map(|s| s.anon_kib),
    };
    // Per call above the warm daemon (its code resident), else above the idle one.
    let base = warm.or(idle);
    let rss_per_call = match (rss_steady, base) {
        (Some(s), Some(i)) => Some(round((s as f64 - i.rss_kib as f64) / calls_up, 1)),
        _ => None,
    };
    let rss_after_vs_warm_pct = match (settled, warm) {
        (Some(a), Some(w)) if w.rss_kib > 0 => Some(round(
            (a.rss_kib as f64 - w.rss_kib as f64) * 100.0 / w.rss_kib as f64,
            1,
        )),
        _ => None,
    };
    let (rss_slices_kib, rss_drift_pct) = rss_drift(&trace.baton, from, to);
    let anon_per_call = match (anon_steady, base) {
        (Some(s), Some(i)) => Some(round((s as f64 - i.anon_kib as f64) / calls_up, 1)),
        _ => None,
    };
    let delta = |f: fn(&Scrape) -> Option<f64>| -> Option<u64> {
        let a = after.as_ref().and_then(f)?;
        let b = before.as_ref().and_then(f).unwrap_or(0.0);
        Some((a - b).max(0.0).round() as u64)
    };
    let underruns = delta(|s| s.underruns);
    let late_ticks = delta(|s| s.late_ticks);
    // Every wake-up of the per-call tasks in the window, per call and 20 ms frame.
    let wakeups_per_call_frame = delta(|s| s.wakeups)
        .filter(|_| window_s > 0.0)
        .map(|w| round(w as f64 / (calls_up * window_s * 50.0), 2));
    let server_jitter = after.as_ref().and_then(|a| {
        let b = before
            .as_ref()
            .map(|b| b.jitter_buckets.clone())
            .unwrap_or_default();
        p99_bound(&a.jitter_buckets, &b)
    });

    let failed = r.calls.saturating_sub(r.started);
    let mut why = Vec::new();
    if failed > 0 {
        why.push(format!("{failed} call(s) did not start: {:?}", r.failures));
    }
    let not_hung_up: u64 = r
        .ends
        .iter()
        .filter(|(k, _)| k.as_str() != "hung_up")
        .map(|(_, v)| v)
        .sum();
    if not_hung_up > 0 {
        why.push(format!("{not_hung_up} call(s) ended early: {:?}", r.ends));
    }
    if r.jitter_ms.p99 > args.max_jitter_ms {
        why.push(format!(
            "jitter p99 {:.2} ms > {} ms",
            r.jitter_ms.p99, args.max_jitter_ms
        ));
    }
    if r.intervals == 0 {
        why.push("no agent audio was received".into());
    }
    if let Some(u) = underruns.filter(|&u| u > 0) {
        why.push(format!("{u} underrun(s)"));
    }
    Ok(Step {
        calls: n,
        calls_placed: r.calls,
        started: r.started,
        failed,
        failures: r.failures,
        ends: r.ends,
        window_s: round(window_s, 2),
        intervals: r.intervals,
        jitter_ms: r.jitter_ms,
        call_p99_ms: r.call_p99_ms,
        late_frames: r.late_frames,
        underruns,
        late_ticks,
        wakeups_per_call_frame,
        server_send_jitter_p99_le_ms: server_jitter,
        media_received: r.media_received,
        frames_sent: r.frames_sent,
        baton,
        rss_per_call_kib: rss_per_call,
        rss_slices_kib,
        rss_drift_pct,
        rss_after_vs_warm_pct,
        anon_per_call_kib: anon_per_call,
        mock_cpu_pct: mock_cpu.map(|c| round(c, 1)),
        client_cpu_pct: client_cpu.map(|c| round(c, 1)),
        mock_cpu_ms_per_call_s: per_call_s(mock_cpu),
        client_cpu_ms_per_call_s: per_call_s(client_cpu),
        busiest: busiest(cpu, mock_cpu, client_cpu),
        other_cpu_pct: cpu_pct(&trace.system, from, to).map(|all| {
            let ours = cpu.unwrap_or(0.0) + mock_cpu.unwrap_or(0.0) + client_cpu.unwrap_or(0.0);
            round((all - ours).max(0.0), 1)
        }),
        loadavg_before,
        client_tick_late_ms: r.tick_late_ms,
        held: why.is_empty(),
        failed_because: why,
    })
}

/// One 2-second call before the step, then [`SETTLE`] with none live: the daemon as it is once it
/// has served a call (the call path's code resident, its memory given back), what RSS after the
/// step is compared with. `None` when the daemon's process is not known or the call failed.
fn warm_up(exe: &Path, under: &Under, report: &Path, n: usize, ticks: f64) -> Option<ProcSample> {
    let pid = under.pid?;
    let args: Vec<String> = [
        "bench",
        "load-client",
        &under.url,
        "--calls",
        "1",
        "--duration",
        "2",
        "--ramp",
        "0",
    ]
    .map(str::to_owned)
    .into();
    let log = report.join("logs").join(format!("warm-up-{n}.log"));
    let mut client =
        ChildGuard::spawn("baton bench load-client (warm-up)", exe, &args, &log).ok()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !client.exited() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_idle(under, Duration::from_secs(15));
    std::thread::sleep(SETTLE);
    procs::sample(pid, ticks)
}

/// The RSS of `samples` over the window `from`–`to` after its first fifth (warm-up), in four
/// equal slices: each slice's median (KiB), and the largest minus the smallest in % of the
/// smallest. Nothing for a window under 60 s.
pub(super) fn rss_drift(
    samples: &[ProcSample],
    from: Instant,
    to: Instant,
) -> (Vec<u64>, Option<f64>) {
    const SLICES: u32 = 4;
    let window = to.saturating_duration_since(from);
    if window < Duration::from_secs(60) {
        return (Vec::new(), None);
    }
    let start = from + window / 5;
    let slice = (to - start) / SLICES;
    let mut medians = Vec::new();
    for k in 0..SLICES {
        let (a, b) = (start + slice * k, start + slice * (k + 1));
        let mut v: Vec<u64> = samples
            .iter()
            .filter(|s| s.at >= a && s.at < b)
            .map(|s| s.rss_kib)
            .collect();
        if v.is_empty() {
            return (Vec::new(), None);
        }
        v.sort_unstable();
        medians.push(v[v.len() / 2]);
    }
    let (lo, hi) = (
        medians.iter().min().copied().unwrap_or(0),
        medians.iter().max().copied().unwrap_or(0),
    );
    let drift = (lo > 0).then(|| round((hi - lo) as f64 * 100.0 / lo as f64, 2));
    (medians, drift)
}

/// Which of the three processes used the most CPU (`None` when none was measured).
pub(super) fn busiest(
    baton: Option<f64>,
    mock: Option<f64>,
    client: Option<f64>,
) -> Option<&'static str> {
    [("baton", baton), ("mock", mock), ("client", client)]
        .into_iter()
        .filter_map(|(name, c)| Some((name, c?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(name, _)| name)
}

/// The upper bound of the bucket holding the 99th percentile of `after − before`.
fn p99_bound(after: &[(f64, f64)], before: &[(f64, f64)]) -> Option<f64> {
    let diff: Vec<(f64, f64)> = after
        .iter()
        .map(|&(le, c)| {
            let b = before
                .iter()
                .find(|(l, _)| *l == le)
                .map_or(0.0, |(_, c)| *c);
            (le, c - b)
        })
        .collect();
    let total = diff.last()?.1;
    if total <= 0.0 {
        return None;
    }
    diff.iter()
        .find(|(_, c)| *c >= 0.99 * total)
        .map(|(le, _)| *le)
        .filter(|le| le.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(t0: Instant, rss: impl Fn(u64) -> u64) -> Vec<ProcSample> {
        (0..=1000)
            .map(|i| ProcSample {
                at: t0 + Duration::from_millis(100 * i),
                cpu_ms: 0.0,
                rss_kib: rss(i),
                hwm_kib: 0,
                anon_kib: 0,
            })
            .collect()
    }

    #[test]
    fn drift_is_taken_after_the_warm_up_in_four_slices() {
        let t0 = Instant::now();
        let to = t0 + Duration::from_secs(100);
        // Climbing for the first 20 s (warm-up), flat after it.
        let flat = samples(t0, |i| if i < 200 { 50_000 + 100 * i } else { 70_000 });
        let (slices, drift) = rss_drift(&flat, t0, to);
        assert_eq!((slices, drift), (vec![70_000; 4], Some(0.0)));
        // Growing 1 KiB a second after it: the last slice's median is 60 KiB above the first's.
        let growing = samples(t0, |i| 100_000 + i / 10);
        let (slices, drift) = rss_drift(&growing, t0, to);
        assert_eq!(slices, [100_030, 100_050, 100_070, 100_090]);
        assert_eq!(drift, Some(0.06));
        // A window under a minute says nothing.
        assert_eq!(
            rss_drift(&growing, t0, t0 + Duration::from_secs(59)),
            (Vec::new(), None)
        );
    }
}

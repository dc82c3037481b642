//! The sweep's outputs: `report.json`, `report.md`, and three figures (SVG + PNG): jitter, CPU and
//! RSS against concurrent calls.

use std::fmt::Write as _;
use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::combinators::IntoLogRange;
use plotters::prelude::*;

use super::{LoadError, LoadReport, Step};
use crate::plot::{self, Figure, text};

/// Writes everything to `dir`.
pub fn write(r: &LoadReport, dir: &Path) -> Result<(), LoadError> {
    let io =
        |p: &Path, e: std::io::Error| LoadError::Io(format!("cannot write {}: {e}", p.display()));
    let json = dir.join("report.json");
    std::fs::write(
        &json,
        serde_json::to_string_pretty(r).unwrap_or_default() + "\n",
    )
    .map_err(|e| io(&json, e))?;
    let md = dir.join("report.md");
    std::fs::write(&md, markdown(r)).map_err(|e| io(&md, e))?;
    plot::save(&JitterFig(r), &dir.join("jitter"))?;
    plot::save(&CpuFig(r), &dir.join("cpu"))?;
    plot::save(&RssFig(r), &dir.join("rss"))?;
    Ok(())
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "n/a".into(), |v| v.to_string())
}

fn mib(k: Option<u64>) -> String {
    k.map_or_else(|| "n/a".into(), |k| format!("{:.1}", k as f64 / 1024.0))
}

/// What the command prints when done.
pub fn summary(r: &LoadReport, dir: &Path) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "calls  jitter p50/p99/max ms  underruns  late  baton CPU%  CPU ms/call·s baton/mock/client  RSS steady/peak/after MiB  after vs warm %  KiB/call  private idle/after MiB  KiB/call  busiest  held"
    );
    for st in &r.steps {
        let _ = writeln!(
            s,
            "{:>5}  {:>6.2} {:>6.2} {:>7.2}  {:>9}  {:>4}  {:>10}  {:>11} {:>5} {:>6}  {:>8} {:>5} {:>5}  {:>14}  {:>8}  {:>11} {:>10}  {:>8}  {:>7}  {}",
            st.calls,
            st.jitter_ms.p50,
            st.jitter_ms.p99,
            st.jitter_ms.max,
            opt(st.underruns),
            st.late_frames,
            opt(st.baton.cpu_pct),
            opt(st.baton.cpu_ms_per_call_s),
            opt(st.mock_cpu_ms_per_call_s),
            opt(st.client_cpu_ms_per_call_s),
            mib(st.baton.rss_steady_kib),
            mib(st.baton.rss_peak_kib),
            mib(st.baton.rss_after_kib),
            opt(st.rss_after_vs_warm_pct),
            opt(st.rss_per_call_kib),
            mib(st.baton.anon_idle_kib),
            mib(st.baton.anon_after_kib),
            opt(st.anon_per_call_kib),
            st.busiest.unwrap_or("n/a"),
            if st.held { "yes" } else { "no" }
        );
    }
    let _ = writeln!(
        s,
        "RSS slope: {} KiB/call. Largest step with jitter p99 ≤ {} ms and 0 underruns: {}.",
        r.rss_slope_kib_per_call
            .map_or("n/a".into(), |v| format!("{v:.1}")),
        r.max_jitter_ms,
        r.largest_held
            .map_or("none".into(), |n| format!("{n} calls"))
    );
    for st in r.steps.iter().filter(|st| st.rss_drift_pct.is_some()) {
        let _ = writeln!(
            s,
            "{} calls ({} placed): RSS drift after warm-up {} % over {:.0} s.",
            st.calls,
            st.calls_placed,
            opt(st.rss_drift_pct),
            st.window_s
        );
    }
    let _ = writeln!(s, "report: {}", dir.join("report.md").display());
    s
}

fn markdown(r: &LoadReport) -> String {
    let mut s = String::new();
    let m = &r.machine;
    let _ = writeln!(s, "# baton bench load\n");
    let _ = writeln!(s, "`{}`\n", r.command);
    let _ = writeln!(
        s,
        "Machine: {} core(s), {}, {} MiB, Linux {}; {} build. Target: {}. {}; starts spread \
         over {} s.\n",
        m.cores,
        m.cpu,
        m.mem_mib,
        m.kernel,
        m.build,
        r.target,
        match r.call_seconds {
            None => format!("Each call lasts {} s", r.duration_s),
            Some(c) => format!(
                "Calls churn: each caller places calls of {c} s one after another for {} s \
                 (its first one shorter, spread over the callers)",
                r.duration_s
            ),
        },
        r.ramp_s
    );
    let _ = writeln!(
        s,
        "**Largest step with jitter p99 ≤ {} ms and 0 underruns: {}.** RSS slope {} KiB per call \
         (least squares of steady RSS over calls{}).\n",
        r.max_jitter_ms,
        r.largest_held
            .map_or("none".into(), |n| format!("{n} calls")),
        r.rss_slope_kib_per_call
            .map_or("n/a".into(), |v| format!("{v:.1}")),
        r.rss_intercept_kib.map_or(String::new(), |b| format!(
            ", intercept {:.1} MiB",
            b / 1024.0
        ))
    );
    for n in &r.notes {
        let _ = writeln!(s, "- {n}");
    }
    if !r.notes.is_empty() {
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "| calls | started | jitter p50 / p99 / max ms | worst call p99 ms | underruns | late ticks | late frames | baton send p99 ≤ ms | wake-ups per call per 20 ms | baton CPU % | CPU ms per call-s | RSS idle / warm / steady / peak / after MiB | after vs warm % | KiB per call | private idle / steady / after MiB | private KiB per call | mock CPU % | client CPU % | mock / client CPU ms per call-s | busiest | other CPU % | client tick late p99 ms | held |"
    );
    let _ = writeln!(
        s,
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---|---|---:|---:|---|"
    );
    for st in &r.steps {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} / {:.2} / {:.2} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} / {} / {} | {} | {} | {} / {} / {} | {} | {} | {} | {} / {} | {} | {} | {:.2} | {} |",
            st.calls,
            st.started,
            st.jitter_ms.p50,
            st.jitter_ms.p99,
            st.jitter_ms.max,
            st.call_p99_ms.max,
            opt(st.underruns),
            opt(st.late_ticks),
            st.late_frames,
            opt(st.server_send_jitter_p99_le_ms),
            opt(st.wakeups_per_call_frame),
            opt(st.baton.cpu_pct),
            opt(st.baton.cpu_ms_per_call_s),
            mib(st.baton.rss_idle_kib),
            mib(st.baton.rss_warm_kib),
            mib(st.baton.rss_steady_kib),
            mib(st.baton.rss_peak_kib),
            mib(st.baton.rss_after_kib),
            opt(st.rss_after_vs_warm_pct),
            opt(st.rss_per_call_kib),
            mib(st.baton.anon_idle_kib),
            mib(st.baton.anon_steady_kib),
            mib(st.baton.anon_after_kib),
            opt(st.anon_per_call_kib),
            opt(st.mock_cpu_pct),
            opt(st.client_cpu_pct),
            opt(st.mock_cpu_ms_per_call_s),
            opt(st.client_cpu_ms_per_call_s),
            st.busiest.unwrap_or("n/a"),
            opt(st.other_cpu_pct),
            st.client_tick_late_ms.p99,
            if st.held {
                "yes".to_owned()
            } else {
                format!("no: {}", st.failed_because.join("; "))
            }
        );
    }
    let soaks: Vec<&Step> = r
        .steps
        .iter()
        .filter(|st| st.rss_drift_pct.is_some())
        .collect();
    if !soaks.is_empty() {
        let _ = writeln!(
            s,
            "\n**Memory over the window** (after its first fifth, in four equal slices: each \
             slice's median RSS; drift = largest − smallest, in % of the smallest):\n"
        );
        for st in soaks {
            let slices: Vec<String> = st
                .rss_slices_kib
                .iter()
                .map(|k| format!("{:.1}", *k as f64 / 1024.0))
                .collect();
            let _ = writeln!(
                s,
                "- {} calls ({} placed, {:.0} s window): {} MiB; drift {} %",
                st.calls,
                st.calls_placed,
                st.window_s,
                slices.join(" → "),
                opt(st.rss_drift_pct)
            );
        }
    }
    s.push_str(
        "\n![jitter](jitter.svg)\n![cpu](cpu.svg)\n![rss](rss.svg)\n\n## What the columns mean\n\n\
- **jitter**: `|interval − 20 ms|` between consecutive `media` messages **as the load client \
received them**, within bursts of agent audio (a pause over 200 ms starts a new burst), pooled over \
every call of the step; nearest-rank percentiles. It includes loopback delivery and the client's \
own scheduling delay (see *client tick late*). *worst call p99* is the largest per-call p99.\n\
- **underruns**, **late ticks**: the server's own counts from its `/metrics` \
(`baton_underruns_total`: 20 ms ticks played as silence while the model was still speaking; \
`baton_late_ticks_total`: playout frames released a full tick or more late), recorded as each call \
ends. An underrun reaches the caller as a silent `media` frame, so the client cannot count it.\n\
- **late frames**: received intervals longer than 20 ms + 5 ms (client view).\n\
- **baton send p99 ≤**: baton's own view of its send intervals (`baton_egress_jitter_ms`), the \
upper bound of the histogram bucket holding the 99th percentile.\n\
- **wake-ups per call per 20 ms**: every time a call's task resumed after waiting (it drives the \
bridge socket and the model session's socket itself) in the steady window, counted by baton \
(`baton_task_wakeups_total`), ÷ (calls × 20 ms frames in the window).\n\
- **CPU %**: user + system time of the process over the steady window (all calls up: from the \
last start to the first end) ÷ wall time, in % of one core (`/proc/<pid>/stat`). **CPU ms per \
call-s**: the same CPU time ÷ (calls × window seconds); the mock's and the client's are worked \
out the same way, so the three read side by side.\n\
- **busiest**: the process with the most CPU over the window. The mock and the client are the \
measuring rig; when one of them is the busiest, the rig, not baton, is what limits the step.\n\
- **RSS**: `VmRSS` from `/proc/<pid>/status`, read every 100 ms: before the first call (idle), \
after one 2-second call and 10 s with none live, before the step (warm: a daemon that has served \
a call), median over the steady window (steady), the largest reading or `VmHWM` (peak), and 10 s \
after the step's last call ended (after). **after vs warm**: (after − warm) ÷ warm, what the \
daemon did not give back. **KiB per call**: (steady − warm) ÷ calls. The slope is fitted over \
the steps' steady RSS.\n\
- **private**: the part of RSS only this process holds (`RssAnon`: heap, stacks), read with RSS. \
RSS also counts the executable's own pages once they have run; the first calls bring in the call \
path's code (about 10 MiB of a release build), which stays resident but is shared and clean, so \
RSS after a step stays that much above an idle daemon that has served no call (hence the warm \
reading). The private figures are what the daemon holds per call and gives back.\n\
- **other CPU %**: the whole machine's busy time (`/proc/stat`) over the window minus baton, \
the mock and the client: other work sharing the cores during the step.\n\
- **client tick late**: how late the callers' own 20 ms send timers fired; when it is large the \
client, not baton, was short of CPU and the jitter figures are inflated by it.\n\
- A step **holds** when every call started and ran to its end, jitter p99 is within the budget, \
and there were 0 underruns.\n",
    );
    s
}

/// Calls (x) of the steps.
fn x_range(steps: &[Step]) -> std::ops::Range<f64> {
    let max = steps.iter().map(|s| s.calls).max().unwrap_or(1) as f64;
    0.0..max * 1.08
}

fn draw_lines<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<impl Ranged<ValueType = f64>, impl Ranged<ValueType = f64>>,
    >,
    pts: Vec<(f64, f64)>,
    color: RGBColor,
    label: &str,
) -> Result<(), String> {
    if pts.is_empty() {
        return Ok(());
    }
    let style = ShapeStyle::from(&color).stroke_width(2);
    chart
        .draw_series(LineSeries::new(pts.clone(), style))
        .map_err(text)?
        .label(label.to_owned())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    chart
        .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))
        .map_err(text)?;
    Ok(())
}

struct JitterFig<'a>(&'a LoadReport);

impl Figure for JitterFig<'_> {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let r = self.0;
        area.fill(&WHITE).map_err(text)?;
        const FLOOR: f64 = 0.01;
        let top = r
            .steps
            .iter()
            .map(|s| s.jitter_ms.max)
            .fold(r.max_jitter_ms, f64::max)
            * 2.0;
        let mut chart = ChartBuilder::on(area)
            .caption(
                "Egress jitter as received (|interval − 20 ms|), by concurrent calls",
                ("sans-serif", 22),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(x_range(&r.steps), (FLOOR..top).log_scale())
            .map_err(text)?;
        chart
            .configure_mesh()
            .x_desc("concurrent calls")
            .y_desc("ms (log scale)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y}"))
            .label_style(("sans-serif", 15))
            .draw()
            .map_err(text)?;
        let series = |f: fn(&Step) -> f64| -> Vec<(f64, f64)> {
            r.steps
                .iter()
                .map(|s| (s.calls as f64, f(s).max(FLOOR)))
                .collect()
        };
        draw_lines(&mut chart, series(|s| s.jitter_ms.p50), BLUE, "p50")?;
        draw_lines(&mut chart, series(|s| s.jitter_ms.p99), RED, "p99")?;
        draw_lines(
            &mut chart,
            series(|s| s.jitter_ms.max),
            RGBColor(120, 120, 120),
            "max",
        )?;
        let x = x_range(&r.steps);
        let budget = r.max_jitter_ms;
        chart
            .draw_series(LineSeries::new(
                vec![(x.start, budget), (x.end, budget)],
                ShapeStyle::from(&BLACK).stroke_width(1),
            ))
            .map_err(text)?
            .label(format!("budget {budget} ms (p99)"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(text)?;
        Ok(())
    }
}

struct CpuFig<'a>(&'a LoadReport);

impl Figure for CpuFig<'_> {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let r = self.0;
        area.fill(&WHITE).map_err(text)?;
        let capacity = r.machine.cores as f64 * 100.0;
        let top = r
            .steps
            .iter()
            .flat_map(|s| {
                [
                    s.baton.cpu_pct,
                    s.mock_cpu_pct,
                    s.client_cpu_pct,
                    s.other_cpu_pct,
                ]
            })
            .flatten()
            .fold(capacity, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(
                "CPU by concurrent calls (% of one core, steady window)",
                ("sans-serif", 22),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(x_range(&r.steps), 0.0..top)
            .map_err(text)?;
        chart
            .configure_mesh()
            .x_desc("concurrent calls")
            .y_desc("CPU % of one core")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style(("sans-serif", 15))
            .draw()
            .map_err(text)?;
        let series = |f: fn(&Step) -> Option<f64>| -> Vec<(f64, f64)> {
            r.steps
                .iter()
                .filter_map(|s| Some((s.calls as f64, f(s)?)))
                .collect()
        };
        draw_lines(&mut chart, series(|s| s.baton.cpu_pct), RED, "baton serve")?;
        draw_lines(&mut chart, series(|s| s.mock_cpu_pct), BLUE, "mock model")?;
        draw_lines(
            &mut chart,
            series(|s| s.client_cpu_pct),
            RGBColor(0, 140, 0),
            "load client",
        )?;
        draw_lines(
            &mut chart,
            series(|s| s.other_cpu_pct),
            RGBColor(150, 150, 150),
            "everything else on the machine",
        )?;
        let x = x_range(&r.steps);
        chart
            .draw_series(LineSeries::new(
                vec![(x.start, capacity), (x.end, capacity)],
                ShapeStyle::from(&BLACK).stroke_width(1),
            ))
            .map_err(text)?
            .label(format!("all {} cores", r.machine.cores))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(text)?;
        Ok(())
    }
}

struct RssFig<'a>(&'a LoadReport);

impl Figure for RssFig<'_> {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let r = self.0;
        area.fill(&WHITE).map_err(text)?;
        if r.steps.iter().all(|s| s.baton.rss_peak_kib.is_none()) {
            let (w, h) = self.size();
            area.draw(&Text::new(
                "RSS not measured: the server's process id is unknown (--target-pid)",
                (w as i32 / 2 - 300, h as i32 / 2),
                ("sans-serif", 20),
            ))
            .map_err(text)?;
            return Ok(());
        }
        let to_mib = |k: u64| k as f64 / 1024.0;
        let top = r
            .steps
            .iter()
            .filter_map(|s| s.baton.rss_peak_kib)
            .map(to_mib)
            .fold(1.0, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption("baton serve RSS by concurrent calls", ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(x_range(&r.steps), 0.0..top)
            .map_err(text)?;
        chart
            .configure_mesh()
            .x_desc("concurrent calls")
            .y_desc("MiB")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style(("sans-serif", 15))
            .draw()
            .map_err(text)?;
        let series = |f: fn(&Step) -> Option<u64>| -> Vec<(f64, f64)> {
            r.steps
                .iter()
                .filter_map(|s| Some((s.calls as f64, to_mib(f(s)?))))
                .collect()
        };
        draw_lines(&mut chart, series(|s| s.baton.rss_peak_kib), RED, "peak")?;
        draw_lines(
            &mut chart,
            series(|s| s.baton.rss_steady_kib),
            BLUE,
            "steady (median)",
        )?;
        if let (Some(slope), Some(b)) = (r.rss_slope_kib_per_call, r.rss_intercept_kib) {
            let x = x_range(&r.steps);
            let gray = RGBColor(120, 120, 120);
            chart
                .draw_series(LineSeries::new(
                    vec![
                        (x.start, (b + slope * x.start) / 1024.0),
                        (x.end, (b + slope * x.end) / 1024.0),
                    ],
                    ShapeStyle::from(&gray).stroke_width(1),
                ))
                .map_err(text)?
                .label(format!("fit: {slope:.1} KiB per call"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], gray));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(text)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::load::{Machine, Pct, ProcFigures};

    fn step(calls: usize, with_proc: bool) -> Step {
        Step {
            calls,
            calls_placed: calls,
            started: calls,
            failed: 0,
            failures: Default::default(),
            ends: [("hung_up".to_owned(), calls as u64)].into(),
            window_s: 18.5,
            intervals: 1000,
            jitter_ms: Pct {
                p50: 0.5,
                p99: 3.0 + calls as f64 / 100.0,
                max: 12.0,
            },
            call_p99_ms: Pct::default(),
            late_frames: 0,
            underruns: with_proc.then_some(0),
            late_ticks: with_proc.then_some(0),
            wakeups_per_call_frame: with_proc.then_some(9.5),
            server_send_jitter_p99_le_ms: with_proc.then_some(4.0),
            media_received: 10,
            frames_sent: 10,
            baton: ProcFigures {
                cpu_pct: with_proc.then_some(calls as f64 * 0.25),
                cpu_ms_per_call_s: with_proc.then_some(2.5),
                rss_idle_kib: with_proc.then_some(11_000),
                rss_warm_kib: with_proc.then_some(11_100),
                anon_warm_kib: with_proc.then_some(2_050),
                rss_steady_kib: with_proc.then_some(11_000 + 300 * calls as u64),
                rss_peak_kib: with_proc.then_some(11_500 + 300 * calls as u64),
                rss_after_kib: with_proc.then_some(11_200),
                anon_idle_kib: with_proc.then_some(2_000),
                anon_steady_kib: with_proc.then_some(2_000 + 250 * calls as u64),
                anon_after_kib: with_proc.then_some(2_100),
            },
            rss_per_call_kib: with_proc.then_some(300.0),
            rss_slices_kib: Vec::new(),
            rss_drift_pct: None,
            rss_after_vs_warm_pct: with_proc.then_some(2.5),
            anon_per_call_kib: with_proc.then_some(250.0),
            mock_cpu_pct: with_proc.then_some(calls as f64 * 0.12),
            client_cpu_pct: Some(calls as f64 * 0.1),
            mock_cpu_ms_per_call_s: with_proc.then_some(1.2),
            client_cpu_ms_per_call_s: Some(1.0),
            busiest: Some(if with_proc { "baton" } else { "client" }),
            other_cpu_pct: Some(20.0),
            loadavg_before: Some(0.5),
            client_tick_late_ms: Pct::default(),
            held: true,
            failed_because: Vec::new(),
        }
    }

    fn report(with_proc: bool) -> LoadReport {
        let steps: Vec<Step> = [50, 100, 200].map(|n| step(n, with_proc)).into();
        let (slope, intercept) = crate::bench::load::rss_fit(&steps);
        LoadReport {
            command: "baton bench load".into(),
            machine: Machine {
                cores: 2,
                cpu: "test".into(),
                mem_mib: 1024,
                kernel: "6".into(),
                build: "release".into(),
            },
            target: "spawned baton serve".into(),
            duration_s: 20.0,
            call_seconds: None,
            ramp_s: 1.0,
            max_jitter_ms: 5.0,
            largest_held: Some(200),
            steps,
            rss_slope_kib_per_call: slope,
            rss_intercept_kib: intercept,
            notes: vec!["a note".into()],
        }
    }

    #[test]
    fn writes_everything_with_and_without_process_figures() {
        for with_proc in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let r = report(with_proc);
            assert_eq!(r.rss_slope_kib_per_call.is_some(), with_proc);
            if with_proc {
                assert!((r.rss_slope_kib_per_call.unwrap() - 300.0).abs() < 1e-6);
            }
            write(&r, dir.path()).unwrap();
            for f in [
                "report.json",
                "report.md",
                "jitter.png",
                "cpu.svg",
                "rss.png",
            ] {
                assert!(dir.path().join(f).exists(), "{f}");
            }
            let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
            assert!(md.contains("| 200 | 200 |"), "{md}");
            assert_eq!(md.contains("n/a"), !with_proc, "{md}");
        }
    }
}

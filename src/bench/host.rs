//! The machine a benchmark ran on, and the process CPU time it used (Linux `/proc`).

use std::time::Duration;

use serde::Serialize;

/// Clock ticks per second of `/proc/*/stat` times: the kernel's `USER_HZ`, 100 on every
/// architecture baton builds for.
const USER_HZ: f64 = 100.0;

/// What a report says about the machine.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Cores this process may use.
    pub cores: usize,
    /// `model name` from `/proc/cpuinfo`.
    pub cpu_model: String,
    pub os: String,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// `release` or `debug`: the build that measured.
    pub build: &'static str,
    /// `/proc/loadavg`'s 1, 5 and 15-minute load averages when the run started: other work on
    /// the machine the figures shared it with.
    pub load_average: String,
    pub baton_version: &'static str,
}

impl Machine {
    /// Reads the machine's description; fields that cannot be read are `unknown`.
    pub fn detect() -> Self {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| cpu_model(&s))
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
        let load_average = std::fs::read_to_string("/proc/loadavg")
            .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|_| "unknown".into());
        Machine {
            load_average,
            cores: cores(),
            cpu_model,
            os: std::env::consts::OS.to_owned(),
            kernel,
            build: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
            baton_version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// Cores this process may use (at least 1).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_owned())
    })
}

/// User + system CPU time of this process so far, all threads included (finished ones too);
/// `None` where `/proc/self/stat` cannot be read. Resolution: 10 ms.
pub fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_cpu_time(&stat)
}

/// `utime + stime` from a `/proc/<pid>/stat` line. The command name (field 2) may hold spaces
/// and parentheses, so fields are counted after its last `)`.
fn parse_cpu_time(stat: &str) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_secs_f64((utime + stime) as f64 / USER_HZ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_the_command_name() {
        let line = "4242 (a (weird) name) R 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 9 0 100 0 0";
        assert_eq!(parse_cpu_time(line), Some(Duration::from_secs(3)));
        assert_eq!(parse_cpu_time("4242 (x) R 1"), None);
    }

    #[test]
    fn this_process_has_used_some_cpu() {
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        if cfg!(target_os = "linux") {
            assert!(cpu_time().is_some_and(|t| t > Duration::ZERO));
        }
        assert!(cores() >= 1);
    }

    #[test]
    fn model_name_from_cpuinfo() {
        let info = "processor\t: 0\nvendor_id\t: X\nmodel name\t: Some CPU @ 2.0GHz\n";
        assert_eq!(cpu_model(info).as_deref(), Some("Some CPU @ 2.0GHz"));
    }
}

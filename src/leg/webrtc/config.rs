//! The `[webrtc]` section of the daemon config: where media is bound, how candidates are
//! gathered, who may signal from another origin, and the leg's limits. Validated with the rest of
//! the file (`crate::config`), every problem named by key with a fix.

use std::net::SocketAddr;

use serde::Deserialize;

/// Browser callers (`POST /whip`, WebRTC with Opus).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebrtcConfig {
    /// Local UDP addresses for media; empty: `server.listen`'s IP with port 0.
    pub udp_addrs: Vec<String>,
    /// STUN/TURN server URLs (`stun:host:port`) used to gather candidates.
    pub ice_servers: Vec<String>,
    /// Public IPs advertised instead of the host's own (1:1 NAT).
    pub nat_1to1_ips: Vec<String>,
    /// Origins allowed to call `/whip` from another origin (CORS); `"*"` for any.
    pub allow_origins: Vec<String>,
    /// Largest SDP offer accepted, in bytes.
    pub max_offer_bytes: usize,
    /// Opus bitrate toward the browser, bits per second.
    pub opus_bitrate: u32,
    /// How long the browser's first audio may take after the answer.
    pub connect_timeout_s: u64,
}

impl Default for WebrtcConfig {
    fn default() -> Self {
        WebrtcConfig {
            udp_addrs: Vec::new(),
            ice_servers: Vec::new(),
            nat_1to1_ips: Vec::new(),
            allow_origins: Vec::new(),
            max_offer_bytes: 32 * 1024,
            opus_bitrate: 32_000,
            connect_timeout_s: 15,
        }
    }
}

pub fn validate(w: &WebrtcConfig, problem: &mut impl FnMut(&str, String, &str)) {
    for a in &w.udp_addrs {
        if a.parse::<SocketAddr>().is_err() {
            problem(
                "webrtc.udp_addrs",
                format!("{a:?} is not an address:port"),
                "e.g. \"127.0.0.1:0\", or \"0.0.0.0:0\" for every interface (port 0: any free port)",
            );
        }
    }
    for ip in &w.nat_1to1_ips {
        if ip.parse::<std::net::IpAddr>().is_err() {
            problem(
                "webrtc.nat_1to1_ips",
                format!("{ip:?} is not an IP address"),
                "write the public IP the browser reaches baton at, e.g. \"203.0.113.7\"",
            );
        }
    }
    for u in &w.ice_servers {
        if !["stun:", "stuns:", "turn:", "turns:"]
            .iter()
            .any(|p| u.starts_with(p))
        {
            problem(
                "webrtc.ice_servers",
                format!("{u:?} is not a STUN or TURN URL"),
                "e.g. \"stun:stun.example.com:3478\"",
            );
        }
    }
    if !(1024..=1024 * 1024).contains(&w.max_offer_bytes) {
        problem(
            "webrtc.max_offer_bytes",
            format!("{} is outside 1024..=1048576", w.max_offer_bytes),
            "browser offers are 2–8 KiB; the default is 32768",
        );
    }
    if !(6_000..=510_000).contains(&w.opus_bitrate) {
        problem(
            "webrtc.opus_bitrate",
            format!("{} b/s is outside Opus's 6000..=510000", w.opus_bitrate),
            "use 24000–40000 for speech; the default is 32000",
        );
    }
    if w.connect_timeout_s == 0 {
        problem(
            "webrtc.connect_timeout_s",
            "is 0, so no browser could connect".into(),
            "set a few seconds; the default is 15",
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{ConfigError, parse};

    fn problems(text: &str) -> Vec<crate::config::Problem> {
        match parse(text, Path::new("/tmp/x/baton.toml")) {
            Err(ConfigError::Invalid { problems, .. }) => problems,
            other => panic!("expected problems, got {other:?}"),
        }
    }

    #[test]
    fn webrtc_keys_are_checked() {
        let l = parse("", Path::new("c.toml")).unwrap();
        assert!(l.config.webrtc.udp_addrs.is_empty());
        let p = problems(
            "[webrtc]\nudp_addrs = [\"nowhere\"]\nnat_1to1_ips = [\"x\"]\nice_servers = [\"http://s\"]\nmax_offer_bytes = 1\nopus_bitrate = 1\nconnect_timeout_s = 0\n",
        );
        let keys: Vec<_> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "webrtc.udp_addrs",
                "webrtc.nat_1to1_ips",
                "webrtc.ice_servers",
                "webrtc.max_offer_bytes",
                "webrtc.opus_bitrate",
                "webrtc.connect_timeout_s"
            ]
        );
    }

    #[test]
    fn the_shipped_configs_load() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        for f in ["baton.toml", "browser-demo.toml"] {
            let l = crate::config::load(&root.join(f)).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(l.config.webrtc.max_offer_bytes, 32 * 1024, "{f}");
        }
    }
}

//! The `[sip]` section of the daemon config: where SIP is answered, the address peers are told
//! behind NAT, the RTP ports, codecs, who may send calls (source allow-lists, a digest
//! challenge), trunks (registration, outbound calls) and routes from the called user to an
//! agent set. Validated with the rest of the file (`crate::config`), every problem named by key
//! with a fix; credentials are named by environment variable, never written here.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use serde::Deserialize;

use super::sdp::Codec;

/// SIP trunks and PBXs (see README "SIP trunks and PBXs").
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SipConfig {
    /// Where SIP is answered: `"udp:127.0.0.1:5060"`, `"tcp:0.0.0.0:5060"`,
    /// `"tls:0.0.0.0:5061"`. Empty: no SIP.
    pub listen: Vec<String>,
    /// The certificate chain and private key (PEM files, relative to this config file) of a
    /// `tls:` listen address.
    pub tls_cert: String,
    pub tls_key: String,
    /// The CA certificates (a PEM file, relative to this config file) trusted for calls and
    /// registrations baton makes over TLS (a private PBX's own CA); empty: the system's roots.
    /// The trunk's certificate is always verified against them, host name or IP included.
    pub tls_ca_file: String,
    /// The IP peers reach baton at (Contact, Via, SDP) when it is behind NAT; empty: the
    /// address SIP is bound to.
    pub public_ip: String,
    /// The local IP RTP sockets bind; empty: the first listen address's IP.
    pub rtp_ip: String,
    /// RTP ports (even ones; RTCP on the odd one above each).
    pub rtp_port_min: u16,
    pub rtp_port_max: u16,
    /// Codecs answered and offered, in baton's order (`PCMU`, `PCMA`, `opus`).
    pub codecs: Vec<String>,
    /// `180 Ringing`, then the answer after this long (0: answer at once).
    pub ring_ms: u64,
    /// The jitter buffer's lowest and highest target delay.
    pub jitter_min_ms: u32,
    pub jitter_max_ms: u32,
    /// No RTP from a sending peer for this long ends the call (0: never).
    pub rtp_timeout_s: u64,
    /// Send RTP where the peer's packets come from (NAT), not only where its SDP says.
    pub symmetric_rtp: bool,
    /// Source addresses (IPs or CIDRs) calls are taken from, besides the trunks' own. Empty
    /// with no trunk and no `auth_user`: any source, which only loopback listen addresses allow.
    pub allow_from: Vec<String>,
    /// A digest challenge (401) on INVITEs from sources no allow-list names: the user, and the
    /// NAME of the variable holding its password.
    pub auth_user: String,
    pub auth_password_env: String,
    /// The realm of that challenge; empty: "baton".
    pub auth_realm: String,
    /// Called user (the Request-URI's user part) → an agent set file, relative to this config
    /// file. Calls to any other user run `agents.set`.
    pub routes: BTreeMap<String, String>,
    /// Trunks and PBXs baton registers with or calls out through (`[sip.trunks.<name>]`).
    pub trunks: BTreeMap<String, TrunkConfig>,
}

impl Default for SipConfig {
    fn default() -> Self {
        SipConfig {
            listen: Vec::new(),
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_ca_file: String::new(),
            public_ip: String::new(),
            rtp_ip: String::new(),
            rtp_port_min: 20_000,
            rtp_port_max: 29_999,
            codecs: vec!["PCMU".into(), "PCMA".into(), "opus".into()],
            ring_ms: 0,
            jitter_min_ms: 40,
            jitter_max_ms: 200,
            rtp_timeout_s: 30,
            symmetric_rtp: true,
            allow_from: Vec::new(),
            auth_user: String::new(),
            auth_password_env: String::new(),
            auth_realm: String::new(),
            routes: BTreeMap::new(),
            trunks: BTreeMap::new(),
        }
    }
}

/// One trunk or PBX.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrunkConfig {
    /// Where its SIP is: `"sip:pbx.example.com:5060"` (`;transport=tcp` for TCP;
    /// `"sips:pbx.example.com:5061"` or `;transport=tls` for TLS).
    pub uri: String,
    /// The account, and the NAME of the variable holding its password (digest auth on
    /// REGISTER and on outbound INVITEs).
    pub username: String,
    pub password_env: String,
    /// Register (and refresh before expiry) so the trunk sends calls here.
    pub register: bool,
    pub expires_s: u32,
    /// The From of outbound calls (caller ID); empty: `sip:<username>@<trunk host>`.
    pub from: String,
    /// Source addresses (IPs or CIDRs) of this trunk's INVITEs, taken without a challenge.
    pub allow_from: Vec<String>,
    /// How long an outbound call rings before it is given up (no answer).
    pub ring_timeout_s: u64,
}

impl Default for TrunkConfig {
    fn default() -> Self {
        TrunkConfig {
            uri: String::new(),
            username: String::new(),
            password_env: String::new(),
            register: false,
            expires_s: 300,
            from: String::new(),
            allow_from: Vec::new(),
            ring_timeout_s: 30,
        }
    }
}

impl TrunkConfig {
    /// The transport calls and registrations toward this trunk use: TLS for a `sips:` URI or
    /// `;transport=tls`, TCP for `;transport=tcp`, else UDP.
    pub fn transport(&self) -> Transport {
        let uri = self.uri.to_ascii_lowercase();
        if uri.starts_with("sips:") || uri.contains(";transport=tls") {
            Transport::Tls
        } else if uri.contains(";transport=tcp") {
            Transport::Tcp
        } else {
            Transport::Udp
        }
    }
}

/// The transport of a listen address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
    Tls,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Tls => "tls",
        })
    }
}

/// Reads `"udp:127.0.0.1:5060"` (or `tcp:`, `tls:`; a bare address is UDP).
pub fn parse_listen(s: &str) -> Option<(Transport, SocketAddr)> {
    let (t, rest) = match s.split_once(':') {
        Some(("udp", r)) => (Transport::Udp, r),
        Some(("tcp", r)) => (Transport::Tcp, r),
        Some(("tls", r)) => (Transport::Tls, r),
        _ => (Transport::Udp, s),
    };
    rest.parse().ok().map(|a| (t, a))
}

/// An IP or a CIDR block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNet {
    pub ip: IpAddr,
    pub prefix: u8,
}

impl IpNet {
    pub fn parse(s: &str) -> Option<IpNet> {
        let (ip, prefix) = match s.split_once('/') {
            Some((ip, p)) => (ip.parse::<IpAddr>().ok()?, p.parse::<u8>().ok()?),
            None => {
                let ip: IpAddr = s.parse().ok()?;
                (ip, if ip.is_ipv4() { 32 } else { 128 })
            }
        };
        let max = if ip.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then_some(IpNet { ip, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.ip, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V4(a)) => n.to_ipv4_mapped() == Some(a) && self.prefix >= 96,
            (IpAddr::V4(_), IpAddr::V6(a)) => a
                .to_ipv4_mapped()
                .is_some_and(|a4| self.contains(IpAddr::V4(a4))),
        }
    }
}

impl SipConfig {
    /// The listen addresses (only valid ones; [`validate`] reports the rest).
    pub fn listens(&self) -> Vec<(Transport, SocketAddr)> {
        self.listen.iter().filter_map(|s| parse_listen(s)).collect()
    }

    /// The codecs taken, in order.
    pub fn codec_list(&self) -> Vec<Codec> {
        let mut v: Vec<Codec> = self
            .codecs
            .iter()
            .filter_map(|c| Codec::from_name(c))
            .collect();
        v.dedup();
        v
    }
}

fn is_env_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Checks `[sip]`; `dir` is the config file's folder (routes' agent sets are relative to it).
pub fn validate(c: &SipConfig, dir: &Path, problem: &mut impl FnMut(&str, String, &str)) {
    for l in &c.listen {
        if parse_listen(l).is_none() {
            problem(
                "sip.listen",
                format!("{l:?} is not a transport and address"),
                "write \"udp:127.0.0.1:5060\", \"tcp:0.0.0.0:5060\" or \"tls:0.0.0.0:5061\"",
            );
        }
    }
    if c.listens().iter().any(|(t, _)| *t == Transport::Tls) {
        for (key, file) in [("sip.tls_cert", &c.tls_cert), ("sip.tls_key", &c.tls_key)] {
            if file.is_empty() || !dir.join(file).is_file() {
                problem(
                    key,
                    format!("a tls: listen address needs this PEM file ({file:?} is not one)"),
                    "name the certificate chain and private key files, relative to this config",
                );
            }
        }
    }
    for (key, v) in [("sip.public_ip", &c.public_ip), ("sip.rtp_ip", &c.rtp_ip)] {
        if !v.is_empty() && v.parse::<IpAddr>().is_err() {
            problem(
                key,
                format!("{v:?} is not an IP address"),
                "write an IP such as \"203.0.113.7\" (host names are not resolved), or leave it empty",
            );
        }
    }
    if c.rtp_port_min < 1024 || c.rtp_port_min > c.rtp_port_max || c.rtp_port_max == u16::MAX {
        problem(
            "sip.rtp_port_min",
            format!(
                "the RTP ports {}–{} are not a range of unprivileged ports",
                c.rtp_port_min, c.rtp_port_max
            ),
            "e.g. rtp_port_min = 20000, rtp_port_max = 29999 (two ports per call)",
        );
    } else if crate::leg::sip::leg::port_pairs(c.rtp_port_min, c.rtp_port_max).1 == 0 {
        problem(
            "sip.rtp_port_min",
            format!(
                "the RTP ports {}–{} hold no even/odd pair: a call needs an even port for RTP \
                 and the next one for RTCP",
                c.rtp_port_min, c.rtp_port_max
            ),
            "e.g. rtp_port_min = 20000, rtp_port_max = 29999 (two ports per call)",
        );
    }
    let codecs = c.codec_list();
    if codecs.len() != c.codecs.len() || codecs.is_empty() {
        problem(
            "sip.codecs",
            format!("{:?} is not a list of codecs baton speaks", c.codecs),
            "use \"PCMU\", \"PCMA\" and/or \"opus\"",
        );
    }
    if c.jitter_min_ms < 20 || c.jitter_min_ms > c.jitter_max_ms || c.jitter_max_ms > 1000 {
        problem(
            "sip.jitter_min_ms",
            format!(
                "the jitter buffer range {}–{} ms is not within 20–1000 ms",
                c.jitter_min_ms, c.jitter_max_ms
            ),
            "the defaults are 40 and 200",
        );
    }
    let nets = |key: &str, list: &[String], problem: &mut dyn FnMut(&str, String, &str)| {
        for a in list {
            if IpNet::parse(a).is_none() {
                problem(
                    key,
                    format!("{a:?} is not an IP address or CIDR block"),
                    "e.g. \"203.0.113.10\" or \"203.0.113.0/24\"",
                );
            }
        }
    };
    nets("sip.allow_from", &c.allow_from, problem);
    if c.auth_user.is_empty() != c.auth_password_env.is_empty() {
        problem(
            "sip.auth_user",
            "auth_user and auth_password_env go together".into(),
            "set both (the user, and the NAME of the variable holding its password), or neither",
        );
    }
    if !c.auth_password_env.is_empty() && !is_env_name(&c.auth_password_env) {
        // The value is not repeated: it may be the password itself, written in the wrong place.
        problem(
            "sip.auth_password_env",
            "must be the NAME of an environment variable, not the password".into(),
            "write e.g. auth_password_env = \"BATON_SIP_PASSWORD\" and export the password there",
        );
    }
    for (user, set) in &c.routes {
        if !dir.join(set).is_file() {
            problem(
                &format!("sip.routes.{user}"),
                format!("agent set {set:?} is not a file next to this config"),
                "name an agent set file relative to this config, e.g. \"agents/support.toml\"",
            );
        }
    }
    if !c.tls_ca_file.is_empty() && !dir.join(&c.tls_ca_file).is_file() {
        problem(
            "sip.tls_ca_file",
            format!("{:?} is not a file", c.tls_ca_file),
            "name the PEM file of the CA that signed the trunk's certificate, relative to this \
             config, or leave it empty to trust the system's roots",
        );
    }
    let tls_listen = c.listens().iter().any(|(t, _)| *t == Transport::Tls);
    for (name, t) in &c.trunks {
        let key = |k: &str| format!("sip.trunks.{name}.{k}");
        let lower = t.uri.to_ascii_lowercase();
        if rsipstack::sip::Uri::try_from(t.uri.as_str()).is_err()
            || !(lower.starts_with("sip:") || lower.starts_with("sips:"))
        {
            problem(
                &key("uri"),
                format!("{:?} is not a SIP URI", t.uri),
                "write where the trunk's SIP is, e.g. \"sip:pbx.example.com:5060\"",
            );
        }
        if t.transport() == Transport::Tls && !tls_listen {
            problem(
                &key("uri"),
                "a trunk reached over TLS needs a tls: listen address".into(),
                "add e.g. \"tls:0.0.0.0:5061\" to sip.listen (with tls_cert and tls_key): the \
                 trunk sends its requests in a call (its BYE, a re-INVITE) and the calls to a \
                 registration to baton's Contact, over TLS",
            );
        }
        if !t.password_env.is_empty() && !is_env_name(&t.password_env) {
            problem(
                &key("password_env"),
                "must be the NAME of an environment variable, not the password".into(),
                "write e.g. password_env = \"PBX_PASSWORD\" and export the password there",
            );
        }
        if t.register && t.username.is_empty() {
            problem(
                &key("username"),
                "registering needs an account".into(),
                "set username (and password_env), or register = false",
            );
        }
        if t.register && !(60..=86_400).contains(&t.expires_s) {
            problem(
                &key("expires_s"),
                format!("{} s is outside 60–86400", t.expires_s),
                "the default is 300",
            );
        }
        if !t.from.is_empty() && rsipstack::sip::Uri::try_from(t.from.as_str()).is_err() {
            problem(
                &key("from"),
                format!("{:?} is not a SIP URI", t.from),
                "e.g. \"sip:+15550100@pbx.example.com\"",
            );
        }
        if t.ring_timeout_s == 0 {
            problem(
                &key("ring_timeout_s"),
                "is 0, so no outbound call could be answered".into(),
                "the default is 30",
            );
        }
        nets(&key("allow_from"), &t.allow_from, problem);
    }
    // Anyone who can reach a public SIP port could place calls on the model's bill.
    let open = c.allow_from.is_empty()
        && c.auth_user.is_empty()
        && c.trunks.values().all(|t| t.allow_from.is_empty());
    let public = c.listens().iter().any(|(_, a)| !a.ip().is_loopback());
    if open && public {
        problem(
            "sip.allow_from",
            "SIP listens beyond loopback and takes calls from anyone".into(),
            "name the trunk's addresses (allow_from, or a trunk's allow_from), or set auth_user \
             and auth_password_env to challenge callers",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    use crate::config::{ConfigError, parse};

    fn problems(text: &str) -> Vec<crate::config::Problem> {
        match parse(text, Path::new("/tmp/x/baton.toml")) {
            Err(ConfigError::Invalid { problems, .. }) => problems,
            other => panic!("expected problems, got {other:?}"),
        }
    }

    #[test]
    fn an_rtp_range_without_a_whole_pair_is_refused() {
        for (min, max) in [(20_000, 20_000), (20_001, 20_002)] {
            let p = problems(&format!(
                "[sip]\nlisten = [\"udp:127.0.0.1:5060\"]\nrtp_port_min = {min}\nrtp_port_max = {max}\n"
            ));
            assert_eq!(p.len(), 1, "{p:?}");
            assert_eq!(p[0].key, "sip.rtp_port_min");
            assert!(p[0].message.contains("no even/odd pair"), "{:?}", p[0]);
        }
        parse(
            "[sip]\nlisten = [\"udp:127.0.0.1:5060\"]\nrtp_port_min = 20001\nrtp_port_max = 20003\n",
            Path::new("c.toml"),
        )
        .unwrap();
    }

    #[test]
    fn sip_keys_are_checked() {
        let l = parse("", Path::new("c.toml")).unwrap();
        assert!(l.config.sip.listen.is_empty());
        let p = problems(
            "[sip]\nlisten = [\"sctp:1\", \"tls:127.0.0.1:5061\"]\npublic_ip = \"nat\"\nrtp_port_min = 80\ncodecs = [\"G729\"]\n\
             jitter_min_ms = 5\nallow_from = [\"10.0.0.0/40\"]\nauth_user = \"u\"\n\
             [sip.routes]\n\"100\" = \"nowhere.toml\"\n\
             [sip.trunks.pbx]\nuri = \"pbx\"\nregister = true\nexpires_s = 5\nring_timeout_s = 0\n\
             password_env = \"a b\"\n",
        );
        let keys: Vec<_> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "sip.listen",
                "sip.tls_cert",
                "sip.tls_key",
                "sip.public_ip",
                "sip.rtp_port_min",
                "sip.codecs",
                "sip.jitter_min_ms",
                "sip.allow_from",
                "sip.auth_user",
                "sip.routes.100",
                "sip.trunks.pbx.uri",
                "sip.trunks.pbx.password_env",
                "sip.trunks.pbx.username",
                "sip.trunks.pbx.expires_s",
                "sip.trunks.pbx.ring_timeout_s",
            ]
        );
    }

    #[test]
    fn trunks_over_tls_need_a_tls_listener_and_a_real_ca_file() {
        let p = problems(
            "[sip]\nlisten = [\"udp:127.0.0.1:5060\"]\ntls_ca_file = \"nowhere.pem\"\n\
             [sip.trunks.pbx]\nuri = \"sips:pbx.example.com:5061\"\n",
        );
        let keys: Vec<_> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["sip.tls_ca_file", "sip.trunks.pbx.uri"]);
        assert!(p[1].message.contains("tls: listen address"), "{p:?}");
        let t = |uri: &str| {
            TrunkConfig {
                uri: uri.into(),
                ..TrunkConfig::default()
            }
            .transport()
        };
        assert_eq!(t("sips:pbx.example.com"), Transport::Tls);
        assert_eq!(t("sip:10.0.0.1:5061;transport=TLS"), Transport::Tls);
        assert_eq!(t("sip:10.0.0.1;transport=tcp"), Transport::Tcp);
        assert_eq!(t("sip:10.0.0.1"), Transport::Udp);
    }

    #[test]
    fn a_public_listener_needs_an_allow_list_or_a_challenge() {
        let p = problems("[sip]\nlisten = [\"udp:0.0.0.0:5060\"]\n");
        assert_eq!(p[0].key, "sip.allow_from");
        for ok in [
            "allow_from = [\"203.0.113.0/24\"]",
            "auth_user = \"baton\"\nauth_password_env = \"SIP_PW\"",
        ] {
            parse(
                &format!("[sip]\nlisten = [\"udp:0.0.0.0:5060\"]\n{ok}\n"),
                Path::new("c.toml"),
            )
            .unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn listen_addresses_and_networks() {
        assert_eq!(
            parse_listen("tcp:0.0.0.0:5060"),
            Some((Transport::Tcp, "0.0.0.0:5060".parse().unwrap()))
        );
        assert_eq!(
            parse_listen("127.0.0.1:5060"),
            Some((Transport::Udp, "127.0.0.1:5060".parse().unwrap()))
        );
        assert_eq!(
            parse_listen("tls:1.2.3.4:5061"),
            Some((Transport::Tls, "1.2.3.4:5061".parse().unwrap()))
        );
        assert_eq!(parse_listen("wss:1.2.3.4:5061"), None);
        let net = IpNet::parse("203.0.113.0/24").unwrap();
        assert!(net.contains("203.0.113.77".parse().unwrap()));
        assert!(!net.contains("203.0.114.1".parse().unwrap()));
        assert!(
            IpNet::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert!(
            IpNet::parse("::1")
                .unwrap()
                .contains("::1".parse().unwrap())
        );
        assert!(
            IpNet::parse("10.0.0.1")
                .unwrap()
                .contains("::ffff:10.0.0.1".parse().unwrap())
        );
        assert_eq!(IpNet::parse("10.0.0.0/33"), None);
    }
}

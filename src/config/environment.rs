//! What a config needs from the machine it runs on, checked before `serve` starts and by
//! `check-config`: the environment variables it names (set and not empty; a credential command
//! in place of `credential_env` is run by `check-config` and `serve` themselves), the ports it
//! binds (free), and for a file it points at that is missing, the closest file that exists.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};

use super::{BackendKind, Loaded, Problem};
use crate::leg::sip::config::{Transport, parse_listen};

/// Every variable the config names that `serve` would read, with the key naming it.
fn named_variables(loaded: &Loaded) -> Vec<(String, String)> {
    let c = &loaded.config;
    let m = &c.model;
    let mut out: Vec<(String, String)> = Vec::new();
    let mut add = |key: &str, var: &str| {
        if !var.trim().is_empty() {
            out.push((key.to_owned(), var.trim().to_owned()));
        }
    };
    // A credential command replaces the variable (the OpenAI default one included).
    let command = m.credential_command.is_some();
    match m.backend {
        _ if command => {}
        BackendKind::Gemini | BackendKind::Vertex => add("model.credential_env", &m.credential_env),
        BackendKind::Openai => add(
            "model.credential_env",
            if m.credential_env.is_empty() {
                crate::model::openai::endpoint::DEFAULT_KEY_ENV
            } else {
                &m.credential_env
            },
        ),
        BackendKind::Mock => {}
    }
    if !c.twilio.disable_signature_check {
        add("twilio.auth_token_env", &c.twilio.auth_token_env);
    }
    add(
        "telnyx.stream_auth_token_env",
        &c.telnyx.stream_auth_token_env,
    );
    add("exotel.basic_auth_env", &c.exotel.basic_auth_env);
    add("server.auth_tokens_env", &c.server.auth_tokens_env);
    add("store.url_env", &c.store.url_env);
    for (name, s) in &c.mcp {
        add(&format!("mcp.{name}.header_env"), &s.header_env);
    }
    // The SIP side starts (and reads its passwords) only when it listens.
    let sip = &c.sip;
    if !sip.listen.is_empty() {
        if !sip.auth_user.is_empty() {
            add("sip.auth_password_env", &sip.auth_password_env);
        }
        for (name, t) in &sip.trunks {
            if !t.username.is_empty() {
                add(&format!("sip.trunks.{name}.password_env"), &t.password_env);
            }
        }
    }
    out
}

/// Variables the config names that are not set (or empty) here.
pub fn unset_variables(loaded: &Loaded, out: &mut Vec<Problem>) {
    for (key, var) in named_variables(loaded) {
        // Only names reach here; a value pasted in the file is refused by validation.
        if !var
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
        {
            continue;
        }
        let state = match std::env::var_os(&var) {
            None => "is not set",
            Some(v) if v.is_empty() => "is set but empty",
            Some(_) => continue,
        };
        let vertex =
            key == "model.credential_env" && loaded.config.model.backend == BackendKind::Vertex;
        let fix = if vertex {
            // Vertex takes an OAuth2 access token, sent as `Authorization: Bearer`; baton reads
            // the variable when it starts and never looks for application-default credentials.
            format!(
                "export {var}=\"$(gcloud auth print-access-token)\" in the environment baton \
                 starts in (an OAuth2 access token, read when baton starts; gcloud's last about \
                 an hour), or let baton renew it: credential_command = [\"gcloud\", \"auth\", \
                 \"print-access-token\"] in place of credential_env"
            )
        } else {
            format!(
                "export {var}=… in the environment baton starts in (the value never goes in \
                 this file), or remove the key"
            )
        };
        out.push(Problem {
            key,
            message: format!("names the environment variable {var}, which {state} here"),
            fix,
        });
    }
}

/// The addresses the daemon binds that another process holds (or this machine cannot bind):
/// the HTTP and AudioSocket listeners (TCP), and SIP's listen addresses (UDP, or TCP for
/// `tcp:` and `tls:`). A problem of the HTTP address is listed under `listen_key`
/// (`server.listen`, or `--listen` when the command line gave it).
pub fn ports(loaded: &Loaded, listen_key: &str, out: &mut Vec<Problem>) {
    // Each fix's port is taken too once suggested: two busy keys are not sent to one port.
    let mut taken = config_ports(loaded);
    let mut check = |key: &str, addr: SocketAddr, out: &mut Vec<Problem>| {
        if addr.port() == 0 {
            return;
        }
        if let Err(e) = TcpListener::bind(addr) {
            out.push(tcp_problem(key, addr, &e, &mut taken));
        }
    };
    check(listen_key, loaded.listen, out);
    if let Some(a) = loaded.audiosocket_listen() {
        check("audiosocket.listen", a, out);
    }
    sip_ports(&loaded.config.sip.listen, &mut taken, out);
}

/// Every port the configuration asks the daemon to bind (HTTP, AudioSocket, SIP): a fix never
/// suggests one of them.
pub fn config_ports(loaded: &Loaded) -> Vec<u16> {
    let mut taken = vec![loaded.listen.port()];
    taken.extend(loaded.audiosocket_listen().map(|a| a.port()));
    taken.extend(
        loaded
            .config
            .sip
            .listen
            .iter()
            .filter_map(|l| parse_listen(l).map(|(_, a)| a.port())),
    );
    taken
}

/// `sip.listen`'s addresses that cannot be bound, each with the list as it would be with that
/// address moved.
fn sip_ports(listen: &[String], taken: &mut Vec<u16>, out: &mut Vec<Problem>) {
    for (i, entry) in listen.iter().enumerate() {
        // An entry that is not an address is reported by validation.
        let Some((transport, addr)) = parse_listen(entry) else {
            continue;
        };
        if addr.port() == 0 {
            continue;
        }
        let udp = transport == Transport::Udp;
        let bound = if udp {
            UdpSocket::bind(addr).map(drop)
        } else {
            TcpListener::bind(addr).map(drop)
        };
        let Err(e) = bound else {
            continue;
        };
        let value = |a: SocketAddr| {
            let entries: Vec<String> = listen
                .iter()
                .enumerate()
                .map(|(j, l)| {
                    if j == i {
                        format!("\"{transport}:{a}\"")
                    } else {
                        format!("{l:?}")
                    }
                })
                .collect();
            format!("[{}]", entries.join(", "))
        };
        out.push(problem(
            Bind {
                key: "sip.listen",
                addr,
                udp,
                value: &value,
                example_port: 5060,
                taken: &mut *taken,
            },
            &e,
        ));
    }
}

/// Why `addr` (the value of `key`, a config key or a command-line flag such as `--listen`)
/// cannot be bound, and what to do; a fix never suggests a port of `taken`
/// ([`config_ports`]).
pub fn bind_problem(key: &str, addr: SocketAddr, e: &std::io::Error, taken: &[u16]) -> Problem {
    tcp_problem(key, addr, e, &mut taken.to_vec())
}

/// [`bind_problem`], adding the port its fix suggests to `taken`.
fn tcp_problem(key: &str, addr: SocketAddr, e: &std::io::Error, taken: &mut Vec<u16>) -> Problem {
    problem(
        Bind {
            key,
            addr,
            udp: false,
            value: &|a| format!("\"{a}\""),
            example_port: 8080,
            taken,
        },
        e,
    )
}

/// An address a key asks to bind.
struct Bind<'a> {
    key: &'a str,
    addr: SocketAddr,
    /// A UDP address (else TCP).
    udp: bool,
    /// The key's value written with another address in place of `addr`.
    value: &'a dyn Fn(SocketAddr) -> String,
    /// A port an unprivileged user may bind, for the fix.
    example_port: u16,
    /// The configuration's own ports and those already suggested, never suggested again.
    taken: &'a mut Vec<u16>,
}

/// A port near `addr`'s that this machine lets bind now (with `addr`'s protocol) and the
/// configuration does not use; the next one when none of the hundred after it is.
fn free_port_near(addr: SocketAddr, udp: bool, taken: &[u16]) -> u16 {
    let next = addr.port().wrapping_add(1).max(1);
    (1..=100u16)
        .filter_map(|k| addr.port().checked_add(k))
        .filter(|p| !taken.contains(p))
        .find(|&p| {
            let a = SocketAddr::new(addr.ip(), p);
            if udp {
                UdpSocket::bind(a).is_ok()
            } else {
                TcpListener::bind(a).is_ok()
            }
        })
        .unwrap_or(next)
}

fn problem(b: Bind<'_>, e: &std::io::Error) -> Problem {
    let (key, addr) = (b.key, b.addr);
    let port = free_port_near(addr, b.udp, b.taken);
    b.taken.push(port);
    let other = SocketAddr::new(addr.ip(), port);
    let flag = if key == "server.listen" {
        " (or serve --listen)"
    } else {
        ""
    };
    // The setting as the user writes it: `key = value` in the file, `--flag ADDR` on the
    // command line.
    let set = |a: SocketAddr| {
        if key.starts_with("--") {
            format!("{key} {a}")
        } else {
            format!("{key} = {}", (b.value)(a))
        }
    };
    let (message, fix) = match e.kind() {
        std::io::ErrorKind::AddrInUse => (
            format!(
                "{addr}{} is already in use by another process",
                if b.udp { " (UDP)" } else { "" }
            ),
            format!(
                "stop that process (`ss -l{}np 'sport = :{}'` names it), or listen elsewhere: \
                 {}{flag}",
                if b.udp { "u" } else { "t" },
                addr.port(),
                set(other)
            ),
        ),
        std::io::ErrorKind::AddrNotAvailable => (
            format!("{} is not an address of this machine", addr.ip()),
            format!(
                "use one of this machine's addresses, e.g. {}",
                set(SocketAddr::new([127, 0, 0, 1].into(), addr.port()))
            ),
        ),
        std::io::ErrorKind::PermissionDenied => (
            format!("binding {addr} is not permitted for this user"),
            format!(
                "use a port above 1023, e.g. {}",
                set(SocketAddr::new(addr.ip(), b.example_port))
            ),
        ),
        _ => (
            format!("{addr} cannot be bound: {e}"),
            format!("choose another address for {key}"),
        ),
    };
    Problem {
        key: key.to_owned(),
        message,
        fix,
    }
}

/// A problem for a file the config points at that does not exist: the path it was looked for
/// at, and the closest file that does exist.
pub fn missing_file(key: &str, resolved: &Path, what: &str) -> Problem {
    let near = closest_existing(resolved)
        .map(|p| format!("; the closest file there is {}", p.display()))
        .unwrap_or_default();
    Problem {
        key: key.to_owned(),
        message: format!("{} does not exist{near}", resolved.display()),
        fix: format!("give the path of {what}, relative to this config file"),
    }
}

/// The entry of the nearest existing folder on `path`'s way whose name is closest to the part
/// of `path` that is missing there.
pub fn closest_existing(path: &Path) -> Option<PathBuf> {
    let mut dir = path.parent()?;
    let mut wanted = path.file_name()?.to_string_lossy().into_owned();
    while !dir.as_os_str().is_empty() && !dir.is_dir() {
        wanted = dir.file_name()?.to_string_lossy().into_owned();
        dir = dir.parent()?;
    }
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let best = names
        .iter()
        .map(|n| (strsim::damerau_levenshtein(&wanted, n), n))
        .filter(|(d, n)| *d <= (n.len().max(wanted.len()) / 2).max(2))
        // Ties: the same extension first, then the first name in order.
        .min_by_key(|(d, n)| {
            let ext = Path::new(n.as_str()).extension() != Path::new(&wanted).extension();
            (*d, ext, n.as_str())
        })?;
    Some(dir.join(best.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closest_existing_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("scenarios")).unwrap();
        std::fs::write(dir.path().join("scenarios/seed000.toml"), "").unwrap();
        let near = closest_existing(&dir.path().join("scenarios/seed00.toml")).unwrap();
        assert!(near.ends_with("scenarios/seed000.toml"), "{near:?}");
        // A folder that is missing too: the closest entry where the path stops existing.
        let near = closest_existing(&dir.path().join("scenario/seed000.toml")).unwrap();
        assert!(near.ends_with("scenarios"), "{near:?}");
        let p = missing_file(
            "model.scenario",
            &dir.path().join("scenarios/seed00.toml"),
            "x",
        );
        assert!(p.message.contains("seed000.toml"), "{p:?}");
    }

    /// The port a fix suggests after the first `prefix` (`--listen 127.0.0.1:`, `"udp:127.0.0.1:`).
    fn suggested(fix: &str, prefix: &str) -> u16 {
        let at = fix.find(prefix).expect(prefix) + prefix.len();
        let digits: String = fix[at..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap()
    }

    #[test]
    fn a_port_in_use_is_named_with_a_fix_that_suggests_a_free_one_the_config_does_not_use() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        // The next port busy too (held here, or by someone else), the one after it SIP's.
        let _next = TcpListener::bind(SocketAddr::new(addr.ip(), addr.port() + 1));
        let sip = addr.port() + 2;
        let text = format!("[sip]\nlisten = [\"tcp:127.0.0.1:{sip}\"]\n");
        let mut loaded = super::super::parse(&text, Path::new("/tmp/baton.toml")).unwrap();
        loaded.listen = addr;
        let mut out = Vec::new();
        ports(&loaded, "server.listen", &mut out);
        let p = out
            .iter()
            .find(|p| p.key == "server.listen")
            .expect("listen");
        assert!(p.message.contains("already in use"), "{p:?}");
        assert!(p.fix.contains("--listen"), "{p:?}");
        // Given by the flag, the address is the flag's, written as the flag is.
        let mut out = Vec::new();
        ports(&loaded, "--listen", &mut out);
        let p = out.iter().find(|p| p.key == "--listen").expect("flag");
        assert!(
            p.fix.contains("listen elsewhere: --listen 127.0.0.1:"),
            "{p:?}"
        );
        let q = suggested(&p.fix, "--listen 127.0.0.1:");
        assert!(q > sip, "skips the busy port and SIP's: {p:?}");
        assert!(
            TcpListener::bind(SocketAddr::new(addr.ip(), q)).is_ok(),
            "{q}"
        );
    }

    #[test]
    fn two_busy_keys_are_not_sent_to_one_port() {
        // Two busy neighbours (h, h + 1): each one's nearest free port is h + 2.
        let (_http, _audiosocket, h, a) = (0..50)
            .find_map(|_| {
                let http = TcpListener::bind("127.0.0.1:0").ok()?;
                let h = http.local_addr().ok()?;
                let a = SocketAddr::new(h.ip(), h.port().checked_add(1)?);
                let audiosocket = TcpListener::bind(a).ok()?;
                Some((http, audiosocket, h, a))
            })
            .expect("two neighbouring ports");
        let text = format!("[audiosocket]\nlisten = \"{a}\"\n");
        let mut loaded = super::super::parse(&text, Path::new("/tmp/baton.toml")).unwrap();
        loaded.listen = h;
        let mut out = Vec::new();
        ports(&loaded, "server.listen", &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        let p = suggested(&out[0].fix, "server.listen = \"127.0.0.1:");
        let q = suggested(&out[1].fix, "audiosocket.listen = \"127.0.0.1:");
        assert_ne!(p, q, "{out:?}");
        assert!(![h.port(), a.port()].contains(&p) && ![h.port(), a.port()].contains(&q));
    }

    #[test]
    fn a_sip_address_in_use_is_named_under_sip_listen_with_a_fix() {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let u = udp.local_addr().unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let t = tcp.local_addr().unwrap();
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\
             [sip]\nlisten = [\"udp:{u}\", \"tcp:{t}\", \"udp:127.0.0.1:0\"]\n"
        );
        let loaded = super::super::parse(&text, Path::new("/tmp/baton.toml")).unwrap();
        let mut out = Vec::new();
        ports(&loaded, "server.listen", &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out.iter().all(|p| p.key == "sip.listen"), "{out:?}");
        assert_eq!(
            out[0].message,
            format!("{u} (UDP) is already in use by another process")
        );
        let q = suggested(&out[0].fix, "\"udp:127.0.0.1:");
        assert!(q > u.port() && q != t.port(), "{:?}", out[0]);
        assert_eq!(
            out[0].fix,
            format!(
                "stop that process (`ss -lunp 'sport = :{}'` names it), or listen elsewhere: \
                 sip.listen = [\"udp:127.0.0.1:{q}\", \"tcp:{t}\", \"udp:127.0.0.1:0\"]",
                u.port(),
            )
        );
        assert_eq!(
            out[1].message,
            format!("{t} is already in use by another process")
        );
        let q = suggested(&out[1].fix, "\"tcp:127.0.0.1:");
        assert!(q > t.port() && q != u.port(), "{:?}", out[1]);
        assert!(
            out[1].fix.contains("ss -ltnp")
                && out[1].fix.contains(&format!(
                    "sip.listen = [\"udp:{u}\", \"tcp:127.0.0.1:{q}\", \"udp:127.0.0.1:0\"]"
                )),
            "{:?}",
            out[1]
        );
        // Free, the same addresses are no problem.
        drop((udp, tcp));
        let mut out = Vec::new();
        ports(&loaded, "server.listen", &mut out);
        assert!(out.is_empty(), "{out:?}");
    }
}

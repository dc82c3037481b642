//! `[mcp.<name>]` in the daemon's config: the MCP servers this daemon connects to once and shares
//! with every call, and their validation (every problem with its key and fix).
//!
//! ```toml
//! [mcp.crm]                            # Streamable HTTP
//! url = "https://crm.example.com/mcp"
//! header = "Authorization"             # optional: sent with every request …
//! header_env = "CRM_MCP_AUTH"          # … its value from this variable ("Bearer …")
//! timeout_ms = 5000                    # a tool call's deadline (default 5000)
//! timeouts_ms = { monthly_report = 15000 }   # per tool
//!
//! [mcp.files]                          # stdio: a child process baton starts and restarts
//! command = "python3"
//! args = ["servers/files.py"]
//! env = { LOG_LEVEL = "warning" }      # added to baton's own environment
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::config::decode::Problem;

/// One MCP server as configured.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpServerSection {
    /// Streamable HTTP endpoint (`http://` or `https://`). Exactly one of `url` and `command`.
    pub url: String,
    /// A header sent with every HTTP request, e.g. "Authorization".
    pub header: String,
    /// NAME of the environment variable holding the header's value.
    pub header_env: String,
    /// stdio: the program to start (looked up in `PATH`).
    pub command: String,
    /// stdio: its arguments.
    pub args: Vec<String>,
    /// stdio: environment variables added for the child.
    pub env: BTreeMap<String, String>,
    /// stdio: the child's working directory, relative to the config file (default: baton's).
    pub cwd: String,
    /// A tool call's deadline (ms); at it the call is cancelled on the server and the model is
    /// answered with an error.
    pub timeout_ms: Option<u64>,
    /// Per-tool deadlines (ms), by the tool's name on the server.
    pub timeouts_ms: BTreeMap<String, u64>,
    /// Connecting (and each reconnect) must finish within this (ms).
    pub connect_timeout_ms: Option<u64>,
    /// HTTP requests in flight at once on the server's session (default 64); more wait.
    pub max_concurrent: Option<usize>,
}

/// Default deadline of a tool call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(5_000);
/// Default deadline of connecting to a server.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(10_000);
/// Default number of HTTP requests in flight at once on one server's session.
pub const DEFAULT_MAX_CONCURRENT: usize = 64;

/// How baton reaches a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    Http {
        url: url::Url,
        /// A header name and the NAME of the variable holding its value.
        header: Option<(String, String)>,
        max_concurrent: usize,
    },
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<std::path::PathBuf>,
    },
}

/// A validated `[mcp.<name>]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSpec {
    pub name: String,
    pub transport: Transport,
    pub timeout: Duration,
    pub timeouts: BTreeMap<String, Duration>,
    pub connect_timeout: Duration,
}

impl ServerSpec {
    /// The deadline of a call of `tool`.
    pub fn timeout_of(&self, tool: &str) -> Duration {
        self.timeouts.get(tool).copied().unwrap_or(self.timeout)
    }

    /// A Streamable HTTP server at `url` with the defaults (tests, the demo).
    pub fn http(name: &str, url: url::Url) -> ServerSpec {
        ServerSpec {
            name: name.to_owned(),
            transport: Transport::Http {
                url,
                header: None,
                max_concurrent: DEFAULT_MAX_CONCURRENT,
            },
            timeout: DEFAULT_TIMEOUT,
            timeouts: BTreeMap::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// Where the server is, for logs and status (never a credential: the header's value is not
    /// part of the spec).
    pub fn endpoint(&self) -> String {
        match &self.transport {
            Transport::Http { url, .. } => url.to_string(),
            Transport::Stdio { command, args, .. } => std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

fn is_env_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A server name is used in agent sets and event names: letters, digits, `_` and `-`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Checks every `[mcp.*]`, reporting problems through `problem(key, message, fix)`; returns the
/// servers that are valid. `base` anchors a relative `cwd`.
pub fn validate(
    sections: &BTreeMap<String, McpServerSection>,
    base: &std::path::Path,
    problem: &mut dyn FnMut(&str, String, &str),
) -> Vec<ServerSpec> {
    let mut out = Vec::new();
    for (name, s) in sections {
        let k = format!("mcp.{name}");
        let mut ok = true;
        let mut bad = |key: &str, message: String, fix: &str| {
            ok = false;
            problem(key, message, fix);
        };
        if !valid_name(name) {
            bad(
                &k,
                format!("{name:?} cannot be a server name"),
                "use letters, digits, _ and - (agent sets name the server by it)",
            );
        }
        let timeout = match s.timeout_ms {
            None => DEFAULT_TIMEOUT,
            Some(ms) if (1..=600_000).contains(&ms) => Duration::from_millis(ms),
            Some(ms) => {
                bad(
                    &format!("{k}.timeout_ms"),
                    format!("{ms} ms is outside 1..=600000"),
                    "a caller is waiting: use a few seconds, e.g. 5000",
                );
                DEFAULT_TIMEOUT
            }
        };
        let mut timeouts = BTreeMap::new();
        for (tool, &ms) in &s.timeouts_ms {
            if (1..=600_000).contains(&ms) {
                timeouts.insert(tool.clone(), Duration::from_millis(ms));
            } else {
                bad(
                    &format!("{k}.timeouts_ms.{tool}"),
                    format!("{ms} ms is outside 1..=600000"),
                    "use the tool's deadline in ms, e.g. 15000",
                );
            }
        }
        let connect_timeout = match s.connect_timeout_ms {
            None => DEFAULT_CONNECT_TIMEOUT,
            Some(ms) if ms > 0 => Duration::from_millis(ms),
            Some(_) => {
                bad(
                    &format!("{k}.connect_timeout_ms"),
                    "is 0".into(),
                    "use e.g. 10000, or remove the key",
                );
                DEFAULT_CONNECT_TIMEOUT
            }
        };
        let (url, command) = (s.url.trim(), s.command.trim());
        let transport = if url.is_empty() && command.is_empty() {
            bad(
                &k,
                "names neither a url nor a command".into(),
                "set url = \"https://host/mcp\" (Streamable HTTP) or command = \"…\" (stdio)",
            );
            None
        } else if !url.is_empty() && !command.is_empty() {
            bad(
                &k,
                "names both a url and a command".into(),
                "keep url (Streamable HTTP) or command (stdio), not both",
            );
            None
        } else if !url.is_empty() {
            http(&k, url, s, &mut bad)
        } else {
            if !s.header.is_empty() || !s.header_env.is_empty() || s.max_concurrent.is_some() {
                bad(
                    &format!("{k}.header"),
                    "header, header_env and max_concurrent are for HTTP servers".into(),
                    "remove them, or use url instead of command",
                );
            }
            Some(Transport::Stdio {
                command: command.to_owned(),
                args: s.args.clone(),
                env: s.env.clone(),
                cwd: (!s.cwd.is_empty()).then(|| base.join(&s.cwd)),
            })
        };
        if let (true, Some(transport)) = (ok, transport) {
            out.push(ServerSpec {
                name: name.clone(),
                transport,
                timeout,
                timeouts,
                connect_timeout,
            });
        }
    }
    out
}

fn http(
    k: &str,
    url: &str,
    s: &McpServerSection,
    bad: &mut dyn FnMut(&str, String, &str),
) -> Option<Transport> {
    if !s.args.is_empty() || !s.env.is_empty() || !s.cwd.is_empty() {
        bad(
            &format!("{k}.args"),
            "args, env and cwd are for stdio servers".into(),
            "remove them, or use command instead of url",
        );
    }
    let parsed = match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Some(u),
        _ => {
            bad(
                &format!("{k}.url"),
                format!("{url:?} is not an http(s) URL"),
                "e.g. url = \"https://crm.example.com/mcp\"",
            );
            None
        }
    };
    if parsed.as_ref().is_some_and(|u| u.password().is_some()) {
        bad(
            &format!("{k}.url"),
            "holds a password".into(),
            "send the credential as a header: header = \"Authorization\", header_env = \"VAR\"",
        );
    }
    let header = match (s.header.trim(), s.header_env.trim()) {
        ("", "") => None,
        (h, env) if !h.is_empty() && !env.is_empty() => {
            if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                bad(
                    &format!("{k}.header"),
                    format!("{h:?} is not a header name"),
                    "e.g. header = \"Authorization\"",
                );
            }
            if !is_env_name(env) {
                bad(
                    &format!("{k}.header_env"),
                    "must be the NAME of an environment variable, not the secret".into(),
                    "write e.g. header_env = \"CRM_MCP_AUTH\" and export the value in that variable",
                );
            }
            Some((h.to_owned(), env.to_owned()))
        }
        _ => {
            bad(
                &format!("{k}.header_env"),
                "header and header_env go together".into(),
                "set both (the header's value comes from the variable) or neither",
            );
            None
        }
    };
    let max_concurrent = match s.max_concurrent {
        None => DEFAULT_MAX_CONCURRENT,
        Some(n) if (1..=1024).contains(&n) => n,
        Some(n) => {
            bad(
                &format!("{k}.max_concurrent"),
                format!("{n} is outside 1..=1024"),
                "use e.g. 64",
            );
            DEFAULT_MAX_CONCURRENT
        }
    };
    Some(Transport::Http {
        url: parsed?,
        header,
        max_concurrent,
    })
}

/// The problems of `[mcp.*]` as [`Problem`]s (for the daemon config's check).
pub fn problems(
    sections: &BTreeMap<String, McpServerSection>,
    base: &std::path::Path,
) -> (Vec<ServerSpec>, Vec<Problem>) {
    let mut found = Vec::new();
    let specs = validate(sections, base, &mut |key, message, fix| {
        found.push(Problem {
            key: key.to_owned(),
            message,
            fix: fix.to_owned(),
        })
    });
    (specs, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(toml_text: &str) -> (Vec<ServerSpec>, Vec<String>) {
        #[derive(Deserialize)]
        struct F {
            mcp: BTreeMap<String, McpServerSection>,
        }
        let f: F = toml::from_str(toml_text).unwrap();
        let (specs, p) = problems(&f.mcp, std::path::Path::new("/etc/baton"));
        (specs, p.into_iter().map(|p| p.key).collect())
    }

    #[test]
    fn http_and_stdio_servers_are_read() {
        let (specs, problems) = check(
            r#"
            [mcp.crm]
            url = "http://127.0.0.1:8000/mcp"
            header = "Authorization"
            header_env = "CRM_AUTH"
            timeouts_ms = { slow = 9000 }
            [mcp.files]
            command = "python3"
            args = ["s.py"]
            cwd = "servers"
            "#,
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].name, "crm");
        assert_eq!(specs[0].timeout_of("slow"), Duration::from_millis(9000));
        assert_eq!(specs[0].timeout_of("fast"), DEFAULT_TIMEOUT);
        assert_eq!(specs[1].endpoint(), "python3 s.py");
        assert!(matches!(
            &specs[1].transport,
            Transport::Stdio { cwd: Some(c), .. } if c == std::path::Path::new("/etc/baton/servers")
        ));
    }

    #[test]
    fn every_problem_names_its_key() {
        let (specs, problems) = check(
            r#"
            [mcp."bad name"]
            url = "http://x/mcp"
            [mcp.both]
            url = "http://x/mcp"
            command = "x"
            [mcp.none]
            [mcp.secret]
            url = "http://x/mcp"
            header = "Authorization"
            header_env = "Bearer abc"
            [mcp.slow]
            url = "ftp://x"
            timeout_ms = 0
            "#,
        );
        assert!(specs.is_empty());
        assert_eq!(
            problems,
            [
                "mcp.bad name",
                "mcp.both",
                "mcp.none",
                "mcp.secret.header_env",
                "mcp.slow.timeout_ms",
                "mcp.slow.url"
            ]
        );
    }
}

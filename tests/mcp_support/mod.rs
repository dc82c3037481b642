//! Shared by the MCP tests: the official Python SDK's server (tests/python/mcp_server.py) in a
//! process of its own, over Streamable HTTP or stdio, and a call's side of the orchestrator
//! driven the way the call layer drives it (tool calls in, `ToolTasks` running tools, function
//! responses and events out).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;

use baton::agents::runner::ToolTasks;
use baton::agents::{Action, CallEvent, Input, Orchestrator, Registry};
use baton::mcp::{ServerSpec, Transport};
use baton::model::gemini::wire::FunctionResponse;
use baton::model::{Capabilities, ToolCallRequest};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

pub const CAPS: Capabilities = Capabilities {
    update_instructions: true,
    update_tools: true,
    non_blocking_tools: false,
    mid_session_client_content: true,
    resumption: true,
    history_config: true,
    calls_pause_speech: false,
};

/// The test venv's python (made by scripts/python-env.sh; fails with the reason if it cannot be).
pub fn python() -> PathBuf {
    let out = Command::new("bash")
        .arg(Path::new(ROOT).join("scripts/python-env.sh"))
        .output()
        .expect("cannot run bash for scripts/python-env.sh");
    assert!(
        out.status.success(),
        "scripts/python-env.sh failed; the MCP tests need python3 with venv and pip (and PyPI \
         access the first time) for the official `mcp` SDK:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

pub fn script() -> PathBuf {
    Path::new(ROOT).join("tests/python/mcp_server.py")
}

/// The Python server over Streamable HTTP.
pub struct PyHttp {
    pub child: Child,
    pub port: u16,
    pub stats: PathBuf,
    _dir: Arc<tempfile::TempDir>,
}

impl PyHttp {
    pub fn start(extra: &[&str]) -> PyHttp {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        Self::start_in(dir, 0, extra)
    }

    pub fn start_in(dir: Arc<tempfile::TempDir>, port: u16, extra: &[&str]) -> PyHttp {
        let stats = dir.path().join("stats.json");
        let mut child = Command::new(python())
            .arg(script())
            .args(["--http", "--port", &port.to_string(), "--stats"])
            .arg(&stats)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the server prints its port");
        PyHttp {
            child,
            port,
            stats,
            _dir: dir,
        }
    }

    pub fn url(&self) -> url::Url {
        url::Url::parse(&format!("http://127.0.0.1:{}/mcp", self.port)).unwrap()
    }

    pub fn spec(&self, name: &str) -> ServerSpec {
        ServerSpec::http(name, self.url())
    }

    /// Kills the server; a new one on the same port with the same stats file.
    pub fn restart(mut self) -> PyHttp {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let port = self.port;
        let dir = self._dir.clone();
        drop(self);
        PyHttp::start_in(dir, port, &[])
    }

    pub fn stats(&self) -> Value {
        read_stats(&self.stats)
    }
}

impl Drop for PyHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn read_stats(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

/// The Python server as a child baton starts over stdio.
pub fn stdio_spec(name: &str, stats: &Path) -> ServerSpec {
    let mut s = ServerSpec::http(name, url::Url::parse("http://unused/").unwrap());
    s.transport = Transport::Stdio {
        command: python().to_string_lossy().into_owned(),
        args: vec![
            script().to_string_lossy().into_owned(),
            "--stats".into(),
            stats.to_string_lossy().into_owned(),
        ],
        env: BTreeMap::new(),
        cwd: None,
    };
    s
}

/// An agent set whose billing agent may use `billing` on server `server`, the promotions agent
/// `promos`.
pub fn set(server: &str, billing: &[&str], promos: &[&str]) -> Registry {
    let list = |v: &[&str]| {
        v.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let text = format!(
        r#"
[set]
name = "mcp-test"
[agents.billing]
name = "Bill"
role = "primary"
instruction = "You are Bill, billing."
mcp.{server} = [{}]
[agents.promos]
name = "Priya"
role = "specialist"
instruction = "You are Priya, promotions."
mcp.{server} = [{}]
"#,
        list(billing),
        list(promos)
    );
    baton::agents::parse(&text, Path::new("mcp-test.toml")).unwrap()
}

/// One call's orchestrator, its running tools, and what came out.
pub struct CallSide {
    pub orch: Orchestrator,
    pub tasks: ToolTasks,
    tx: mpsc::Sender<Box<Input>>,
    rx: mpsc::Receiver<Box<Input>>,
    pub responses: Vec<FunctionResponse>,
    pub events: Vec<CallEvent>,
    n: u32,
}

impl CallSide {
    pub fn new(reg: Arc<Registry>) -> CallSide {
        let (tx, rx) = mpsc::channel(16);
        CallSide {
            orch: Orchestrator::new(reg, CAPS, Instant::now()),
            tasks: ToolTasks::default(),
            tx,
            rx,
            responses: Vec::new(),
            events: Vec::new(),
            n: 0,
        }
    }

    /// The function names the model is given now.
    pub fn declared(&self) -> Vec<String> {
        self.orch
            .session_setup()
            .tools
            .iter()
            .flat_map(|t| {
                t["functionDeclarations"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|d| d["name"].as_str().map(str::to_owned))
            .collect()
    }

    fn drain(&mut self) {
        while let Some(a) = self.orch.poll_action() {
            match a {
                Action::RunTool(run) => self.tasks.spawn(run, self.tx.clone()),
                Action::ToolResponse(r) => self.responses.push(r),
                Action::Event(e) => self.events.push(e),
                _ => {}
            }
        }
    }

    /// The model calls `name`; returns the call id.
    pub fn call(&mut self, name: &str, args: Value) -> String {
        self.n += 1;
        let id = format!("call-{}", self.n);
        let _ = self.orch.handle(
            Input::ToolCall(ToolCallRequest {
                id: id.clone(),
                name: name.into(),
                args,
            }),
            Instant::now(),
        );
        self.drain();
        id
    }

    /// The model cancels these calls (the caller barged in), as the call layer passes it on.
    pub fn barge_in(&mut self, ids: &[String]) {
        self.tasks.cancel(ids, "the caller interrupted");
        let _ = self
            .orch
            .handle(Input::ToolCallCancelled(ids.to_vec()), Instant::now());
        self.drain();
    }

    /// Waits (at most `within`) for the function response to `id`.
    pub async fn response(&mut self, id: &str, within: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(r) = self.responses.iter().find(|r| r.id.as_deref() == Some(id)) {
                return r.response.clone();
            }
            let input = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .ok()??;
            let _ = self.orch.handle(*input, Instant::now());
            self.drain();
        }
    }
}

//! Headless Chromium driven over the DevTools protocol (its own WebSocket, no driver binary):
//! launch with a WAV as the fake microphone, evaluate JavaScript in the page, take screenshots.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The Chromium binary: `$BATON_CHROMIUM`, else the first of the usual names on `PATH`.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("BATON_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .iter()
    .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
    .find(|p| p.is_file())
}

/// Chromium, installed by `scripts/browser-setup.sh` when it is missing; `Err` says why not.
pub fn chromium_or_install(root: &Path) -> Result<PathBuf, String> {
    if let Some(p) = find_chromium() {
        return Ok(p);
    }
    let out = std::process::Command::new("bash")
        .arg(root.join("scripts/browser-setup.sh"))
        .output()
        .map_err(|e| format!("cannot run scripts/browser-setup.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "scripts/browser-setup.sh failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    find_chromium().ok_or_else(|| "chromium is still not on PATH after setup".into())
}

pub struct Browser {
    child: tokio::process::Child,
    _profile: tempfile::TempDir,
    ws: Socket,
    next_id: u64,
}

impl Browser {
    /// Starts headless Chromium on `about:blank` with `mic_wav` as the microphone (played once).
    pub async fn launch(chromium: &Path, mic_wav: &Path) -> Result<Browser, String> {
        let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut cmd = tokio::process::Command::new(chromium);
        cmd.args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-features=WebRtcHideLocalIpsWithMdns",
            "--use-fake-ui-for-media-stream",
            "--use-fake-device-for-media-stream",
            "--autoplay-policy=no-user-gesture-required",
            "--window-size=900,1100",
            "--remote-debugging-port=0",
        ])
        .arg(format!(
            "--use-file-for-fake-audio-capture={}%noloop",
            mic_wav.display()
        ))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", chromium.display()))?;
        let port_file = profile.path().join("DevToolsActivePort");
        let mut port = None;
        for _ in 0..150 {
            if let Ok(text) = std::fs::read_to_string(&port_file)
                && let Some(p) = text
                    .lines()
                    .next()
                    .and_then(|l| l.trim().parse::<u16>().ok())
            {
                port = Some(p);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let port = port.ok_or("Chromium did not open its DevTools port within 15 s")?;
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        let list = super::request(addr, "GET", "/json/list", &[], b"").await;
        let targets: Vec<Value> =
            serde_json::from_str(&list.body).map_err(|e| format!("/json/list: {e}: {list:?}"))?;
        let url = targets
            .iter()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .ok_or("no page target")?
            .to_owned();
        let (ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .map_err(|e| format!("DevTools socket: {e}"))?;
        Ok(Browser {
            child,
            _profile: profile,
            ws,
            next_id: 1,
        })
    }

    /// One DevTools command; its `result`.
    pub async fn cmd(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"id": id, "method": method, "params": params});
        self.ws
            .send(Message::text(msg.to_string()))
            .await
            .map_err(|e| e.to_string())?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let m = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .map_err(|_| format!("{method}: no answer"))?;
            let Some(Ok(Message::Text(t))) = m else {
                if matches!(m, None | Some(Err(_))) {
                    return Err(format!("{method}: DevTools socket closed"));
                }
                continue;
            };
            let v: Value = serde_json::from_str(t.as_str()).map_err(|e| e.to_string())?;
            if v["id"] == id {
                if let Some(e) = v.get("error") {
                    return Err(format!("{method}: {e}"));
                }
                return Ok(v["result"].clone());
            }
        }
    }

    /// Evaluates `expr` in the page (awaiting a promise) and returns its value.
    pub async fn eval(&mut self, expr: &str) -> Result<Value, String> {
        let r = self
            .cmd(
                "Runtime.evaluate",
                json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
            )
            .await?;
        if let Some(e) = r.get("exceptionDetails") {
            return Err(format!("{expr}: {e}"));
        }
        Ok(r["result"]["value"].clone())
    }

    pub async fn goto(&mut self, url: &str) -> Result<(), String> {
        self.cmd("Page.navigate", json!({"url": url})).await?;
        for _ in 0..100 {
            if self.eval("document.readyState").await.ok() == Some(json!("complete")) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("{url} did not load"))
    }

    pub async fn screenshot(&mut self, path: &Path) -> Result<(), String> {
        let r = self
            .cmd("Page.captureScreenshot", json!({"format": "png"}))
            .await?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap_or(""))
            .map_err(|e| e.to_string())?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        }
        std::fs::write(path, png).map_err(|e| e.to_string())
    }

    pub async fn close(mut self) {
        let _ = self.child.kill().await;
    }
}

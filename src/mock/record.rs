//! Recording of client messages (`--record-messages FILE`): every message as received, one JSON
//! object per line, written by its own task fed through a channel so a session never waits on the
//! disk.

use std::path::{Path, PathBuf};

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// A handle that queues lines for the writer task; cheap to clone, one per server.
#[derive(Clone, Debug)]
pub struct RecordSink {
    tx: mpsc::UnboundedSender<String>,
}

/// The recording file could not be created.
#[derive(Debug, thiserror::Error)]
#[error("{path}: cannot create message recording: {source}")]
pub struct RecordError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl RecordSink {
    /// Creates (truncates) `path` and spawns the writer task, which ends when every sink clone is
    /// dropped. Must be called inside a tokio runtime.
    pub async fn create(path: &Path) -> Result<(Self, tokio::task::JoinHandle<()>), RecordError> {
        let file = tokio::fs::File::create(path)
            .await
            .map_err(|source| RecordError {
                path: path.to_path_buf(),
                source,
            })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let path = path.to_path_buf();
        let task = tokio::spawn(write_lines(file, rx, path));
        Ok((RecordSink { tx }, task))
    }

    /// Queues one client message (a text frame's text, or a binary frame's bytes).
    pub fn record(&self, frame: &[u8]) {
        let text = String::from_utf8_lossy(frame);
        // Raw line breaks cannot occur inside JSON strings, so replacing them keeps JSON intact.
        let line = text.replace(['\n', '\r'], " ");
        // A send error means the writer stopped (disk error, already reported); drop the line.
        let _ = self.tx.send(line);
    }
}

async fn write_lines(
    file: tokio::fs::File,
    mut rx: mpsc::UnboundedReceiver<String>,
    path: PathBuf,
) {
    let mut out = tokio::io::BufWriter::new(file);
    while let Some(first) = rx.recv().await {
        let mut line = Some(first);
        while let Some(l) = line {
            let res = async {
                out.write_all(l.as_bytes()).await?;
                out.write_all(b"\n").await
            }
            .await;
            if let Err(e) = res {
                tracing::error!(path = %path.display(), error = %e, "message recording stopped");
                return;
            }
            line = rx.try_recv().ok();
        }
        if let Err(e) = out.flush().await {
            tracing::error!(path = %path.display(), error = %e, "message recording stopped");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_one_line_per_message() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rec.jsonl");
        let (sink, task) = RecordSink::create(&p).await.unwrap();
        sink.record(br#"{"setup":{}}"#);
        sink.record(b"{\"realtimeInput\":\n {\"text\": \"hi\"}}");
        drop(sink);
        task.await.unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        for l in lines {
            serde_json::from_str::<serde_json::Value>(l).unwrap();
        }
        let err = RecordSink::create(&dir.path().join("no/such/dir/x.jsonl"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("x.jsonl"), "{err}");
    }
}

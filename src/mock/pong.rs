//! Late pongs (`[faults] late_pong_ms`): the service answers WebSocket pings 8–30 s late
//! (reference §8.2 item 1). tungstenite answers every ping at once and cannot be told otherwise,
//! so this wrapper sits under the mock's WebSocket and holds back the pong frames it writes,
//! releasing each `delay` later at a frame boundary; every other byte passes unchanged and in
//! order. It is switched on after the HTTP handshake ([`LatePongs::activate`]).

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Where the parser is in the outgoing frame stream.
#[derive(Debug)]
enum At {
    /// Collecting a frame header.
    Header(Vec<u8>),
    /// `left` payload bytes of the current frame to come; `pong`: it is being held.
    Payload { left: u64, pong: bool },
}

/// A stream whose outgoing WebSocket pongs are delayed.
pub struct LatePongs<S> {
    inner: S,
    delay: Duration,
    active: bool,
    at: At,
    /// Bytes for `inner`, in order.
    out: Vec<u8>,
    /// The pong frame being collected.
    pong: Vec<u8>,
    held: VecDeque<(Instant, Vec<u8>)>,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<S> LatePongs<S> {
    pub fn new(inner: S, delay: Duration) -> Self {
        LatePongs {
            inner,
            delay,
            active: false,
            at: At::Header(Vec::new()),
            out: Vec::new(),
            pong: Vec::new(),
            held: VecDeque::new(),
            timer: None,
        }
    }

    /// From now on the bytes written are WebSocket frames.
    pub fn activate(&mut self) {
        self.active = true;
    }

    /// Splits written bytes into frames, holding pongs back.
    fn parse(&mut self, mut buf: &[u8]) {
        while !buf.is_empty() {
            match &mut self.at {
                At::Header(h) => {
                    h.push(buf[0]);
                    buf = &buf[1..];
                    let Some(len) = header_len(h) else { continue };
                    if h.len() < len {
                        continue;
                    }
                    let header = std::mem::take(h);
                    let payload = payload_len(&header);
                    let pong = header[0] & 0x0F == 0xA;
                    if pong {
                        self.pong = header;
                    } else {
                        self.out.extend_from_slice(&header);
                    }
                    self.at = At::Payload {
                        left: payload,
                        pong,
                    };
                }
                At::Payload { left, pong } => {
                    let n = (*left).min(buf.len() as u64) as usize;
                    let target = if *pong { &mut self.pong } else { &mut self.out };
                    target.extend_from_slice(&buf[..n]);
                    buf = &buf[n..];
                    *left -= n as u64;
                }
            }
            if let At::Payload { left: 0, pong } = self.at {
                if pong {
                    let frame = std::mem::take(&mut self.pong);
                    self.held.push_back((Instant::now() + self.delay, frame));
                }
                self.at = At::Header(Vec::new());
            }
        }
    }

    /// Moves pongs that are due into `out` (only between frames); arms the timer for the next.
    fn release(&mut self, cx: &mut Context<'_>) {
        let between = matches!(&self.at, At::Header(h) if h.is_empty());
        let now = Instant::now();
        while between && self.held.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, frame)) = self.held.pop_front() {
                self.out.extend_from_slice(&frame);
            }
        }
        self.timer = None;
        if let Some(&(at, _)) = self.held.front() {
            let mut sleep = Box::pin(tokio::time::sleep_until(at.max(now)));
            if sleep.as_mut().poll(cx).is_ready() {
                cx.waker().wake_by_ref();
            }
            self.timer = Some(sleep);
        }
    }
}

use std::future::Future;

impl<S: AsyncWrite + Unpin> LatePongs<S> {
    /// Writes `out` to the inner stream; Ready once it is empty.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.out) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    self.out.drain(..n);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// Header length once the first two bytes are known.
fn header_len(h: &[u8]) -> Option<usize> {
    let b1 = *h.get(1)?;
    let ext = match b1 & 0x7F {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    Some(2 + ext + if b1 & 0x80 != 0 { 4 } else { 0 })
}

fn payload_len(h: &[u8]) -> u64 {
    match h[1] & 0x7F {
        126 => u64::from(u16::from_be_bytes([h[2], h[3]])),
        127 => h[2..10].iter().fold(0u64, |a, &b| (a << 8) | u64::from(b)),
        n => u64::from(n),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for LatePongs<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.active {
            this.release(cx);
            if let Poll::Ready(Err(e)) = this.drain(cx) {
                return Poll::Ready(Err(e));
            }
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for LatePongs<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.active {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        this.parse(buf);
        this.release(cx);
        // What cannot be written now goes out on the next write or flush.
        if let Poll::Ready(Err(e)) = this.drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.active {
            this.release(cx);
            std::task::ready!(this.drain(cx))?;
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn pongs_are_held_and_everything_else_passes_in_order() {
        let (a, mut b) = tokio::io::duplex(1 << 16);
        let mut w = LatePongs::new(a, Duration::from_secs(30));
        w.write_all(b"HTTP/1.1 101\r\n\r\n").await.unwrap();
        w.activate();
        let text = [0x81u8, 0x02, b'h', b'i'];
        let pong = [0x8Au8, 0x01, b'p'];
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&text);
        bytes.extend_from_slice(&pong);
        bytes.extend_from_slice(&text);
        // Written in awkward pieces.
        for chunk in bytes.chunks(3) {
            w.write_all(chunk).await.unwrap();
        }
        w.flush().await.unwrap();
        let mut got = vec![0u8; 16 + 8];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[16..], [text, text].concat());
        // The pong comes 30 s later, once the wrapper is polled (the mock always reads).
        let start = Instant::now();
        let reader = tokio::spawn(async move {
            let mut sink = [0u8; 8];
            let _ = w.read(&mut sink).await;
        });
        let mut p = [0u8; 3];
        b.read_exact(&mut p).await.unwrap();
        assert_eq!(p, pong);
        assert_eq!(Instant::now() - start, Duration::from_secs(30));
        reader.abort();
    }
}

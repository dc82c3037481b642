//! A scripted WebRTC caller for the WHIP tests (webrtc-rs on the other side, with its own Opus
//! codec from baton's codec module), raw HTTP requests, and the event stream.
#![allow(dead_code)]

pub mod browser;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rtc::media::Sample;
use rtc::media_stream::MediaStreamTrack;
use rtc::rtp_transceiver::rtp_sender::{
    RTCRtpCodec, RTCRtpCodecParameters, RTCRtpCodingParameters, RTCRtpEncodingParameters,
    RtpCodecKind,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use webrtc::media_stream::track_local::static_sample::TrackLocalStaticSample;
use webrtc::media_stream::track_remote::{TrackRemote, TrackRemoteEvent};
use webrtc::peer_connection::{
    MediaEngine, PeerConnection, PeerConnectionBuilder, PeerConnectionEventHandler,
    RTCIceGatheringState, RTCSessionDescription, Registry, SettingEngineBuilder,
    register_default_interceptors,
};

use baton::leg::webrtc::codec::{OpusInbound, OpusOutbound};

pub const RATE: u32 = 24_000;

/// One HTTP exchange.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A raw HTTP/1.1 request with `Connection: close`.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
    {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    // The server may answer (413) before reading a large body; a failed write is fine then.
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    HttpResponse {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// `GET /calls` as JSON.
pub async fn calls(addr: SocketAddr) -> Vec<serde_json::Value> {
    let r = request(addr, "GET", "/calls", &[], b"").await;
    assert_eq!(r.status, 200, "{r:?}");
    serde_json::from_str(&r.body).unwrap()
}

/// Collects a call's event stream until the server closes it.
pub fn follow_events(
    addr: SocketAddr,
    call_id: &str,
) -> tokio::task::JoinHandle<Vec<serde_json::Value>> {
    let url = format!("ws://{addr}/calls/{call_id}/events");
    tokio::spawn(async move {
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        let mut out = Vec::new();
        while let Some(Ok(m)) = ws.next().await {
            if let tokio_tungstenite::tungstenite::Message::Text(t) = m {
                out.push(serde_json::from_str(t.as_str()).unwrap());
            }
        }
        out
    })
}

/// What the scripted caller got.
pub struct CallResult {
    pub call_id: String,
    pub location: String,
    /// What it heard, 24 kHz mono, on its own timeline (zero = the offer was posted).
    pub heard: Vec<i16>,
    pub packets_in: u64,
    pub delete_status: u16,
}

struct Handler {
    gathered: watch::Sender<bool>,
    tracks: mpsc::UnboundedSender<Arc<dyn TrackRemote>>,
}

#[async_trait::async_trait]
impl PeerConnectionEventHandler for Handler {
    async fn on_ice_gathering_state_change(&self, state: RTCIceGatheringState) {
        if state == RTCIceGatheringState::Complete {
            self.gathered.send_replace(true);
        }
    }
    async fn on_track(&self, track: Arc<dyn TrackRemote>) {
        let _ = self.tracks.send(track);
    }
}

fn opus() -> RTCRtpCodecParameters {
    RTCRtpCodecParameters {
        rtp_codec: RTCRtpCodec {
            mime_type: "audio/opus".to_owned(),
            clock_rate: 48_000,
            channels: 2,
            sdp_fmtp_line: "minptime=10;useinbandfec=1".to_owned(),
            rtcp_feedback: vec![],
        },
        payload_type: 111,
    }
}

/// Calls `addr`'s `/whip`, plays `pcm` (24 kHz) in real time then `tail` of silence, records
/// what it hears, then `DELETE`s the session. `during` runs once the answer is in.
pub async fn place_call<F, Fut>(
    addr: SocketAddr,
    pcm: &[i16],
    tail: Duration,
    during: F,
) -> CallResult
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut media = MediaEngine::default();
    media.register_codec(opus(), RtpCodecKind::Audio).unwrap();
    let registry = register_default_interceptors(Registry::new(), &mut media).unwrap();
    let (gathered_tx, mut gathered) = watch::channel(false);
    let (tracks_tx, mut tracks) = mpsc::unbounded_channel();
    let pc = PeerConnectionBuilder::new()
        .with_media_engine(media)
        .with_interceptor_registry(registry)
        .with_setting_engine(
            SettingEngineBuilder::new()
                .with_include_loopback_candidate(true)
                .build(),
        )
        .with_handler(Arc::new(Handler {
            gathered: gathered_tx,
            tracks: tracks_tx,
        }))
        .with_udp_addrs(vec!["127.0.0.1:0".to_string()])
        .build()
        .await
        .unwrap();
    let ssrc = 0x5eed_0001;
    let track = Arc::new(
        TrackLocalStaticSample::new(
            Instant::now(),
            MediaStreamTrack::new(
                "caller".into(),
                "mic".into(),
                "mic".into(),
                RtpCodecKind::Audio,
                vec![RTCRtpEncodingParameters {
                    rtp_coding_parameters: RTCRtpCodingParameters {
                        ssrc: Some(ssrc),
                        ..Default::default()
                    },
                    codec: opus().rtp_codec,
                    ..Default::default()
                }],
            ),
        )
        .unwrap(),
    );
    let sender = pc.add_track(track.clone()).await.unwrap();
    let offer = pc.create_offer(None).await.unwrap();
    pc.set_local_description(offer).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), gathered.wait_for(|g| *g))
        .await
        .unwrap()
        .unwrap();
    let sdp = pc.local_description().await.unwrap().sdp;
    let t0 = Instant::now();
    let r = request(
        addr,
        "POST",
        "/whip",
        &[("Content-Type", "application/sdp")],
        sdp.as_bytes(),
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/sdp"));
    let location = r.header("location").unwrap().to_owned();
    let call_id = r.header("baton-call-id").unwrap().to_owned();
    assert!(
        r.body.contains("a=sendrecv"),
        "the answer is sendrecv: {}",
        r.body
    );
    assert!(
        r.body.contains("a=candidate:"),
        "non-trickle: candidates in the answer"
    );
    pc.set_remote_description(RTCSessionDescription::answer(r.body.clone()).unwrap())
        .await
        .unwrap();
    tokio::spawn(during(call_id.clone()));

    // What the caller hears, placed by arrival of the first packet and then by RTP time.
    let heard = Arc::new(Mutex::new((Vec::<i16>::new(), 0u64)));
    let reader = {
        let heard = heard.clone();
        tokio::spawn(async move {
            let Some(track) = tracks.recv().await else {
                return;
            };
            let mut dec = OpusInbound::new(RATE).unwrap();
            let mut frames = Vec::new();
            let mut base = None;
            while let Some(ev) = track.poll().await {
                let TrackRemoteEvent::OnRtpPacket(p) = ev else {
                    continue;
                };
                let base =
                    *base.get_or_insert((t0.elapsed().as_secs_f64() * f64::from(RATE)) as usize);
                dec.push(
                    p.header.sequence_number,
                    p.header.timestamp,
                    &p.payload,
                    &mut frames,
                );
                let mut h = heard.lock().unwrap();
                h.1 += 1;
                for f in frames.drain(..) {
                    let at = base + (f.ts.as_secs_f64() * f64::from(RATE)) as usize;
                    if h.0.len() < at + f.samples.len() {
                        h.0.resize(at + f.samples.len(), 0);
                    }
                    h.0[at..at + f.samples.len()].copy_from_slice(&f.samples);
                }
            }
        })
    };

    let pt = sender
        .get_parameters()
        .await
        .ok()
        .and_then(|p| p.rtp_parameters.codecs.first().map(|c| c.payload_type))
        .unwrap_or(111);
    let mut enc = OpusOutbound::new(RATE, 32_000).unwrap();
    let spf = (RATE / 50) as usize;
    let frames = pcm.len().div_ceil(spf) + (tail.as_millis() / 20) as usize;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for n in 0..frames {
        tick.tick().await;
        let chunk = pcm
            .get(n * spf..((n + 1) * spf).min(pcm.len()))
            .unwrap_or(&[]);
        let data = enc.encode(chunk).unwrap();
        let mut s = Sample::new(Instant::now());
        s.data = data.into();
        s.duration = Duration::from_millis(20);
        let _ = track.sample_writer(ssrc, pt).write_sample(&s).await;
    }
    let del = request(addr, "DELETE", &location, &[], b"").await;
    let _ = pc.close().await;
    let _ = tokio::time::timeout(Duration::from_secs(3), reader).await;
    let (heard, packets_in) = std::mem::take(&mut *heard.lock().unwrap());
    CallResult {
        call_id,
        location,
        heard,
        packets_in,
        delete_status: del.status,
    }
}

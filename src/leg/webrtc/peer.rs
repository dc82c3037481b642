//! One browser's peer connection (webrtc-rs): checking the offer, answering it with Opus only and
//! `sendrecv`, non-trickle ICE (the answer is returned once gathering is complete, so it carries
//! every candidate), and the handles the leg needs afterwards.

use std::sync::Arc;
use std::time::Duration;

use rtc::media_stream::MediaStreamTrack;
use rtc::peer_connection::transport::RTCIceCandidateType;
use rtc::rtp_transceiver::rtp_sender::{
    RTCRtpCodec, RTCRtpCodecParameters, RTCRtpCodingParameters, RTCRtpEncodingParameters,
    RtpCodecKind,
};
use tokio::sync::{mpsc, watch};
use webrtc::media_stream::track_local::static_sample::TrackLocalStaticSample;
use webrtc::media_stream::track_remote::TrackRemote;
use webrtc::peer_connection::{
    MediaEngine, PeerConnection, PeerConnectionBuilder, PeerConnectionEventHandler,
    RTCConfigurationBuilder, RTCIceGatheringState, RTCIceServer, RTCPeerConnectionState,
    RTCSessionDescription, Registry, SettingEngineBuilder, register_default_interceptors,
};

use super::codec::RTP_CLOCK;

/// Opus as offered by browsers (RFC 7587: the rtpmap always says 2 channels). `useinbandfec=1`:
/// baton decodes in-band FEC when a packet is lost. No `usedtx`: the browser sends a continuous
/// 50 packets per second.
const OPUS_FMTP: &str = "minptime=10;useinbandfec=1";
const OPUS_PT: u8 = 111;

/// Where and how a peer connection gathers candidates.
#[derive(Clone, Debug)]
pub struct PeerSettings {
    /// Local UDP addresses to bind (`127.0.0.1:0`, `0.0.0.0:0` = every non-loopback interface).
    pub udp_addrs: Vec<String>,
    /// STUN/TURN servers (`stun:host:port`, `turn:host:port?transport=udp`).
    pub ice_servers: Vec<IceServer>,
    /// Public addresses to advertise instead of the host's own (a server behind 1:1 NAT).
    pub nat_1to1_ips: Vec<String>,
    /// How long ICE gathering may take before the offer is refused.
    pub gather_timeout: Duration,
}

impl Default for PeerSettings {
    fn default() -> Self {
        PeerSettings {
            udp_addrs: vec!["127.0.0.1:0".into()],
            ice_servers: Vec::new(),
            nat_1to1_ips: Vec::new(),
            gather_timeout: Duration::from_secs(5),
        }
    }
}

/// One STUN or TURN server.
#[derive(Clone, Debug, Default)]
pub struct IceServer {
    pub urls: Vec<String>,
    pub username: String,
    pub credential: String,
}

/// Why an offer could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The offer is not SDP baton can answer; the text says why (HTTP 400).
    #[error("{0}")]
    BadOffer(String),
    /// Setting up the connection failed on baton's side (HTTP 500).
    #[error("cannot set up the peer connection: {0}")]
    Setup(String),
    #[error("ICE gathering did not complete within {0:?}")]
    GatherTimeout(Duration),
}

fn setup<E: std::fmt::Display>(e: E) -> PeerError {
    PeerError::Setup(e.to_string())
}

/// Checks that an offer is SDP with exactly one audio section that sends audio and offers Opus;
/// the error names what is wrong. webrtc-rs parses it again when it is applied.
pub fn check_offer(sdp: &str) -> Result<(), PeerError> {
    let bad = |m: String| PeerError::BadOffer(m);
    if !sdp.trim_start().starts_with("v=0") {
        return Err(bad(
            "the body is not an SDP offer (it must start with \"v=0\")".into(),
        ));
    }
    let desc = RTCSessionDescription::offer(sdp.to_owned()).map_err(|e| {
        bad(format!(
            "the SDP offer does not parse: {}",
            e.to_string().trim()
        ))
    })?;
    let parsed = desc
        .unmarshal()
        .map_err(|e| bad(format!("the SDP offer does not parse: {e}")))?;
    let mut audio = 0;
    for m in &parsed.media_descriptions {
        match m.media_name.media.as_str() {
            "audio" => audio += 1,
            other => {
                return Err(bad(format!(
                    "the offer has a {other} section; baton takes one audio section only"
                )));
            }
        }
        let dir = ["sendrecv", "sendonly", "recvonly", "inactive"]
            .into_iter()
            .find(|d| m.has_attribute(d))
            .unwrap_or("sendrecv");
        if matches!(dir, "recvonly" | "inactive") {
            return Err(bad(format!(
                "the audio section is {dir}: the caller must send audio (offer sendrecv)"
            )));
        }
        let opus = m.attributes.iter().any(|a| {
            a.key == "rtpmap"
                && a.value.as_deref().is_some_and(|v| {
                    v.split_whitespace()
                        .nth(1)
                        .is_some_and(|c| c.to_ascii_lowercase().starts_with("opus/48000"))
                })
        });
        if !opus {
            return Err(bad(
                "the audio section offers no Opus (a=rtpmap:<pt> opus/48000/2)".into(),
            ));
        }
    }
    match audio {
        0 => Err(bad("the offer has no audio section (m=audio)".into())),
        1 => Ok(()),
        n => Err(bad(format!(
            "the offer has {n} audio sections; baton takes one"
        ))),
    }
}

fn opus_codec() -> RTCRtpCodec {
    RTCRtpCodec {
        mime_type: rtc::peer_connection::configuration::media_engine::MIME_TYPE_OPUS.to_owned(),
        clock_rate: RTP_CLOCK,
        channels: 2,
        sdp_fmtp_line: OPUS_FMTP.to_owned(),
        rtcp_feedback: vec![],
    }
}

/// An answered peer connection and what the leg takes from it.
pub struct Peer {
    pub pc: Arc<dyn PeerConnection>,
    /// The agent's audio track toward the browser.
    pub track: Arc<TrackLocalStaticSample>,
    pub ssrc: u32,
    /// The Opus payload type negotiated for the outbound track.
    pub payload_type: u8,
    /// The caller's microphone track: the first remote track to arrive (the offer has one audio
    /// section; a further track a peer adds is ignored, so this holds at most one).
    pub remote_tracks: mpsc::Receiver<Arc<dyn TrackRemote>>,
    /// The connection state, as webrtc-rs reports it.
    pub state: watch::Receiver<RTCPeerConnectionState>,
}

/// The answer and the connection it belongs to.
pub struct Answered {
    pub sdp: String,
    pub peer: Peer,
}

struct Handler {
    gathered: watch::Sender<bool>,
    state: watch::Sender<RTCPeerConnectionState>,
    tracks: mpsc::Sender<Arc<dyn TrackRemote>>,
}

#[async_trait::async_trait]
impl PeerConnectionEventHandler for Handler {
    async fn on_ice_gathering_state_change(&self, state: RTCIceGatheringState) {
        if state == RTCIceGatheringState::Complete {
            self.gathered.send_replace(true);
        }
    }

    async fn on_connection_state_change(&self, state: RTCPeerConnectionState) {
        tracing::debug!(%state, "peer connection state");
        self.state.send_replace(state);
    }

    async fn on_track(&self, track: Arc<dyn TrackRemote>) {
        // The leg plays the first track; one more queued or a closed leg means this one is
        // not heard, and it is not kept.
        if self.tracks.try_send(track).is_err() {
            tracing::debug!("a further remote track is ignored");
        }
    }
}

/// Answers `offer`: one Opus track each way (`sendrecv`), every candidate in the answer.
pub async fn answer(offer: &str, s: &PeerSettings) -> Result<Answered, PeerError> {
    check_offer(offer)?;
    let desc = RTCSessionDescription::offer(offer.to_owned())
        .map_err(|e| PeerError::BadOffer(format!("the SDP offer does not parse: {e}")))?;
    let mut media = MediaEngine::default();
    let opus = RTCRtpCodecParameters {
        rtp_codec: opus_codec(),
        payload_type: OPUS_PT,
    };
    media
        .register_codec(opus.clone(), RtpCodecKind::Audio)
        .map_err(setup)?;
    let registry = register_default_interceptors(Registry::new(), &mut media).map_err(setup)?;
    let loopback = s.udp_addrs.iter().any(|a| {
        a.parse::<std::net::SocketAddr>()
            .is_ok_and(|sa| sa.ip().is_loopback())
    });
    let mut settings = SettingEngineBuilder::new().with_include_loopback_candidate(loopback);
    if !s.nat_1to1_ips.is_empty() {
        settings = settings.with_nat_1to1_ips(s.nat_1to1_ips.clone(), RTCIceCandidateType::Host);
    }
    let config = RTCConfigurationBuilder::new()
        .with_ice_servers(
            s.ice_servers
                .iter()
                .map(|i| RTCIceServer {
                    urls: i.urls.clone(),
                    username: i.username.clone(),
                    credential: i.credential.clone(),
                })
                .collect(),
        )
        .build();
    let (gathered_tx, mut gathered) = watch::channel(false);
    let (state_tx, state) = watch::channel(RTCPeerConnectionState::New);
    let (tracks_tx, remote_tracks) = mpsc::channel(1);
    let handler = Arc::new(Handler {
        gathered: gathered_tx,
        state: state_tx,
        tracks: tracks_tx,
    });
    let pc = PeerConnectionBuilder::new()
        .with_configuration(config)
        .with_media_engine(media)
        .with_setting_engine(settings.build())
        .with_interceptor_registry(registry)
        .with_handler(handler)
        .with_udp_addrs(s.udp_addrs.clone())
        .build()
        .await
        .map_err(setup)?;
    let pc: Arc<dyn PeerConnection> = Arc::new(pc);
    let result = negotiate(&pc, desc, &opus, &mut gathered, s.gather_timeout).await;
    match result {
        Ok((sdp, track, ssrc, payload_type)) => Ok(Answered {
            sdp,
            peer: Peer {
                pc,
                track,
                ssrc,
                payload_type,
                remote_tracks,
                state,
            },
        }),
        Err(e) => {
            let _ = pc.close().await;
            Err(e)
        }
    }
}

async fn negotiate(
    pc: &Arc<dyn PeerConnection>,
    offer: RTCSessionDescription,
    opus: &RTCRtpCodecParameters,
    gathered: &mut watch::Receiver<bool>,
    gather_timeout: Duration,
) -> Result<(String, Arc<TrackLocalStaticSample>, u32, u8), PeerError> {
    let ssrc = getrandom::u32().map_err(setup)?;
    let track = TrackLocalStaticSample::new(
        std::time::Instant::now(),
        MediaStreamTrack::new(
            "baton".to_owned(),
            "agent-audio".to_owned(),
            "agent".to_owned(),
            RtpCodecKind::Audio,
            vec![RTCRtpEncodingParameters {
                rtp_coding_parameters: RTCRtpCodingParameters {
                    ssrc: Some(ssrc),
                    ..Default::default()
                },
                codec: opus.rtp_codec.clone(),
                ..Default::default()
            }],
        ),
    )
    .map_err(setup)?;
    let track = Arc::new(track);
    let sender = pc.add_track(track.clone()).await.map_err(setup)?;
    pc.set_remote_description(offer)
        .await
        .map_err(|e| PeerError::BadOffer(format!("the offer cannot be applied: {e}")))?;
    let answer = pc
        .create_answer(None)
        .await
        .map_err(|e| PeerError::BadOffer(format!("the offer cannot be answered: {e}")))?;
    pc.set_local_description(answer).await.map_err(setup)?;
    if tokio::time::timeout(gather_timeout, gathered.wait_for(|done| *done))
        .await
        .is_err()
    {
        return Err(PeerError::GatherTimeout(gather_timeout));
    }
    let local = pc
        .local_description()
        .await
        .ok_or_else(|| setup("no local description after answering"))?;
    if !local.sdp.contains("a=candidate:") {
        return Err(setup(
            "no ICE candidate was gathered (check webrtc.udp_addrs)",
        ));
    }
    let payload_type = sender
        .get_parameters()
        .await
        .ok()
        .and_then(|p| p.rtp_parameters.codecs.first().map(|c| c.payload_type))
        .unwrap_or(OPUS_PT);
    Ok((local.sdp, track, ssrc, payload_type))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHROME_LIKE: &str = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111 0\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=sendrecv\r\na=rtcp-mux\r\na=rtpmap:111 opus/48000/2\r\na=fmtp:111 minptime=10;useinbandfec=1\r\na=rtpmap:0 PCMU/8000\r\na=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\na=fingerprint:sha-256 00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF\r\na=setup:actpass\r\n";

    #[test]
    fn offers_are_checked_with_a_reason() {
        assert!(check_offer(CHROME_LIKE).is_ok());
        let why = |sdp: &str| check_offer(sdp).unwrap_err().to_string();
        assert!(why("hello").contains("not an SDP offer"));
        assert!(why("v=0\r\nthis is not sdp\r\n").contains("does not parse"));
        assert!(why(&CHROME_LIKE.replace("opus/48000/2", "G722/8000")).contains("no Opus"));
        assert!(why(&CHROME_LIKE.replace("a=sendrecv", "a=recvonly")).contains("recvonly"));
        let no_audio = CHROME_LIKE.replace("m=audio", "m=video");
        assert!(
            why(&no_audio).contains("video section"),
            "{}",
            why(&no_audio)
        );
        let two = format!(
            "{CHROME_LIKE}m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:1\r\na=rtpmap:111 opus/48000/2\r\n"
        );
        assert!(why(&two).contains("2 audio sections"));
    }
}

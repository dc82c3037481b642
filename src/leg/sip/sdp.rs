//! SDP offer/answer for a SIP call's audio (RFC 3264, with RFC 3551's static payload types and
//! RFC 4733's `telephone-event`): what a peer offers or answers, what baton answers or offers,
//! and the negotiated media the leg runs. Pure functions over text, no sockets; the syntax is
//! read by the `rtc` stack's SDP parser, the meaning here.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

/// Largest SDP body accepted (real offers are 200 B – 2 KiB).
pub const MAX_SDP: usize = 16 * 1024;
/// The payload type baton offers `telephone-event` on (the de facto standard number).
pub const OFFERED_DTMF_PT: u8 = 101;
/// The dynamic payload type baton offers Opus on.
pub const OFFERED_OPUS_PT: u8 = 111;
/// The clock of `telephone-event` when nothing else is said (RFC 4733 §7.1.1).
pub const DTMF_CLOCK: u32 = 8000;

/// An audio codec baton speaks on SIP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    /// G.711 μ-law, static payload type 0.
    Pcmu,
    /// G.711 A-law, static payload type 8.
    Pcma,
    /// Opus (RFC 7587): a dynamic payload type, `opus/48000/2`, 48 kHz RTP clock whatever the
    /// audio's own bandwidth; baton sends and takes mono.
    Opus,
}

impl Codec {
    /// Every codec, in baton's default order of preference.
    pub const ALL: [Codec; 3] = [Codec::Pcmu, Codec::Pcma, Codec::Opus];

    /// The encoding name in `a=rtpmap`.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Pcmu => "PCMU",
            Codec::Pcma => "PCMA",
            Codec::Opus => "opus",
        }
    }

    /// The payload type baton offers it on: RFC 3551's static type, or a dynamic one for Opus.
    pub fn static_pt(self) -> u8 {
        match self {
            Codec::Pcmu => 0,
            Codec::Pcma => 8,
            Codec::Opus => OFFERED_OPUS_PT,
        }
    }

    /// The RTP clock rate.
    pub fn clock_rate(self) -> u32 {
        match self {
            Codec::Pcmu | Codec::Pcma => 8000,
            Codec::Opus => 48_000,
        }
    }

    /// The `a=rtpmap` encoding parameters after the clock rate (RFC 7587 §7: always two
    /// channels for Opus, even for mono audio).
    fn rtpmap_channels(self) -> &'static str {
        match self {
            Codec::Opus => "/2",
            _ => "",
        }
    }

    /// The PCM rate of a leg whose call starts on this codec: G.711's own 8 kHz, and wideband
    /// 16 kHz for Opus (what speech models take in; Opus decodes to it natively).
    pub fn leg_rate(self) -> u32 {
        match self {
            Codec::Pcmu | Codec::Pcma => 8000,
            Codec::Opus => 16_000,
        }
    }

    /// The codec named `name` (case-insensitive), if baton speaks it.
    pub fn from_name(name: &str) -> Option<Codec> {
        Codec::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }
}

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which way media flows, as one side declares it (`a=sendrecv` …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Direction {
    #[default]
    SendRecv,
    SendOnly,
    RecvOnly,
    Inactive,
}

impl Direction {
    /// The attribute name.
    pub fn attr(self) -> &'static str {
        match self {
            Direction::SendRecv => "sendrecv",
            Direction::SendOnly => "sendonly",
            Direction::RecvOnly => "recvonly",
            Direction::Inactive => "inactive",
        }
    }

    /// The answer to an offer with this direction when the answerer would send and receive
    /// (RFC 3264 §6.1).
    pub fn answer(self) -> Direction {
        match self {
            Direction::SendRecv => Direction::SendRecv,
            Direction::SendOnly => Direction::RecvOnly,
            Direction::RecvOnly => Direction::SendOnly,
            Direction::Inactive => Direction::Inactive,
        }
    }

    /// The side declaring this direction sends media.
    pub fn sends(self) -> bool {
        matches!(self, Direction::SendRecv | Direction::SendOnly)
    }

    /// The side declaring this direction receives media.
    pub fn receives(self) -> bool {
        matches!(self, Direction::SendRecv | Direction::RecvOnly)
    }
}

/// One payload format of a media section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format {
    pub pt: u8,
    /// The `a=rtpmap` encoding name, or the static type's name; empty when unknown.
    pub name: String,
    pub clock_rate: u32,
}

/// One `m=` section, as far as an answer has to mirror it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub media: String,
    pub port: u16,
    pub proto: String,
    pub formats: Vec<String>,
}

/// What the peer's SDP says about the audio it sends and wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteMedia {
    /// Where the peer wants RTP (`c=` and `m=` port). An unspecified IP (`0.0.0.0`) is the old
    /// way of putting a call on hold.
    pub rtp: SocketAddr,
    /// Where the peer wants RTCP (`a=rtcp`, else the RTP port + 1).
    pub rtcp: SocketAddr,
    /// The audio section's formats, in the peer's order of preference.
    pub formats: Vec<Format>,
    /// The direction the peer declared for the audio.
    pub direction: Direction,
    /// `a=ptime`, when given.
    pub ptime: Option<u32>,
    /// `o=` session id and version (a re-INVITE with the same version changes nothing).
    pub session: (u64, u64),
    /// Every `m=` section, in order; `audio` indexes the one used.
    pub sections: Vec<Section>,
    pub audio: usize,
}

impl RemoteMedia {
    /// The peer has put the call on hold: it asks not to be sent media (`sendonly`,
    /// `inactive`, or the old `c=0.0.0.0`).
    pub fn on_hold(&self) -> bool {
        self.rtp.ip().is_unspecified() || !self.direction.receives()
    }
}

/// An SDP body baton cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SdpError {
    #[error("the SDP body is {0} bytes, over the {MAX_SDP}-byte limit")]
    TooLarge(usize),
    #[error("the SDP body is not UTF-8 text")]
    NotText,
    #[error("the SDP is malformed: {0}")]
    Syntax(String),
    #[error("the SDP has no audio stream (m=audio with a port)")]
    NoAudio,
    #[error("the audio stream uses {0}; baton speaks plain RTP/AVP (no SRTP)")]
    Profile(String),
    #[error("the audio stream has no connection address (c=) at session or media level")]
    NoConnection,
    #[error("the connection address {0:?} is not an IP address (host names are not resolved)")]
    BadAddress(String),
    #[error("the audio port {0} is not a UDP port")]
    BadPort(isize),
    #[error("payload type {0:?} is not a number 0-127")]
    BadPayloadType(String),
}

/// Reads a peer's SDP (an offer or an answer).
pub fn parse(body: &[u8]) -> Result<RemoteMedia, SdpError> {
    if body.len() > MAX_SDP {
        return Err(SdpError::TooLarge(body.len()));
    }
    let text = std::str::from_utf8(body).map_err(|_| SdpError::NotText)?;
    // The parser wants CRLF or LF line ends and a final line end.
    let mut text = text.to_owned();
    if !text.ends_with('\n') {
        text.push_str("\r\n");
    }
    let desc = rtc::sdp::SessionDescription::unmarshal(&mut std::io::Cursor::new(text.as_bytes()))
        .map_err(|e| SdpError::Syntax(e.to_string().trim().to_owned()))?;
    let mut sections = Vec::with_capacity(desc.media_descriptions.len());
    for m in &desc.media_descriptions {
        sections.push(Section {
            media: m.media_name.media.clone(),
            port: u16::try_from(m.media_name.port.value).unwrap_or(0),
            proto: m.media_name.protos.join("/"),
            formats: m.media_name.formats.clone(),
        });
    }
    let audio = desc
        .media_descriptions
        .iter()
        .position(|m| m.media_name.media == "audio" && m.media_name.port.value != 0)
        .ok_or(SdpError::NoAudio)?;
    let m = &desc.media_descriptions[audio];
    let port = m.media_name.port.value;
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or(SdpError::BadPort(port))?;
    let proto = m.media_name.protos.join("/");
    if !proto.eq_ignore_ascii_case("RTP/AVP") {
        return Err(SdpError::Profile(proto));
    }
    let conn = m
        .connection_information
        .as_ref()
        .or(desc.connection_information.as_ref())
        .and_then(|c| c.address.as_ref())
        .ok_or(SdpError::NoConnection)?;
    let ip: IpAddr = conn
        .address
        .parse()
        .map_err(|_| SdpError::BadAddress(conn.address.clone()))?;
    let attr = |key: &'static str| attrs(&m.attributes, key);
    let mut formats = Vec::with_capacity(m.media_name.formats.len());
    for f in &m.media_name.formats {
        let pt: u8 = f
            .parse()
            .ok()
            .filter(|p| *p < 128)
            .ok_or_else(|| SdpError::BadPayloadType(f.clone()))?;
        let mapped = attr("rtpmap").find_map(|v| {
            let (num, enc) = v.split_once(' ')?;
            (num.trim().parse::<u8>().ok()? == pt).then_some(enc.trim())
        });
        let (name, clock_rate) = match mapped {
            Some(enc) => {
                let mut parts = enc.split('/');
                let name = parts.next().unwrap_or_default().to_owned();
                let rate = parts.next().and_then(|r| r.parse().ok()).unwrap_or(0);
                (name, rate)
            }
            None => match pt {
                0 => ("PCMU".to_owned(), 8000),
                8 => ("PCMA".to_owned(), 8000),
                _ => (String::new(), 0),
            },
        };
        formats.push(Format {
            pt,
            name,
            clock_rate,
        });
    }
    let direction = direction_of(&m.attributes)
        .or_else(|| direction_of(&desc.attributes))
        .unwrap_or_default();
    let ptime = attr("ptime").find_map(|v| v.trim().parse().ok());
    let rtcp = attr("rtcp")
        .find_map(|v| {
            let mut it = v.split_whitespace();
            let port: u16 = it.next()?.parse().ok()?;
            let ip = match (it.next(), it.next(), it.next()) {
                (Some("IN"), Some(_), Some(a)) => a.parse().ok()?,
                _ => ip,
            };
            Some(SocketAddr::new(ip, port))
        })
        .unwrap_or_else(|| SocketAddr::new(ip, port.saturating_add(1)));
    Ok(RemoteMedia {
        rtp: SocketAddr::new(ip, port),
        rtcp,
        formats,
        direction,
        ptime,
        session: (desc.origin.session_id, desc.origin.session_version),
        sections,
        audio,
    })
}

fn attrs<'a>(
    list: &'a [rtc::sdp::description::common::Attribute],
    key: &'a str,
) -> impl Iterator<Item = &'a str> {
    list.iter()
        .filter(move |a| a.key.eq_ignore_ascii_case(key))
        .filter_map(|a| a.value.as_deref())
}

fn direction_of(attrs: &[rtc::sdp::description::common::Attribute]) -> Option<Direction> {
    attrs.iter().find_map(|a| match a.key.as_str() {
        "sendrecv" => Some(Direction::SendRecv),
        "sendonly" => Some(Direction::SendOnly),
        "recvonly" => Some(Direction::RecvOnly),
        "inactive" => Some(Direction::Inactive),
        _ => None,
    })
}

/// The media both sides agreed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    pub codec: Codec,
    /// The payload type the codec travels on.
    pub pt: u8,
    /// The payload type of `telephone-event`, when both sides take it.
    pub dtmf_pt: Option<u8>,
    /// The clock of that `telephone-event` payload (its durations count in it): 8000, or the
    /// codec's own rate when the peer offered that.
    pub dtmf_rate: u32,
    /// Where baton sends RTP and RTCP (until the peer's own packets say otherwise).
    pub remote_rtp: SocketAddr,
    pub remote_rtcp: SocketAddr,
    /// baton's side of the direction.
    pub direction: Direction,
}

impl Negotiated {
    /// baton sends audio (the peer has not put the call on hold).
    pub fn sends(&self) -> bool {
        self.direction.sends() && !self.remote_rtp.ip().is_unspecified()
    }
}

/// No codec of the offer is one baton takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no codec in common: the peer offers {offered}; baton takes {taken}")]
pub struct NoCommonCodec {
    pub offered: String,
    pub taken: String,
}

/// Answers an offer. The codec is the first offered one baton takes (the offerer's
/// preference), except that Opus wins when it is offered together with any `telephone-event`:
/// keypad events keep working on it (an 8 kHz event payload beside 48 kHz Opus is legal, each
/// payload type has its own clock, RFC 4733 §2.1 and RFC 3264 §5.1), so the call gets wideband
/// audio without losing keys. `telephone-event` is taken at the codec's clock when offered,
/// else at 8 kHz.
pub fn negotiate(offer: &RemoteMedia, codecs: &[Codec]) -> Result<Negotiated, NoCommonCodec> {
    let taken = |f: &Format| {
        let c = Codec::from_name(&f.name)?;
        (codecs.contains(&c) && f.clock_rate == c.clock_rate()).then_some((c, f.pt))
    };
    let has_events = offer.formats.iter().any(is_event);
    let opus = offer
        .formats
        .iter()
        .filter_map(taken)
        .find(|(c, _)| *c == Codec::Opus);
    let chosen = match opus {
        Some(o) if has_events => Some(o),
        _ => offer.formats.iter().find_map(taken),
    };
    let Some((codec, pt)) = chosen else {
        let offered: Vec<String> = offer
            .formats
            .iter()
            .map(|f| {
                if f.name.is_empty() {
                    format!("payload type {}", f.pt)
                } else {
                    format!("{}/{}", f.name, f.clock_rate)
                }
            })
            .collect();
        return Err(NoCommonCodec {
            offered: if offered.is_empty() {
                "nothing".into()
            } else {
                offered.join(", ")
            },
            taken: codecs
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    let event_at = |rate: u32| {
        offer
            .formats
            .iter()
            .find(|f| is_event(f) && f.clock_rate == rate)
            .map(|f| (f.pt, rate))
    };
    let dtmf = event_at(codec.clock_rate()).or_else(|| event_at(DTMF_CLOCK));
    Ok(Negotiated {
        codec,
        pt,
        dtmf_pt: dtmf.map(|d| d.0),
        dtmf_rate: dtmf.map_or(DTMF_CLOCK, |d| d.1),
        remote_rtp: offer.rtp,
        remote_rtcp: offer.rtcp,
        direction: offer.direction.answer(),
    })
}

fn is_event(f: &Format) -> bool {
    f.name.eq_ignore_ascii_case("telephone-event")
}

/// Reads the peer's answer to baton's offer: the codec it picked must be one baton offered.
pub fn accept_answer(answer: &RemoteMedia, offered: &[Codec]) -> Result<Negotiated, NoCommonCodec> {
    let mut n = negotiate(answer, offered)?;
    // In an answer the direction is the peer's own; baton's is its mirror.
    n.direction = answer.direction.answer();
    Ok(n)
}

/// baton's side of the session: where its RTP socket is, and the `o=` line's numbers.
#[derive(Clone, Debug)]
pub struct Local {
    /// The address the peer sends RTP to (the public address behind NAT).
    pub ip: IpAddr,
    pub port: u16,
    pub session_id: u64,
    /// Incremented whenever baton's SDP changes (RFC 3264 §8).
    pub version: u64,
}

fn head(local: &Local, out: &mut String) {
    let fam = if local.ip.is_ipv4() { "IP4" } else { "IP6" };
    let _ = write!(
        out,
        "v=0\r\no=baton {id} {ver} IN {fam} {ip}\r\ns=baton\r\nc=IN {fam} {ip}\r\nt=0 0\r\n",
        id = local.session_id,
        ver = local.version,
        ip = local.ip,
    );
}

fn audio_lines(
    local: &Local,
    codecs: &[(Codec, u8)],
    dtmf: Option<(u8, u32)>,
    dir: Direction,
) -> String {
    let mut out = String::new();
    let mut pts: Vec<String> = codecs.iter().map(|(_, pt)| pt.to_string()).collect();
    if let Some((d, _)) = dtmf {
        pts.push(d.to_string());
    }
    let _ = write!(out, "m=audio {} RTP/AVP {}\r\n", local.port, pts.join(" "));
    for (c, pt) in codecs {
        let _ = write!(
            out,
            "a=rtpmap:{pt} {}/{}{}\r\n",
            c.name(),
            c.clock_rate(),
            c.rtpmap_channels()
        );
        if *c == Codec::Opus {
            // Mono both ways, in-band FEC taken and sent (RFC 7587 §6.1).
            let _ = write!(
                out,
                "a=fmtp:{pt} maxplaybackrate=16000;sprop-maxcapturerate=16000;stereo=0;sprop-stereo=0;useinbandfec=1\r\n"
            );
        }
    }
    if let Some((d, rate)) = dtmf {
        let _ = write!(
            out,
            "a=rtpmap:{d} telephone-event/{rate}\r\na=fmtp:{d} 0-16\r\n"
        );
    }
    let _ = write!(out, "a=ptime:20\r\na={}\r\n", dir.attr());
    out
}

/// baton's answer to `offer`: one `m=` line per offered section (the ones not used refused
/// with port 0), the audio one with the negotiated codec and `telephone-event`.
pub fn answer(local: &Local, offer: &RemoteMedia, n: &Negotiated) -> String {
    let mut out = String::with_capacity(400);
    head(local, &mut out);
    for (i, s) in offer.sections.iter().enumerate() {
        if i == offer.audio {
            out.push_str(&audio_lines(
                local,
                &[(n.codec, n.pt)],
                n.dtmf_pt.map(|pt| (pt, n.dtmf_rate)),
                n.direction,
            ));
        } else {
            let first = s.formats.first().map(String::as_str).unwrap_or("0");
            let _ = write!(out, "m={} 0 {} {first}\r\n", s.media, s.proto);
        }
    }
    out
}

/// baton's offer: every codec it takes in its order, and `telephone-event/8000` on 101 (the
/// one event clock every peer takes; it serves Opus too).
pub fn offer(local: &Local, codecs: &[Codec], dir: Direction) -> String {
    let mut out = String::with_capacity(400);
    head(local, &mut out);
    let list: Vec<(Codec, u8)> = codecs.iter().map(|c| (*c, c.static_pt())).collect();
    out.push_str(&audio_lines(
        local,
        &list,
        Some((OFFERED_DTMF_PT, DTMF_CLOCK)),
        dir,
    ));
    out
}

/// An offer of exactly the media now negotiated, payload types included (a re-INVITE without
/// SDP asks baton for one; the session goes on unchanged).
pub fn offer_current(local: &Local, n: &Negotiated) -> String {
    let mut out = String::with_capacity(400);
    head(local, &mut out);
    out.push_str(&audio_lines(
        local,
        &[(n.codec, n.pt)],
        n.dtmf_pt.map(|pt| (pt, n.dtmf_rate)),
        n.direction,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    const SIPP: &str = "v=0\r\no=user1 53655765 2353687637 IN IP4 127.0.0.1\r\ns=-\r\n\
        c=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n";

    const BARESIP: &str = "v=0\r\no=- 1 2 IN IP4 10.0.0.5\r\ns=-\r\nc=IN IP4 10.0.0.5\r\n\
        t=0 0\r\nm=audio 10000 RTP/AVP 96 8 0 101\r\nb=AS:80\r\na=rtpmap:96 opus/48000/2\r\n\
        a=fmtp:96 stereo=1\r\na=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\n\
        a=rtcp:10005\r\na=sendrecv\r\na=ptime:20\r\nm=video 10002 RTP/AVP 97\r\n\
        a=rtpmap:97 H264/90000\r\n";

    fn local() -> Local {
        Local {
            ip: "192.0.2.1".parse().unwrap(),
            port: 20000,
            session_id: 7,
            version: 1,
        }
    }

    #[test]
    fn sipp_offer_is_pcmu_without_events() {
        let o = parse(SIPP.as_bytes()).unwrap();
        assert_eq!(o.rtp, sa("127.0.0.1:6000"));
        assert_eq!(o.rtcp, sa("127.0.0.1:6001"));
        let n = negotiate(&o, &Codec::ALL).unwrap();
        assert_eq!((n.codec, n.pt, n.dtmf_pt), (Codec::Pcmu, 0, None));
        assert_eq!(n.direction, Direction::SendRecv);
        let a = answer(&local(), &o, &n);
        assert!(a.contains("m=audio 20000 RTP/AVP 0\r\n"), "{a}");
        assert!(a.contains("c=IN IP4 192.0.2.1\r\n"));
        // Our own answer reads back.
        let back = parse(a.as_bytes()).unwrap();
        assert_eq!(back.rtp, sa("192.0.2.1:20000"));
    }

    #[test]
    fn the_offerers_order_wins_and_other_sections_are_refused() {
        let o = parse(BARESIP.as_bytes()).unwrap();
        assert_eq!(o.rtcp, sa("10.0.0.5:10005"));
        assert_eq!(o.ptime, Some(20));
        let g711 = [Codec::Pcmu, Codec::Pcma];
        let n = negotiate(&o, &g711).unwrap();
        assert_eq!((n.codec, n.pt, n.dtmf_pt), (Codec::Pcma, 8, Some(101)));
        let only_mu = negotiate(&o, &[Codec::Pcmu]).unwrap();
        assert_eq!(only_mu.codec, Codec::Pcmu);
        let a = answer(&local(), &o, &n);
        assert!(a.contains("m=audio 20000 RTP/AVP 8 101\r\n"), "{a}");
        assert!(a.contains("a=rtpmap:101 telephone-event/8000\r\n"));
        assert!(a.contains("m=video 0 RTP/AVP 97\r\n"), "{a}");
        assert_eq!(parse(a.as_bytes()).unwrap().sections.len(), 2);
    }

    #[test]
    fn opus_with_an_8k_event_is_preferred_and_keeps_the_event() {
        let o = parse(BARESIP.as_bytes()).unwrap();
        let n = negotiate(&o, &Codec::ALL).unwrap();
        assert_eq!(
            (n.codec, n.pt, n.dtmf_pt, n.dtmf_rate),
            (Codec::Opus, 96, Some(101), 8000)
        );
        let a = answer(&local(), &o, &n);
        assert!(a.contains("m=audio 20000 RTP/AVP 96 101\r\n"), "{a}");
        assert!(a.contains("a=rtpmap:96 opus/48000/2\r\n"), "{a}");
        assert!(a.contains("a=fmtp:96 "), "{a}");
        assert!(a.contains("a=rtpmap:101 telephone-event/8000\r\n"), "{a}");
        let back = parse(a.as_bytes()).unwrap();
        assert_eq!(negotiate(&back, &Codec::ALL).unwrap().codec, Codec::Opus);
        // A session refresh offers the same payload types again.
        let again = offer_current(&local(), &n);
        assert!(
            again.contains("m=audio 20000 RTP/AVP 96 101\r\n"),
            "{again}"
        );
        // An event at Opus's own clock is taken over the 8 kHz one.
        let both = BARESIP.replace("96 8 0 101", "96 8 0 101 102").replace(
            "a=fmtp:101 0-15\r\n",
            "a=fmtp:101 0-15\r\na=rtpmap:102 telephone-event/48000\r\n",
        );
        let n = negotiate(&parse(both.as_bytes()).unwrap(), &Codec::ALL).unwrap();
        assert_eq!((n.dtmf_pt, n.dtmf_rate), (Some(102), 48_000));
        // With no event offered at all, the offerer's order decides.
        let no_events = BARESIP.replace("96 8 0 101", "8 96 0").replace(
            "a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\n",
            "",
        );
        let n = negotiate(&parse(no_events.as_bytes()).unwrap(), &Codec::ALL).unwrap();
        assert_eq!((n.codec, n.dtmf_pt), (Codec::Pcma, None));
        // Opus at another clock is not Opus.
        let wrong = BARESIP.replace("opus/48000/2", "opus/16000/2");
        let n = negotiate(&parse(wrong.as_bytes()).unwrap(), &Codec::ALL).unwrap();
        assert_eq!(n.codec, Codec::Pcma);
    }

    #[test]
    fn no_common_codec_names_both_sides() {
        let g729 = SIPP
            .replace("RTP/AVP 0", "RTP/AVP 18")
            .replace("0 PCMU", "18 G729");
        let e = negotiate(&parse(g729.as_bytes()).unwrap(), &Codec::ALL).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no codec in common: the peer offers G729/8000; baton takes PCMU, PCMA, opus"
        );
    }

    #[test]
    fn hold_is_seen_either_way() {
        let send_only = SIPP.replace("PCMU/8000\r\n", "PCMU/8000\r\na=sendonly\r\n");
        let o = parse(send_only.as_bytes()).unwrap();
        assert!(o.on_hold());
        let n = negotiate(&o, &Codec::ALL).unwrap();
        assert_eq!(n.direction, Direction::RecvOnly);
        assert!(!n.sends());
        assert!(answer(&local(), &o, &n).contains("a=recvonly\r\n"));
        let old_style = SIPP.replace("c=IN IP4 127.0.0.1", "c=IN IP4 0.0.0.0");
        let o = parse(old_style.as_bytes()).unwrap();
        assert!(o.on_hold());
        assert!(!negotiate(&o, &Codec::ALL).unwrap().sends());
    }

    #[test]
    fn unusable_bodies_say_why() {
        let e = |s: &str| parse(s.as_bytes()).unwrap_err().to_string();
        assert!(
            e("hello").starts_with("the SDP is malformed"),
            "{}",
            e("hello")
        );
        assert_eq!(
            e(&SIPP.replace("RTP/AVP", "RTP/SAVP")),
            "the audio stream uses RTP/SAVP; baton speaks plain RTP/AVP (no SRTP)"
        );
        assert_eq!(
            e(&SIPP.replace("c=IN IP4 127.0.0.1\r\n", "")),
            "the audio stream has no connection address (c=) at session or media level"
        );
        assert_eq!(
            e(&SIPP.replace("m=audio", "m=video")),
            "the SDP has no audio stream (m=audio with a port)"
        );
        assert!(
            e(&SIPP.replace("IP4 127.0.0.1\r\nt", "IP4 pbx.example\r\nt")).contains("pbx.example")
        );
        assert_eq!(
            e(&SIPP.replace("RTP/AVP 0", "RTP/AVP 0 900")),
            "payload type \"900\" is not a number 0-127"
        );
        assert!(parse(&vec![b'a'; MAX_SDP + 1]).is_err());
        assert_eq!(parse(&[0xff, 0xfe]).unwrap_err(), SdpError::NotText);
    }

    #[test]
    fn an_offer_reads_back_and_an_answer_is_accepted() {
        let o = offer(&local(), &Codec::ALL, Direction::SendRecv);
        let parsed = parse(o.as_bytes()).unwrap();
        assert_eq!(parsed.formats.len(), 4);
        assert!(o.contains("m=audio 20000 RTP/AVP 0 8 111 101\r\n"), "{o}");
        assert!(o.contains("a=rtpmap:111 opus/48000/2\r\n"), "{o}");
        // The peer answers PCMA with events, sendrecv.
        let a = "v=0\r\no=- 1 1 IN IP4 10.0.0.9\r\ns=-\r\nc=IN IP4 10.0.0.9\r\nt=0 0\r\n\
                 m=audio 4000 RTP/AVP 8 101\r\na=rtpmap:101 telephone-event/8000\r\n";
        let n = accept_answer(&parse(a.as_bytes()).unwrap(), &Codec::ALL).unwrap();
        assert_eq!((n.codec, n.pt, n.dtmf_pt), (Codec::Pcma, 8, Some(101)));
        assert_eq!(n.remote_rtp, sa("10.0.0.9:4000"));
    }
}

//! The SIP trunk leg: baton as a SIP user agent with RTP media, so carriers, PBXs (Asterisk,
//! FreeSWITCH, 3CX) and SIP trunks reach an agent with no bridge vendor in the media path.
//!
//! Signalling is the `rsipstack` stack's (message parsing, transactions and their
//! retransmissions, dialogs, digest answers, registration, UDP, TCP and TLS); the media and every
//! decision are baton's own, sans-IO where they decide:
//! * [`config`]: the `[sip]` section and its checks;
//! * [`sdp`]: offer/answer (codecs, `telephone-event`, direction and hold);
//! * [`uas`]: what a new INVITE is answered (allow-lists, digest, 486/503/415/488);
//! * [`rtp`], [`rtcp`]: packets and RFC 3550 statistics and reports;
//! * [`jitter`]: the adaptive jitter buffer with loss concealment;
//! * [`opus`]: Opus (RFC 7587) behind the jitter buffer and toward the peer;
//! * [`dtmf`]: RFC 4733 events both ways, SIP INFO digits, and tones;
//! * [`media`]: the sans-IO core of one call's media (symmetric RTP, frames both ways, RTCP,
//!   the RTP timeout, the call's figures);
//! * [`leg`]: the async shell over the RTP/RTCP sockets that hands the call a `LegHandle`;
//! * [`ua`]: the stack's endpoint, transports and the dispatch of new requests;
//! * [`call`]: one call's dialog, inbound (answer) or outbound (place), run beside its media;
//! * [`register`]: registrations with trunks, refreshed before they expire;
//! * [`transfer`]: a blind transfer of a call by REFER, its NOTIFYs followed.

pub mod call;
pub mod config;
pub mod dtmf;
pub mod jitter;
pub mod latch;
pub mod leg;
pub mod media;
pub mod opus;
pub mod register;
pub mod rtcp;
pub mod rtp;
pub mod sdp;
pub mod transfer;
pub mod ua;
pub mod uas;

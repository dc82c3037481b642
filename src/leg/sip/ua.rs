//! baton's SIP user agent on the `rsipstack` stack: the transports (`[sip] listen`, UDP, TCP
//! and TLS), the transaction and dialog layers, and the dispatch of every request that is not part
//! of a call baton already has — a new INVITE goes to the call handler; OPTIONS is answered
//! (200, or 503 while baton takes no calls, which trunks read as "route elsewhere"); a request
//! inside a dialog goes to that dialog (481 when there is none); anything else is 405 with the
//! methods baton allows. Work that must reach the wire before the transports close (an outbound
//! INVITE given up on: its CANCEL, and the BYE of a 200 that crossed it, with those of a forked
//! INVITE's extra dialogs) runs in tasks the user agent holds ([`UserAgent::settle`]) and a stop
//! waits for ([`UserAgent::settled`], bounded); BYEs sent and their answers, each told as the BYE
//! it is ([`UserAgent::byes`]), say when that work is done.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rsipstack::EndpointBuilder;
use rsipstack::dialog::dialog_layer::DialogLayer;
use rsipstack::sip::prelude::*;
use rsipstack::sip::{Header, Method, SipMessage, StatusCode, StatusCodeKind};
use rsipstack::transaction::endpoint::{EndpointInnerRef, MessageInspector};
use rsipstack::transaction::transaction::Transaction;
use rsipstack::transaction::{Endpoint, TransactionReceiver};
use rsipstack::transport::SipAddr;
use rsipstack::transport::TransportLayer;
use rsipstack::transport::tcp_listener::TcpListenerConnection;
use rsipstack::transport::tls::{TlsConfig, TlsListenerConnection};
use rsipstack::transport::udp::UdpConnection;
use tokio::net::{TcpSocket, UdpSocket};
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::config::{SipConfig, Transport};

/// The methods baton answers.
pub const ALLOW: &str = "INVITE, ACK, BYE, CANCEL, OPTIONS, INFO, UPDATE";

/// How long a stop waits for the work handed to [`UserAgent::settle`] (each piece ends by itself
/// within seconds: a cancelled INVITE's within 9 s) before cutting off what is left.
pub const SETTLE_LIMIT: Duration = Duration::from_secs(10);

/// The SIP side could not start.
#[derive(Debug, thiserror::Error)]
pub enum UaError {
    #[error("cannot listen for SIP on {transport}:{addr}: {reason}")]
    Bind {
        transport: Transport,
        addr: SocketAddr,
        reason: String,
    },
    #[error("[sip] listen names no address")]
    NoListen,
    #[error("a tls: listen address needs sip.tls_cert and sip.tls_key")]
    NoCertificate,
}

/// The user agent: the stack and where it is reachable.
pub struct UserAgent {
    pub endpoint: Endpoint,
    pub dialogs: Arc<DialogLayer>,
    /// The addresses SIP is bound to (ports resolved).
    pub bound: Vec<(Transport, SocketAddr)>,
    /// The IP peers are told in SDP and Contact.
    pub media_ip: IpAddr,
    /// The IP RTP sockets bind.
    pub rtp_bind_ip: IpAddr,
    /// `[sip] public_ip`, when baton is behind NAT.
    pub public_ip: Option<IpAddr>,
    /// The CA certificates (PEM) TLS connections baton opens are verified against.
    trusted: Option<Vec<u8>>,
    cancel: CancellationToken,
    /// Work that must reach the wire before the transports close ([`UserAgent::settle`]).
    settling: Mutex<JoinSet<()>>,
    /// Every BYE sent and every final answer to a BYE, as it goes or comes ([`UserAgent::byes`]).
    byes: broadcast::Sender<ByeNews>,
    /// Ports picked for `:0` TCP and TLS addresses, held (bound, not listening) while the user
    /// agent lives so that nothing else takes them; the stack's listeners bind beside them.
    _reserved: Vec<TcpSocket>,
}

fn free_tcp_port(addr: SocketAddr) -> std::io::Result<(SocketAddr, Option<TcpSocket>)> {
    if addr.port() != 0 {
        return Ok((addr, None));
    }
    // The stack binds TCP listeners only when it starts serving, to an address it is given:
    // pick a free port and keep it bound (not listening, address reuse on, as the stack's own
    // listener sets it) so that nothing else takes it in between; the stack's listener then
    // binds beside it.
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    Ok((socket.local_addr()?, Some(socket)))
}

/// The host's first non-loopback IPv4 address (what a wildcard bind is reached at), else
/// loopback.
fn host_ip(bound: IpAddr) -> IpAddr {
    if !bound.is_unspecified() {
        return bound;
    }
    rsipstack::transport::SipConnection::resolve_bind_address(SocketAddr::new(bound, 0)).ip()
}

impl UserAgent {
    /// Binds the configured transports and builds the stack (not yet serving: see
    /// [`UserAgent::serve`]). `tls` is the certificate chain and key (PEM) of `tls:` addresses;
    /// `trusted` the CA certificates (PEM) that connections baton opens over TLS verify the
    /// peer against (none: baton opens no TLS connection that could succeed).
    pub async fn start(
        cfg: &SipConfig,
        tls: Option<(Vec<u8>, Vec<u8>)>,
        trusted: Option<Vec<u8>>,
    ) -> Result<(Arc<UserAgent>, TransactionReceiver), UaError> {
        let listens = cfg.listens();
        if listens.is_empty() {
            return Err(UaError::NoListen);
        }
        let public_ip: Option<IpAddr> = cfg.public_ip.parse().ok();
        let cancel = CancellationToken::new();
        let layer = TransportLayer::new(cancel.child_token());
        if let Some(ca) = trusted.clone() {
            // The stack verifies the peer's chain and its name (the URI's host, or its IP)
            // against these roots with rustls; nothing turns the check off.
            layer.set_tls_config(TlsConfig {
                ca_certs: Some(ca),
                ..TlsConfig::default()
            });
        }
        let mut bound = Vec::new();
        let mut reserved = Vec::new();
        for (t, addr) in listens {
            let err = |e: &dyn std::fmt::Display| UaError::Bind {
                transport: t,
                addr,
                reason: e.to_string(),
            };
            match t {
                Transport::Udp => {
                    // Bound here and handed over, so that a `:0` port cannot be taken by
                    // another socket between finding it and binding it.
                    let socket = UdpSocket::bind(addr).await.map_err(|e| err(&e))?;
                    let local = socket.local_addr().map_err(|e| err(&e))?;
                    let external = public_ip.map(|ip| SocketAddr::new(ip, local.port()));
                    let conn = UdpConnection::from_socket(
                        Arc::new(socket),
                        external,
                        Some(cancel.child_token()),
                    )
                    .await
                    .map_err(|e| err(&e))?;
                    layer.add_transport(conn.into());
                    bound.push((t, local));
                }
                Transport::Tcp => {
                    let (local, reservation) = free_tcp_port(addr).map_err(|e| err(&e))?;
                    reserved.extend(reservation);
                    let external = public_ip.map(|ip| SocketAddr::new(ip, local.port()));
                    let l = TcpListenerConnection::new(local, external)
                        .await
                        .map_err(|e| err(&e))?;
                    layer.add_transport(l.into());
                    bound.push((t, local));
                }
                Transport::Tls => {
                    let (cert, key) = tls.clone().ok_or(UaError::NoCertificate)?;
                    let (local, reservation) = free_tcp_port(addr).map_err(|e| err(&e))?;
                    reserved.extend(reservation);
                    let external = public_ip.map(|ip| SocketAddr::new(ip, local.port()));
                    let config = TlsConfig {
                        cert: Some(cert),
                        key: Some(key),
                        ..TlsConfig::default()
                    };
                    let l = TlsListenerConnection::new(local, external, config)
                        .await
                        .map_err(|e| err(&e))?;
                    layer.add_transport(l.into());
                    bound.push((t, local));
                }
            }
        }
        let (byes, _) = broadcast::channel(BYE_NEWS);
        let endpoint = EndpointBuilder::new()
            .with_cancel_token(cancel.clone())
            .with_inspector(Box::new(ByeWatch(byes.clone())))
            .with_transport_layer(layer)
            .with_user_agent(concat!("baton/", env!("CARGO_PKG_VERSION")))
            .with_allows(vec![
                Method::Invite,
                Method::Ack,
                Method::Bye,
                Method::Cancel,
                Method::Options,
                Method::Info,
                Method::Update,
            ])
            .build();
        let incoming = endpoint
            .incoming_transactions()
            .map_err(|_| UaError::NoListen)?;
        let dialogs = Arc::new(DialogLayer::new(endpoint.inner.clone()));
        let first = bound[0].1.ip();
        let rtp_bind_ip = cfg.rtp_ip.parse().unwrap_or(first);
        let media_ip = public_ip.unwrap_or_else(|| host_ip(rtp_bind_ip));
        Ok((
            Arc::new(UserAgent {
                endpoint,
                dialogs,
                bound,
                media_ip,
                rtp_bind_ip,
                public_ip,
                trusted,
                cancel,
                settling: Mutex::new(JoinSet::new()),
                byes,
                _reserved: reserved,
            }),
            incoming,
        ))
    }

    /// Runs the stack (transports, timers) until [`UserAgent::shutdown`].
    pub async fn serve(self: Arc<Self>) {
        self.endpoint.serve().await;
    }

    pub fn inner(&self) -> EndpointInnerRef {
        self.endpoint.inner.clone()
    }

    /// Why a TLS connection to `uri`'s host fails, when it does: a handshake made as the
    /// stack makes it (the same roots, the URI's host as the name), because the stack itself
    /// only lets the request go unanswered when the peer's certificate is refused.
    pub async fn tls_problem(&self, uri: &rsipstack::sip::Uri) -> Option<String> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, ServerName};
        let host = match &uri.host_with_port.host {
            rsipstack::sip::Host::Domain(d) => d.to_string(),
            rsipstack::sip::Host::IpAddr(ip) => ip.to_string(),
        };
        let port = uri.host_with_port.port.as_ref().map_or(5061, |p| p.value());
        let mut roots = rustls::RootCertStore::empty();
        if let Some(pem) = &self.trusted {
            for cert in CertificateDer::pem_slice_iter(pem).flatten() {
                let _ = roots.add(cert);
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = match ServerName::try_from(host.clone()) {
            Ok(n) => n,
            Err(e) => return Some(format!("{host:?} is not a TLS server name: {e}")),
        };
        let attempt = async {
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
            tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        };
        match tokio::time::timeout(std::time::Duration::from_secs(5), attempt).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(explain_tls(&e)),
            Err(_) => Some(format!(
                "the TLS handshake with {host}:{port} did not finish in 5 s"
            )),
        }
    }

    /// Runs `work`, the end of something baton started on the wire (a CANCEL and what may cross
    /// it), in a task of the user agent's own that [`UserAgent::settled`] waits for, so that a
    /// stop does not cut it off. `work` must end by itself within seconds.
    pub fn settle(&self, work: impl Future<Output = ()> + Send + 'static) {
        let mut set = self.settling.lock().unwrap_or_else(|e| e.into_inner());
        // Those already over are forgotten here, so the set holds only what still runs.
        while set.try_join_next().is_some() {}
        set.spawn(work);
    }

    /// Waits for the work handed to [`UserAgent::settle`], that handed over meanwhile included,
    /// to end: `limit` at most, after which what is left is aborted. Whether all of it ended.
    pub async fn settled(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let mut set =
                std::mem::take(&mut *self.settling.lock().unwrap_or_else(|e| e.into_inner()));
            if set.is_empty() {
                return true;
            }
            let all = async { while set.join_next().await.is_some() {} };
            if tokio::time::timeout_at(deadline, all).await.is_err() {
                tracing::warn!(
                    tasks = set.len(),
                    "SIP work still under way (a CANCEL or a BYE) cut off at the stop"
                );
                set.abort_all();
                return false;
            }
        }
    }

    /// Every BYE baton sends (each transmission, baton's own or the stack's) and every final
    /// answer to a BYE, from now on: which BYE each is ([`ByeId`]) says which answer is whose.
    pub fn byes(&self) -> broadcast::Receiver<ByeNews> {
        self.byes.subscribe()
    }

    /// Stops the transports and timers (at once: see [`UserAgent::settled`] for what should end
    /// first).
    pub fn shutdown(&self) {
        self.cancel.cancel();
        self.endpoint.shutdown();
    }

    /// The address SIP is reached at over `transport` (the first such listener).
    pub fn addr(&self, transport: Transport) -> Option<SocketAddr> {
        self.bound
            .iter()
            .find(|(t, _)| *t == transport)
            .map(|(_, a)| *a)
    }

    /// baton's Contact for a dialog over `transport`.
    pub fn contact(&self, user: &str, transport: Transport) -> rsipstack::sip::Uri {
        let local = self.addr(transport).unwrap_or(self.bound[0].1);
        let ip = self.public_ip.unwrap_or_else(|| host_ip(local.ip()));
        let mut params = Vec::new();
        match transport {
            Transport::Udp => {}
            Transport::Tcp => params.push(rsipstack::sip::Param::Transport(
                rsipstack::sip::Transport::Tcp,
            )),
            Transport::Tls => params.push(rsipstack::sip::Param::Transport(
                rsipstack::sip::Transport::Tls,
            )),
        }
        rsipstack::sip::Uri {
            scheme: Some(rsipstack::sip::Scheme::Sip),
            auth: (!user.is_empty()).then(|| rsipstack::sip::Auth {
                user: user.to_owned(),
                password: None,
            }),
            host_with_port: SocketAddr::new(ip, local.port()).into(),
            params,
            headers: vec![],
        }
    }
}

/// How many pieces of news about BYEs a slow reader of [`UserAgent::byes`] may fall behind by.
const BYE_NEWS: usize = 64;

/// Which BYE a request or an answer is, as both name it: the dialog (Call-ID, From and To tags,
/// so the two dialogs of a forked INVITE, which share a Call-ID, are told apart) and the
/// transaction (the top Via's branch, RFC 3261 §17.1.3). A tag or branch missing is empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ByeId {
    pub call_id: String,
    pub from_tag: String,
    pub to_tag: String,
    pub branch: String,
}

impl ByeId {
    /// The BYE `msg` is (a BYE request, or an answer to one), when it has a Call-ID.
    fn of(msg: &impl HeadersExt) -> Option<ByeId> {
        let call_id = msg.call_id_header().ok()?.value().to_owned();
        let tag = |t: Result<Option<rsipstack::sip::param::Tag>, _>| {
            t.ok()
                .flatten()
                .map(|t| t.value().to_owned())
                .unwrap_or_default()
        };
        let branch = msg
            .top_via_header()
            .ok()
            .and_then(|v| v.typed().ok())
            .and_then(|v| v.branch().map(|b| b.value().to_owned()))
            .unwrap_or_default();
        Some(ByeId {
            call_id,
            from_tag: msg.from_header().map_or(String::new(), |f| tag(f.tag())),
            to_tag: msg.to_header().map_or(String::new(), |t| tag(t.tag())),
            branch,
        })
    }
}

/// What [`UserAgent::byes`] tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ByeNews {
    /// A BYE went out (its first transmission or a resend).
    Sent(ByeId),
    /// A final answer to a BYE came in (the same answer may be told more than once).
    Answered(ByeId),
}

/// Tells [`UserAgent::byes`] of each BYE sent and each final answer to a BYE; every message
/// passes unchanged. The stack sends BYEs of its own, from tasks baton does not hold (for a 200
/// that crossed a CANCEL, and for each extra dialog of a forked INVITE): what is sent and what
/// answers it is how baton knows each is through.
struct ByeWatch(broadcast::Sender<ByeNews>);

impl MessageInspector for ByeWatch {
    fn before_send(&self, msg: SipMessage, _: Option<&SipAddr>) -> SipMessage {
        if let SipMessage::Request(r) = &msg
            && r.method == Method::Bye
            && let Some(id) = ByeId::of(r)
        {
            // Nobody listening is the usual case.
            let _ = self.0.send(ByeNews::Sent(id));
        }
        msg
    }

    fn after_received(&self, msg: SipMessage, _: Option<&SipAddr>) -> SipMessage {
        // A challenge (401, 407) is not the end of a BYE: the stack sends it again with the
        // trunk's credentials, on a branch of its own, whose answer is the one that counts.
        if let SipMessage::Response(r) = &msg
            && r.status_code.kind() != StatusCodeKind::Provisional
            && !matches!(
                r.status_code,
                StatusCode::Unauthorized | StatusCode::ProxyAuthenticationRequired
            )
            && r.cseq_header()
                .and_then(|c| c.method())
                .is_ok_and(|m| m == Method::Bye)
            && let Some(id) = ByeId::of(r)
        {
            let _ = self.0.send(ByeNews::Answered(id));
        }
        msg
    }
}

/// The platform's trusted CA certificates (or `SSL_CERT_FILE` / `SSL_CERT_DIR`), as one PEM
/// bundle for the stack's TLS client.
pub fn system_roots_pem() -> Vec<u8> {
    use base64::Engine as _;
    let loaded = rustls_native_certs::load_native_certs();
    for e in &loaded.errors {
        tracing::warn!(error = %e, "some platform CA certificates could not be loaded");
    }
    if loaded.certs.is_empty() {
        tracing::warn!(
            "no CA certificates in the platform store: SIP over TLS accepts no peer until \
             sip.tls_ca_file names one"
        );
    }
    let ders: Vec<Vec<u8>> = loaded.certs.iter().map(|c| c.to_vec()).collect();
    let mut pem = String::new();
    for der in ders {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).unwrap_or_default());
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem.into_bytes()
}

/// Says what went wrong when a TLS connection to a peer failed its certificate check, with the
/// fix; other errors are passed on as they are.
pub fn explain_tls(error: &str) -> String {
    let lower = error.to_ascii_lowercase();
    if lower.contains("certificate")
        || lower.contains("unknownissuer")
        || lower.contains("notvalidforname")
    {
        format!(
            "the peer's TLS certificate was not accepted ({}): set sip.tls_ca_file to the CA \
             that signed it, and make sure it names the host or IP baton dials",
            error.trim()
        )
    } else {
        error.to_owned()
    }
}

/// The transport a request came over.
pub fn transport_of(tx: &Transaction) -> Transport {
    match tx.connection.as_ref().map(|c| c.transport()) {
        Some(rsipstack::sip::Transport::Tcp) => Transport::Tcp,
        Some(rsipstack::sip::Transport::Tls) => Transport::Tls,
        _ => Transport::Udp,
    }
}

/// Where a request came from: the top Via's `received` (which the stack sets when the source
/// differs from what the Via says), else the Via's host.
pub fn source_ip(req: &rsipstack::sip::Request) -> Option<IpAddr> {
    let via = req.via_header().ok()?.typed().ok()?;
    for p in &via.params {
        if let rsipstack::sip::Param::Received(r) = p {
            return r.value().trim_matches(['[', ']']).parse().ok();
        }
    }
    match &via.uri.host_with_port.host {
        rsipstack::sip::Host::IpAddr(ip) => Some(ip.to_owned()),
        _ => None,
    }
}

/// The user part of the Request-URI (the number or extension called).
pub fn called_user(req: &rsipstack::sip::Request) -> String {
    req.uri
        .auth
        .as_ref()
        .map(|a| a.user.clone())
        .unwrap_or_default()
}

/// What [`dispatch`] asks of the daemon.
pub trait Handler: Send + Sync + 'static {
    /// A new INVITE (outside any dialog): the handler owns it from here.
    fn invite(&self, tx: Transaction);
    /// Whether new calls are taken now (OPTIONS answers 200 or 503).
    fn taking_calls(&self) -> bool;
}

/// Hands every incoming transaction to its place until the stack stops.
pub async fn dispatch(
    ua: Arc<UserAgent>,
    mut incoming: TransactionReceiver,
    handler: Arc<dyn Handler>,
) {
    while let Some(mut tx) = incoming.recv().await {
        let in_dialog = tx
            .original
            .to_header()
            .ok()
            .and_then(|t| t.tag().ok().flatten())
            .is_some();
        if in_dialog {
            match ua.dialogs.match_dialog(&tx) {
                Some(mut d) => {
                    tokio::spawn(async move {
                        if let Err(e) = d.handle(&mut tx).await {
                            tracing::debug!(error = %e, "in-dialog request failed");
                        }
                    });
                }
                None => {
                    let _ = tx.reply(StatusCode::CallTransactionDoesNotExist).await;
                }
            }
            continue;
        }
        match tx.original.method {
            Method::Invite => handler.invite(tx),
            Method::Options => {
                let status = if handler.taking_calls() {
                    StatusCode::OK
                } else {
                    StatusCode::ServiceUnavailable
                };
                tokio::spawn(async move {
                    let headers = vec![
                        Header::Other("Allow".into(), ALLOW.into()),
                        Header::Other("Accept".into(), "application/sdp".into()),
                    ];
                    let _ = tx.reply_with(status, headers, None).await;
                });
            }
            Method::Ack => {}
            Method::Bye | Method::Cancel | Method::Info | Method::Update => {
                tokio::spawn(async move {
                    let _ = tx.reply(StatusCode::CallTransactionDoesNotExist).await;
                });
            }
            _ => {
                tokio::spawn(async move {
                    let headers = vec![Header::Other("Allow".into(), ALLOW.into())];
                    let _ = tx
                        .reply_with(StatusCode::MethodNotAllowed, headers, None)
                        .await;
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_picked_tcp_port_stays_free_for_the_stacks_listener_only() {
        let (local, reservation) = free_tcp_port("127.0.0.1:0".parse().unwrap()).unwrap();
        assert_ne!(local.port(), 0);
        assert!(reservation.is_some());
        // Another socket cannot take the port in the meantime...
        let other = TcpSocket::new_v4().unwrap();
        assert_eq!(
            other.bind(local).unwrap_err().kind(),
            std::io::ErrorKind::AddrInUse
        );
        // ...while a listener that reuses addresses, as the stack's does, binds beside it.
        let stack = TcpSocket::new_v4().unwrap();
        stack.set_reuseaddr(true).unwrap();
        stack.bind(local).unwrap();
        let listener = stack.listen(8).unwrap();
        let client = tokio::net::TcpStream::connect(local).await.unwrap();
        let (_, from) = listener.accept().await.unwrap();
        assert_eq!(from, client.local_addr().unwrap());
        // A fixed port is used as given, with nothing held.
        let fixed: SocketAddr = "127.0.0.1:5060".parse().unwrap();
        let (addr, held) = free_tcp_port(fixed).unwrap();
        assert_eq!(addr, fixed);
        assert!(held.is_none());
    }
}

//! Client startup: TLS negotiation, the startup packet, authentication — all through pgwire —
//! ending with the raw socket and whatever the client already sent after it, for the session loop.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use futures::SinkExt;
use pgwire::api::auth::driver::AuthOutcome;
use pgwire::api::auth::{AuthDriver, DefaultServerParameterProvider};
use pgwire::api::{ClientInfo, DefaultClient, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::startup::SecretKey;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::server::{negotiate_tls, MaybeTls, PgWireMessageServerCodec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use super::FrontendError;
use crate::client_error::ClientError;
use crate::frontend::context::ServerCtx;
use crate::protocol::{self, Severity};

/// A client socket before authentication completes.
type StartupSocket = Framed<MaybeTls, PgWireMessageServerCodec<String>>;

/// An authenticated client, ready for the session loop.
pub struct ClientStart {
    pub io: MaybeTls,
    /// Bytes the client sent after authenticating that pgwire had already read.
    pub read_buf: BytesMut,
    pub user: String,
    /// Run-time parameters from the startup packet (application_name, client_encoding …).
    pub params: BTreeMap<String, String>,
    pub addr: SocketAddr,
}

pub enum Startup {
    Session(Box<ClientStart>),
    Cancel {
        pid: i32,
        secret: i32,
    },
    /// The client went away, or was refused (it has been told why).
    Ended,
}

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Protocol(#[from] PgWireError),
}

/// Startup parameters that are about the connection itself rather than run-time settings.
const NOT_SETTINGS: [&str; 4] = ["user", "database", "replication", "options"];

/// The lengths PostgreSQL accepts for a packet before login (its length field counts itself):
/// a protocol version at least, contents of at most MAX_STARTUP_PACKET_LENGTH (10,000 bytes).
/// It closes the connection on any other without reading on.
const STARTUP_PACKET_LEN: std::ops::RangeInclusive<u32> = 8..=4 + 10_000;

/// The protocol codes of SSLRequest, GSSENCRequest and CancelRequest.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;

pub async fn startup(tcp: TcpStream, ctx: &ServerCtx) -> Result<Startup, StartupError> {
    let limit = Duration::from_millis(ctx.config.limits.login_timeout_ms);
    match tokio::time::timeout(limit, startup_inner(tcp, ctx)).await {
        Ok(r) => r,
        Err(_) => Ok(Startup::Ended),
    }
}

async fn startup_inner(tcp: TcpStream, ctx: &ServerCtx) -> Result<Startup, StartupError> {
    let addr = tcp.peer_addr()?;
    let mut socket = match before_startup(tcp, addr, ctx.tls.as_ref()).await? {
        Before::Over => return Ok(Startup::Ended),
        Before::Tls(socket) => *socket,
        Before::Plain(tcp) => match negotiate_tls::<String>(tcp, ctx.tls.clone()).await? {
            Some(socket) => socket,
            None => return Ok(Startup::Ended),
        },
    };
    let driver: AuthDriver<DefaultServerParameterProvider> =
        AuthDriver::new(DefaultServerParameterProvider::default());
    let mut user = String::new();
    loop {
        let Some(msg) = super::auth::next_message(&mut socket).await else {
            return Ok(Startup::Ended);
        };
        let outcome = match msg? {
            PgWireFrontendMessage::CancelRequest(c) => {
                return Ok(match cancel_secret(&c.secret_key) {
                    Some(secret) => Startup::Cancel { pid: c.pid, secret },
                    None => Startup::Ended,
                });
            }
            PgWireFrontendMessage::Startup(startup) => {
                match take_startup(&mut socket, &startup, ctx).await? {
                    Ok(name) => user = name,
                    Err(e) => {
                        refuse(&mut socket, &e).await?;
                        return Ok(Startup::Ended);
                    }
                }
                driver
                    .begin_authentication(&mut socket, ctx.auth_mechanism.create())
                    .await
            }
            PgWireFrontendMessage::PasswordMessageFamily(m) => {
                driver.advance_authentication(&mut socket, m).await
            }
            _ => {
                refuse(&mut socket, &FrontendError::ExpectedStartup).await?;
                return Ok(Startup::Ended);
            }
        };
        match outcome {
            Ok(AuthOutcome::InProgress) => {}
            Ok(AuthOutcome::Authenticated { final_message, .. }) => {
                if let Some(m) = final_message {
                    socket.send(PgWireBackendMessage::Authentication(m)).await?;
                }
                break;
            }
            Err(e) => {
                ctx.metrics.auth_failures.increment(1);
                refuse(&mut socket, &login_refusal(ctx, user, e)).await?;
                return Ok(Startup::Ended);
            }
        }
    }
    let params = client_params(&socket);
    let parts = socket.into_parts();
    Ok(Startup::Session(Box::new(ClientStart {
        io: parts.io,
        read_buf: parts.read_buf,
        user,
        params,
        addr,
    })))
}

/// A CancelRequest's secret key. Which variant pgwire decodes depends on the protocol version
/// it assumes for a fresh connection; ours are always 4 bytes.
fn cancel_secret(key: &SecretKey) -> Option<i32> {
    match key {
        SecretKey::I32(s) => Some(*s),
        SecretKey::Bytes(b) => <[u8; 4]>::try_from(b.as_ref()).ok().map(i32::from_be_bytes),
    }
}

/// The client's StartupMessage: its protocol version, user and database checked, its
/// parameters kept as the socket's metadata; the user, or why the client is refused.
async fn take_startup(
    socket: &mut StartupSocket,
    startup: &pgwire::messages::startup::Startup,
    ctx: &ServerCtx,
) -> Result<Result<String, FrontendError>, StartupError> {
    if startup.protocol_number_major != 3 {
        return Ok(Err(FrontendError::UnsupportedProtocol {
            major: startup.protocol_number_major,
            minor: startup.protocol_number_minor,
        }));
    }
    if startup.protocol_number_minor > 0 {
        // Backends speak 3.0 to us, so the client gets 3.0 too.
        let unknown: Vec<String> = startup
            .parameters
            .keys()
            .filter(|k| k.starts_with("_pq_."))
            .cloned()
            .collect();
        socket
            .send(PgWireBackendMessage::NegotiateProtocolVersion(
                pgwire::messages::startup::NegotiateProtocolVersion::new(196608, unknown),
            ))
            .await?;
    }
    let user = startup.parameters.get("user").cloned().unwrap_or_default();
    if user.is_empty() {
        return Ok(Err(FrontendError::NoUserName));
    }
    let database = startup
        .parameters
        .get("database")
        .cloned()
        .unwrap_or_else(|| user.clone());
    if database != ctx.config.proxy.database {
        return Ok(Err(FrontendError::UnknownDatabase { database }));
    }
    socket.metadata_mut().extend(
        startup
            .parameters
            .iter()
            .filter(|(k, _)| !k.starts_with("_pq_."))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    Ok(Ok(user))
}

/// Why a login failed, for the client. An unknown user went through the same exchange as a
/// known one, so the time taken tells nothing; only the answer differs, as the interface asks.
fn login_refusal(ctx: &ServerCtx, user: String, e: PgWireError) -> FrontendError {
    match e {
        PgWireError::InvalidPassword(_) if ctx.users.exists(&user) => {
            FrontendError::WrongPassword { user }
        }
        PgWireError::InvalidPassword(_) => FrontendError::UnknownRole { user },
        e => FrontendError::AuthExchange(e.to_string()),
    }
}

/// The client's settings from its startup parameters, `options` included.
fn client_params(socket: &StartupSocket) -> BTreeMap<String, String> {
    let mut params: BTreeMap<String, String> = socket
        .metadata()
        .iter()
        .filter(|(k, _)| !NOT_SETTINGS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(options) = socket.metadata().get("options") {
        params.extend(settings_from_options(options));
    }
    params
}

/// How a connection goes on after [`before_startup`].
enum Before {
    /// No request the proxy handled: pgwire negotiates (a plain startup, direct TLS).
    Plain(TcpStream),
    /// TLS was requested and is up: pgwire reads the startup packet through it.
    Tls(Box<StartupSocket>),
    /// The connection is over (the client was told why where PostgreSQL would tell it).
    Over,
}

/// The packets before the startup packet, read as PostgreSQL reads them and before pgwire reads
/// any: a length PostgreSQL would not accept ends the connection at once (a length of 0 would
/// otherwise keep it waiting for a header that never comes); each kind of encryption request is
/// answered once, a second of a kind is refused as PostgreSQL refuses it, and so are bytes sent
/// ahead of the answer (before a TLS handshake they may be a man in the middle's).
async fn before_startup(
    mut tcp: TcpStream,
    addr: SocketAddr,
    tls: Option<&pgwire::tokio::TlsAcceptor>,
) -> Result<Before, StartupError> {
    let (mut ssl_answered, mut gss_answered) = (false, false);
    loop {
        let head = match peek_packet_head(&tcp, tls.is_some()).await? {
            Head::Packet(head) => head,
            Head::DirectTls => return Ok(Before::Plain(tcp)),
            Head::Over => return Ok(Before::Over),
        };
        let code = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
        let major = code >> 16;
        // What PostgreSQL answers a version it does not speak, which a second encryption
        // request of a kind counts as.
        let unsupported = FrontendError::UnsupportedProtocol {
            major: major as u16,
            minor: code as u16,
        };
        let (answered, what) = match code {
            SSL_REQUEST => (&mut ssl_answered, "SSL"),
            GSSENC_REQUEST => (&mut gss_answered, "GSSAPI encryption"),
            CANCEL_REQUEST => return Ok(Before::Plain(tcp)),
            _ if major == 3 => return Ok(Before::Plain(tcp)),
            _ => {
                tcp.write_all(&fatal_in_protocol(&unsupported, major))
                    .await?;
                return Ok(Before::Over);
            }
        };
        let mut request = [0u8; 8];
        tcp.read_exact(&mut request).await?;
        if *answered {
            tcp.write_all(&fatal(&unsupported)).await?;
            return Ok(Before::Over);
        }
        *answered = true;
        // Looked at before the answer, which the client may follow at once, and taken off the
        // socket, so that a TLS handshake reads only what comes after the answer (as PostgreSQL,
        // which had read them with the request).
        let sent_ahead = take_bytes_waiting(&tcp)
            .then_some(FrontendError::UnencryptedAfterRequest { request: what });
        let accept = code == SSL_REQUEST && tls.is_some();
        tcp.write_all(if accept { b"S" } else { b"N" }).await?;
        if let (true, Some(tls)) = (accept, tls) {
            let mut stream = tls.accept(tcp).await?;
            if let Some(e) = sent_ahead {
                // As PostgreSQL: the refusal goes over the encrypted connection.
                stream.write_all(&fatal(&e)).await?;
                stream.flush().await?;
                return Ok(Before::Over);
            }
            let codec = PgWireMessageServerCodec::new(DefaultClient::new(addr, true));
            let mut socket = Framed::new(MaybeTls::Tls(Box::new(stream)), codec);
            socket.set_state(PgWireConnectionState::AwaitingStartup);
            return Ok(Before::Tls(Box::new(socket)));
        }
        if let Some(e) = sent_ahead {
            tcp.write_all(&fatal(&e)).await?;
            return Ok(Before::Over);
        }
    }
}

/// Whether the client has sent bytes that wait unread, without waiting for any; those there
/// are read and dropped.
fn take_bytes_waiting(tcp: &TcpStream) -> bool {
    let mut chunk = [std::mem::MaybeUninit::<u8>::uninit(); 1024];
    let socket = socket2::SockRef::from(tcp);
    let mut took = false;
    // The socket is non-blocking (tokio's): an empty one answers WouldBlock at once. A client
    // that keeps sending is not waited for: what it sends later breaks the handshake instead.
    for _ in 0..64 {
        match socket.recv(&mut chunk) {
            Ok(n) if n > 0 => took = true,
            _ => break,
        }
    }
    took
}

/// A FATAL error in the protocol the client asked for, as PostgreSQL refuses a version it does
/// not speak: version 2's error is the letter E and a line of text.
fn fatal_in_protocol(e: &FrontendError, major: u32) -> BytesMut {
    if major >= 3 {
        return fatal(e);
    }
    let mut refusal = BytesMut::new();
    refusal.extend_from_slice(b"E");
    refusal.extend_from_slice(format!("FATAL:  {}\n\0", e.client_message()).as_bytes());
    refusal
}

/// A FATAL ErrorResponse, for a socket pgwire does not have yet.
fn fatal(e: &FrontendError) -> BytesMut {
    let mut refusal = BytesMut::new();
    protocol::error_response(
        &mut refusal,
        Severity::Fatal,
        &e.sqlstate(),
        &e.client_message(),
    );
    refusal
}

enum Head {
    /// The next packet's length and protocol code.
    Packet([u8; 8]),
    /// A TLS handshake without SSLRequest (`sslnegotiation=direct`), for pgwire to accept.
    DirectTls,
    /// The client closed, or sent a length PostgreSQL refuses.
    Over,
}

/// The first 8 bytes of the next packet, once they are there.
async fn peek_packet_head(tcp: &TcpStream, tls_offered: bool) -> std::io::Result<Head> {
    /// The first byte of a TLS handshake record.
    const TLS_HANDSHAKE: u8 = 0x16;
    let mut head = [0u8; 8];
    let mut pause = Duration::from_millis(1);
    loop {
        let n = tcp.peek(&mut head).await?;
        if n == 0 {
            return Ok(Head::Over);
        }
        if tls_offered && head[0] == TLS_HANDSHAKE {
            return Ok(Head::DirectTls);
        }
        if n >= 4 {
            let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            if !STARTUP_PACKET_LEN.contains(&len) {
                return Ok(Head::Over);
            }
        }
        if n == head.len() {
            return Ok(Head::Packet(head));
        }
        // The head came in pieces (rare): a peek returns at once while any byte waits, so wait
        // a little for the rest.
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

async fn refuse(socket: &mut StartupSocket, e: &FrontendError) -> Result<(), StartupError> {
    let info = ErrorInfo::new(
        "FATAL".to_owned(),
        e.sqlstate().code().to_owned(),
        e.client_message(),
    );
    socket
        .send(PgWireBackendMessage::ErrorResponse(info.into()))
        .await?;
    Ok(())
}

/// The run-time settings in a startup packet's `options` (`-c name=value`, `-cname=value`,
/// `--name=value`; words split at unescaped whitespace, `\` escapes the next character), as
/// PostgreSQL reads them. Other command-line switches are ignored.
pub fn settings_from_options(options: &str) -> Vec<(String, String)> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => word.extend(chars.next()),
            c if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    let mut settings = Vec::new();
    let mut words = words.into_iter();
    while let Some(w) = words.next() {
        let assignment = if w == "-c" {
            words.next()
        } else if let Some(rest) = w.strip_prefix("-c") {
            Some(rest.to_string())
        } else {
            w.strip_prefix("--").map(str::to_string)
        };
        if let Some((name, value)) = assignment.as_deref().and_then(|a| a.split_once('=')) {
            // PostgreSQL accepts `-` for `_` in option names given this way.
            settings.push((name.replace('-', "_"), value.to_string()));
        }
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::settings_from_options;

    #[test]
    fn options_become_settings() {
        assert_eq!(
            settings_from_options(
                "-c DateStyle=SQL,DMY  -csearch_path=a\\ b --statement-timeout=5s -x"
            ),
            vec![
                ("DateStyle".to_string(), "SQL,DMY".to_string()),
                ("search_path".to_string(), "a b".to_string()),
                ("statement_timeout".to_string(), "5s".to_string()),
            ]
        );
    }
}

//! Client startup: TLS negotiation, the startup packet, authentication — all through pgwire —
//! ending with the raw socket and whatever the client already sent after it, for the session loop.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use pgwire::api::auth::driver::AuthOutcome;
use pgwire::api::auth::{AuthDriver, DefaultServerParameterProvider};
use pgwire::api::ClientInfo;
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::startup::SecretKey;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::server::{negotiate_tls, MaybeTls, PgWireMessageServerCodec};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use super::FrontendError;
use crate::context::ServerCtx;
use crate::error::ClientError;

/// A client socket before authentication completes.
type StartupSocket = Framed<MaybeTls, PgWireMessageServerCodec<String>>;

/// How long a client may take from connect to authenticated, as in PostgreSQL's
/// authentication_timeout.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

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

pub async fn startup(tcp: TcpStream, ctx: &ServerCtx) -> Result<Startup, StartupError> {
    match tokio::time::timeout(STARTUP_TIMEOUT, startup_inner(tcp, ctx)).await {
        Ok(r) => r,
        Err(_) => Ok(Startup::Ended),
    }
}

async fn startup_inner(tcp: TcpStream, ctx: &ServerCtx) -> Result<Startup, StartupError> {
    let addr = tcp.peer_addr()?;
    let Some(mut socket) = negotiate_tls::<String>(tcp, ctx.tls.clone()).await? else {
        return Ok(Startup::Ended);
    };
    let driver: AuthDriver<DefaultServerParameterProvider> =
        AuthDriver::new(DefaultServerParameterProvider::default());
    let mut user = String::new();
    loop {
        let Some(msg) = socket.next().await else {
            return Ok(Startup::Ended);
        };
        let outcome = match msg? {
            PgWireFrontendMessage::CancelRequest(c) => {
                // Which variant pgwire decodes depends on the protocol version it assumes for
                // a fresh connection; ours are always 4 bytes.
                let secret = match c.secret_key {
                    SecretKey::I32(s) => s,
                    SecretKey::Bytes(b) => match <[u8; 4]>::try_from(b.as_ref()) {
                        Ok(b) => i32::from_be_bytes(b),
                        Err(_) => return Ok(Startup::Ended),
                    },
                };
                return Ok(Startup::Cancel { pid: c.pid, secret });
            }
            PgWireFrontendMessage::Startup(startup) => {
                if startup.protocol_number_major != 3 {
                    let e = FrontendError::UnsupportedProtocol {
                        major: startup.protocol_number_major,
                        minor: startup.protocol_number_minor,
                    };
                    refuse(&mut socket, &e).await?;
                    return Ok(Startup::Ended);
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
                            pgwire::messages::startup::NegotiateProtocolVersion::new(
                                196608, unknown,
                            ),
                        ))
                        .await?;
                }
                user = startup.parameters.get("user").cloned().unwrap_or_default();
                if user.is_empty() {
                    refuse(&mut socket, &FrontendError::NoUserName).await?;
                    return Ok(Startup::Ended);
                }
                let database = startup
                    .parameters
                    .get("database")
                    .cloned()
                    .unwrap_or_else(|| user.clone());
                if database != ctx.config.proxy.database {
                    refuse(&mut socket, &FrontendError::UnknownDatabase { database }).await?;
                    return Ok(Startup::Ended);
                }
                socket.metadata_mut().extend(
                    startup
                        .parameters
                        .iter()
                        .filter(|(k, _)| !k.starts_with("_pq_."))
                        .map(|(k, v)| (k.clone(), v.clone())),
                );
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
            Err(PgWireError::InvalidPassword(_)) => {
                ctx.metrics.auth_failures.increment(1);
                // An unknown user went through the same exchange as a known one, so the time
                // taken tells nothing; only the answer differs, as the interface asks.
                let e = if ctx.users.exists(&user) {
                    FrontendError::WrongPassword { user }
                } else {
                    FrontendError::UnknownRole { user }
                };
                refuse(&mut socket, &e).await?;
                return Ok(Startup::Ended);
            }
            Err(e) => {
                ctx.metrics.auth_failures.increment(1);
                let e = FrontendError::AuthExchange(e.to_string());
                refuse(&mut socket, &e).await?;
                return Ok(Startup::Ended);
            }
        }
    }
    let mut params: BTreeMap<String, String> = socket
        .metadata()
        .iter()
        .filter(|(k, _)| !NOT_SETTINGS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(options) = socket.metadata().get("options") {
        params.extend(settings_from_options(options));
    }
    let parts = socket.into_parts();
    Ok(Startup::Session(Box::new(ClientStart {
        io: parts.io,
        read_buf: parts.read_buf,
        user,
        params,
        addr,
    })))
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
fn settings_from_options(options: &str) -> Vec<(String, String)> {
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

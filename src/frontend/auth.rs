//! Where the proxy's users and their secrets come from: `[[users]]` in the configuration. SCRAM
//! secrets are salted once at start; an unknown user gets a dummy secret so that a failed login
//! costs the same time whether or not the user exists.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use pgwire::api::auth::md5pass::{hash_md5_password, Md5PasswordAuth};
use pgwire::api::auth::mechanism::{AuthMechanism, AuthMechanismFactory, AuthState};
use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramAuth};
use pgwire::api::auth::{AuthSource, LoginInfo, Password};
use pgwire::api::{ClientInfo, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::startup::PasswordMessageFamily;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::server::PgWireMessageServerCodec;
use rand::RngCore;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio_util::codec::Framed;

use super::FrontendError;
use crate::client_error::ClientError;
use crate::config::{AuthMethod, Config};

const SCRAM_ITERATIONS: usize = 4096;

#[derive(Debug)]
struct ScramSecret {
    salt: Vec<u8>,
    salted_password: Vec<u8>,
}

impl ScramSecret {
    fn new(password: &str) -> ScramSecret {
        let mut salt = vec![0u8; 16];
        rand::thread_rng().fill_bytes(&mut salt);
        let salted_password = gen_salted_password(password, &salt, SCRAM_ITERATIONS);
        ScramSecret {
            salt,
            salted_password,
        }
    }
}

/// The configured users, ready for either authentication method.
#[derive(Debug)]
pub struct Users {
    method: AuthMethod,
    passwords: HashMap<String, String>,
    scram: HashMap<String, ScramSecret>,
    unknown_scram: ScramSecret,
    unknown_password: String,
}

impl Users {
    pub fn new(config: &Config) -> Users {
        let passwords: HashMap<String, String> = config
            .users
            .iter()
            .map(|u| (u.name.clone(), u.password.clone()))
            .collect();
        let scram = match config.proxy.auth_method {
            AuthMethod::ScramSha256 => passwords
                .iter()
                .map(|(n, p)| (n.clone(), ScramSecret::new(p)))
                .collect(),
            AuthMethod::Md5 => HashMap::new(),
        };
        let mut random = [0u8; 24];
        rand::thread_rng().fill_bytes(&mut random);
        let unknown_password: String = random.iter().map(|b| format!("{b:02x}")).collect();
        Users {
            method: config.proxy.auth_method,
            passwords,
            scram,
            unknown_scram: ScramSecret::new(&unknown_password),
            unknown_password,
        }
    }

    pub fn exists(&self, name: &str) -> bool {
        self.passwords.contains_key(name)
    }

    /// The mechanism factory for the configured method.
    pub fn mechanism(self: &Arc<Self>) -> Arc<dyn AuthMechanismFactory> {
        match self.method {
            AuthMethod::ScramSha256 => Arc::new(CheckedScram(ScramAuth::new(Arc::new(
                ScramSource(self.clone()),
            )))),
            AuthMethod::Md5 => Arc::new(Md5PasswordAuth::new(Arc::new(Md5Source(self.clone())))),
        }
    }
}

/// pgwire's SCRAM, with the client's first message checked before pgwire reads it: pgwire
/// trusts its length fields, and panics on a SASLInitialResponse shorter than they say.
struct CheckedScram(ScramAuth);

impl AuthMechanismFactory for CheckedScram {
    fn create(&self) -> Box<dyn AuthMechanism> {
        Box::new(CheckedScramMechanism {
            inner: self.0.create(),
            first: true,
        })
    }
}

struct CheckedScramMechanism {
    inner: Box<dyn AuthMechanism>,
    /// The next message is the client's first (SASLInitialResponse).
    first: bool,
}

#[async_trait]
impl AuthMechanism for CheckedScramMechanism {
    async fn begin(&mut self, client: &(dyn ClientInfo + Send + Sync)) -> PgWireResult<AuthState> {
        self.inner.begin(client).await
    }

    async fn next(
        &mut self,
        client: &(dyn ClientInfo + Send + Sync),
        message: PasswordMessageFamily,
    ) -> PgWireResult<AuthState> {
        let first = std::mem::replace(&mut self.first, false);
        if let (true, PasswordMessageFamily::Raw(body)) = (first, &message) {
            if !sasl_initial_response_fits(body) {
                return Err(PgWireError::InvalidScramMessage(
                    "malformed SASLInitialResponse message".into(),
                ));
            }
        }
        self.inner.next(client, message).await
    }
}

/// Whether a SASLInitialResponse body holds what its fields say: the mechanism's name, then
/// the length of the data (-1: none) and at least that much data.
fn sasl_initial_response_fits(body: &[u8]) -> bool {
    let Some(name_end) = body.iter().position(|&b| b == 0) else {
        return false;
    };
    let rest = &body[name_end + 1..];
    let Some((len, data)) = rest.split_first_chunk::<4>() else {
        return false;
    };
    match i32::from_be_bytes(*len) {
        -1 => true,
        len => usize::try_from(len).is_ok_and(|len| len <= data.len()),
    }
}

#[derive(Debug)]
struct ScramSource(Arc<Users>);

#[async_trait]
impl AuthSource for ScramSource {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let users = &self.0;
        let secret = login
            .user()
            .and_then(|u| users.scram.get(u))
            .unwrap_or(&users.unknown_scram);
        Ok(Password::new(
            Some(secret.salt.clone()),
            secret.salted_password.clone(),
        ))
    }
}

#[derive(Debug)]
struct Md5Source(Arc<Users>);

#[async_trait]
impl AuthSource for Md5Source {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let users = &self.0;
        let user = login.user().unwrap_or_default();
        let password = users.passwords.get(user).unwrap_or(&users.unknown_password);
        let mut salt = vec![0u8; 4];
        rand::thread_rng().fill_bytes(&mut salt);
        let hashed = hash_md5_password(user, password, &salt);
        Ok(Password::new(Some(salt), hashed.into_bytes()))
    }
}

/// Whether pgwire may read the client message that starts `buf`, during authentication: only
/// a password message is taken then, and pgwire decodes any kind in full, trusting its fields
/// (it subtracts 4 from a length field unchecked, and panics on less). `None`: what decides
/// has not all arrived.
pub fn auth_message_head(buf: &[u8]) -> Option<Result<(), FrontendError>> {
    let (&tag, rest) = buf.split_first()?;
    if tag != b'p' {
        return Some(Err(FrontendError::ExpectedStartup));
    }
    let len = rest.get(..4)?;
    let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
    Some(match len >= 4 {
        true => Ok(()),
        false => Err(FrontendError::ProtocolViolation(format!(
            "invalid message length {len}"
        ))),
    })
}

/// The client's next message, read by pgwire; during authentication only once
/// [`auth_message_head`] takes it. A message it refuses ends the exchange: the client is told
/// why, as PostgreSQL tells it.
pub async fn next_message<T, S>(
    socket: &mut Framed<T, PgWireMessageServerCodec<S>>,
) -> Option<PgWireResult<PgWireFrontendMessage>>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
    Framed<T, PgWireMessageServerCodec<S>>: futures::Stream<Item = PgWireResult<PgWireFrontendMessage>>
        + futures::Sink<PgWireBackendMessage, Error = std::io::Error>
        + Unpin,
{
    use futures::{SinkExt, StreamExt};
    if matches!(
        socket.state(),
        PgWireConnectionState::AuthenticationInProgress
    ) {
        loop {
            match auth_message_head(socket.read_buffer()) {
                Some(Ok(())) => break,
                Some(Err(e)) => {
                    let info = ErrorInfo::new(
                        "FATAL".to_owned(),
                        e.sqlstate().code().to_owned(),
                        e.client_message(),
                    );
                    let _ = socket
                        .send(PgWireBackendMessage::ErrorResponse(info.into()))
                        .await;
                    let e = std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string());
                    return Some(Err(e.into()));
                }
                // Framed, which has returned the startup packet or an earlier message, decodes
                // what it holds before it reads again: it finds these bytes.
                None => {
                    let mut chunk = [0u8; 64];
                    match socket.get_mut().read(&mut chunk).await {
                        Ok(0) => return None,
                        Ok(n) => socket.read_buffer_mut().extend_from_slice(&chunk[..n]),
                        Err(e) => return Some(Err(e.into())),
                    }
                }
            }
        }
    }
    socket.next().await
}

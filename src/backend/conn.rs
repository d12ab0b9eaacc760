//! One raw connection to a shard: our own startup and authentication (trust, cleartext, md5,
//! SCRAM-SHA-256) with postgres-protocol, then the same frame reader as the client side. The proxy
//! copies frames to and from it; it never decodes result rows on the single-shard path.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::sasl::{
    ChannelBinding, ScramSha256, SCRAM_SHA_256, SCRAM_SHA_256_PLUS,
};
use postgres_protocol::message::backend::{AuthenticationSaslBody, ErrorResponseBody, Message};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::prepared::{PreparedStatements, StatementText};
use super::stream::ShardStream;
use super::BackendError;
use crate::config::Endpoint;
use crate::protocol::{self, Frame};

/// The backend process a cancel request for this connection must name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CancelKey {
    pub pid: i32,
    pub secret: i32,
}

/// A client's run-time settings from its startup packet, by name. Shared, so that handing a
/// connection to the next client of the same settings costs a pointer comparison.
pub type Settings = Arc<[(String, String)]>;

/// One [`Settings`] per distinct set of settings: the clients of one application usually send
/// the same startup parameters, and then share one, so a connection passes between them after a
/// pointer comparison rather than a comparison of every name and value.
#[derive(Default)]
pub struct SettingsRegistry {
    live: Mutex<LiveSettings>,
}

#[derive(Default)]
struct LiveSettings {
    all: HashSet<Settings>,
    /// At this many entries, those no client or connection holds any more are dropped.
    purge_at: usize,
}

impl SettingsRegistry {
    pub fn intern(&self, settings: Vec<(String, String)>) -> Settings {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shared) = live.all.get(settings.as_slice()) {
            return shared.clone();
        }
        if live.all.len() >= live.purge_at {
            live.all.retain(|s| Arc::strong_count(s) > 1);
            live.purge_at = (2 * live.all.len()).max(1024);
        }
        let shared: Settings = settings.into();
        live.all.insert(shared.clone());
        shared
    }
}

pub struct BackendConn {
    /// Whole, not split into halves: the halves share it behind an `Arc`, one more pointer to
    /// follow (and cache line to miss) on every read and write of the data path.
    pub stream: ShardStream,
    pub read_buf: BytesMut,
    /// ParameterStatus values as the backend last reported them.
    pub params: HashMap<String, String>,
    /// The settings the proxy applied for the client it served last (with the raw values that
    /// client asked for); everything else has the connection's default.
    pub applied: Settings,
    pub cancel: CancelKey,
    /// Statements prepared on this connection for clients.
    pub prepared: PreparedStatements,
    /// What the unnamed statement currently holds, when the proxy knows.
    pub unnamed: Option<Arc<StatementText>>,
    /// Set when the connection's protocol state is unknown; the pool then drops it.
    pub broken: bool,
    /// How the shard's type OIDs become the first shard's in the descriptions it sends, and
    /// the first shard's its own in Parse; none on the first shard.
    pub types: Option<Arc<super::ShardTypes>>,
    /// The columns of the result being read that `types` changes in each DataRow.
    pub binary_arrays: Option<super::types::BinaryArrays>,
}

impl BackendConn {
    /// `check_function_bodies = false` turns PostgreSQL's setting of that name off for the
    /// connection.
    pub async fn connect(
        ep: &Endpoint,
        check_function_bodies: bool,
        timeout: Duration,
    ) -> Result<BackendConn, BackendError> {
        let connecting = Self::connect_inner(ep, check_function_bodies);
        match tokio::time::timeout(timeout, connecting).await {
            Ok(r) => r,
            Err(_) => Err(BackendError::Timeout {
                endpoint: ep.to_string(),
            }),
        }
    }

    async fn connect_inner(
        ep: &Endpoint,
        check_function_bodies: bool,
    ) -> Result<BackendConn, BackendError> {
        let io_err = |e: std::io::Error| connect_error(ep, e);
        let mut stream = ShardStream::open(ep).await?;
        let mut out = BytesMut::new();
        let mut startup = vec![
            ("user", ep.user.as_str()),
            ("database", ep.dbname.as_str()),
            ("application_name", "shardwire"),
        ];
        // Only "off" is sent: the server's own setting (its file, the database's or the role's)
        // stands otherwise.
        if !check_function_bodies {
            startup.push(("check_function_bodies", "off"));
        }
        frontend::startup_message(startup, &mut out).map_err(io_err)?;
        stream.write_all(&out).await.map_err(io_err)?;
        out.clear();

        let mut buf = BytesMut::with_capacity(8192);
        let mut params = HashMap::new();
        let mut key = None;
        let mut scram: Option<ScramSha256> = None;
        loop {
            let msg = loop {
                if let Some(m) = Message::parse(&mut buf).map_err(io_err)? {
                    break m;
                }
                if stream.read_buf(&mut buf).await.map_err(io_err)? == 0 {
                    return Err(io_err(std::io::ErrorKind::UnexpectedEof.into()));
                }
            };
            match msg {
                Message::AuthenticationOk => {}
                Message::AuthenticationCleartextPassword => {
                    let pw = password(ep)?;
                    frontend::password_message(pw.as_bytes(), &mut out).map_err(io_err)?;
                }
                Message::AuthenticationMd5Password(body) => {
                    let pw = password(ep)?;
                    let hash = postgres_protocol::authentication::md5_hash(
                        ep.user.as_bytes(),
                        pw.as_bytes(),
                        body.salt(),
                    );
                    frontend::password_message(hash.as_bytes(), &mut out).map_err(io_err)?;
                }
                Message::AuthenticationSasl(body) => {
                    scram = Some(start_scram(ep, &stream, &body, &mut out)?);
                }
                Message::AuthenticationSaslContinue(body) => {
                    let s = scram.as_mut().ok_or_else(|| protocol_violation(ep))?;
                    s.update(body.data()).map_err(io_err)?;
                    frontend::sasl_response(s.message(), &mut out).map_err(io_err)?;
                }
                Message::AuthenticationSaslFinal(body) => {
                    let s = scram.as_mut().ok_or_else(|| protocol_violation(ep))?;
                    s.finish(body.data()).map_err(|e| BackendError::Auth {
                        endpoint: ep.to_string(),
                        message: format!("server's SCRAM signature did not verify: {e}"),
                    })?;
                }
                Message::ParameterStatus(body) => {
                    params.insert(
                        body.name().map_err(io_err)?.to_string(),
                        body.value().map_err(io_err)?.to_string(),
                    );
                }
                Message::BackendKeyData(body) => {
                    key = Some((body.process_id(), body.secret_key()));
                }
                Message::ErrorResponse(body) => return Err(refused(ep, &body)),
                Message::NoticeResponse(_) => {}
                Message::ReadyForQuery(_) => break,
                _ => return Err(protocol_violation(ep)),
            }
            if !out.is_empty() {
                stream.write_all(&out).await.map_err(io_err)?;
                out.clear();
            }
        }
        let (pid, secret) = key.ok_or_else(|| protocol_violation(ep))?;
        Ok(BackendConn {
            stream,
            read_buf: buf,
            params,
            applied: Settings::default(),
            cancel: CancelKey { pid, secret },
            prepared: PreparedStatements::default(),
            unnamed: None,
            broken: false,
            types: None,
            binary_arrays: None,
        })
    }

    /// Reads until at least one more complete frame is buffered, then returns it. A
    /// connection that fails to give one (closed, failed, or sending a malformed frame) is
    /// marked broken: where its stream stands is unknown, so it goes back to no pool.
    pub async fn read_frame(&mut self) -> Result<Frame, BackendError> {
        let read = self.next_frame().await;
        if read.is_err() {
            self.broken = true;
        }
        read
    }

    async fn next_frame(&mut self) -> Result<Frame, BackendError> {
        loop {
            self.translate_front_types();
            if let Some(f) = protocol::split_frame(&mut self.read_buf)? {
                return Ok(f);
            }
            if self.stream.read_buf(&mut self.read_buf).await? == 0 {
                return Err(BackendError::Closed);
            }
        }
    }

    /// Gives the first buffered frame, when it is complete, the first shard's type OIDs
    /// ([`super::types`]).
    fn translate_front_types(&mut self) {
        let Some(types) = &self.types else {
            return;
        };
        let buf = &mut self.read_buf[..];
        if buf.len() < 5 || !super::types::translated(buf[0], &self.binary_arrays) {
            return;
        }
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if let Some(frame) = buf.get_mut(..len + 1) {
            let tag = frame[0];
            types.translate(tag, &mut frame[5..], &mut self.binary_arrays);
        }
    }

    /// `messages` (whole frames) with the parameter types of each Parse among them made the
    /// shard's own ([`super::types`]).
    pub fn with_own_types<'m>(&self, messages: &'m [u8]) -> Cow<'m, [u8]> {
        let Some(types) = self.types.as_deref().filter(|t| t.differs()) else {
            return Cow::Borrowed(messages);
        };
        let mut out: Option<BytesMut> = None;
        let mut at = 0;
        while let Some(len) = messages.get(at + 1..at + 5) {
            let end = at + 1 + u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
            let Some(frame) = messages.get(at..end) else {
                break;
            };
            let translated = (frame[0] == b'P')
                .then(|| parse_with_types(&frame[5..], types))
                .flatten();
            match (translated, &mut out) {
                (Some(parse), out) => {
                    let out = out.get_or_insert_with(|| BytesMut::from(&messages[..at]));
                    out.extend_from_slice(&parse);
                }
                (None, Some(out)) => out.extend_from_slice(frame),
                (None, None) => {}
            }
            at = end;
        }
        match out {
            Some(mut out) => {
                out.extend_from_slice(&messages[at..]);
                Cow::Owned(out.to_vec())
            }
            None => Cow::Borrowed(messages),
        }
    }

    /// Runs one simple query for the proxy's own purposes, discarding its results; the first
    /// error, if any, is returned as its message.
    pub async fn run_internal(&mut self, sql: &str) -> Result<Result<(), String>, BackendError> {
        // A simple query drops the backend's unnamed statement.
        self.unnamed = None;
        let mut out = BytesMut::new();
        protocol::query(&mut out, sql);
        self.stream.write_all(&out).await?;
        let mut failure = Ok(());
        loop {
            let f = self.read_frame().await?;
            match f.tag {
                b'E' => {
                    let msg = protocol::error_fields(f.body())
                        .into_iter()
                        .find(|(c, _)| *c == b'M')
                        .map(|(_, m)| m)
                        .unwrap_or_default();
                    failure = Err(msg);
                }
                b'S' => self.note_parameter_status(f.body()),
                b'Z' => return Ok(failure),
                _ => {}
            }
        }
    }

    pub fn note_parameter_status(&mut self, body: &[u8]) {
        let mut rest = body;
        if let (Ok(name), Ok(value)) = (
            protocol::take_cstr(&mut rest, "ParameterStatus"),
            protocol::take_cstr(&mut rest, "ParameterStatus"),
        ) {
            self.params.insert(
                String::from_utf8_lossy(name).into_owned(),
                String::from_utf8_lossy(value).into_owned(),
            );
        }
    }
}

fn connect_error(ep: &Endpoint, e: std::io::Error) -> BackendError {
    BackendError::Connect {
        endpoint: ep.to_string(),
        source: e,
    }
}

/// The SASL exchange's first message, for the mechanisms the server offers: over TLS bound to
/// the server's certificate when the server offers SCRAM-SHA-256-PLUS (the server then proves
/// it is the one the certificate names, even under sslmode=require).
fn start_scram(
    ep: &Endpoint,
    stream: &ShardStream,
    body: &AuthenticationSaslBody,
    out: &mut BytesMut,
) -> Result<ScramSha256, BackendError> {
    let io_err = |e: std::io::Error| connect_error(ep, e);
    let mut mechanisms = body.mechanisms();
    let (mut has_scram, mut has_scram_plus) = (false, false);
    while let Some(m) = mechanisms.next().map_err(io_err)? {
        has_scram |= m == SCRAM_SHA_256;
        has_scram_plus |= m == SCRAM_SHA_256_PLUS;
    }
    let pw = password(ep)?;
    let end_point = stream
        .peer_certificate()
        .and_then(crate::tls::server_end_point);
    let (mechanism, binding) = match end_point {
        Some(hash) if has_scram_plus => (
            SCRAM_SHA_256_PLUS,
            ChannelBinding::tls_server_end_point(hash),
        ),
        // "y": we could bind but the server did not offer it, which a server that did offer
        // it refuses as a downgrade.
        Some(_) if has_scram => (SCRAM_SHA_256, ChannelBinding::unrequested()),
        None if has_scram => (SCRAM_SHA_256, ChannelBinding::unsupported()),
        _ => {
            return Err(BackendError::Auth {
                endpoint: ep.to_string(),
                message: "server offers no SASL mechanism shardwire supports".into(),
            })
        }
    };
    let s = ScramSha256::new(pw.as_bytes(), binding);
    frontend::sasl_initial_response(mechanism, s.message(), out).map_err(io_err)?;
    Ok(s)
}

/// The server's refusal of the connection, with its message.
fn refused(ep: &Endpoint, body: &ErrorResponseBody) -> BackendError {
    let mut fields = body.fields();
    let mut message = String::new();
    loop {
        match fields.next() {
            Ok(Some(f)) if f.type_() == b'M' => {
                message = String::from_utf8_lossy(f.value_bytes()).into_owned();
            }
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => return connect_error(ep, e),
        }
    }
    BackendError::Auth {
        endpoint: ep.to_string(),
        message,
    }
}

fn password(ep: &Endpoint) -> Result<&str, BackendError> {
    ep.password.as_deref().ok_or_else(|| BackendError::Auth {
        endpoint: ep.to_string(),
        message: "the server asks for a password but the shard URL has none".into(),
    })
}

fn protocol_violation(ep: &Endpoint) -> BackendError {
    BackendError::Auth {
        endpoint: ep.to_string(),
        message: "unexpected message during startup".into(),
    }
}

/// Sends a CancelRequest for the statement running on the connection `key` names, over TLS
/// when the shard's URL asks for it (the key is a secret).
pub async fn send_cancel(ep: &Endpoint, key: CancelKey) -> Result<(), BackendError> {
    let mut stream = ShardStream::open(ep).await?;
    let mut out = BytesMut::new();
    frontend::cancel_request(key.pid, key.secret, &mut out);
    stream.write_all(&out).await?;
    // PostgreSQL closes the connection once it has read the request.
    let mut sink = [0u8; 1];
    let _ = stream.read(&mut sink).await;
    Ok(())
}

/// A Parse (its body given) again with the shard's own parameter types, when they differ.
fn parse_with_types(body: &[u8], types: &super::ShardTypes) -> Option<BytesMut> {
    let name_end = body.iter().position(|&c| c == 0)?;
    let query_end = name_end + 1 + body[name_end + 1..].iter().position(|&c| c == 0)?;
    let params = types.from_first(&body[query_end + 1..])?;
    let mut out = BytesMut::with_capacity(body.len() + 5);
    protocol::Extended::new(&mut out).parse(
        &body[..name_end],
        &body[name_end + 1..query_end],
        &params,
    );
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn equal_settings_are_shared_and_unused_ones_dropped() {
        let registry = SettingsRegistry::default();
        let a = registry.intern(settings(&[
            ("application_name", "app"),
            ("TimeZone", "UTC"),
        ]));
        let b = registry.intern(settings(&[
            ("application_name", "app"),
            ("TimeZone", "UTC"),
        ]));
        let c = registry.intern(settings(&[("application_name", "other")]));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(*c, *settings(&[("application_name", "other")]));

        drop(c);
        for i in 0..2000 {
            registry.intern(settings(&[("application_name", &i.to_string())]));
        }
        let live = registry.live.lock().unwrap();
        assert!(live.all.len() < 2000, "unused settings were kept");
        assert!(live.all.contains(&a), "settings in use were dropped");
    }
}

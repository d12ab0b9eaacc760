//! A bare protocol-3 client for what tokio-postgres cannot be made to send: statement names of
//! our choosing, several Bind/Execute in one batch before a single Sync, a Close followed by a
//! Parse of the same name, and hand-made cancel requests.

use std::net::SocketAddr;

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use postgres_protocol::IsNull;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_postgres::error::SqlState;

/// One server message, reduced to what tests compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    ParseComplete,
    BindComplete,
    CloseComplete,
    NoData,
    /// Column count.
    RowDescription(usize),
    /// Parameter type OIDs.
    ParameterDescription(Vec<u32>),
    /// Text-format values.
    Row(Vec<Option<String>>),
    /// Command tag.
    Complete(String),
    Error(SqlState),
    CopyIn,
    Ready(u8),
}

pub struct RawClient {
    stream: TcpStream,
    inbuf: BytesMut,
    out: BytesMut,
    pub pid: i32,
    pub secret: i32,
    /// The ParameterStatus messages of the startup, in order.
    pub reported: Vec<(String, String)>,
}

impl RawClient {
    /// Logs in with SCRAM (the proxy's default); fails with the server's SQLSTATE.
    pub async fn connect(
        addr: SocketAddr,
        user: &str,
        password: &str,
        db: &str,
    ) -> Result<RawClient, SqlState> {
        RawClient::connect_with(addr, user, password, db, &[]).await
    }

    /// Logs in with run-time parameters in the startup packet besides user and database.
    pub async fn connect_with(
        addr: SocketAddr,
        user: &str,
        password: &str,
        db: &str,
        params: &[(&str, &str)],
    ) -> Result<RawClient, SqlState> {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let mut c = RawClient {
            stream,
            inbuf: BytesMut::new(),
            out: BytesMut::new(),
            pid: 0,
            secret: 0,
            reported: Vec::new(),
        };
        let startup = [("user", user), ("database", db)]
            .into_iter()
            .chain(params.iter().copied());
        frontend::startup_message(startup, &mut c.out).unwrap();
        c.flush().await;
        let mut scram = None;
        loop {
            match c.next_message().await {
                Message::AuthenticationSasl(body) => {
                    let mechanisms: Vec<&str> = body.mechanisms().collect().unwrap();
                    assert!(mechanisms.contains(&SCRAM_SHA_256), "{mechanisms:?}");
                    let s = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
                    frontend::sasl_initial_response(SCRAM_SHA_256, s.message(), &mut c.out)
                        .unwrap();
                    scram = Some(s);
                    c.flush().await;
                }
                Message::AuthenticationSaslContinue(body) => {
                    let s = scram.as_mut().expect("SASL started");
                    s.update(body.data()).expect("server-first message");
                    frontend::sasl_response(s.message(), &mut c.out).unwrap();
                    c.flush().await;
                }
                Message::AuthenticationSaslFinal(body) => {
                    let s = scram.as_mut().expect("SASL started");
                    s.finish(body.data()).expect("server signature verifies");
                }
                Message::AuthenticationOk => {}
                Message::ParameterStatus(body) => c.reported.push((
                    body.name().unwrap().to_owned(),
                    body.value().unwrap().to_owned(),
                )),
                Message::BackendKeyData(body) => {
                    c.pid = body.process_id();
                    c.secret = body.secret_key();
                }
                Message::ReadyForQuery(_) => return Ok(c),
                Message::ErrorResponse(body) => return Err(sqlstate(body.fields())),
                other => panic!("unexpected message during startup: {}", tag_of(&other)),
            }
        }
    }

    /// Straight to shard `shard` of the test binary, bypassing the proxy.
    pub async fn connect_to_shard(shard: usize) -> RawClient {
        RawClient::connect_to_shard_with(shard, &[])
            .await
            .unwrap_or_else(|e| panic!("connect to shard {shard}: {e:?}"))
    }

    /// Straight to shard `shard`, with run-time parameters in the startup packet.
    pub async fn connect_to_shard_with(
        shard: usize,
        params: &[(&str, &str)],
    ) -> Result<RawClient, SqlState> {
        let config: tokio_postgres::Config = super::shards().url(shard).parse().unwrap();
        let port = config.get_ports()[0];
        let password = config.get_password().expect("shard URLs carry a password");
        let user = config.get_user().expect("shard URLs name a user");
        let db = config.get_dbname().expect("shard URLs name a database");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        RawClient::connect_with(
            addr,
            user,
            std::str::from_utf8(password).unwrap(),
            db,
            params,
        )
        .await
    }

    /// Queues bytes as they are, for messages no well-behaved client sends.
    pub fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.out.extend_from_slice(bytes);
        self
    }

    pub fn query(&mut self, sql: &str) -> &mut Self {
        frontend::query(sql, &mut self.out).unwrap();
        self
    }

    pub fn parse(&mut self, name: &str, sql: &str) -> &mut Self {
        frontend::parse(name, sql, std::iter::empty(), &mut self.out).unwrap();
        self
    }

    /// Binds text-format parameters, asking for text results.
    pub fn bind(&mut self, portal: &str, statement: &str, params: &[&str]) -> &mut Self {
        let written = frontend::bind(
            portal,
            statement,
            [0i16],
            params.iter(),
            |p, buf| {
                buf.extend_from_slice(p.as_bytes());
                Ok(IsNull::No)
            },
            [0i16],
            &mut self.out,
        );
        assert!(written.is_ok(), "bind encodes");
        self
    }

    pub fn execute(&mut self, portal: &str) -> &mut Self {
        frontend::execute(portal, 0, &mut self.out).unwrap();
        self
    }

    pub fn describe_statement(&mut self, name: &str) -> &mut Self {
        frontend::describe(b'S', name, &mut self.out).unwrap();
        self
    }

    pub fn close_statement(&mut self, name: &str) -> &mut Self {
        frontend::close(b'S', name, &mut self.out).unwrap();
        self
    }

    pub fn copy_data(&mut self, data: &[u8]) -> &mut Self {
        frontend::CopyData::new(data).unwrap().write(&mut self.out);
        self
    }

    pub fn copy_done(&mut self) -> &mut Self {
        frontend::copy_done(&mut self.out);
        self
    }

    pub fn sync(&mut self) -> &mut Self {
        frontend::sync(&mut self.out);
        self
    }

    pub async fn flush(&mut self) {
        let out = self.out.split();
        self.stream.write_all(&out).await.expect("write to server");
    }

    /// Sends what is queued and collects the replies up to and including ReadyForQuery.
    pub async fn round_trip(&mut self) -> Vec<Reply> {
        self.flush().await;
        self.until_ready().await
    }

    pub async fn until_ready(&mut self) -> Vec<Reply> {
        let mut replies = Vec::new();
        loop {
            let reply = self.next_reply().await;
            let ready = matches!(reply, Reply::Ready(_));
            replies.push(reply);
            if ready {
                return replies;
            }
        }
    }

    /// A Flush message: the server sends what it has answered so far, mid-batch.
    pub fn flush_message(&mut self) -> &mut Self {
        frontend::flush(&mut self.out);
        self
    }

    /// The next reply, notices and parameter changes skipped.
    pub async fn next_reply(&mut self) -> Reply {
        loop {
            return match self.next_message().await {
                Message::ParseComplete => Reply::ParseComplete,
                Message::BindComplete => Reply::BindComplete,
                Message::CloseComplete => Reply::CloseComplete,
                Message::NoData => Reply::NoData,
                Message::RowDescription(body) => {
                    Reply::RowDescription(body.fields().count().unwrap())
                }
                Message::ParameterDescription(body) => {
                    Reply::ParameterDescription(body.parameters().collect().unwrap())
                }
                Message::DataRow(body) => {
                    let buf = body.buffer();
                    let values = body
                        .ranges()
                        .map(|r| Ok(r.map(|r| String::from_utf8(buf[r].to_vec()).expect("utf-8"))))
                        .collect()
                        .unwrap();
                    Reply::Row(values)
                }
                Message::CommandComplete(body) => Reply::Complete(body.tag().unwrap().to_string()),
                Message::ErrorResponse(body) => Reply::Error(sqlstate(body.fields())),
                Message::CopyInResponse(_) => Reply::CopyIn,
                Message::ReadyForQuery(body) => Reply::Ready(body.status()),
                Message::NoticeResponse(_) | Message::ParameterStatus(_) => continue,
                other => panic!("unexpected message: {}", tag_of(&other)),
            };
        }
    }

    /// Sends what is queued and names every message up to and including ReadyForQuery, as a
    /// protocol trace shows them: ParameterStatus with its name and value, notices included.
    pub async fn trace(&mut self) -> Vec<String> {
        self.flush().await;
        let mut trace = Vec::new();
        loop {
            let message = self.next_message().await;
            trace.push(match &message {
                Message::ParameterStatus(body) => format!(
                    "ParameterStatus {}={}",
                    body.name().unwrap(),
                    body.value().unwrap()
                ),
                Message::RowDescription(_) => "RowDescription".into(),
                Message::DataRow(_) => "DataRow".into(),
                Message::CommandComplete(body) => {
                    format!("CommandComplete {}", body.tag().unwrap())
                }
                Message::NoticeResponse(_) => "NoticeResponse".into(),
                Message::ErrorResponse(body) => {
                    format!("ErrorResponse {:?}", sqlstate(body.fields()))
                }
                Message::ReadyForQuery(body) => format!("ReadyForQuery {}", body.status() as char),
                Message::ParseComplete => "ParseComplete".into(),
                Message::BindComplete => "BindComplete".into(),
                Message::NoData => "NoData".into(),
                Message::ParameterDescription(_) => "ParameterDescription".into(),
                other => tag_of(other).into(),
            });
            if matches!(message, Message::ReadyForQuery(_)) {
                return trace;
            }
        }
    }

    async fn next_message(&mut self) -> Message {
        loop {
            if let Some(m) = Message::parse(&mut self.inbuf).expect("well-formed server message") {
                return m;
            }
            let n = self
                .stream
                .read_buf(&mut self.inbuf)
                .await
                .expect("read from server");
            assert!(n > 0, "server closed the connection");
        }
    }

    /// Sends what is queued and collects the replies until the server closes the connection.
    /// Sends what is queued, closes the sending side (the client goes away), and collects the
    /// replies until the server closes too.
    pub async fn until_closed_after_shutdown(&mut self) -> Vec<Reply> {
        self.flush().await;
        self.stream.shutdown().await.expect("shut the sending side");
        self.until_closed().await
    }

    pub async fn until_closed(&mut self) -> Vec<Reply> {
        self.flush().await;
        let mut replies = Vec::new();
        loop {
            let message = loop {
                match Message::parse(&mut self.inbuf).expect("well-formed server message") {
                    Some(m) => break Some(m),
                    None => match self.stream.read_buf(&mut self.inbuf).await {
                        Ok(0) | Err(_) => break None,
                        Ok(_) => {}
                    },
                }
            };
            match message {
                None => return replies,
                Some(Message::ErrorResponse(body)) => {
                    replies.push(Reply::Error(sqlstate(body.fields())))
                }
                Some(Message::ReadyForQuery(body)) => replies.push(Reply::Ready(body.status())),
                Some(Message::CommandComplete(body)) => {
                    replies.push(Reply::Complete(body.tag().unwrap().to_string()))
                }
                Some(_) => {}
            }
        }
    }

    pub async fn terminate(mut self) {
        frontend::terminate(&mut self.out);
        self.flush().await;
    }
}

/// Sends a CancelRequest on a connection of its own, as libpq does.
pub async fn send_cancel(addr: SocketAddr, pid: i32, secret: i32) {
    let mut buf = BytesMut::new();
    frontend::cancel_request(pid, secret, &mut buf);
    let mut stream = TcpStream::connect(addr).await.expect("connect for cancel");
    stream.write_all(&buf).await.expect("send cancel");
    // The server closes without answering; waiting for that makes the cancel delivered.
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest).await;
}

fn sqlstate(mut fields: postgres_protocol::message::backend::ErrorFields<'_>) -> SqlState {
    while let Some(field) = fields.next().expect("error fields") {
        if field.type_() == b'C' {
            return SqlState::from_code(std::str::from_utf8(field.value_bytes()).expect("code"));
        }
    }
    panic!("error response without SQLSTATE")
}

fn tag_of(m: &Message) -> &'static str {
    match m {
        Message::CopyOutResponse(_) => "CopyOutResponse",
        Message::CopyData(_) => "CopyData",
        Message::NotificationResponse(_) => "NotificationResponse",
        Message::PortalSuspended => "PortalSuspended",
        Message::EmptyQueryResponse => "EmptyQueryResponse",
        _ => "another message",
    }
}

//! Arbitrary bytes from a client, read as the proxy reads them.
//!
//! The first byte chooses the point in the connection:
//!
//! - bit 0 clear: a fresh connection. pgwire's server codec decodes the bytes in the state
//!   the proxy's startup leaves it in (SSLRequest / GSSENCRequest answered, or straight to the
//!   startup packet when bit 1 is set), then the startup packet's checks and the `options`
//!   parameter as the proxy reads them, then the password messages through the configured
//!   authentication mechanism (SCRAM, or MD5 when bit 2 is set).
//! - bit 0 set: a logged-in session. The session's framer cuts the bytes into frames under
//!   `limits.max_message_bytes`, and every frame goes through what the session looks at before
//!   it forwards anything: the message's parts, the lexical classification of Query and Parse
//!   text (local statements, session effects, admin and signal statements, nested NoSQL names,
//!   SET TTL), the client's statement names, and Bind's parameters with every rewrite the
//!   session makes of them.

#![no_main]

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pgwire::api::auth::mechanism::{AuthMechanism, AuthState};
use pgwire::api::{ClientInfo, DefaultClient, PgWireConnectionState};
use pgwire::messages::startup::SecretKey;
use pgwire::messages::{PgWireFrontendMessage, SslNegotiationMetaMessage};
use pgwire::tokio::server::PgWireMessageServerCodec;
use shardwire::config::{AuthMethod, Config};
use shardwire::frontend::auth::{auth_message_head, Users};
use shardwire::frontend::pipeline::Pipeline;
use shardwire::frontend::startup::settings_from_options;
use shardwire::frontend::statements::{self, ClientFrame, StatementNames};
use shardwire::model::TableId;
use shardwire::protocol::{self, Frame};
use shardwire::router::route::{self, BindParts, Params};
use shardwire::sql::classify::{self, keyword, LastEffect};
use shardwire::ddl::row_ttl::{rewrite_row_ttl, TtlTable};
use shardwire::sql::{nested_names, signal};
use shardwire::{admin, ddl::model::QualifiedName};
use shardwire_fuzz::{config, plan_cache, snapshot, VERSION};
use tokio_util::codec::Decoder;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        let method = match mode & 4 {
            0 => AuthMethod::ScramSha256,
            _ => AuthMethod::Md5,
        };
        fresh_connection(bytes, mode & 2 != 0, method);
    } else {
        logged_in(bytes);
    }
});

/// The proxy's users under each authentication method; salting SCRAM secrets is slow, so once.
fn users(method: AuthMethod) -> &'static Arc<Users> {
    static SCRAM: OnceLock<Arc<Users>> = OnceLock::new();
    static MD5: OnceLock<Arc<Users>> = OnceLock::new();
    let with = |method| {
        let mut c: Config = config().clone();
        c.proxy.auth_method = method;
        Arc::new(Users::new(&c))
    };
    match method {
        AuthMethod::ScramSha256 => SCRAM.get_or_init(|| with(method)),
        AuthMethod::Md5 => MD5.get_or_init(|| with(method)),
    }
}

fn fresh_connection(bytes: &[u8], after_tls: bool, method: AuthMethod) {
    let addr: SocketAddr = ([127, 0, 0, 1], 40000).into();
    let mut codec = PgWireMessageServerCodec::<String>::new(DefaultClient::new(addr, after_tls));
    codec.client_info.state = match after_tls {
        true => PgWireConnectionState::AwaitingStartup,
        false => PgWireConnectionState::AwaitingSslRequest,
    };
    let mut buf = BytesMut::from(bytes);
    let mut mechanism: Option<Box<dyn AuthMechanism>> = None;
    let (mut ssl_answered, mut gss_answered) = (false, false);
    loop {
        let before = buf.len();
        // During authentication pgwire reads only what the proxy lets it (`auth::next_message`).
        if mechanism.is_some() && !matches!(auth_message_head(&buf), Some(Ok(()))) {
            return;
        }
        let message = match codec.decode(&mut buf) {
            Ok(Some(m)) => m,
            Ok(None) | Err(_) => return,
        };
        match message {
            PgWireFrontendMessage::SslNegotiation(request) => {
                // Both requests are refused (no TLS here); a second of a kind ends the
                // connection, as the proxy ends it; anything else is the startup packet.
                let answered = match request {
                    SslNegotiationMetaMessage::PostgresSsl(_) => &mut ssl_answered,
                    SslNegotiationMetaMessage::PostgresGss(_) => &mut gss_answered,
                    SslNegotiationMetaMessage::None => {
                        codec.client_info.state = PgWireConnectionState::AwaitingStartup;
                        continue;
                    }
                };
                if std::mem::replace(answered, true) {
                    return;
                }
            }
            PgWireFrontendMessage::CancelRequest(cancel) => {
                let _ = match cancel.secret_key {
                    SecretKey::I32(s) => Some(s),
                    SecretKey::Bytes(b) => {
                        <[u8; 4]>::try_from(b.as_ref()).ok().map(i32::from_be_bytes)
                    }
                };
                return;
            }
            PgWireFrontendMessage::Startup(startup) => {
                if startup.protocol_number_major != 3 {
                    return;
                }
                let user = startup.parameters.get("user").cloned().unwrap_or_default();
                if user.is_empty() {
                    return;
                }
                let _ = users(method).exists(&user);
                if let Some(options) = startup.parameters.get("options") {
                    let _ = settings_from_options(options);
                }
                codec.client_info.metadata_mut().extend(
                    startup
                        .parameters
                        .iter()
                        .filter(|(k, _)| !k.starts_with("_pq_."))
                        .map(|(k, v)| (k.clone(), v.clone())),
                );
                codec.client_info.state = PgWireConnectionState::AuthenticationInProgress;
                let mut started = users(method).mechanism().create();
                match futures::executor::block_on(started.begin(&codec.client_info)) {
                    Ok(AuthState::InProgress(_)) => mechanism = Some(started),
                    _ => return,
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(password) => {
                let Some(m) = mechanism.as_mut() else {
                    return;
                };
                match futures::executor::block_on(m.next(&codec.client_info, password)) {
                    Ok(AuthState::InProgress(_)) => {}
                    _ => return,
                }
            }
            _ => return,
        }
        if buf.len() == before {
            return;
        }
    }
}

/// What a session keeps between frames that the frames' inspection reads or changes.
#[derive(Default)]
struct SessionState {
    statements: StatementNames,
    parse_effect: LastEffect,
    pipeline: Pipeline,
    cout: BytesMut,
    bout: BytesMut,
}

fn logged_in(bytes: &[u8]) {
    let max = config().limits.max_message_bytes as usize;
    let cin = BytesMut::from(bytes);
    let mut state = SessionState::default();
    let mut pos = 0;
    loop {
        let len = match protocol::frame_len_within(&cin[pos..], max) {
            Ok(Some(len)) => len,
            Ok(None) | Err(_) => break,
        };
        // The other framer, which reads backend frames and COPY answers, cuts the same frame.
        let mut copy = BytesMut::from(&cin[pos..]);
        if let Ok(Some(frame)) = protocol::split_frame(&mut copy) {
            assert_eq!(frame.raw.len(), len, "the two framers disagree");
        }
        let frame = Frame::borrowed(&cin[pos..pos + len]);
        if !protocol::is_frontend_tag(frame.tag) || frame.tag == b'X' {
            break;
        }
        inspect(&frame, &mut state);
        pos += len;
    }
}

fn inspect(frame: &Frame<&[u8]>, state: &mut SessionState) {
    if statements::goes_unchanged(frame.raw) {
        statements::send_unchanged(
            frame.raw,
            &mut state.pipeline,
            &mut state.bout,
            &mut state.cout,
        );
    }
    let Ok(parsed) = ClientFrame::parse(frame) else {
        return;
    };
    match parsed {
        ClientFrame::Query(sql) => {
            let _ = classify::session_effect(sql);
            inspect_text(sql, frame);
            state.statements.forget_unnamed();
        }
        ClientFrame::Parse { name, query, types } => {
            let _ = state.parse_effect.session_effect(query);
            inspect_text(query, frame);
            let _ = state
                .statements
                .hold(name, query, types, &mut state.pipeline, &mut state.cout);
        }
        ClientFrame::Bind {
            statement, rest, ..
        } => {
            let types = state
                .statements
                .get(statement)
                .map(|s| s.param_types.clone())
                .unwrap_or_default();
            inspect_bind(rest, &types);
        }
        ClientFrame::Describe { kind, name } | ClientFrame::Close { kind, name } => {
            if kind == b'S' {
                let _ = state.statements.get(name);
            }
        }
        ClientFrame::Execute => {
            // The portal's name, then the row limit.
            let mut body = frame.body();
            if protocol::take_cstr(&mut body, "Execute").is_ok() {
                let _ = protocol::take_i32(&mut body, "Execute");
            }
        }
        ClientFrame::CopyEnd if frame.tag == b'f' => {
            let message = frame.body().split(|&c| c == 0).next().unwrap_or_default();
            let _ = String::from_utf8_lossy(message);
        }
        ClientFrame::Sync
        | ClientFrame::Flush
        | ClientFrame::FunctionCall
        | ClientFrame::CopyData
        | ClientFrame::CopyEnd
        | ClientFrame::Other => {}
    }
}

/// What the session reads of a statement's text before routing it.
fn inspect_text(sql: &[u8], frame: &Frame<&[u8]>) {
    // The session's test for statements it may answer itself, by their first words.
    if classify::may_start_with(sql, &[*b"show", *b"crea", *b"drop", *b"alte", *b"sele"]) {
        const SHOW: u128 = keyword(b"show");
        const SELECT: u128 = keyword(b"select");
        match classify::first_keyword(sql) {
            SHOW => {
                let _ = admin::parse(sql);
            }
            SELECT if signal::mentions_signal(sql) => {
                if let Ok(text) = std::str::from_utf8(sql) {
                    let _ = signal::signal_call(text);
                }
            }
            _ => {}
        }
    }
    let _ = classify::leading_keywords::<3>(sql);
    let _ = classify::is_blank(sql);
    let Ok(text) = std::str::from_utf8(sql) else {
        return;
    };
    let snapshot = snapshot();
    let _ = nested_names::rewrite_nested_names(text, |schema, table| {
        snapshot.is_nested_name(schema, table)
    });
    // As the session decides whether to try the rewrite: a NoSQL table exists, and the frame
    // says "ttl" somewhere.
    if frame
        .body()
        .windows(3)
        .any(|w| w.eq_ignore_ascii_case(b"ttl"))
    {
        let table = |schema: &str, name: &str| {
            snapshot
                .table_by_name(schema, name)
                .filter(|t| t.nosql)
                .map(|t| TtlTable {
                    id: t.id,
                    name: QualifiedName::new(&t.schema, &t.name),
                    ttl: t.ttl,
                })
        };
        let cache = plan_cache();
        let columns = |id: TableId| cache.columns(VERSION, id);
        let _ = rewrite_row_ttl(text, &table, &columns);
    }
}

/// Bind's parameter part as routing reads it, and every rewrite the session makes of it for
/// statements it runs on several shards.
fn inspect_bind(rest: &[u8], types: &[u8]) {
    let Ok(params) = Params::parse(rest, types) else {
        return;
    };
    let count = params.count();
    // A Bind PostgreSQL would refuse goes on to the shard, which refuses it: only a readable
    // one must stay readable through the session's rewrites.
    let readable = BindParts::read(rest).is_ok_and(|parts| {
        assert_eq!(parts.values.len(), count);
        // The session reads a value's format at the value's index (a sharding-key UPDATE's
        // parameters): a Bind read without error has one for each.
        assert_eq!(parts.formats.len(), count, "a format for every value");
        true
    });
    for (visible, hidden) in [(0, 0), (1, 1), (3, 2)] {
        let _ = route::with_hidden_result_columns(rest, visible, hidden);
    }
    if let (Ok(extended), true) = (route::with_extra_param(rest, "42"), readable) {
        let more = BindParts::read(&extended).expect("the session's own Bind reads back");
        assert_eq!(more.values.len(), count + 1);
    }
    let _ = route::with_extra_param_type(types, count);
    let keep: Vec<usize> = (0..count).rev().collect();
    if let Ok(selected) = route::select_params(rest, &keep) {
        let back = BindParts::read(&selected).expect("the session's own Bind reads back");
        assert_eq!(back.values.len(), keep.len());
    }
    let _ = route::select_param_types(types, &keep);
}

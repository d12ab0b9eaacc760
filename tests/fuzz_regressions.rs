//! Inputs the fuzz targets (fuzz/, docs/fuzzing.md) found to crash the proxy, each through the
//! production function that crashed, without a fuzzer. None needs a database.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use pgwire::api::auth::mechanism::AuthState;
use pgwire::api::{ClientInfo, DefaultClient};
use pgwire::messages::startup::PasswordMessageFamily;
use shardwire::config::Config;
use shardwire::frontend::auth::Users;
use shardwire::frontend::statements::ClientFrame;
use shardwire::protocol::Frame;
use shardwire::router::route::{self, BindParts, Params};

const CONFIG: &str = r#"
[proxy]
listen = "127.0.0.1:6432"
database = "app"

[[users]]
name = "app"
password = "app"

[[shards]]
name = "s1"
url = "postgres://postgres@127.0.0.1:55431/app"
"#;

/// The SCRAM exchange of a client `app` that has sent the password messages `bodies`: the
/// outcome of the last one.
fn scram_exchange(bodies: &[&[u8]]) -> pgwire::error::PgWireResult<AuthState> {
    let config = Config::parse(CONFIG, "test").unwrap();
    let users = Arc::new(Users::new(&config));
    let addr: SocketAddr = ([127, 0, 0, 1], 40000).into();
    let mut client = DefaultClient::<String>::new(addr, false);
    client.metadata_mut().insert("user".into(), "app".into());
    let mut mechanism = users.mechanism().create();
    futures::executor::block_on(async {
        let mut state = mechanism.begin(&client).await;
        for body in bodies {
            let message = PasswordMessageFamily::Raw(BytesMut::from(*body));
            state = mechanism.next(&client, message).await;
        }
        state
    })
}

/// client_messages: a SASLInitialResponse whose data is shorter than its length field says
/// (32 bytes announced, 30 sent) made pgwire split past the end of the message and panic.
#[test]
fn short_sasl_initial_response_is_refused() {
    let mut body = b"SCRAM-SHA-256\0".to_vec();
    body.extend_from_slice(&32i32.to_be_bytes());
    body.extend_from_slice(b"n,,n=app,r=rOprNGfwEbeRWgbNEkqO");
    assert!(scram_exchange(&[&body]).is_err());
    // Nor may the length field itself be cut short, or be negative.
    assert!(scram_exchange(&[b"SCRAM-SHA-256\0\0\0"]).is_err());
    assert!(scram_exchange(&[b"SCRAM-SHA-256\0\xff\xff\xff\xfe"]).is_err());
    assert!(scram_exchange(&[b"no name"]).is_err());
}

/// A well-formed first message still goes on to the server's challenge.
#[test]
fn whole_sasl_initial_response_gets_the_challenge() {
    let data = b"n,,n=app,r=rOprNGfwEbeRWgbNEkqO";
    let mut body = b"SCRAM-SHA-256\0".to_vec();
    body.extend_from_slice(&(data.len() as i32).to_be_bytes());
    body.extend_from_slice(data);
    assert!(matches!(
        scram_exchange(&[&body]),
        Ok(AuthState::InProgress(_))
    ));
}

/// client_messages: once the startup packet is read, pgwire decoded any kind of message in
/// full and panicked on some: a password message whose length field says less than the 4 bytes
/// it takes itself (it subtracts 4 unchecked), a Parse whose parameter count runs past its end.
/// The proxy, which takes only password messages then, now looks at the head first.
#[test]
fn only_whole_password_messages_reach_pgwire_during_authentication() {
    use shardwire::frontend::auth::auth_message_head;
    for len in 0..4u8 {
        assert!(matches!(
            auth_message_head(&[b'p', 0, 0, 0, len]),
            Some(Err(_))
        ));
    }
    assert!(matches!(
        auth_message_head(&[b'p', 0xff, 0xff, 0xff, 0xff]),
        Some(Err(_))
    ));
    assert!(matches!(
        auth_message_head(b"P\0\0\0P\0\0\0\x04s2\0SE\0\0p"),
        Some(Err(_))
    ));
    assert!(matches!(
        auth_message_head(&[b'p', 0, 0, 0, 4]),
        Some(Ok(()))
    ));
    assert!(auth_message_head(&[b'p', 0, 0]).is_none());
}

/// The same messages through the proxy's reader of the authentication exchange: refused, and
/// the client told why.
#[tokio::test]
async fn malformed_messages_end_the_authentication_exchange() {
    use pgwire::api::PgWireConnectionState;
    use pgwire::tokio::server::PgWireMessageServerCodec;
    use shardwire::frontend::auth::next_message;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let addr: SocketAddr = ([127, 0, 0, 1], 40000).into();
    let refused: [&[u8]; 2] = [b"p\0\0\0\0md5", b"P\0\0\0P\0\0\0\x04s2\0SE\0\0p"];
    for message in refused {
        let (mut client, server) = tokio::io::duplex(256);
        let codec = PgWireMessageServerCodec::<String>::new(DefaultClient::new(addr, false));
        let mut socket = tokio_util::codec::Framed::new(server, codec);
        socket.set_state(PgWireConnectionState::AuthenticationInProgress);
        client.write_all(message).await.unwrap();
        assert!(matches!(next_message(&mut socket).await, Some(Err(_))));
        let mut answer = [0u8; 1];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"E", "an ErrorResponse");
    }

    // After the startup packet, a whole password message sent in two pieces is read as
    // before.
    let (mut client, server) = tokio::io::duplex(64);
    let codec = PgWireMessageServerCodec::<String>::new(DefaultClient::new(addr, false));
    let mut socket = tokio_util::codec::Framed::new(server, codec);
    socket.set_state(PgWireConnectionState::AwaitingStartup);
    client
        .write_all(b"\0\0\0\x12\0\x03\0\0user\0app\0\0")
        .await
        .unwrap();
    assert!(matches!(
        next_message(&mut socket).await,
        Some(Ok(pgwire::messages::PgWireFrontendMessage::Startup(_)))
    ));
    socket.set_state(PgWireConnectionState::AuthenticationInProgress);
    client.write_all(b"p\0\0").await.unwrap();
    let sender = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        client.write_all(b"\0\x08abc\0").await.unwrap();
        client
    });
    assert!(matches!(
        next_message(&mut socket).await,
        Some(Ok(
            pgwire::messages::PgWireFrontendMessage::PasswordMessageFamily(_)
        ))
    ));
    drop(sender.await);
}

/// client_messages: a Bind with two parameter format codes and no values. PostgreSQL refuses
/// a Bind whose several format codes are not one per value; the session, which reads a value's
/// format at the value's index (a sharding-key UPDATE's parameters), took it.
#[test]
fn bind_with_a_format_count_unlike_its_values_is_unreadable() {
    let frame: &[u8] = b"B\0\0\0\x2a\0s1\xfb\xff\x01\xf6\0\0\x02\0\0\0\x08\0\0\0\0\0\0\0\x07\
        \0\0\0\x08\0\0\0\0\0\0\0\n\0\x01\0\t";
    let frame = Frame::borrowed(frame);
    let Ok(ClientFrame::Bind { rest, .. }) = ClientFrame::parse(&frame) else {
        panic!("a Bind");
    };
    assert!(BindParts::read(rest).is_err());
    // Routing still reads it: the shard answers it with PostgreSQL's own error.
    assert_eq!(Params::parse(rest, &[]).map(|p| p.count()).ok(), Some(0));

    // Two codes for three values, as a sharding-key UPDATE with three parameters would get.
    let mut rest = vec![0, 2, 0, 1, 0, 1, 0, 3];
    for v in [&b"1"[..], b"2", b"3"] {
        rest.extend_from_slice(&(v.len() as i32).to_be_bytes());
        rest.extend_from_slice(v);
    }
    rest.extend_from_slice(&[0, 0]);
    assert!(BindParts::read(&rest).is_err());
    assert!(route::select_params(&rest, &[0, 1, 2]).is_err());
    // One code for all of them, or one each, is a Bind like any other.
    rest[1] = 1;
    rest.drain(4..6);
    assert_eq!(
        BindParts::read(&rest).unwrap().formats.as_slice(),
        [1, 1, 1]
    );
}

/// router_keys: a simple query that ends inside a string literal whose last character takes
/// several bytes. The plan cache's scanner cut the literal's text one byte before the end, in
/// the middle of that character, and panicked.
#[test]
fn query_ending_inside_a_string_is_planned_without_sharing() {
    use shardwire::catalog::Snapshot;
    use shardwire::router::normalize::normalize;
    use shardwire::router::PlanCache;

    let sql = "SELECT nextval('tickist\u{fffd}".as_bytes();
    assert!(normalize(sql).is_none());
    assert!(normalize(b"SELECT 'it''").is_none());
    let cache = PlanCache::new(16);
    let mut memo = shardwire::router::SimpleMemo::default();
    let literals = memo.normalise(sql);
    assert!(cache
        .plan_simple(
            sql,
            literals,
            &Snapshot::default(),
            &metrics::Counter::noop(),
            &mut memo
        )
        .is_ok());
    // A closed literal is still shared.
    let normalized = normalize("SELECT 'é'".as_bytes()).unwrap();
    assert_eq!(normalized.literals[0].value, "é");
}

/// client_messages: a Bind whose result formats say one code follows, and only one byte does.
/// For a statement on several shards that sorts by a column it does not return, the session
/// spells out the result formats with one more for the hidden sort column, and read the code
/// past the end of the message.
#[test]
fn result_format_count_without_its_code_is_sent_as_it_came() {
    let frame: &[u8] = b"B\0\0\0*\0s1\xfb\xff\x01\0\x8b\x01\0\x02\0\0\0\x08\0\0\0\0\0\0\0\x07\
        \0\0\0\x08\0\0\0\0\0\0\0\n\0\x01\0";
    let frame = Frame::borrowed(frame);
    let Ok(ClientFrame::Bind { rest, .. }) = ClientFrame::parse(&frame) else {
        panic!("a Bind");
    };
    assert_eq!(Params::parse(rest, &[]).map(|p| p.count()).ok(), Some(2));
    assert_eq!(route::with_hidden_result_columns(rest, 1, 1), rest);
    assert_eq!(route::with_hidden_result_columns(rest, 3, 2), rest);
    // With its code, the code is spelt out per column and the hidden column reads as text.
    let mut whole = rest.to_vec();
    whole.push(1);
    let spelt = route::with_hidden_result_columns(&whole, 2, 1);
    assert_eq!(&spelt[spelt.len() - 8..], &[0, 3, 0, 1, 0, 1, 0, 0]);
}

//! Input no well-behaved client sends: each is answered with an ErrorResponse or a closed
//! connection, never a hang or a crash, while a healthy client beside it keeps working and the
//! proxy's memory stays bounded.

mod common;

use std::time::{Duration, Instant};

use common::raw::{RawClient, Reply};
use common::{TestProxy, APP};
use postgres_protocol::message::backend::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_postgres::error::SqlState;

/// The tests that measure the process's memory run one at a time.
static MEASURED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn healthy(client: &tokio_postgres::Client) {
    let one: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1, "the healthy client is served");
}

/// What the server sends until it closes the connection (or 5 s pass: a hang).
async fn until_closed(stream: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut buf = [0u8; 4096];
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return got,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("{what}: the server neither answered nor closed: {got:?}"),
        }
    }
}

fn startup_packet(params: &[(&str, &str)]) -> Vec<u8> {
    let mut body = 196608u32.to_be_bytes().to_vec();
    for (k, v) in params {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut packet = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    packet.extend(body);
    packet
}

const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// Shard 0's address, for the same bytes sent to PostgreSQL directly.
fn shard_addr() -> std::net::SocketAddr {
    let config: tokio_postgres::Config = common::shards().url(0).parse().unwrap();
    std::net::SocketAddr::from(([127, 0, 0, 1], config.get_ports()[0]))
}

/// The SQLSTATE of the first ErrorResponse in `bytes`.
fn first_error(bytes: &[u8]) -> Option<String> {
    let at = bytes.iter().position(|&b| b == b'E')?;
    let body = bytes.get(at + 5..)?;
    let c = body.windows(1).position(|w| w[0] == b'C')?;
    let code = &body[c + 1..c + 6];
    Some(String::from_utf8_lossy(code).into_owned())
}

#[tokio::test]
async fn startup_packets_of_bad_length_or_kind_are_refused() {
    let proxy = TestProxy::start();
    let bystander = proxy.connect().await;
    for (what, bytes) in [
        ("length below 4", vec![0, 0, 0, 3, 0, 3, 0, 0]),
        ("length 0", vec![0, 0, 0, 0]),
        ("contents over 10000 bytes", {
            let mut b = (4 + 10_001u32).to_be_bytes().to_vec();
            b.extend_from_slice(&196608u32.to_be_bytes());
            b
        }),
        ("negative length", vec![0x80, 0, 0, 0, 0, 3, 0, 0]),
        ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("an SSLRequest with bytes sent ahead of its answer", {
            [SSL_REQUEST, SSL_REQUEST].concat()
        }),
        ("protocol 2", {
            let mut p = startup_packet(&[("user", APP)]);
            p[4..8].copy_from_slice(&131072u32.to_be_bytes());
            p
        }),
    ] {
        // Nothing more comes: a server that waited for the rest would hang here.
        let mut direct = TcpStream::connect(shard_addr()).await.unwrap();
        direct.write_all(&bytes).await.unwrap();
        let want = until_closed(&mut direct, what).await;
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream.write_all(&bytes).await.unwrap();
        let answer = until_closed(&mut stream, what).await;
        // Closed as directly: silently, or after the same refusal (the declined SSLRequest's
        // 'N' first).
        assert_eq!(
            answer.first() == Some(&b'N'),
            want.first() == Some(&b'N'),
            "{what}"
        );
        assert_eq!(
            first_error(&answer),
            first_error(&want),
            "{what}: {:?} directly {:?}",
            String::from_utf8_lossy(&answer),
            String::from_utf8_lossy(&want)
        );
        assert_eq!(answer.is_empty(), want.is_empty(), "{what}: {answer:?}");
        if what == "protocol 2" {
            // In version 2's own form: E and a line of text.
            assert_eq!(answer, want, "{what}");
        }
        healthy(&bystander).await;
    }

    // A second SSLRequest after the first was declined, as directly.
    let mut replies = Vec::new();
    for addr in [shard_addr(), proxy.addr] {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&SSL_REQUEST).await.unwrap();
        let mut answer = [0u8; 1];
        stream.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"N");
        stream.write_all(&SSL_REQUEST).await.unwrap();
        replies.push(first_error(
            &until_closed(&mut stream, "a second SSLRequest").await,
        ));
    }
    assert_eq!(replies[0].as_deref(), Some("0A000"));
    assert_eq!(replies[1], replies[0]);
    healthy(&bystander).await;

    // GSSENCRequest is declined with 'N', and the startup goes on in the clear.
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30])
        .await
        .unwrap();
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"N");
    stream
        .write_all(&startup_packet(&[
            ("user", APP),
            ("database", "no_such_db"),
        ]))
        .await
        .unwrap();
    let answer = until_closed(&mut stream, "GSSENCRequest, then a startup").await;
    assert_eq!(first_error(&answer).as_deref(), Some("3D000"), "{answer:?}");
    healthy(&bystander).await;
}

/// After login: a message type the protocol does not have, a length below 4, and a password
/// message outside authentication each end the session with FATAL 08P01 — as directly.
#[tokio::test]
async fn messages_the_protocol_does_not_allow_end_the_session_with_08p01() {
    let proxy = TestProxy::start();
    let bystander = proxy.connect().await;
    // PostgreSQL closes the connection on a bad length without a word (it only logs it); the
    // proxy says why.
    let bad: [(&str, &[u8], bool); 3] = [
        ("unknown type", b"x\0\0\0\x04", true),
        ("length below 4", b"Q\0\0\0\x02", false),
        ("password message", b"p\0\0\0\x09hello\0", true),
    ];
    for (what, bytes, told) in bad {
        let mut direct = RawClient::connect_to_shard(0).await;
        let want = direct.raw(bytes).until_closed().await;
        let expected = if told {
            vec![Reply::Error(SqlState::PROTOCOL_VIOLATION)]
        } else {
            vec![]
        };
        assert_eq!(want, expected, "directly, {what}");
        let mut client = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
        let got = client.raw(bytes).until_closed().await;
        assert!(
            got.contains(&Reply::Error(SqlState::PROTOCOL_VIOLATION)),
            "{what}: {got:?}"
        );
        healthy(&bystander).await;
    }
}

#[tokio::test]
async fn a_message_longer_than_the_limit_is_refused_at_its_header() {
    let proxy = TestProxy::start_with(|c| c.limits.max_message_bytes = 65_536);
    let mut client = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    let fits = format!("SELECT length('{}')", "x".repeat(60_000));
    let replies = client.query(&fits).round_trip().await;
    assert!(
        replies.contains(&Reply::Row(vec![Some("60000".into())])),
        "{replies:?}"
    );
    // Only the header: the refusal cannot wait for the body.
    let replies = client.raw(b"Q\0\x0f\x42\x40").until_closed().await;
    assert_eq!(replies, [Reply::Error(SqlState::PROTOCOL_VIOLATION)]);
    let next = proxy.connect().await;
    healthy(&next).await;
}

fn vm_size_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmSize")
}

fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Clients that announce messages of almost 1 GB and send a few bytes of them: the proxy
/// (in this process) must not set memory aside for what it has not received.
#[tokio::test]
async fn claimed_lengths_cost_no_memory() {
    let _alone = MEASURED.lock().await;
    let proxy = TestProxy::start();
    let bystander = proxy.connect().await;
    healthy(&bystander).await;
    let before = vm_size_kib();
    let mut clients = Vec::new();
    for _ in 0..64 {
        let mut c = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
        c.raw(b"Q\x3f\xff\xff\x00SELECT 1").flush().await;
        clients.push(c);
    }
    healthy(&bystander).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grown_mib = vm_size_kib().saturating_sub(before) / 1024;
    // Reserved as claimed it would be 64 GiB.
    assert!(
        grown_mib < 2048,
        "the proxy's address space grew by {grown_mib} MiB"
    );
    drop(clients);
    healthy(&bystander).await;
}

/// A client that asks for a large result and does not read it: the proxy stops reading the
/// shard once its buffer for the client is full, rather than holding the whole result.
#[tokio::test]
async fn a_client_that_stops_reading_does_not_make_the_proxy_buffer_its_result() {
    let _alone = MEASURED.lock().await;
    let proxy = TestProxy::start();
    let bystander = proxy.connect().await;
    let before = vm_rss_kib();
    let mut stalled = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    // About 2 GB of rows.
    stalled
        .query("SELECT repeat('x', 1000) FROM generate_series(1, 2000000)")
        .flush()
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    healthy(&bystander).await;
    let grown_mib = vm_rss_kib().saturating_sub(before) / 1024;
    assert!(
        grown_mib < 256,
        "the proxy's memory grew by {grown_mib} MiB"
    );
    drop(stalled);
    healthy(&bystander).await;
}

/// Bind messages that disagree with their Parse, or carry 65,535 parameters: the shard's
/// error, and the session goes on.
#[tokio::test]
async fn binds_that_disagree_with_their_parse_are_refused() {
    let proxy = TestProxy::start();
    let mut client = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    let replies = client
        .parse("one", "SELECT $1::int")
        .bind("", "one", &[])
        .execute("")
        .sync()
        .round_trip()
        .await;
    assert!(
        replies.contains(&Reply::Error(SqlState::PROTOCOL_VIOLATION)),
        "{replies:?}"
    );
    let many: Vec<String> = (0..65_535).map(|i| i.to_string()).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let replies = client
        .bind("", "one", &many)
        .execute("")
        .sync()
        .round_trip()
        .await;
    assert!(
        replies.contains(&Reply::Error(SqlState::PROTOCOL_VIOLATION)),
        "{replies:?}"
    );
    // Two parameter formats for one parameter.
    let mut bind = b"B".to_vec();
    let mut body = b"\0one\0".to_vec();
    body.extend_from_slice(&[0, 2, 0, 0, 0, 0]);
    body.extend_from_slice(&[0, 1, 0, 0, 0, 1, b'7']);
    body.extend_from_slice(&[0, 0]);
    bind.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    bind.extend(body);
    let replies = client.raw(&bind).execute("").sync().round_trip().await;
    assert!(
        replies.contains(&Reply::Error(SqlState::PROTOCOL_VIOLATION)),
        "{replies:?}"
    );
    let replies = client
        .bind("", "one", &["7"])
        .execute("")
        .sync()
        .round_trip()
        .await;
    assert!(
        replies.contains(&Reply::Row(vec![Some("7".into())])),
        "{replies:?}"
    );
}

/// How a SCRAM exchange is broken.
#[derive(Debug, Clone, Copy)]
enum Broken {
    /// The client-final message's proof does not verify.
    Proof,
    /// The client-final message carries a nonce other than the server's.
    Nonce,
    /// The client-first message is no SCRAM message at all.
    Garbage,
}

/// The next message from `stream`, read into `buf`.
async fn next_message(stream: &mut TcpStream, buf: &mut bytes::BytesMut) -> Option<Message> {
    loop {
        if let Some(m) = Message::parse(buf).expect("well-formed server message") {
            return Some(m);
        }
        match tokio::time::timeout(Duration::from_secs(5), stream.read_buf(buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return None,
            Ok(Ok(_)) => {}
            Err(_) => panic!("the server neither answered nor closed"),
        }
    }
}

/// Logs in to `addr` as `user` with `password`, breaking the SCRAM exchange as `broken` says;
/// the SQLSTATE of the server's refusal, if it sent one.
async fn broken_scram(
    addr: std::net::SocketAddr,
    user: &str,
    password: &str,
    broken: Broken,
) -> Option<String> {
    use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
    use postgres_protocol::message::frontend;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut out = bytes::BytesMut::new();
    let mut buf = bytes::BytesMut::new();
    frontend::startup_message([("user", user), ("database", APP)], &mut out).unwrap();
    stream.write_all(&out).await.unwrap();
    let mut scram = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
    loop {
        out.clear();
        match next_message(&mut stream, &mut buf).await? {
            Message::AuthenticationSasl(_) => {
                let first = match broken {
                    Broken::Garbage => b"this is no SCRAM message".to_vec(),
                    Broken::Proof | Broken::Nonce => scram.message().to_vec(),
                };
                frontend::sasl_initial_response(SCRAM_SHA_256, &first, &mut out).unwrap();
            }
            Message::AuthenticationSaslContinue(body) => {
                scram.update(body.data()).expect("server-first message");
                let last = String::from_utf8(scram.message().to_vec()).unwrap();
                let (without_proof, proof) = last.rsplit_once(",p=").unwrap();
                let last = match broken {
                    Broken::Proof => {
                        let flipped = if proof.starts_with('A') { "B" } else { "A" };
                        format!("{without_proof},p={flipped}{}", &proof[1..])
                    }
                    Broken::Nonce => {
                        let (head, nonce) = without_proof.rsplit_once(",r=").unwrap();
                        format!("{head},r={nonce}x,p={proof}")
                    }
                    Broken::Garbage => last,
                };
                frontend::sasl_response(last.as_bytes(), &mut out).unwrap();
            }
            Message::ErrorResponse(body) => {
                let mut fields = body.fields();
                while let Some(f) = fallible_iterator::FallibleIterator::next(&mut fields).unwrap()
                {
                    if f.type_() == b'C' {
                        return Some(String::from_utf8_lossy(f.value_bytes()).into_owned());
                    }
                }
                return Some(String::new());
            }
            Message::AuthenticationOk | Message::AuthenticationSaslFinal(_) => {
                panic!("{broken:?}: logged in")
            }
            _ => {}
        }
        if !out.is_empty() {
            stream.write_all(&out).await.unwrap();
        }
    }
}

/// SCRAM exchanges gone wrong are refused as PostgreSQL refuses them, and the proxy goes on.
#[tokio::test]
async fn broken_scram_exchanges_are_refused_as_directly() {
    let proxy = TestProxy::start();
    let bystander = proxy.connect().await;
    let shard: tokio_postgres::Config = common::shards().url(0).parse().unwrap();
    let shard_user = shard.get_user().unwrap().to_string();
    let shard_password = String::from_utf8_lossy(shard.get_password().unwrap()).into_owned();
    for broken in [Broken::Proof, Broken::Nonce, Broken::Garbage] {
        let want = broken_scram(shard_addr(), &shard_user, &shard_password, broken).await;
        assert!(want.is_some(), "{broken:?} refused directly");
        let got = broken_scram(proxy.addr, APP, APP, broken).await;
        assert_eq!(got, want, "{broken:?}");
        healthy(&bystander).await;
    }
}

/// A message cut short by a client that then goes away ends only that session.
#[tokio::test]
async fn a_message_cut_short_by_a_client_that_leaves_ends_only_its_session() {
    let proxy = TestProxy::start();
    let bystander = proxy.connect().await;
    for partial in [&b"Q\0\0\0\x20SELEC"[..], b"P\0\0", b"B"] {
        let mut client = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
        let replies = client.raw(partial).until_closed_after_shutdown().await;
        assert_eq!(replies, [], "{partial:?}");
        healthy(&bystander).await;
    }
}

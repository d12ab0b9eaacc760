//! The byte stream under a backend connection: TCP, or TLS over it when the shard's URL asks
//! for it. Plain TCP is the data path's common case and keeps its cheap reads and writes
//! (`frontend::socket`); TLS goes through tokio-rustls.
//!
//! rustls may keep part of what it accepted in its own buffer when the socket is full, and
//! sends it only on a later write or flush. A connection the proxy wrote a request to is read
//! next, so every read of a TLS stream first pushes out what is left (see [`ShardStream`]'s
//! `AsyncRead`), and nothing written waits for a write that never comes.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::BackendError;
use crate::config::Endpoint;
use crate::tls::SslMode;

/// PostgreSQL's SSLRequest: length 8, code 1234.5679.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

pub enum ShardStream {
    Plain(TcpStream),
    /// Boxed: the TLS state is large, and most connections are plain.
    Tls(Box<TlsStream<TcpStream>>),
}

impl ShardStream {
    /// Connects to the endpoint and, when its URL asks for TLS, negotiates it (SSLRequest, then
    /// the handshake and the certificate check of its `sslmode`).
    pub async fn open(ep: &Endpoint) -> Result<ShardStream, BackendError> {
        let io_err = |e: io::Error| BackendError::Connect {
            endpoint: ep.to_string(),
            source: e,
        };
        let mut tcp = TcpStream::connect((ep.host.as_str(), ep.port))
            .await
            .map_err(io_err)?;
        tcp.set_nodelay(true).map_err(io_err)?;
        let Some(tls) = &ep.tls else {
            return Ok(ShardStream::Plain(tcp));
        };
        tcp.write_all(&SSL_REQUEST).await.map_err(io_err)?;
        let tls_err = |message: String| BackendError::Tls {
            endpoint: ep.to_string(),
            message,
        };
        // The answer is one byte, and the server sends nothing after it before the handshake,
        // so no byte of what follows can be read along with it.
        match tcp.read_u8().await.map_err(io_err)? {
            b'S' => {}
            b'N' if !tls.mode().requires_tls() => return Ok(ShardStream::Plain(tcp)),
            b'N' => {
                return Err(tls_err(format!(
                    "the server does not support TLS, but the URL says sslmode={}",
                    tls.mode().as_str()
                )))
            }
            // A server too old for SSLRequest answers with an ErrorResponse.
            other => {
                return Err(tls_err(format!(
                    "the server answered the SSLRequest with {:?}",
                    char::from(other)
                )))
            }
        }
        let stream = tls
            .handshake(&ep.host, tcp)
            .await
            .map_err(|e| tls_err(handshake_failure(e, tls.mode())))?;
        Ok(ShardStream::Tls(Box::new(stream)))
    }

    /// What the stream has now, without waiting: `WouldBlock` when there is nothing.
    pub fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            ShardStream::Plain(tcp) => tcp.try_read_buf(buf),
            ShardStream::Tls(_) => {
                // A waker left registered by a Pending read is harmless: whoever waits on this
                // stream polls it again first, with its own.
                let mut cx = Context::from_waker(futures::task::noop_waker_ref());
                match tokio_util::io::poll_read_buf(Pin::new(self), &mut cx, buf) {
                    Poll::Ready(r) => r,
                    Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
                }
            }
        }
    }

    /// Writes what the stream takes now, without waiting (0 when it takes nothing).
    pub fn write_now(&mut self, data: &[u8]) -> io::Result<usize> {
        let written = match self {
            ShardStream::Plain(tcp) => tcp.try_write(data),
            ShardStream::Tls(tls) => {
                // As in try_read_buf: the caller polls before it waits.
                let mut cx = Context::from_waker(futures::task::noop_waker_ref());
                match Pin::new(&mut **tls).poll_write(&mut cx, data) {
                    Poll::Ready(r) => r,
                    Poll::Pending => Ok(0),
                }
            }
        };
        match written {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            other => other,
        }
    }

    /// Whether the server sent anything (or hung up) since the last read. For an idle pooled
    /// connection, which is owed nothing, either means it must not serve a client. Costs no
    /// system call while tokio has seen nothing arrive on the socket.
    pub fn spoke(&self) -> bool {
        let tcp = match self {
            ShardStream::Plain(tcp) => tcp,
            ShardStream::Tls(tls) => tls.get_ref().0,
        };
        let mut byte = [0u8; 1];
        !matches!(tcp.try_read(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Whether the stream is TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, ShardStream::Tls(_))
    }

    /// The server's certificate, when the stream is TLS.
    pub fn peer_certificate(&self) -> Option<&[u8]> {
        match self {
            ShardStream::Plain(_) => None,
            ShardStream::Tls(tls) => tls.get_ref().1.peer_certificates()?.first().map(|c| &**c),
        }
    }
}

/// Why a handshake failed, worded for the operator who set `sslmode`.
fn handshake_failure(e: io::Error, mode: SslMode) -> String {
    let reason = e.to_string();
    if reason.contains("invalid peer certificate") {
        format!(
            "the server's certificate failed the sslmode={} check: {reason}",
            mode.as_str()
        )
    } else {
        format!("TLS handshake failed: {reason}")
    }
}

impl AsyncRead for ShardStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ShardStream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            ShardStream::Tls(tls) => {
                if let Poll::Ready(Err(e)) = Pin::new(&mut **tls).poll_flush(cx) {
                    return Poll::Ready(Err(e));
                }
                Pin::new(&mut **tls).poll_read(cx, buf)
            }
        }
    }
}

impl AsyncWrite for ShardStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ShardStream::Plain(tcp) => Pin::new(tcp).poll_write(cx, data),
            ShardStream::Tls(tls) => Pin::new(&mut **tls).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ShardStream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            ShardStream::Tls(tls) => Pin::new(&mut **tls).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ShardStream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            ShardStream::Tls(tls) => Pin::new(&mut **tls).poll_shutdown(cx),
        }
    }
}

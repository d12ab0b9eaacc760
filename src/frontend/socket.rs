//! The session's sockets, read and written with tokio's readiness flags but without its
//! per-poll cost where that cost buys nothing.
//!
//! `poll_read` on a tokio socket charges the task's cooperative budget and, whenever the socket
//! is not ready, takes the readiness lock to store the task's waker, even when that same waker
//! is stored already. A session polls each socket it waits on after every wake-up, so that was
//! about a quarter of the proxy's user time per transaction. `ReadArm` (in the backend layer,
//! which reads the shards' connections the same way) remembers that the waker is registered and
//! until then checks readiness with one atomic load (`try_io`), and client writes use
//! `try_write`. The session loop keeps its own fairness budget in place of
//! tokio's (see `Session::poll_event`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, Interest};
use tokio::net::TcpStream;

use crate::backend::readiness::ReadArm;

/// The client's side of a session.
pub trait ClientSocket {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<usize>>;
    fn poll_write(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>>;
    /// Writes what the socket takes now, without waiting (0 when it takes nothing).
    fn write_now(&mut self, data: &[u8]) -> io::Result<usize>;
    /// A watch on the client hanging up, for work that does not read the socket meanwhile.
    fn hangup_watch(&self) -> Option<HangupWatch>;
}

/// Notices that the client closed its side of the connection, or that its socket failed,
/// without reading it: the session's general path does not read the client while it works
/// (what the client sends meanwhile waits in the socket for the loop), yet must not run a
/// statement to its end for a client that is gone.
///
/// A second descriptor of the client's socket, registered with tokio on its own: its
/// readiness is this watch's alone, so waiting on it disturbs neither the session's
/// [`ReadArm`] nor tokio's registration of the session's own descriptor. The peer's hang-up
/// (EPOLLRDHUP, EPOLLHUP) stays set in tokio's readiness once seen.
pub struct HangupWatch {
    stream: TcpStream,
}

impl HangupWatch {
    fn of(socket: SockRef<'_>) -> Option<HangupWatch> {
        let dup: std::net::TcpStream = socket.try_clone().ok()?.into();
        dup.set_nonblocking(true).ok()?;
        TcpStream::from_std(dup)
            .ok()
            .map(|stream| HangupWatch { stream })
    }

    /// Ready once the client has hung up.
    pub async fn hung_up(&self) {
        loop {
            match self.stream.ready(Interest::READABLE).await {
                Ok(ready) if !ready.is_read_closed() => {
                    // Bytes the client sent ahead, which the session reads later: forget this
                    // readiness and wait for the next event on the socket.
                    let _ = self.stream.try_io(Interest::READABLE, || {
                        Err::<(), _>(io::ErrorKind::WouldBlock.into())
                    });
                }
                _ => return,
            }
        }
    }
}

/// A plain TCP client: the cheap paths above. The stream is not split into halves, which would
/// share it behind an `Arc`: one more pointer to follow on every read and write.
pub struct PlainClient {
    stream: TcpStream,
    arm: ReadArm,
}

impl PlainClient {
    pub fn new(stream: TcpStream) -> PlainClient {
        PlainClient {
            stream,
            arm: ReadArm::default(),
        }
    }
}

impl ClientSocket for PlainClient {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<usize>> {
        self.arm.poll_read(&self.stream, cx, buf)
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, data)
    }

    fn write_now(&mut self, data: &[u8]) -> io::Result<usize> {
        write_now(&self.stream, data)
    }

    fn hangup_watch(&self) -> Option<HangupWatch> {
        HangupWatch::of(SockRef::from(&self.stream))
    }
}

/// Any other client stream (TLS): tokio's polls.
pub struct StreamClient<R, W> {
    reader: R,
    writer: W,
    /// The TCP socket under the stream, for [`HangupWatch`].
    tcp: Option<socket2::Socket>,
}

impl<R, W> StreamClient<R, W> {
    /// `tcp`: a descriptor of the socket under the stream, if it has one.
    pub fn new(reader: R, writer: W, tcp: Option<socket2::Socket>) -> Self {
        StreamClient {
            reader,
            writer,
            tcp,
        }
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> ClientSocket for StreamClient<R, W> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<usize>> {
        // TLS may hold back part of what a write took while the socket was full, and sends it
        // only when written or flushed again. The session polls the client's read whenever it
        // waits, whether or not it has more to write, so the rest goes out from here.
        if let Poll::Ready(Err(e)) = Pin::new(&mut self.writer).poll_flush(cx) {
            return Poll::Ready(Err(e));
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.reader), cx, buf)
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.writer).poll_write(cx, data)
    }

    fn write_now(&mut self, data: &[u8]) -> io::Result<usize> {
        // A waker registered by a Pending poll is harmless: the session polls again before it
        // waits.
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        match Pin::new(&mut self.writer).poll_write(&mut cx, data) {
            Poll::Ready(r) => r,
            Poll::Pending => Ok(0),
        }
    }

    fn hangup_watch(&self) -> Option<HangupWatch> {
        HangupWatch::of(SockRef::from(self.tcp.as_ref()?))
    }
}

/// Writes what a socket takes now (0 when it takes nothing).
pub fn write_now(stream: &TcpStream, data: &[u8]) -> io::Result<usize> {
    would_block_is_zero(stream.try_write(data))
}

fn would_block_is_zero(r: io::Result<usize>) -> io::Result<usize> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        other => other,
    }
}

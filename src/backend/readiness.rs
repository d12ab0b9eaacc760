//! Reading a socket with tokio's readiness flags but without its per-poll cost where that cost
//! buys nothing: the session polls each socket it waits on after every wake-up.
//!
//! `poll_read` on a tokio socket charges the task's cooperative budget and, whenever the socket
//! is not ready, takes the readiness lock to store the task's waker, even when that same waker
//! is stored already; that was about a quarter of the proxy's user time per transaction.
//! [`ReadArm`] remembers that the waker is registered and until then checks readiness with one
//! atomic load (`try_io`). Sessions read both their client's socket and their shards'
//! connections through it.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use socket2::SockRef;
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::stream::ShardStream;

/// Reads one TCP socket for one session, registering its waker only when it is not
/// registered already.
///
/// `armed` means: the last readiness poll returned `Pending`, so tokio holds the session's waker
/// for the socket's read direction, and no readiness has been seen since. Tokio sets the
/// readiness flag before it takes and wakes the waker, so while the flag is clear the waker is
/// still there; once the flag has been seen set, the waker may be gone and must be registered
/// again before waiting. This holds as long as one session polls the socket, which its
/// ownership of its client socket and of its held backend connection guarantees (a new backend
/// connection starts with a new `ReadArm`), and as long as tokio's cooperative budget never
/// refuses the poll (a refused poll is Pending without a registration): sessions run
/// unconstrained by it (`frontend::driver`, `server::Sessions`) and keep their own
/// (`Session::poll_event`).
#[derive(Debug, Default)]
pub struct ReadArm {
    armed: bool,
}

impl ReadArm {
    /// Reads what the socket has into `buf`'s spare capacity (the caller reserves it). Ready
    /// with 0 at end of stream.
    pub fn poll_read(
        &mut self,
        stream: &TcpStream,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<usize>> {
        loop {
            match read_ready(stream, buf) {
                Readiness::Read(n) => {
                    self.armed = false;
                    return Poll::Ready(Ok(n));
                }
                Readiness::Failed(e) if e.kind() == io::ErrorKind::Interrupted => {
                    self.armed = false;
                    continue;
                }
                Readiness::Failed(e) => return Poll::Ready(Err(e)),
                Readiness::WasReady => self.armed = false,
                Readiness::NotReady => {}
            }
            if self.armed {
                return Poll::Pending;
            }
            match stream.poll_read_ready(cx) {
                Poll::Ready(Ok(())) => continue,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.armed = true;
                    return Poll::Pending;
                }
            }
        }
    }
}

impl ReadArm {
    /// Reads a shard's connection: plain TCP the cheap way above, TLS through tokio-rustls.
    pub fn poll_read_shard(
        &mut self,
        stream: &mut ShardStream,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<usize>> {
        match stream {
            ShardStream::Plain(tcp) => self.poll_read(tcp, cx, buf),
            tls @ ShardStream::Tls(_) => tokio_util::io::poll_read_buf(Pin::new(tls), cx, buf),
        }
    }
}

enum Readiness {
    /// Bytes read (0: end of stream).
    Read(usize),
    /// The flag was set but the socket had nothing after all; the flag is clear now.
    WasReady,
    /// The flag was clear: nothing was tried.
    NotReady,
    Failed(io::Error),
}

/// One `recv` if the socket's readiness flag is set. A read that leaves room in the buffer has
/// drained the socket, so the flag is cleared right away (as tokio's own read does): the next
/// wait registers the waker instead of making a `recv` that would only say "would block".
fn read_ready(stream: &TcpStream, buf: &mut BytesMut) -> Readiness {
    let mut tried = false;
    let mut read = 0;
    let room = buf.capacity() - buf.len();
    let result = stream.try_io(Interest::READABLE, || {
        tried = true;
        let spare: &mut [MaybeUninit<u8>] = buf.spare_capacity_mut();
        read = SockRef::from(stream).recv(spare)?;
        if read > 0 && read < room {
            // Reported as "would block" only so that try_io clears the flag with the tick
            // of the event it saw, never one that arrived after the recv.
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(())
        }
    });
    match result {
        // Both kept errors are tokio's or ours, of the simple kind that owns no memory: not
        // dropping them saves a call per readiness check on the hot path.
        Err(e) if !tried => {
            std::mem::forget(e);
            return Readiness::NotReady;
        }
        Err(e) if read == 0 => {
            return match e.kind() {
                io::ErrorKind::WouldBlock => Readiness::WasReady,
                _ => Readiness::Failed(e),
            }
        }
        Err(e) => std::mem::forget(e),
        Ok(()) => {}
    }
    debug_assert!(read <= room, "recv reported more than the spare capacity");
    // SAFETY: recv initialised `read` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + read) };
    Readiness::Read(read)
}

//! The session as the executor's multi-shard statements use it ([`Host`]): its connections
//! joined to its block or batch, the reach of the client's cancel, and the client's output.

use super::{consume, Session, SessionError, HIGH_WATER};
use crate::backend::{BackendError, CancelKey};
use crate::executor::commit::Commit;
use crate::executor::gather;
use crate::executor::host::{Host, HostError, Shared};
use crate::executor::participants::Participants;
use crate::frontend::context::ServerCtx;
use crate::frontend::socket::ClientSocket;
use crate::model::ShardId;
use bytes::BytesMut;

/// The session, lent to a multi-shard statement; with the client's socket when the statement
/// streams its answer (without it, the answer gathers in the output buffer, which the session
/// loop writes).
pub(super) struct SessionHost<'a> {
    session: &'a mut Session,
    client: Option<&'a mut (dyn ClientSocket + Send)>,
}

impl HostError for SessionError {
    fn into_backend(self) -> Result<BackendError, SessionError> {
        match self {
            SessionError::Backend(e) => Ok(e),
            other => Err(other),
        }
    }
}

impl Host for SessionHost<'_> {
    type Error = SessionError;

    async fn join(&mut self, shards: &[ShardId]) -> Result<Vec<usize>, SessionError> {
        self.session.connections_for(shards).await
    }

    fn links(&mut self) -> &mut Participants {
        &mut self.session.links
    }

    fn commit(&mut self) -> Commit<'_> {
        self.session.commit()
    }

    fn cancel_reaches(&mut self, running: Vec<(ShardId, CancelKey)>) {
        self.session.cancel.slot.set_others(running);
    }

    fn span(&self) -> &tracing::Span {
        &self.session.span
    }

    fn links_and_sink(&mut self) -> (&mut Participants, impl gather::Sink + '_) {
        let sink = ClientSink {
            cout: &mut self.session.cout,
            // Reborrowed, the socket's trait object takes the sink's shorter lifetime.
            client: match &mut self.client {
                Some(client) => Some(&mut **client),
                None => None,
            },
            eager: !self.session.under_way.script,
        };
        (&mut self.session.links, sink)
    }
}

impl Session {
    /// The session lent to a multi-shard statement.
    pub(super) fn host<'a>(
        &'a mut self,
        client: Option<&'a mut (dyn ClientSocket + Send)>,
    ) -> SessionHost<'a> {
        SessionHost {
            session: self,
            client,
        }
    }
}

/// The server's parts a multi-shard statement uses.
pub(super) fn shared(ctx: &ServerCtx) -> Shared<'_> {
    Shared {
        config: &ctx.config,
        catalog: &ctx.catalog,
        pools: &ctx.pools,
        control: &ctx.control,
        coordinator: &ctx.coordinator,
        metrics: &ctx.metrics,
        failpoints: &ctx.failpoints,
    }
}

/// The client's output while the proxy streams a multi-shard answer into it: written to the
/// client whenever a high-water mark's worth has gathered, which bounds the memory a large
/// result takes.
pub(super) struct ClientSink<'a> {
    pub(super) cout: &'a mut BytesMut,
    /// None: the output gathers, for the session loop to write.
    pub(super) client: Option<&'a mut (dyn ClientSocket + Send)>,
    /// Also writes what the socket takes while the shards are awaited. Off while a query
    /// string's statements run: their answers are read frame by frame afterwards, from a
    /// buffer a partial write would leave starting mid-message.
    pub(super) eager: bool,
}

impl gather::Sink for ClientSink<'_> {
    fn out(&mut self) -> &mut BytesMut {
        self.cout
    }

    async fn written(&mut self) -> std::io::Result<()> {
        let Some(client) = self.client.as_deref_mut() else {
            return Ok(());
        };
        if self.cout.len() < HIGH_WATER {
            return Ok(());
        }
        while !self.cout.is_empty() {
            let n = std::future::poll_fn(|cx| client.poll_write(cx, self.cout)).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            consume(self.cout, n);
        }
        Ok(())
    }

    fn waiting(&mut self) -> std::io::Result<()> {
        if let Some(client) = self.client.as_deref_mut() {
            if self.eager && !self.cout.is_empty() {
                let n = client.write_now(self.cout)?;
                consume(self.cout, n);
            }
        }
        Ok(())
    }
}

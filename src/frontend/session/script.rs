//! The session's side of a query string whose statements go to different shards
//! ([`crate::executor::script`], which holds the string's transaction): each statement
//! dispatched as a query of its own, its answer captured without its ReadyForQuery.

use super::{consume, reserve_for_read, Session, SessionError, HIGH_WATER};
use crate::backend::readiness::ReadArm;
use crate::client_error::ClientError;
use crate::executor::script::{self, Heard, Running, ScriptRefusal, Statements};
use crate::frontend::socket::ClientSocket;
use crate::frontend::FrontendError;
use crate::protocol::{self, Frame, MessageBuilder, TxStatus};
use crate::sql::script::split;
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_postgres::error::SqlState;

/// The session lent to a query string's statements, with the client's socket their answers
/// are written to.
struct ScriptRunner<'a> {
    session: &'a mut Session,
    client: &'a mut (dyn ClientSocket + Send),
}

impl Statements for ScriptRunner<'_> {
    type Error = SessionError;

    fn run<'a>(&'a mut self, text: &'a str) -> Running<'a, SessionError> {
        Box::pin(self.session.statement(text, self.client))
    }

    fn quietly<'a>(&'a mut self, text: &'a str) -> Running<'a, SessionError> {
        Box::pin(async move {
            let heard = self.session.statement(text, self.client).await?;
            if heard == Heard::Done {
                self.session.cout.clear();
            }
            Ok(heard)
        })
    }

    fn refuse<'a>(&'a mut self, e: &'a ScriptRefusal) -> Running<'a, SessionError> {
        Box::pin(async move {
            self.session
                .refused(&e.sqlstate(), &e.client_message(), self.client)
                .await
        })
    }

    fn complete(&mut self, tag: &str) {
        protocol::command_complete(&mut self.session.cout, tag);
    }

    fn warn_no_transaction(&mut self) {
        notice_no_transaction(&mut self.session.cout);
    }

    fn status(&mut self) -> TxStatus {
        self.session.links.status()
    }
}

impl Session {
    /// Runs the statements of `sql` one by one, then answers ReadyForQuery.
    pub(super) async fn run_script(
        &mut self,
        sql: &[u8],
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        self.under_way.script = true;
        let ran = self.run_statements(sql, client).await;
        self.under_way.script = false;
        ran
    }

    async fn run_statements(
        &mut self,
        sql: &[u8],
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        let statements = std::str::from_utf8(sql).ok().and_then(split);
        let Some(statements) = statements else {
            // The plan read the text; if it cannot be cut now, nothing of it has run.
            let e = FrontendError::NotAcrossShards(
                "a query string shardwire cannot cut into its statements".into(),
            );
            let frame = query_frame("");
            self.refuse(&Frame::borrowed(&frame), &e.sqlstate(), &e.client_message());
            return Ok(());
        };
        // The answers to queries the client pipelined before this one go out whole, their
        // ReadyForQuery included: from here on the buffer holds this string's answers only.
        self.write_out(client).await?;
        let mut runner = ScriptRunner {
            session: self,
            client,
        };
        script::run(&mut runner, &statements).await?;
        let status = self.links.status();
        protocol::ready_for_query(&mut self.cout, status);
        self.release_parked_if_idle();
        Ok(())
    }

    /// A statement refused by the proxy inside the string: the block fails with it.
    async fn refused(
        &mut self,
        code: &SqlState,
        message: &str,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Heard, SessionError> {
        self.flush_client(client).await?;
        let frame = query_frame("");
        self.refuse_query(&Frame::borrowed(&frame), code, message)
            .await?;
        Ok(self.heard(false))
    }

    /// One statement of the string, run as a query of its own; its answer goes to the client
    /// without the ReadyForQuery.
    async fn statement(
        &mut self,
        text: &str,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Heard, SessionError> {
        // What the statement answers is all that is in the buffer afterwards, even if a
        // streamed answer is written out on the way.
        self.flush_client(client).await?;
        let frame = query_frame(text);
        Box::pin(self.on_client_frame(Frame::borrowed(&frame), client)).await?;
        let failed_on_the_way = self.await_answer(client).await?;
        Ok(self.heard(failed_on_the_way))
    }

    /// Reads the current connection's answers to the statement sent, writing them on to the
    /// client whenever a high-water mark's worth has gathered, as the session loop does;
    /// whether an error was among what went out.
    async fn await_answer(
        &mut self,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<bool, SessionError> {
        let mut failed = false;
        loop {
            let Some(link) = self.links.current.as_mut() else {
                return Ok(failed);
            };
            if !link.out.is_empty() {
                if let Err(e) = link.conn.conn.stream.write_all(&link.out).await {
                    return Err(self.backend_lost(e));
                }
                link.out.clear();
                continue;
            }
            if self.pipeline.is_empty() {
                break;
            }
            // Before the statement's ReadyForQuery, which empties the pipeline, has come.
            if self.cout.len() >= HIGH_WATER {
                failed |= self.flush_client(client).await?;
                continue;
            }
            let conn = &mut link.conn.conn;
            reserve_for_read(&mut conn.read_buf);
            let n = conn.stream.read_buf(&mut conn.read_buf).await;
            if n.map_err(|e| self.backend_lost(e))? == 0 {
                return Err(self.backend_lost(std::io::ErrorKind::UnexpectedEof.into()));
            }
            self.on_backend_data()?;
        }
        if let Some(link) = self.links.current.as_mut() {
            link.arm = ReadArm::default();
        }
        Ok(failed)
    }

    /// Writes everything the client is owed so far, without ReadyForQuery; whether an error
    /// was among it.
    async fn flush_client(
        &mut self,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<bool, SessionError> {
        let failed = without_ready_for_query(&mut self.cout);
        self.write_out(client).await?;
        Ok(failed)
    }

    /// Writes everything the client is owed so far, as it is.
    async fn write_out(
        &mut self,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        while !self.cout.is_empty() {
            let n = std::future::poll_fn(|cx| client.poll_write(cx, &self.cout))
                .await
                .map_err(SessionError::Client)?;
            if n == 0 {
                return Err(SessionError::Client(std::io::ErrorKind::WriteZero.into()));
            }
            consume(&mut self.cout, n);
        }
        self.batch.deferred_parse_len = 0;
        Ok(())
    }

    /// Whether the statement just run failed: by what it answered (its ReadyForQuery removed
    /// here), or by the block it failed — a streamed answer may have taken its error out.
    fn heard(&mut self, failed_on_the_way: bool) -> Heard {
        let failed = without_ready_for_query(&mut self.cout)
            || failed_on_the_way
            || self.links.status() == TxStatus::Failed;
        if failed {
            Heard::Failed
        } else {
            Heard::Done
        }
    }
}

/// A Query message of `text`.
fn query_frame(text: &str) -> BytesMut {
    let mut frame = BytesMut::new();
    protocol::query(&mut frame, text);
    frame
}

/// PostgreSQL's warning for COMMIT or ROLLBACK with no block open.
fn notice_no_transaction(out: &mut BytesMut) {
    let mut m = MessageBuilder::new(out, b'N');
    m.u8(b'S').cstr(b"WARNING");
    m.u8(b'V').cstr(b"WARNING");
    m.u8(b'C')
        .cstr(SqlState::NO_ACTIVE_SQL_TRANSACTION.code().as_bytes());
    m.u8(b'M').cstr(b"there is no transaction in progress");
    m.u8(0);
    m.finish();
}

/// Removes the ReadyForQuery messages from `out`, which holds whole messages; whether an
/// ErrorResponse is among them.
fn without_ready_for_query(out: &mut BytesMut) -> bool {
    let mut failed = false;
    let mut pos = 0;
    while let Ok(Some(len)) = protocol::complete_frame_len(&out[pos..]) {
        match out[pos] {
            b'Z' => {
                out.copy_within(pos + len.., pos);
                out.truncate(out.len() - len);
                continue;
            }
            b'E' => failed = true,
            _ => {}
        }
        pos += len;
    }
    // Whole messages only (no partial write left one cut at the front): else a ReadyForQuery
    // would be missed and reach the client in the middle of the string's answers.
    debug_assert_eq!(pos, out.len(), "the client's buffer starts mid-message");
    failed
}

//! A simple query whose statements go to different shards, run statement by statement as
//! PostgreSQL runs a query string: one implicit transaction unless the string's own BEGIN,
//! COMMIT or ROLLBACK say otherwise, the rest skipped after an error, one ReadyForQuery at the
//! end.
//!
//! Each statement goes through the general path as a query of its own — routed, gathered,
//! refused or answered by the proxy as it would be alone — and its answer reaches the client
//! without its ReadyForQuery. The implicit transaction is a block the proxy opens with a BEGIN
//! of its own before the first statement that is not transaction control, and commits (two-phase
//! when several shards wrote) after the last, or rolls back after an error: its answers never
//! reach the client, a failed commit's error does.

use super::{consume, reserve_for_read, Session, SessionError, HIGH_WATER};
use crate::backend::readiness::ReadArm;
use crate::client_error::ClientError;
use crate::frontend::socket::ClientSocket;
use crate::frontend::FrontendError;
use crate::protocol::{self, Frame, MessageBuilder, TxStatus};
use crate::sql::script::{self, Control};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_postgres::error::SqlState;

/// Where the string's transaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    /// None open: the next statement that is not transaction control opens the implicit one.
    Idle,
    /// The proxy's BEGIN opened it: committed after the last statement.
    Implicit,
    /// The client's own block, open when the query came or begun by it.
    Client,
}

/// What the client heard of one statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    Done,
    Failed,
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
        let statements = std::str::from_utf8(sql).ok().and_then(script::split);
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
        let mut block = match self.links.status() {
            TxStatus::Idle => Block::Idle,
            TxStatus::InBlock | TxStatus::Failed => Block::Client,
        };
        let mut failed = false;
        for statement in &statements {
            let heard = match (statement.control, block) {
                (Some(Control::TwoPhase), _) => self.two_phase_refused(client).await?,
                (None, Block::Idle) => match self.quietly("BEGIN", client).await? {
                    Heard::Done => {
                        block = Block::Implicit;
                        self.statement(statement.text, client).await?
                    }
                    Heard::Failed => Heard::Failed,
                },
                (Some(control), Block::Implicit) => {
                    let heard = self.control_in_implicit(control, statement.text, client);
                    let heard = heard.await?;
                    if matches!(control, Control::Begin { .. }) && heard == Heard::Done {
                        block = Block::Client;
                    } else if matches!(control, Control::Commit { .. } | Control::Rollback { .. }) {
                        block = self.block_after();
                    }
                    heard
                }
                (None, Block::Implicit | Block::Client) => {
                    self.statement(statement.text, client).await?
                }
                (Some(_), Block::Idle | Block::Client) => {
                    let heard = self.statement(statement.text, client).await?;
                    block = self.block_after();
                    heard
                }
            };
            if heard == Heard::Failed {
                failed = true;
                break;
            }
        }
        if block == Block::Implicit {
            if failed {
                self.quietly("ROLLBACK", client).await?;
            } else {
                // Only its error reaches the client.
                self.quietly("COMMIT", client).await?;
            }
        }
        let status = self.links.status();
        protocol::ready_for_query(&mut self.cout, status);
        self.release_parked_if_idle();
        Ok(())
    }

    /// The string's transaction after a statement that may have ended or begun one.
    fn block_after(&self) -> Block {
        match self.links.status() {
            TxStatus::Idle => Block::Idle,
            TxStatus::InBlock | TxStatus::Failed => Block::Client,
        }
    }

    /// Transaction control met inside the implicit transaction, as PostgreSQL treats it there:
    /// BEGIN makes it the client's block, COMMIT and ROLLBACK end it with a warning, the rest
    /// needs a block the client began.
    async fn control_in_implicit(
        &mut self,
        control: Control,
        text: &str,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Heard, SessionError> {
        match control {
            Control::Begin { modes: false } => {
                protocol::command_complete(&mut self.cout, "BEGIN");
                Ok(Heard::Done)
            }
            Control::Begin { modes: true } => {
                let e = FrontendError::NotAcrossShards(
                    "BEGIN with transaction modes after other statements of a query string \
                     whose statements go to several shards: put it first"
                        .into(),
                );
                self.refused(&e.sqlstate(), &e.client_message(), client)
                    .await
            }
            Control::Commit { chain: false } | Control::Rollback { chain: false } => {
                notice_no_transaction(&mut self.cout);
                self.statement(text, client).await
            }
            Control::Commit { chain: true } => {
                self.only_in_blocks("COMMIT AND CHAIN", client).await
            }
            Control::Rollback { chain: true } => {
                self.only_in_blocks("ROLLBACK AND CHAIN", client).await
            }
            Control::Savepoint(command) => self.only_in_blocks(command, client).await,
            Control::TwoPhase => self.two_phase_refused(client).await,
        }
    }

    /// PostgreSQL's refusal of `command` outside a block the client began.
    async fn only_in_blocks(
        &mut self,
        command: &str,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Heard, SessionError> {
        let message = format!("{command} can only be used in transaction blocks");
        self.refused(&SqlState::NO_ACTIVE_SQL_TRANSACTION, &message, client)
            .await
    }

    /// The two-phase commands prepare or finish one shard's transaction: not a string's.
    async fn two_phase_refused(
        &mut self,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Heard, SessionError> {
        let e = FrontendError::NotAcrossShards(
            "PREPARE TRANSACTION, COMMIT PREPARED and ROLLBACK PREPARED in a query string whose \
             statements go to several shards are not supported: send them as queries of their own"
                .into(),
        );
        self.refused(&e.sqlstate(), &e.client_message(), client)
            .await
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

    /// A statement of the proxy's own, its answer kept from the client unless it failed.
    async fn quietly(
        &mut self,
        text: &str,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Heard, SessionError> {
        let heard = self.statement(text, client).await?;
        if heard == Heard::Done {
            self.cout.clear();
        }
        Ok(heard)
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

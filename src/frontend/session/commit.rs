//! The client's COMMIT of a block that spans shards, and the end of a batch that is one
//! transaction over several: answered here, committed by [`crate::executor::commit`].

use super::{Session, SessionError};
use crate::client_error::ClientError;
use crate::executor::commit::{Commit, Ended};
use crate::executor::gather;
use crate::frontend::pipeline::Pending;
use crate::frontend::statements::ClientFrame;
use crate::frontend::FrontendError;
use crate::protocol::{self, Frame};
use crate::sql::classify::{first_keyword, keyword};
use bytes::BytesMut;

/// Whether a block-ending statement commits (COMMIT, END; not ROLLBACK or ABORT).
fn commits(sql: &[u8]) -> bool {
    const COMMIT: u128 = keyword(b"commit");
    const END: u128 = keyword(b"end");
    matches!(first_keyword(sql), COMMIT | END)
}

impl Session {
    /// Commits a block spanning shards for the client's COMMIT (a simple query, or the Bind of
    /// one): true when the proxy answered it, false when the block has one participant and the
    /// COMMIT goes to it as it is.
    pub(super) async fn commit_across_shards(
        &mut self,
        frame: &Frame<&[u8]>,
        sql: &[u8],
    ) -> Result<bool, SessionError> {
        let participants = self.links.iter().filter(|l| l.tx_status.in_block()).count();
        if !commits(sql) || participants < 2 {
            return Ok(false);
        }
        self.drain_current().await?;
        self.park_current();
        let ended = if crate::sql::classify::leading_words::<4>(sql)
            .iter()
            .any(|w| w.eq_ignore_ascii_case(b"chain"))
        {
            self.end_every_participant("ROLLBACK").await?;
            Err(FrontendError::ChainAcrossShards.error_frame())
        } else {
            self.commit_participants().await?
        };
        self.links.block.begin_sql = None;
        self.release_parked_if_idle();
        let mut out = BytesMut::new();
        match frame.tag {
            b'B' => {
                let portal = match ClientFrame::parse(frame)? {
                    ClientFrame::Bind { portal, .. } => Box::<[u8]>::from(portal),
                    _ => Box::default(),
                };
                match ended {
                    Ok(tag) => {
                        out.extend_from_slice(&protocol::empty_message(b'2'));
                        let completed = gather::Rows {
                            tag: Some(tag.into()),
                            ..Default::default()
                        };
                        self.portals.put_buffered(portal, completed);
                    }
                    Err(error) => {
                        out.extend_from_slice(&error);
                        self.batch.skip_until_sync = true;
                    }
                }
            }
            _ => {
                match ended {
                    Ok(tag) => protocol::command_complete(&mut out, tag),
                    Err(error) => out.extend_from_slice(&error),
                }
                let status = self.links.status();
                protocol::ready_for_query(&mut out, status);
            }
        }
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(true)
    }

    /// At the client's Sync after a batch that is one transaction over several shards
    /// (`atomic_batch`): every shard's part is held open in a block by the Sync, then they
    /// commit together, or roll back together when any statement of the batch failed. A
    /// commit that fails is the batch's error. True when the Sync is answered.
    pub(super) async fn end_atomic_batch(&mut self) -> Result<bool, SessionError> {
        if !std::mem::take(&mut self.links.block.atomic_batch) {
            return Ok(false);
        }
        // The answers still owed may hold the batch's failure.
        self.drain_current().await?;
        self.park_current();
        self.sync_parked_then(super::shard_switch::AtSync::Hold)
            .await?;
        if self.links.block.begin_sql.is_some() {
            // The client opened a block in the batch: what ran before its BEGIN is part of
            // the block, as on PostgreSQL, and the Sync is answered as in any block.
            return Ok(false);
        }
        if std::mem::take(&mut self.batch.skip_until_sync) {
            self.end_every_participant("ROLLBACK").await?;
        } else if let Err(error) = self.commit_participants().await? {
            self.cout.extend_from_slice(&error);
        }
        self.batch.fail_block_at_sync = None;
        self.drop_portals().await?;
        self.release_parked_if_idle();
        let status = self.links.status();
        protocol::ready_for_query(&mut self.cout, status);
        Ok(true)
    }

    /// The commit of the session's block over its parked connections.
    pub(super) fn commit(&mut self) -> Commit<'_> {
        Commit {
            links: &mut self.links,
            coordinator: &self.ctx.coordinator,
            control: &self.ctx.control,
            metrics: &self.ctx.metrics,
            failpoints: &self.ctx.failpoints,
            span: &self.span,
        }
    }

    /// Commits every parked participant of the block, atomically.
    pub(super) async fn commit_participants(&mut self) -> Result<Ended, SessionError> {
        Ok(self.commit().commit_participants().await?)
    }

    /// Ends every open participant's block with `sql` (ROLLBACK).
    pub(super) async fn end_every_participant(&mut self, sql: &str) -> Result<(), SessionError> {
        Ok(self.links.end_open_blocks(sql).await?)
    }
}

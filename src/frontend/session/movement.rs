//! The session's side of a sharding-key UPDATE whose rows may move between shards
//! ([`crate::movement::run`]): the statement's own block ended, the answer to the client.

use super::host::shared;
use super::{Session, SessionError};
use crate::executor::gather::{self, Combined};
use crate::frontend::pipeline::Pending;
use crate::movement::run::{self as moving, Ending, KeyUpdateJob};
use crate::protocol::{self, TxStatus};
use bytes::BytesMut;

impl Session {
    pub(super) async fn run_key_update(&mut self, job: KeyUpdateJob) -> Result<(), SessionError> {
        let implicit = self.links.status() == TxStatus::Idle;
        // A bound statement belongs to its batch, one transaction up to the client's Sync:
        // the move's own block stays open and ends with the batch's other work.
        let ends_here = implicit && job.bound.is_none();
        if implicit && !ends_here {
            self.links.block.atomic_batch = true;
        }
        let ctx = self.ctx.clone();
        let moved = moving::move_rows(&mut self.host(None), shared(&ctx), &job, implicit).await?;
        let answer = match moved {
            Ok((rows, Ending::Open)) if ends_here => match self.commit_participants().await? {
                Ok(_) => Ok(rows),
                Err(error) => Err((BytesMut::new(), error)),
            },
            Ok((rows, _)) => Ok(rows),
            Err(f) => {
                if ends_here {
                    self.end_every_participant("ROLLBACK").await?;
                } else if !implicit && !f.from_shard {
                    self.fail_block(&protocol::error_message(&f.error)).await?;
                }
                Err((f.notices, f.error))
            }
        };
        if ends_here {
            self.release_parked_if_idle();
        }
        let mut out = BytesMut::new();
        let simple = job.bound.is_none();
        match (job.bound, answer) {
            (None, Ok(rows)) => gather::write(&Combined::Rows(rows), &mut out),
            (Some((portal, _)), Ok(rows)) => {
                out.extend_from_slice(&rows.notices);
                out.extend_from_slice(&protocol::empty_message(b'2'));
                let rows = gather::Rows {
                    notices: BytesMut::new(),
                    ..rows
                };
                self.portals.put_buffered(portal, rows);
            }
            (bound, Err((notices, error))) => {
                out.extend_from_slice(&notices);
                out.extend_from_slice(&error);
                if bound.is_some() {
                    self.batch.skip_until_sync = true;
                }
            }
        }
        if simple {
            let status = self.links.status();
            protocol::ready_for_query(&mut out, status);
        }
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }
}

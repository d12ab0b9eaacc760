//! COPY of sharded tables, in the session: where a COPY goes, the COPY's state between the
//! client's messages, and those messages handed to COPY FROM's split
//! ([`crate::executor::copy::copy_in`]) or COPY TO's gathering
//! ([`crate::executor::copy::copy_out`]).

use super::dest::Dest;
use super::host::shared;
use super::{Session, SessionError};
use crate::catalog::{ShardId, Snapshot};
use crate::client_error::ClientError;
use crate::executor::copy::copy_in::{CopyIn, CopyJob};
use crate::executor::copy::copy_out;
use crate::frontend::socket::ClientSocket;
use crate::frontend::FrontendError;
use crate::protocol::{self, Frame, MessageBuilder, TxStatus};
use crate::router::plan::CopyPlan;
use crate::router::route::{self as routing, Params, Route};
use std::sync::Arc;

/// What the session is in the middle of, while the client's messages come to
/// [`Session::on_copy_frame`] first.
pub(super) enum CopyState {
    /// A Bind of the COPY was answered; its Execute starts it.
    Portal(CopyJob),
    /// The same, of a `COPY (SELECT …)` the general path answers.
    CombinedPortal(crate::executor::general::CombineJob),
    In(Box<CopyIn>),
    /// An extended-protocol COPY ended: its Sync gets ReadyForQuery with this status. After a
    /// failure the messages before that Sync are dropped, as PostgreSQL drops them.
    AwaitSync {
        status: TxStatus,
        failed: bool,
    },
}

impl Session {
    /// Where a COPY of a sharded or duplicated table goes.
    pub(super) fn copy_dest(
        &mut self,
        plan: &Arc<CopyPlan>,
        snapshot: &Snapshot,
        params: &Params<'_>,
        source: super::dest::Source<'_>,
    ) -> Dest {
        let mut shards = plan.shards.clone();
        if let Some(select) = &plan.select {
            match routing::route(snapshot, select, params) {
                Ok(r) => match r.route {
                    Route::Single(s) => return Dest::Shard(s),
                    Route::Multi(s) => shards = s,
                    Route::All => {}
                },
                Err(e) => return Dest::refuse(&e),
            }
            if let Some(combine) = &plan.combine {
                // Ordered, limited or aggregated over several shards: the general path.
                return super::combining::combining_dest(combine, source, ShardId(0), Vec::new());
            }
            if let Some(why) = &select.multi_shard_refusal {
                return Dest::refuse(&FrontendError::NotAcrossShards(why.clone()));
            }
            let m = &select.merge;
            if !m.order.is_empty() || m.bounds_rows() {
                // The general path could not plan it.
                return Dest::refuse(&FrontendError::NotAcrossShards(
                    "COPY (SELECT … ORDER BY / LIMIT / OFFSET) of these tables".into(),
                ));
            }
        }
        // COPY TO of a table reads a shard's partitioned table through the rewritten query,
        // even from one shard.
        let rewritten = !plan.from && plan.select.is_none();
        if let ([one], false) = (shards.as_slice(), rewritten) {
            return Dest::Shard(*one);
        }
        Dest::Copy(Box::new(CopyJob {
            plan: plan.clone(),
            shards,
            sql: plan.shard_sql.clone(),
        }))
    }

    /// Runs a COPY the client sent as a simple query (`tag` `Q`), or answers its Bind (`B`)
    /// and waits for its Execute.
    pub(super) async fn run_copy(
        &mut self,
        job: CopyJob,
        tag: u8,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        // Whatever the client is still owed comes first.
        self.drain_current().await?;
        if tag == b'B' {
            MessageBuilder::new(&mut self.cout, b'2').finish();
            self.copy = Some(Box::new(CopyState::Portal(job)));
            return Ok(());
        }
        self.start_copy(job, false, client).await
    }

    async fn start_copy(
        &mut self,
        job: CopyJob,
        extended: bool,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        if job.plan.from {
            self.start_copy_in(job, extended).await
        } else {
            let failed = copy_out::run(&mut self.host(Some(client)), &job).await?;
            self.end_copy(extended, failed);
            Ok(())
        }
    }

    /// The client's status after a COPY over parked connections, and the connections given
    /// back where nothing holds them; a failed block is answered from a shard that failed it.
    pub(super) fn end_copy(&mut self, extended: bool, failed: bool) {
        let status = TxStatus::combined(self.links.parked.iter().map(|p| p.tx_status));
        if extended {
            self.copy = Some(Box::new(CopyState::AwaitSync { status, failed }));
        } else {
            protocol::ready_for_query(&mut self.cout, status);
        }
        self.settle_after_shards();
    }

    /// COPY … FROM STDIN: opens the first shard's COPY, whose CopyInResponse answers the
    /// client; the client's data then comes to [`Session::on_copy_frame`].
    async fn start_copy_in(&mut self, job: CopyJob, extended: bool) -> Result<(), SessionError> {
        if self.links.current.is_some() {
            self.drain_current().await?;
            self.park_current();
        }
        let ctx = self.ctx.clone();
        match CopyIn::start(&mut self.host(None), shared(&ctx), job, extended).await? {
            Some(st) => self.copy = Some(Box::new(CopyState::In(st))),
            None => self.end_copy(extended, true),
        }
        Ok(())
    }

    /// A client message while a COPY is in progress. Returns false when the message is not
    /// the COPY's and takes the usual path.
    pub(super) async fn on_copy_frame(
        &mut self,
        frame: &Frame<&[u8]>,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<bool, SessionError> {
        let Some(state) = self.copy.take() else {
            return Ok(false);
        };
        let st = match *state {
            CopyState::In(st) => st,
            CopyState::Portal(job) => {
                return match frame.tag {
                    b'E' => self.start_copy(job, true, client).await.map(|()| true),
                    b'D' => {
                        // A COPY returns no rows.
                        MessageBuilder::new(&mut self.cout, b'n').finish();
                        self.copy = Some(Box::new(CopyState::Portal(job)));
                        Ok(true)
                    }
                    b'H' => {
                        self.copy = Some(Box::new(CopyState::Portal(job)));
                        Ok(true)
                    }
                    _ => Ok(false),
                };
            }
            CopyState::CombinedPortal(job) => {
                return match frame.tag {
                    b'E' => self.run_combined_copy(job, client).await.map(|()| true),
                    b'D' => {
                        MessageBuilder::new(&mut self.cout, b'n').finish();
                        self.copy = Some(Box::new(CopyState::CombinedPortal(job)));
                        Ok(true)
                    }
                    b'H' => {
                        self.copy = Some(Box::new(CopyState::CombinedPortal(job)));
                        Ok(true)
                    }
                    _ => Ok(false),
                };
            }
            CopyState::AwaitSync { status, failed } => {
                if frame.tag == b'S' {
                    // The COPY ended its shards' parts itself.
                    self.links.block.atomic_batch = false;
                    protocol::ready_for_query(&mut self.cout, status);
                    return Ok(true);
                }
                if failed {
                    self.copy = Some(Box::new(CopyState::AwaitSync { status, failed }));
                    return Ok(true);
                }
                return Ok(false);
            }
        };
        let extended = st.extended;
        let ctx = self.ctx.clone();
        let mut host = self.host(None);
        let going = match frame.tag {
            b'd' => st.data(&mut host, shared(&ctx), frame.body()).await?,
            b'c' => {
                let failed = st.done(&mut host, shared(&ctx)).await?;
                self.end_copy(extended, failed);
                return Ok(true);
            }
            b'f' => {
                let message = frame.body().split(|&c| c == 0).next().unwrap_or_default();
                let e = FrontendError::CopyFailed(String::from_utf8_lossy(message).into_owned());
                st.abort(&mut host, shared(&ctx), e.error_frame()).await?;
                None
            }
            // PostgreSQL ignores these during COPY FROM STDIN.
            b'H' | b'S' => Some(st),
            other => {
                let e = FrontendError::CopyUnexpectedMessage(other);
                st.abort(&mut host, shared(&ctx), e.error_frame()).await?;
                None
            }
        };
        match going {
            Some(st) => self.copy = Some(Box::new(CopyState::In(st))),
            None => self.end_copy(extended, true),
        }
        Ok(true)
    }
}

//! The session's side of a two-step INSERT … SELECT ([`crate::executor::insert_select`]) and
//! the answer of a statement the proxy composed.

use super::host::shared;
use super::{Session, SessionError};
use crate::executor::gather::{self, Combined};
use crate::executor::insert_select;
use crate::frontend::pipeline::Pending;
use crate::protocol;
use crate::router::plan::ShardedPlan;
use bytes::BytesMut;
use std::sync::Arc;

impl Session {
    pub(super) async fn run_insert_select(
        &mut self,
        plan: Arc<ShardedPlan>,
    ) -> Result<(), SessionError> {
        let ctx = self.ctx.clone();
        match insert_select::run(&mut self.host(None), shared(&ctx), &plan).await? {
            Some(combined) => self.answer(&combined),
            None => Ok(()),
        }
    }

    /// Answers the client's simple query with a combined result and ReadyForQuery.
    pub(super) fn answer(&mut self, combined: &Combined) -> Result<(), SessionError> {
        let mut out = BytesMut::new();
        gather::write(combined, &mut out);
        let status = self.links.status();
        protocol::ready_for_query(&mut out, status);
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }
}

//! Statements the proxy runs on several shards at once, or answers itself, and the portals
//! whose Describe and Execute it then answers from their combined results.

use super::dest::{Multi, MultiPortal};
use super::*;
use crate::executor::gather;

/// A multi-shard portal's result, answered by the proxy.
pub(super) struct Portal {
    pub(super) name: Box<[u8]>,
    rows: gather::Rows,
}

/// A simple-protocol reply the proxy composed, as a portal's result; its ErrorResponse if it
/// failed.
fn rows_of_reply(reply: &[u8]) -> Result<gather::Rows, bytes::Bytes> {
    let mut rows = gather::Rows::default();
    let mut rest = reply;
    while let Ok(Some(len)) = protocol::complete_frame_len(rest) {
        let frame = bytes::Bytes::copy_from_slice(&rest[..len]);
        match frame[0] {
            b'T' => rows.description = Some(frame),
            b'D' => rows.rows.push_back(frame),
            b'C' => {
                let body = &frame[5..];
                let tag = body.split(|&c| c == 0).next().unwrap_or(body);
                rows.tag = Some(String::from_utf8_lossy(tag).into_owned());
            }
            b'E' => return Err(frame),
            b'N' => rows.notices.extend_from_slice(&frame),
            _ => {}
        }
        rest = &rest[len..];
    }
    Ok(rows)
}

impl Session {
    /// Runs a statement the proxy answers itself for an extended-protocol Bind: its result
    /// becomes the portal the client's Describe and Execute read.
    pub(super) async fn run_local_portal(
        &mut self,
        portal: Box<[u8]>,
        sql: &[u8],
    ) -> Result<(), SessionError> {
        self.drain_current().await?;
        let Some(kind) = local_kind(sql) else {
            return Ok(());
        };
        let span = self.span.clone();
        let reply = Box::pin(self.answer_locally(sql, kind).instrument(span))
            .await
            .unwrap_or_default();
        match rows_of_reply(&reply) {
            Ok(rows) => {
                self.pipeline.push(
                    Pending::composed(protocol::empty_message(b'2')),
                    &mut self.cout,
                );
                self.portal = Some(Portal { name: portal, rows });
            }
            Err(error) => {
                self.pipeline.push(Pending::composed(error), &mut self.cout);
                self.skip_until_sync = true;
            }
        }
        Ok(())
    }

    /// Describes a statement the proxy answers itself: no parameters; an admin SHOW's columns,
    /// or NoData for DDL (which is not run to describe it).
    pub(super) async fn describe_local(&mut self, sql: &[u8]) -> Result<(), SessionError> {
        self.drain_current().await?;
        let mut out = BytesMut::new();
        MessageBuilder::new(&mut out, b't').i16(0).finish();
        let description = if local_kind(sql) == Some(LocalKind::Show) {
            let span = self.span.clone();
            let reply = Box::pin(self.answer_locally(sql, LocalKind::Show).instrument(span))
                .await
                .unwrap_or_default();
            rows_of_reply(&reply).ok().and_then(|r| r.description)
        } else {
            None
        };
        match description {
            Some(d) => out.extend_from_slice(&d),
            None => out.extend_from_slice(&protocol::empty_message(b'n')),
        }
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }

    /// Runs a simple query on several shards and answers the client with the combined result.
    pub(super) async fn run_multi(&mut self, multi: Multi) -> Result<(), SessionError> {
        // Every shard's connection, with the client's settings applied, parked.
        for &shard in &multi.shards {
            self.switch_to(shard).await?;
            self.drain_current().await?;
            self.park_current();
        }
        let session_status = if self.parked.iter().any(|p| p.tx_status == b'E') {
            b'E'
        } else if self.parked.iter().any(|p| p.tx_status == b'T') {
            b'T'
        } else {
            b'I'
        };
        let mut conns: Vec<&mut crate::backend::BackendConn> = Vec::new();
        let mut order: Vec<usize> = Vec::new();
        // In the order of `multi.shards`, which the SQL and the row assignment follow.
        self.announce_running();
        let mut parked: Vec<Option<&mut Parked>> = self.parked.iter_mut().map(Some).collect();
        for shard in &multi.shards {
            if let Some(i) = parked
                .iter()
                .position(|p| p.as_ref().is_some_and(|p| p.conn.shard == *shard))
            {
                let p = parked[i].take().map(|p| &mut *p.conn.conn);
                if let Some(c) = p {
                    conns.push(c);
                    order.push(i);
                }
            }
        }
        let origin = gather::Origin {
            shards: &multi.shards,
            control: &self.ctx.control,
        };
        let result = gather::run(
            &mut conns,
            &multi.sql,
            &multi.combine,
            &origin,
            session_status,
            &mut self.cout,
        )
        .await;
        drop(conns);
        self.cancel.slot.set_others(Vec::new());
        match result {
            Ok(statuses) => {
                for (i, status) in order.into_iter().zip(statuses) {
                    self.parked[i].tx_status = status;
                }
                // A failed block is answered from the shard that failed it.
                if let Some(i) = self.parked.iter().position(|p| p.tx_status == b'E') {
                    let p = self.parked.swap_remove(i);
                    self.tx_status = p.tx_status;
                    self.backend = Some(p.conn);
                    self.backend_arm = ReadArm::default();
                }
                self.release_parked_if_idle();
                Ok(())
            }
            Err(e) => {
                for p in &mut self.parked {
                    p.conn.conn.broken = true;
                }
                Err(e.into())
            }
        }
    }

    /// Executes a Bind on every shard of its route; the client's Describe and Execute of the
    /// portal are then answered from the combined result ([`Session::answer_portal`]).
    pub(super) async fn run_multi_portal(&mut self, m: MultiPortal) -> Result<(), SessionError> {
        let conns_of = self.connections_for(&m.shards).await?;
        let mut conns: Vec<&mut crate::backend::BackendConn> = Vec::with_capacity(conns_of.len());
        self.announce_running();
        let mut parked: Vec<Option<&mut Parked>> = self.parked.iter_mut().map(Some).collect();
        for &i in &conns_of {
            if let Some(p) = parked[i].take() {
                // The shard's part of the batch stays open until the client's Sync.
                p.unsynced = true;
                p.conn.conn.unnamed = None;
                conns.push(&mut *p.conn.conn);
            }
        }
        let messages = vec![m.messages; conns.len()];
        let origin = gather::Origin {
            shards: &m.shards,
            control: &self.ctx.control,
        };
        let result = gather::run_extended(&mut conns, &messages, &m.combine, &origin).await;
        drop(conns);
        self.cancel.slot.set_others(Vec::new());
        match result {
            Ok(gather::Combined::Rows(rows)) => {
                self.pipeline.push(
                    Pending::composed(protocol::empty_message(b'2')),
                    &mut self.cout,
                );
                self.portal = Some(Portal {
                    name: m.portal,
                    rows,
                });
                Ok(())
            }
            Ok(gather::Combined::Failed { mut notices, error }) => {
                notices.extend_from_slice(&error);
                self.pipeline
                    .push(Pending::composed(notices.freeze()), &mut self.cout);
                self.skip_until_sync = true;
                Ok(())
            }
            Err(e) => {
                for p in &mut self.parked {
                    p.conn.conn.broken = true;
                }
                Err(e.into())
            }
        }
    }

    /// Answers a Describe, Execute or Close of the multi-shard portal.
    pub(super) fn answer_portal(&mut self, frame: &Frame<&[u8]>) -> Result<(), SessionError> {
        let Some(portal) = self.portal.as_mut() else {
            return Ok(());
        };
        let mut out = BytesMut::new();
        match frame.tag {
            b'D' => match &portal.rows.description {
                Some(d) => out.extend_from_slice(d),
                None => out.extend_from_slice(&protocol::empty_message(b'n')),
            },
            b'E' => {
                let mut body = &frame.raw[5..];
                protocol::take_cstr(&mut body, "Execute")?;
                let max = protocol::take_i32(&mut body, "Execute")?;
                let rows = &mut portal.rows;
                out.extend_from_slice(&std::mem::take(&mut rows.notices));
                if rows.empty {
                    out.extend_from_slice(&protocol::empty_message(b'I'));
                } else {
                    let n = if max > 0 {
                        (max as usize).min(rows.rows.len())
                    } else {
                        rows.rows.len()
                    };
                    for r in rows.rows.drain(..n) {
                        out.extend_from_slice(&r);
                    }
                    if max > 0 && !rows.rows.is_empty() {
                        out.extend_from_slice(&protocol::empty_message(b's'));
                    } else {
                        let tag = rows.tag.clone().unwrap_or_default();
                        let tag = match tag.split_once(' ') {
                            // A SELECT's tag counts the rows of this Execute.
                            Some(("SELECT", _)) => format!("SELECT {n}"),
                            _ => tag,
                        };
                        protocol::command_complete(&mut out, &tag);
                    }
                }
            }
            _ => {
                self.portal = None;
                out.extend_from_slice(&protocol::empty_message(b'3'));
            }
        }
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }
}

//! Statements the proxy runs on several shards at once, or answers itself, and the portals
//! whose Describe and Execute it then answers from their combined results.

use super::host::shared;
use super::host::ClientSink;
use super::local::{local_kind, LocalKind};
use super::per_shard::MultiPortal;
use super::{Session, SessionError};
use crate::admin;
use crate::catalog::ShardId;
use crate::executor::fan_out::{self, Multi};
use crate::executor::gather::live::{LiveRows, Taken};
use crate::executor::gather::{self, Combine};
use crate::frontend::pipeline::Pending;
use crate::frontend::socket::ClientSocket;
use crate::frontend::statements::ClientFrame;
use crate::protocol::{self, Frame, MessageBuilder, TxStatus};
use crate::sql::signal::SignalCall;
use bytes::BytesMut;
use tracing::Instrument;

/// A multi-shard portal, answered by the proxy.
pub(super) struct Portal {
    pub(super) name: Box<[u8]>,
    rows: PortalRows,
}

enum PortalRows {
    /// Read in full: a statement the proxy answered itself, or rows an Execute with a row limit
    /// (or a message for another shard) made the proxy read.
    Buffered(gather::Rows),
    /// Still on the shards, each read up to the portal's description: the client's Execute
    /// streams them.
    OnShards {
        shards: Vec<ShardId>,
        combine: Combine,
        description: Option<(bytes::Bytes, usize)>,
    },
    /// Still on the shards, merged as far as row-limited Executes read them, inside a block
    /// (where a portal outlives the client's Sync; the proxy answers those Syncs itself while
    /// the shards' Executes still run, `sync_owed`).
    Live {
        shards: Vec<ShardId>,
        rows: Box<LiveRows>,
        sync_owed: bool,
    },
}

impl Portal {
    /// Whether the portal's rows are still on its shards' connections, which then can take no
    /// other statement until they are read.
    fn on_shards(&self) -> bool {
        matches!(
            self.rows,
            PortalRows::OnShards { .. } | PortalRows::Live { .. }
        )
    }

    /// Whether an Execute may pass the rows on as they arrive: a split INSERT's RETURNING rows
    /// go out in VALUES order, which needs every shard's first, and the copies of a duplicated
    /// table answer as one.
    fn streams(&self) -> bool {
        matches!(
            &self.rows,
            PortalRows::OnShards { combine: Combine::Union { rows, .. }, .. } if rows.is_empty()
        )
    }
}

/// The session's multi-shard portals, by name. At most one has its rows still on its shards:
/// any message that needs those connections has the proxy read them first.
#[derive(Default)]
pub(super) struct Portals(Vec<Portal>);

impl Portals {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn has(&self, name: &[u8]) -> bool {
        self.0.iter().any(|p| *p.name == *name)
    }

    /// The portal whose rows are still on its shards.
    pub(super) fn on_shards(&self) -> Option<&[u8]> {
        self.0.iter().find(|p| p.on_shards()).map(|p| &*p.name)
    }

    /// Forgets a portal whose rows the proxy holds (a new Bind of its name replaces it).
    pub(super) fn forget(&mut self, name: &[u8]) {
        self.0.retain(|p| *p.name != *name || p.on_shards());
    }

    /// Forgets every portal (their transaction ended); none may have rows on its shards.
    pub(super) fn clear(&mut self) {
        debug_assert!(
            self.on_shards().is_none(),
            "a portal's rows left on its shards"
        );
        self.0.clear();
    }

    /// Keeps rows the proxy composed itself as portal `name`.
    pub(super) fn put_buffered(&mut self, name: Box<[u8]>, rows: gather::Rows) {
        self.put(Portal {
            name,
            rows: PortalRows::Buffered(rows),
        });
    }

    fn put(&mut self, portal: Portal) {
        self.0.retain(|p| p.name != portal.name);
        self.0.push(portal);
    }

    fn take(&mut self, name: &[u8]) -> Option<Portal> {
        let i = self.0.iter().position(|p| *p.name == *name)?;
        Some(self.0.swap_remove(i))
    }

    fn get_mut(&mut self, name: &[u8]) -> Option<&mut Portal> {
        self.0.iter_mut().find(|p| *p.name == *name)
    }

    /// Makes portal `name` one whose rows are merged as row-limited Executes read them, if
    /// its rows are a union of its shards' (merged in order) still unread; whether it is one.
    pub(super) fn make_live(&mut self, name: &[u8]) -> bool {
        let Some(portal) = self.get_mut(name) else {
            return false;
        };
        if matches!(portal.rows, PortalRows::Live { .. }) {
            return true;
        }
        if !portal.streams() {
            return false;
        }
        let rows = std::mem::replace(&mut portal.rows, PortalRows::Buffered(Default::default()));
        let PortalRows::OnShards {
            shards,
            combine: Combine::Union { merge, .. },
            description,
        } = rows
        else {
            portal.rows = rows;
            return false;
        };
        let live = LiveRows::new(merge, description, shards.len());
        portal.rows = PortalRows::Live {
            shards,
            rows: Box::new(live),
            sync_owed: false,
        };
        true
    }

    /// A live portal's shards, its Sync now owed to them (the proxy answers the client's).
    pub(super) fn owe_sync(&mut self, name: &[u8]) -> Option<Vec<ShardId>> {
        match &mut self.get_mut(name)?.rows {
            PortalRows::Live {
                shards, sync_owed, ..
            } => {
                *sync_owed = true;
                Some(shards.clone())
            }
            _ => None,
        }
    }
}

/// A simple-protocol reply the proxy composed, as a portal's result; its ErrorResponse if it
/// failed.
pub(super) fn rows_of_reply(reply: &[u8]) -> Result<gather::Rows, bytes::Bytes> {
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
        bound_signal: Option<SignalCall>,
    ) -> Result<(), SessionError> {
        self.drain_current().await?;
        let reply = match bound_signal {
            Some(call) => self.answer_signal_call(call),
            None => {
                let Some(kind) = local_kind(sql) else {
                    return Ok(());
                };
                let span = self.span.clone();
                Box::pin(self.answer_locally(sql, kind).instrument(span)).await
            }
        }
        .unwrap_or_default();
        match rows_of_reply(&reply) {
            Ok(rows) => {
                self.pipeline.push(
                    Pending::composed(protocol::empty_message(b'2')),
                    &mut self.cout,
                );
                self.portals.put(Portal {
                    name: portal,
                    rows: PortalRows::Buffered(rows),
                });
            }
            Err(error) => {
                self.pipeline.push(Pending::composed(error), &mut self.cout);
                self.batch.skip_until_sync = true;
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
        let description = match local_kind(sql) {
            Some(LocalKind::Show) => {
                let span = self.span.clone();
                let reply = Box::pin(self.answer_locally(sql, LocalKind::Show).instrument(span))
                    .await
                    .unwrap_or_default();
                rows_of_reply(&reply).ok().and_then(|r| r.description)
            }
            // Described without signalling anyone.
            Some(LocalKind::Signal) => self
                .proxy_signal(sql)
                .map(|(call, _)| super::signal::description(&call.result_name)),
            // Described from its columns: describing must not move or read anything.
            Some(LocalKind::Growth) => admin::parse_growth(sql)
                .map(|cmd| {
                    admin::answer(&cmd, &self.ctx.catalog, &self.ctx.pools, &self.ctx.config)
                })
                .filter(|(rs, _)| !rs.columns.is_empty())
                .and_then(|(rs, tag)| {
                    let mut encoded = BytesMut::new();
                    rs.encode(&tag, &mut encoded);
                    rows_of_reply(&encoded).ok().and_then(|r| r.description)
                }),
            Some(LocalKind::Ddl) | None => None,
        };
        match description {
            Some(d) => out.extend_from_slice(&d),
            None => out.extend_from_slice(&protocol::empty_message(b'n')),
        }
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }

    /// Runs a simple query on several shards and answers the client with the combined result,
    /// streamed as the rows arrive where the answer is a union of the shards' rows.
    pub(super) async fn run_multi(
        &mut self,
        multi: Multi,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        let ctx = self.ctx.clone();
        let status = fan_out::run(&mut self.host(Some(client)), shared(&ctx), &multi).await?;
        self.batch.deferred_parse_len = 0;
        protocol::ready_for_query(&mut self.cout, status);
        self.settle_after_shards();
        Ok(())
    }

    /// The outcome of work on the parked connections at `order`: a lost shard breaks every
    /// connection of the statement (their answers are out of step now), a lost client ends the
    /// session.
    fn after_multi<T>(
        &mut self,
        order: &[usize],
        result: Result<T, gather::StreamError>,
    ) -> Result<T, SessionError> {
        match result {
            Ok(t) => Ok(t),
            Err(e) => {
                for &i in order {
                    self.links.parked[i].conn.conn.broken = true;
                }
                Err(match e {
                    gather::StreamError::Backend(e) => e.into(),
                    gather::StreamError::Client(e) => SessionError::Client(e),
                })
            }
        }
    }

    /// Executes a Bind on every shard of its route and reads each shard's answers up to the
    /// portal's description; the client's Describe is answered from it, its Execute streams the
    /// rows ([`Session::answer_portal`]).
    pub(super) async fn run_multi_portal(&mut self, m: MultiPortal) -> Result<(), SessionError> {
        let order = self.connections_for(&m.shards).await?;
        if self.batch.skip_until_sync {
            // An earlier statement of the batch failed on a shard left for this one.
            return Ok(());
        }
        // A write over several shards outside a block is one transaction, committed at the
        // client's Sync.
        if self.links.status() == TxStatus::Idle && fan_out::writes(&m.combine) {
            self.links.block.atomic_batch = true;
        }
        self.announce_running();
        let messages = m.messages;
        for &i in &order {
            // The shard's part of the batch stays open until the client's Sync.
            self.links.parked[i].unsynced = true;
            self.links.parked[i].batch_sent = true;
        }
        let mut conns = self.links.parked.conns_at(&order);
        let result = gather::describe_portal(&mut conns, &messages).await;
        drop(conns);
        self.cancel.slot.set_others(Vec::new());
        let described = self.after_multi(&order, result.map_err(gather::StreamError::Backend))?;
        let mut reply = described.notices;
        match described.error {
            None => {
                reply.extend_from_slice(&protocol::empty_message(b'2'));
                self.portals.put(Portal {
                    name: m.portal,
                    rows: PortalRows::OnShards {
                        shards: m.shards,
                        combine: m.combine,
                        description: described.description,
                    },
                });
            }
            Some(error) => {
                reply.extend_from_slice(&error);
                self.batch.skip_until_sync = true;
            }
        }
        self.pipeline
            .push(Pending::composed(reply.freeze()), &mut self.cout);
        Ok(())
    }

    /// Reads the rows of a portal still on its shards into the proxy, so those connections can
    /// take other work (a message for another statement came first, or an Execute with a row
    /// limit will read the rows a few at a time).
    pub(super) async fn buffer_portal(&mut self) -> Result<(), SessionError> {
        let Some(name) = self.portals.on_shards().map(<[u8]>::to_vec) else {
            return Ok(());
        };
        let Some(portal) = self.portals.take(&name) else {
            return Ok(());
        };
        let (shards, combine, description) = match portal.rows {
            PortalRows::OnShards {
                shards,
                combine,
                description,
            } => (shards, combine, description),
            PortalRows::Live {
                shards,
                mut rows,
                sync_owed,
            } => {
                let mut buffered = gather::Rows {
                    description: rows.description(),
                    tag: Some("SELECT 0".into()),
                    ..Default::default()
                };
                let taken = self
                    .take_live(
                        &shards,
                        &mut rows,
                        None,
                        &mut buffered.notices,
                        &mut |row| buffered.rows.push_back(row),
                    )
                    .await?;
                self.settle_live(&shards, sync_owed).await?;
                match taken {
                    Taken::Failed(error) => {
                        let mut reply = std::mem::take(&mut buffered.notices);
                        reply.extend_from_slice(&error);
                        self.pipeline
                            .push(Pending::composed(reply.freeze()), &mut self.cout);
                        self.batch.skip_until_sync = true;
                    }
                    Taken::Finished | Taken::Suspended => self.portals.put(Portal {
                        name: portal.name,
                        rows: PortalRows::Buffered(buffered),
                    }),
                }
                return Ok(());
            }
            PortalRows::Buffered(_) => return Ok(()),
        };
        let order = self.links.parked.positions(&shards);
        let origin = gather::Origin {
            shards: &shards,
            control: &self.ctx.control,
        };
        let mut conns = self.links.parked.conns_at(&order);
        let result = gather::finish_portal(&mut conns, &combine, &origin, description).await;
        drop(conns);
        let combined = self.after_multi(&order, result.map_err(gather::StreamError::Backend))?;
        match combined {
            gather::Combined::Rows(rows) => self.portals.put(Portal {
                name: portal.name,
                rows: PortalRows::Buffered(rows),
            }),
            gather::Combined::Failed { mut notices, error } => {
                // The client hears the failure at the next message it sent, as from a shard.
                notices.extend_from_slice(&error);
                self.pipeline
                    .push(Pending::composed(notices.freeze()), &mut self.cout);
                self.batch.skip_until_sync = true;
            }
        }
        Ok(())
    }

    /// Answers a Describe, Execute or Close of a multi-shard portal.
    pub(super) async fn answer_portal(
        &mut self,
        frame: &Frame<&[u8]>,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        let name: Box<[u8]> = match ClientFrame::parse(frame)? {
            ClientFrame::Describe { name, .. } | ClientFrame::Close { name, .. } => name.into(),
            ClientFrame::Execute => protocol::take_cstr(&mut &frame.raw[5..], "Execute")?.into(),
            _ => return Ok(()),
        };
        let mut out = BytesMut::new();
        match frame.tag {
            b'D' => {
                let description = match self.portals.get_mut(&name).map(|p| &p.rows) {
                    Some(PortalRows::OnShards {
                        combine,
                        description: Some((d, _)),
                        ..
                    }) => Some(gather::client_description(d, combine)),
                    Some(PortalRows::Buffered(rows)) => rows.description.clone(),
                    Some(PortalRows::Live { rows, .. }) => rows.description(),
                    _ => None,
                };
                match description {
                    Some(d) => out.extend_from_slice(&d),
                    None => out.extend_from_slice(&protocol::empty_message(b'n')),
                }
            }
            b'E' => {
                let mut body = &frame.raw[5..];
                protocol::take_cstr(&mut body, "Execute")?;
                let max = protocol::take_i32(&mut body, "Execute")?;
                if self.portals.get_mut(&name).is_some_and(|p| p.on_shards()) {
                    if max <= 0 && self.portals.get_mut(&name).is_some_and(|p| p.streams()) {
                        return self.stream_portal(&name, client).await;
                    }
                    // In a block the portal outlives the batch: its rows are read as the
                    // client's Executes ask for them.
                    if self.links.status() == TxStatus::InBlock && self.portals.make_live(&name) {
                        return self.execute_live(&name, max, client).await;
                    }
                    self.buffer_portal().await?;
                }
                let Some(Portal {
                    rows: PortalRows::Buffered(rows),
                    ..
                }) = self.portals.get_mut(&name)
                else {
                    return Ok(());
                };
                execute_buffered(rows, max, &mut out);
            }
            _ => {
                self.drop_portal(&name).await?;
                out.extend_from_slice(&protocol::empty_message(b'3'));
            }
        }
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }

    /// An Execute without a row limit of a portal still on its shards: the rows go to the
    /// client as they arrive; the portal is then spent.
    async fn stream_portal(
        &mut self,
        name: &[u8],
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        let Some(Portal {
            name,
            rows:
                PortalRows::OnShards {
                    shards,
                    combine,
                    description,
                },
        }) = self.portals.take(name)
        else {
            return Ok(());
        };
        let Combine::Union { kind, merge, .. } = &combine else {
            return Ok(());
        };
        // Every answer owed before this one has been written: the rows go straight out.
        self.drain_current().await?;
        let order = self.links.parked.positions(&shards);
        let origin = gather::Origin {
            shards: &shards,
            control: &self.ctx.control,
        };
        let spec = gather::Spec {
            kind: *kind,
            merge,
            describe: false,
            description,
        };
        let mut conns = self.links.parked.conns_at(&order);
        let mut sink = ClientSink {
            cout: &mut self.cout,
            client: Some(client),
            eager: !self.under_way.script,
        };
        let result = gather::stream_portal(&mut conns, &spec, &origin, &mut sink).await;
        drop(conns);
        self.batch.deferred_parse_len = 0;
        let streamed = self.after_multi(&order, result)?;
        if streamed.failed {
            self.batch.skip_until_sync = true;
        } else {
            // Executed again, a spent portal returns no more rows.
            self.portals.put(Portal {
                name,
                rows: PortalRows::Buffered(gather::Rows {
                    tag: Some(spent_tag(&streamed.tag)),
                    ..Default::default()
                }),
            });
        }
        Ok(())
    }

    /// Closes a portal; rows still on its shards are read and dropped.
    pub(super) async fn drop_portal(&mut self, name: &[u8]) -> Result<(), SessionError> {
        let Some(portal) = self.portals.take(name) else {
            return Ok(());
        };
        let shards = match portal.rows {
            PortalRows::OnShards { shards, .. } => shards,
            PortalRows::Live {
                shards,
                mut rows,
                sync_owed,
            } => {
                let order = self.links.parked.positions(&shards);
                let mut conns = self.links.parked.conns_at(&order);
                let skipped = rows.skip_rest(&mut conns).await;
                drop(conns);
                self.after_multi(&order, skipped.map_err(gather::StreamError::Backend))?;
                return self.settle_live(&shards, sync_owed).await;
            }
            PortalRows::Buffered(_) => return Ok(()),
        };
        let order = self.links.parked.positions(&shards);
        let mut conns = self.links.parked.conns_at(&order);
        let mut result = Ok(());
        for conn in conns.iter_mut() {
            result = gather::skip_to_end(conn).await;
            if result.is_err() {
                break;
            }
        }
        drop(conns);
        self.after_multi(&order, result.map_err(gather::StreamError::Backend))
    }
}

impl Session {
    /// An Execute of a live portal: up to `max` rows (all for 0), written to the client as the
    /// merge passes them, then PortalSuspended, or the completion once every row is out.
    async fn execute_live(
        &mut self,
        name: &[u8],
        max: i32,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        let Some(Portal {
            name,
            rows:
                PortalRows::Live {
                    shards,
                    mut rows,
                    sync_owed,
                },
        }) = self.portals.take(name)
        else {
            return Ok(());
        };
        // Every answer owed before this one has been written: the rows go straight out.
        self.drain_current().await?;
        let mut sent = 0u64;
        let taken = loop {
            let want = match u64::try_from(max) {
                Ok(max) if max > 0 => max - sent,
                _ => LIVE_CHUNK,
            };
            let mut out = BytesMut::new();
            let mut notices = BytesMut::new();
            let mut taken = 0u64;
            let step = self
                .take_live(&shards, &mut rows, Some(want), &mut notices, &mut |row| {
                    taken += 1;
                    out.extend_from_slice(&row)
                })
                .await?;
            sent += taken;
            self.cout.extend_from_slice(&notices);
            self.cout.extend_from_slice(&out);
            let mut sink = ClientSink {
                cout: &mut self.cout,
                client: Some(&mut *client),
                eager: !self.under_way.script,
            };
            gather::Sink::written(&mut sink)
                .await
                .map_err(SessionError::Client)?;
            match step {
                Taken::Suspended if max <= 0 => continue,
                other => break other,
            }
        };
        match taken {
            Taken::Suspended => {
                self.cout.extend_from_slice(&protocol::empty_message(b's'));
                self.portals.put(Portal {
                    name,
                    rows: PortalRows::Live {
                        shards,
                        rows,
                        sync_owed,
                    },
                });
            }
            Taken::Finished => {
                protocol::command_complete(&mut self.cout, &format!("SELECT {sent}"));
                self.settle_live(&shards, sync_owed).await?;
                // Executed again, a spent portal returns no more rows.
                self.portals.put(Portal {
                    name,
                    rows: PortalRows::Buffered(gather::Rows {
                        tag: Some("SELECT 0".into()),
                        ..Default::default()
                    }),
                });
            }
            Taken::Failed(error) => {
                self.cout.extend_from_slice(&error);
                self.settle_live(&shards, sync_owed).await?;
                self.batch.skip_until_sync = true;
            }
        }
        self.batch.deferred_parse_len = 0;
        Ok(())
    }

    /// Up to `n` rows of a live portal (`None`: all), from its shards' parked connections.
    async fn take_live(
        &mut self,
        shards: &[ShardId],
        rows: &mut LiveRows,
        n: Option<u64>,
        notices: &mut BytesMut,
        emit: &mut (dyn FnMut(bytes::Bytes) + Send),
    ) -> Result<Taken, SessionError> {
        let order = self.links.parked.positions(shards);
        let origin = gather::Origin {
            shards,
            control: &self.ctx.control,
        };
        let mut conns = self.links.parked.conns_at(&order);
        let mut taken = 0;
        let result = rows
            .take(&mut conns, &origin, n, &mut taken, notices, emit)
            .await;
        drop(conns);
        self.after_multi(&order, result.map_err(gather::StreamError::Backend))
    }

    /// Once a live portal's Executes have ended on its shards: the Syncs the proxy answered
    /// for them reach them now, so their batch ends as the client's did.
    async fn settle_live(
        &mut self,
        shards: &[ShardId],
        sync_owed: bool,
    ) -> Result<(), SessionError> {
        if sync_owed {
            self.sync_parked_only(shards).await?;
        }
        Ok(())
    }
}

/// Rows an Execute without a row limit of a live portal passes on between writes.
const LIVE_CHUNK: u64 = 10_000;

/// A spent portal's tag: its command's, counting no rows.
fn spent_tag(tag: &str) -> String {
    match tag.split(' ').next() {
        Some("INSERT") => "INSERT 0 0".into(),
        Some(verb) if !verb.is_empty() => format!("{verb} 0"),
        _ => "SELECT 0".into(),
    }
}

/// An Execute of a buffered portal: up to `max` rows (all for 0), then PortalSuspended, or the
/// command's completion once every row is out.
fn execute_buffered(rows: &mut gather::Rows, max: i32, out: &mut BytesMut) {
    out.extend_from_slice(&std::mem::take(&mut rows.notices));
    if rows.empty {
        out.extend_from_slice(&protocol::empty_message(b'I'));
        return;
    }
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
        protocol::command_complete(out, &tag);
    }
}

//! The backend connections one client session holds, one per shard at most: the current one,
//! which the session's loop reads and writes, and the parked ones a transaction block or an
//! extended-protocol batch still holds on other shards. The multi-shard paths borrow the parked
//! connections of the shards they run on and write back each shard's transaction status.

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;

use super::gather::{run_batches_each, values, Replies};
use crate::backend::readiness::ReadArm;
use crate::backend::{BackendConn, BackendError, CancelKey, Pooled, Pools};
use crate::model::ShardId;
use crate::protocol::{self, TxStatus};

/// The connections a session holds. A field of the session, not behind a pointer: the hot loop
/// reaches the current connection's socket, buffers and status at fixed offsets, with no look-up
/// or pointer to follow per frame, and switching shards moves one struct each way.
#[derive(Default)]
pub struct Participants {
    /// The connection the session talks to now; those it holds on other shards are `parked`.
    pub current: Option<ShardLink>,
    /// Connections on other shards that a transaction block or batch still holds.
    pub parked: ParkedLinks,
    /// The output buffer of the last link given back, for the next one, so that a checkout
    /// allocates no buffer.
    pub spare_out: BytesMut,
    /// The session did something that binds it to its connections (SET of a session-only
    /// setting, LISTEN, a temporary table, …): none goes back to its pool until it ends.
    pub pinned: bool,
    /// The transaction block the connections are in, as shards joining it must repeat it.
    pub block: Block,
}

/// What the session's open transaction block (or atomic batch) is, beyond each connection's
/// status: what a shard joining it replays, and what decides how it may commit.
#[derive(Default)]
pub struct Block {
    /// The statement that opened the transaction block, replayed on shards that join it.
    pub begin_sql: Option<String>,
    /// The block's savepoints, oldest first, replayed after `begin_sql` on shards that join.
    pub savepoints: Vec<String>,
    /// Every participant of the open block already waits for locks at most `lock_timeout_ms`.
    pub waits_bounded: bool,
    /// The current extended-protocol batch, outside a transaction block, wrote on several
    /// shards (a multi-shard write, a row move) or ran statements on more than one: on
    /// PostgreSQL a batch is one transaction up to its Sync, so every shard's part turns into
    /// a block before the Sync reaches it, and the parts commit together (or roll back
    /// together, if the batch failed).
    pub atomic_batch: bool,
    /// The open block did something PostgreSQL cannot PREPARE (LISTEN, a temporary table, …):
    /// it may commit on one shard only.
    pub unpreparable: bool,
}

impl Participants {
    pub fn current_shard(&self) -> Option<ShardId> {
        self.current.as_ref().map(ShardLink::shard)
    }

    /// The current connection's transaction status; without one, the session is in none (a
    /// connection in a block is parked, never dropped).
    pub fn current_status(&self) -> TxStatus {
        self.current
            .as_ref()
            .map_or(TxStatus::Idle, |link| link.tx_status)
    }

    /// The transaction status the client sees: failed if any shard's part of the block failed,
    /// in a block if any shard is.
    pub fn status(&self) -> TxStatus {
        TxStatus::combined(self.iter().map(|l| l.tx_status))
    }

    /// Whether the session's connection on `shard`, current or parked, is in a block.
    pub fn in_block_on(&self, shard: ShardId) -> bool {
        self.iter()
            .any(|l| l.shard() == shard && l.tx_status.in_block())
    }

    /// Every connection the session holds.
    pub fn iter(&self) -> impl Iterator<Item = &ShardLink> {
        self.current.iter().chain(self.parked.iter())
    }

    /// Gives the current connection back to its pool, keeping its (empty) output buffer for the
    /// next checkout.
    pub fn release_current(&mut self, pools: &Pools) {
        if let Some(mut link) = self.current.take() {
            if self.spare_out.capacity() == 0 {
                self.spare_out = std::mem::take(&mut link.out);
            }
            link.release(pools, true);
        }
    }

    /// Gives back the parked connections no block or batch holds.
    pub fn release_idle_parked(&mut self, pools: &Pools) {
        for link in self.parked.take_where(ShardLink::idle) {
            link.release(pools, true);
        }
    }

    /// Opens a block on the parked connections at `at`, for a statement that must commit on
    /// all of them or none; `bound_waits` (SET LOCAL lock_timeout, or nothing) keeps a lock
    /// wait across shards from becoming a deadlock no server can see.
    pub async fn begin_on(&mut self, at: &[usize], bound_waits: &str) -> Result<(), BackendError> {
        let begin = if at.len() > 1 && !bound_waits.is_empty() {
            self.block.waits_bounded = true;
            format!("BEGIN; {bound_waits}")
        } else {
            "BEGIN".into()
        };
        self.parked.ask(at, &begin).await?;
        Ok(())
    }

    /// Ends every open parked block with `sql` (ROLLBACK).
    pub async fn end_open_blocks(&mut self, sql: &str) -> Result<(), BackendError> {
        let open = self.parked.open_blocks();
        self.parked.ask(&open, sql).await?;
        Ok(())
    }
}

/// One backend connection the session holds on a shard. At most one per shard: a session's
/// work on a shard is in one transaction block or batch there.
pub struct ShardLink {
    pub conn: Pooled,
    /// The read side of the connection's socket, for this session's task.
    pub arm: ReadArm,
    /// What the session has for the connection and has not written yet. Kept with the
    /// connection, so that bytes meant for one shard can never reach another whichever link is
    /// current.
    pub out: BytesMut,
    /// Transaction status from the connection's last ReadyForQuery.
    pub tx_status: TxStatus,
    /// An extended-protocol message went to the connection and its Sync has not yet (or the
    /// session holds a Parse that will).
    pub unsynced: bool,
    /// Of those, one the backend has received: it is in the middle of a batch.
    pub batch_sent: bool,
    /// The proxy saw its own statement change rows in the connection's open transaction, so
    /// its commit need not ask whether it wrote. (Left over from an earlier transaction it only
    /// makes a reader prepare, which PostgreSQL allows.)
    pub wrote: bool,
}

impl ShardLink {
    pub fn new(conn: Pooled, out: BytesMut) -> ShardLink {
        ShardLink {
            conn,
            arm: ReadArm::default(),
            out,
            tx_status: TxStatus::Idle,
            unsynced: false,
            batch_sent: false,
            wrote: false,
        }
    }

    pub fn shard(&self) -> ShardId {
        self.conn.shard
    }

    /// Neither in a transaction block nor in a batch before its Sync.
    pub fn idle(&self) -> bool {
        self.tx_status == TxStatus::Idle && !self.unsynced
    }

    /// Gives the connection back to its pool, to be closed there unless `clean`.
    pub fn release(mut self, pools: &Pools, clean: bool) {
        if !clean {
            self.conn.conn.broken = true;
        }
        pools.shard(self.conn.shard).release(self.conn);
    }
}

/// What one connection answered to a statement of the proxy's own.
pub struct Answer {
    /// The first column of the first row, as text.
    pub value: Option<Vec<u8>>,
    /// The connection's ErrorResponse, as the client would get it.
    pub error: Option<Bytes>,
}

/// The links on shards other than the current one, keyed by shard.
///
/// A Vec searched by shard rather than a hash map: a session spans few shards (a handful, at
/// most the cluster's), so a linear look-up over a few links beats hashing, and positions
/// stay valid for the multi-shard paths that address several links at once, as long as none is
/// added or taken meanwhile.
#[derive(Default)]
pub struct ParkedLinks {
    links: Vec<ShardLink>,
}

impl ParkedLinks {
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    pub fn len(&self) -> usize {
        self.links.len()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, ShardLink> {
        self.links.iter()
    }

    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, ShardLink> {
        self.links.iter_mut()
    }

    pub fn position(&self, shard: ShardId) -> Option<usize> {
        self.links.iter().position(|l| l.shard() == shard)
    }

    pub fn get_mut(&mut self, shard: ShardId) -> Option<&mut ShardLink> {
        self.links.iter_mut().find(|l| l.shard() == shard)
    }

    /// The positions of the links on `shards`, in that order (shards without one left out).
    pub fn positions(&self, shards: &[ShardId]) -> Vec<usize> {
        shards.iter().filter_map(|&s| self.position(s)).collect()
    }

    /// Keeps a link that is not the current one. The session never holds two on one shard: a
    /// link is taken out of the map before it becomes current.
    pub fn put(&mut self, link: ShardLink) {
        debug_assert!(self.position(link.shard()).is_none());
        self.links.push(link);
    }

    /// Takes the link at `i` out of the map; the last one takes its position.
    pub fn take_at(&mut self, i: usize) -> ShardLink {
        self.links.swap_remove(i)
    }

    pub fn take(&mut self, shard: ShardId) -> Option<ShardLink> {
        self.position(shard).map(|i| self.take_at(i))
    }

    /// Takes out the links `take` picks.
    pub fn take_where(&mut self, mut take: impl FnMut(&ShardLink) -> bool) -> Vec<ShardLink> {
        let mut taken = Vec::new();
        let mut i = 0;
        while i < self.links.len() {
            if take(&self.links[i]) {
                taken.push(self.links.swap_remove(i));
            } else {
                i += 1;
            }
        }
        taken
    }

    pub fn drain(&mut self) -> std::vec::Drain<'_, ShardLink> {
        self.links.drain(..)
    }

    /// The connections of the links at `order`'s positions, in that order, borrowed at once.
    pub fn conns_at(&mut self, order: &[usize]) -> Vec<&mut BackendConn> {
        let mut slots: Vec<Option<&mut ShardLink>> = self.links.iter_mut().map(Some).collect();
        order
            .iter()
            .filter_map(|&i| slots.get_mut(i).and_then(Option::take))
            .map(|l| &mut *l.conn.conn)
            .collect()
    }

    /// Writes back the transaction status each of the links at `order`'s positions reported.
    pub fn set_statuses(&mut self, order: &[usize], statuses: &[TxStatus]) {
        for (&i, &status) in order.iter().zip(statuses) {
            self.links[i].tx_status = status;
        }
    }

    /// Marks the connections of the links at `order`'s positions broken, to be closed when they
    /// go back: a statement on them failed half-way.
    pub fn mark_broken(&mut self, order: &[usize]) {
        for &i in order {
            self.links[i].conn.conn.broken = true;
        }
    }

    /// The positions of the links in a block.
    pub fn open_blocks(&self) -> Vec<usize> {
        (0..self.links.len())
            .filter(|&i| self.links[i].tx_status.in_block())
            .collect()
    }

    /// The cancel keys of every link, for a CancelRequest while a statement runs on them.
    pub fn cancel_keys(&self) -> Vec<(ShardId, CancelKey)> {
        self.links
            .iter()
            .map(|p| (p.conn.shard, p.conn.conn.cancel))
            .collect()
    }

    /// Sends `sql` to the links at `at` at once, then reads each answer up to its
    /// ReadyForQuery, noting its transaction status. A lost connection fails the whole call.
    pub async fn ask(&mut self, at: &[usize], sql: &str) -> Result<Vec<Answer>, BackendError> {
        self.ask_with(at, &|_| sql.to_owned()).await
    }

    /// [`ParkedLinks::ask`], each shard sent the statement `sql_of` gives for it.
    pub async fn ask_with(
        &mut self,
        at: &[usize],
        sql_of: &(dyn Fn(ShardId) -> String + Sync),
    ) -> Result<Vec<Answer>, BackendError> {
        self.ask_each_with(at, sql_of).await.into_iter().collect()
    }

    /// [`ParkedLinks::ask`], each connection on its own: a lost one is marked broken and its
    /// error returned in its place, while the others are still asked and read.
    pub async fn ask_each(&mut self, at: &[usize], sql: &str) -> Vec<Result<Answer, BackendError>> {
        self.ask_each_with(at, &|_| sql.to_owned()).await
    }

    /// [`ParkedLinks::ask_each`], each shard sent the statement `sql_of` gives for it.
    pub async fn ask_each_with(
        &mut self,
        at: &[usize],
        sql_of: &(dyn Fn(ShardId) -> String + Sync),
    ) -> Vec<Result<Answer, BackendError>> {
        let shards: Vec<ShardId> = at.iter().map(|&i| self.links[i].shard()).collect();
        let mut conns = self.conns_at(at);
        let mut sent = Vec::with_capacity(conns.len());
        for (conn, &shard) in conns.iter_mut().zip(&shards) {
            let mut query = BytesMut::new();
            protocol::query(&mut query, &sql_of(shard));
            // A simple query drops the backend's unnamed statement.
            conn.unnamed = None;
            sent.push(conn.stream.write_all(&query).await);
        }
        let mut answers = Vec::with_capacity(conns.len());
        for (conn, sent) in conns.iter_mut().zip(sent) {
            answers.push(match sent {
                Ok(()) => read_answer(conn).await,
                Err(e) => {
                    conn.broken = true;
                    Err(e.into())
                }
            });
        }
        drop(conns);
        at.iter()
            .zip(answers)
            .map(|(&i, answer)| {
                answer.map(|(answer, status)| {
                    self.links[i].tx_status = status;
                    answer
                })
            })
            .collect()
    }

    /// Sends the links at `at` their `messages` (extended-protocol statements ending with one
    /// Sync) all at once, then reads each one's replies up to its ReadyForQuery, writing back
    /// its transaction status. On a failure every one of them is marked broken: where each
    /// stream stands is unknown.
    pub async fn exchange(
        &mut self,
        at: &[usize],
        messages: &[BytesMut],
    ) -> Result<Vec<Replies>, BackendError> {
        let mut conns = self.conns_at(at);
        let result = run_batches_each(&mut conns, messages).await;
        drop(conns);
        match result {
            Ok(replies) => {
                for (&i, r) in at.iter().zip(&replies) {
                    self.links[i].tx_status = r.status;
                }
                Ok(replies)
            }
            Err(e) => {
                self.mark_broken(at);
                Err(e)
            }
        }
    }
}

/// Reads a connection's answer to a simple query of the proxy's own, up to its ReadyForQuery.
async fn read_answer(conn: &mut BackendConn) -> Result<(Answer, TxStatus), BackendError> {
    let mut answer = Answer {
        value: None,
        error: None,
    };
    loop {
        let f = conn.read_frame().await?;
        match f.tag {
            b'D' if answer.value.is_none() => {
                answer.value = values(&f.raw)
                    .first()
                    .copied()
                    .flatten()
                    .map(<[u8]>::to_vec);
            }
            b'E' => {
                answer.error.get_or_insert(f.raw);
            }
            b'S' => conn.note_parameter_status(f.body()),
            b'Z' => return Ok((answer, TxStatus::of_ready(f.body()))),
            _ => {}
        }
    }
}

impl std::ops::Index<usize> for ParkedLinks {
    type Output = ShardLink;

    fn index(&self, i: usize) -> &ShardLink {
        &self.links[i]
    }
}

impl std::ops::IndexMut<usize> for ParkedLinks {
    fn index_mut(&mut self, i: usize) -> &mut ShardLink {
        &mut self.links[i]
    }
}

/// The SET LOCAL that ends a lock wait of a block spanning shards, where a wait may be part of a
/// deadlock no shard can see (`[transactions] lock_timeout_ms`; nothing for 0). Set for the
/// transaction only: the session's own setting is back after it.
pub fn bound_lock_waits(config: &crate::config::Config) -> String {
    match config.transactions.lock_timeout_ms {
        0 => String::new(),
        ms => format!("SET LOCAL lock_timeout = '{ms}ms'"),
    }
}

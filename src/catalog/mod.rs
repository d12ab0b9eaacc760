//! The shard catalog: which tables exist, how they are sharded, and which shard holds each
//! chunk. It lives in schema `shardwire_catalog` of the catalog database (`store`), shared by
//! every proxy; each proxy keeps an immutable [`Snapshot`] in memory, replaced whole when the
//! catalog changes (its own writes at once, other proxies' within a second via the watcher).

mod holds;
pub mod keys;
mod load;
pub mod model;
mod moves;
mod schema;
mod snapshot;
mod splits;
mod store;
pub mod view;
mod view_store;
mod watch;

use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

pub use model::{
    GeneratedKey, NewPartition, NewTable, Partition, PartitionSet, Shard, Table, Tablespace,
    TablespaceSet,
};
// These live in the leaf `model`; re-exported because files being edited concurrently (the
// frontend, the router's planner, admin) still name them through the catalog.
pub use crate::model::{
    BoundValue, Chunk, ChunkId, KeyColumn, MoveId, MoveState, PartitionBound, RowMovement, ShardId,
    ShardingMethod, TableId, TableKind, TableState, TablespaceSetId,
};
pub use holds::CutoverHold;
pub use moves::{MoveOwner, MoveRecord};
pub use snapshot::Snapshot;
pub use splits::{SplitRecord, SplitState};
pub use store::{release_abandoned_updates, UpdateHolder, NOTIFY_CHANNEL};
pub use view::{NewView, View, ViewEntry};

use crate::config::{Config, Endpoint};

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(
        "cannot connect to the catalog database {endpoint}: {}",
        crate::client_error::with_causes(source)
    )]
    Connect {
        endpoint: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("catalog database: {}", crate::client_error::with_causes(.0))]
    Query(#[from] tokio_postgres::Error),
    #[error("the catalog is inconsistent: {0}")]
    Corrupt(String),
    #[error(
        "the catalog places {used_by} on shard \"{shard}\", which this proxy's configuration \
         does not list: add it to [[shards]]"
    )]
    ShardNotConfigured { shard: String, used_by: String },
    #[error("shard {0} is not in the configuration")]
    UnknownShard(ShardId),
    #[error("table {schema}.{name} already exists")]
    TableExists { schema: String, name: String },
    #[error("table {0} is not in the catalog")]
    NoSuchTable(TableId),
    #[error("tablespace set \"{0}\" already exists")]
    TablespaceSetExists(String),
    #[error("tablespace set \"{0}\" does not exist")]
    NoSuchTablespaceSet(String),
    #[error("tablespace set {0} was dropped meanwhile")]
    TablespaceSetGone(TablespaceSetId),
    #[error(
        "tablespace \"{0}\" does not exist: create it with CREATE TABLESPACE {0} ON SHARD \
         <shard>, or declare it in [[tablespaces]]"
    )]
    NoSuchTablespace(String),
    #[error("tablespace \"{0}\" already exists")]
    TablespaceExists(String),
    #[error(
        "cannot drop tablespace \"{name}\": partitions of tables use it ({}); drop them first",
        tables.join(", ")
    )]
    TablespaceInUse { name: String, tables: Vec<String> },
    #[error(
        "cannot drop tablespace set \"{name}\": tables use it ({}); drop them first",
        tables.join(", ")
    )]
    TablespaceSetInUse { name: String, tables: Vec<String> },
    #[error(
        "cannot drop table {table} before the tables of its family that reference it ({}); \
         drop them first",
        children.join(", ")
    )]
    HasChildren {
        table: String,
        children: Vec<String>,
    },
    #[error("table {table} is {from} and cannot become {to}")]
    InvalidTransition {
        table: String,
        from: TableState,
        to: TableState,
    },
    #[error("invalid catalog entry: {0}")]
    InvalidEntry(String),
    #[error(
        "chunk {chunk} of table {table} is already moving: wait for it (SHOW MOVES), or CANCEL \
         MOVE it"
    )]
    MoveInProgress { table: TableId, chunk: ChunkId },
    #[error(
        "move {0}: the cutover's hold lapsed before the chunk was handed over; nothing was \
         changed"
    )]
    HoldLapsed(MoveId),
    #[error("chunk {chunk} of table {table} cannot change now: {why}")]
    ChunkBusy {
        table: TableId,
        chunk: ChunkId,
        why: &'static str,
    },
}

impl CatalogError {
    pub fn sqlstate(&self) -> SqlState {
        match self {
            CatalogError::Connect { .. } => SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
            CatalogError::Query(e) => e.code().cloned().unwrap_or(SqlState::CONNECTION_FAILURE),
            CatalogError::Corrupt(_) => SqlState::DATA_CORRUPTED,
            CatalogError::ShardNotConfigured { .. } => SqlState::CONFIG_FILE_ERROR,
            CatalogError::UnknownShard(_)
            | CatalogError::NoSuchTablespaceSet(_)
            | CatalogError::TablespaceSetGone(_)
            | CatalogError::NoSuchTablespace(_) => SqlState::UNDEFINED_OBJECT,
            CatalogError::TableExists { .. } => SqlState::DUPLICATE_TABLE,
            CatalogError::NoSuchTable(_) => SqlState::UNDEFINED_TABLE,
            CatalogError::TablespaceSetExists(_) | CatalogError::TablespaceExists(_) => {
                SqlState::DUPLICATE_OBJECT
            }
            CatalogError::TablespaceSetInUse { .. }
            | CatalogError::TablespaceInUse { .. }
            | CatalogError::HasChildren { .. } => SqlState::DEPENDENT_OBJECTS_STILL_EXIST,
            CatalogError::InvalidTransition { .. } => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            CatalogError::InvalidEntry(_) => SqlState::INVALID_TABLE_DEFINITION,
            CatalogError::MoveInProgress { .. } | CatalogError::ChunkBusy { .. } => {
                SqlState::OBJECT_IN_USE
            }
            CatalogError::HoldLapsed(_) => SqlState::LOCK_NOT_AVAILABLE,
        }
    }
}

/// The catalog as one proxy sees it: the current snapshot, and the writes that change it.
pub struct Catalog {
    endpoint: Endpoint,
    connect_timeout: Duration,
    /// The configured shards; `ShardId` is the position.
    shards: Vec<Shard>,
    shard_names: Vec<String>,
    /// For loads and writes; reconnected when it was lost. Writes are serialized per proxy,
    /// which DDL can afford.
    client: Mutex<Option<Client>>,
    current: RwLock<Arc<Snapshot>>,
    /// Whether the current snapshot records any table: read on every statement, so that a
    /// proxy without sharded tables routes nothing and takes no lock.
    has_tables: std::sync::atomic::AtomicBool,
    /// The current snapshot's version, so a session can tell its copy is current without a lock.
    version: std::sync::atomic::AtomicI64,
    /// Woken whenever a newer snapshot becomes current.
    reloaded: tokio::sync::Notify,
}

impl Catalog {
    /// Connects to the catalog database, creates or migrates `shardwire_catalog`, records the
    /// configuration's shards, tablespace sets and tablespaces, and loads the first snapshot.
    pub async fn open(config: &Config) -> Result<Arc<Catalog>, CatalogError> {
        let shards: Vec<Shard> = (0u32..)
            .zip(&config.shards)
            .map(|(i, s)| Shard {
                id: ShardId(i),
                name: s.name.clone(),
            })
            .collect();
        let catalog = Catalog {
            endpoint: config.catalog_endpoint(),
            connect_timeout: Duration::from_millis(config.pool.connect_timeout_ms),
            shard_names: shards.iter().map(|s| s.name.clone()).collect(),
            shards,
            client: Mutex::new(None),
            current: RwLock::new(Arc::default()),
            has_tables: Default::default(),
            version: Default::default(),
            reloaded: Default::default(),
        };
        schema::migrate_and_sync(&mut *catalog.client().await?, config).await?;
        let snapshot = catalog.reload().await?;
        tracing::info!(
            endpoint = %catalog.endpoint,
            version = snapshot.version(),
            tables = snapshot.tables().len(),
            "catalog loaded"
        );
        Ok(Arc::new(catalog))
    }

    /// The current snapshot; cheap, and never blocks on the catalog database.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether the current snapshot records any table (a relaxed read: a statement racing a
    /// table's creation may see either answer, as it may see either snapshot).
    pub fn has_tables(&self) -> bool {
        self.has_tables.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The current snapshot's version (a relaxed read, like [`Catalog::has_tables`]).
    pub fn version(&self) -> i64 {
        self.version.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `held`, made the current snapshot unless it is: no lock and no clone in the common case.
    pub fn refresh_snapshot<'a>(&self, held: &'a mut Option<Arc<Snapshot>>) -> &'a Arc<Snapshot> {
        let current = matches!(held, Some(s) if s.version() == self.version());
        if !current {
            *held = Some(self.snapshot());
        }
        held.as_ref().expect("refreshed above")
    }

    /// Reads the catalog again and makes it current (unless a newer snapshot already is).
    pub async fn reload(&self) -> Result<Arc<Snapshot>, CatalogError> {
        let loaded = Arc::new(load::load(&mut *self.client().await?, &self.shards).await?);
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        // Two reloads may finish out of order; never go back to an older version.
        if loaded.version() >= current.version() {
            self.has_tables.store(
                !loaded.tables().is_empty(),
                std::sync::atomic::Ordering::Relaxed,
            );
            self.version
                .store(loaded.version(), std::sync::atomic::Ordering::Relaxed);
            *current = loaded;
            self.reloaded.notify_waiters();
        }
        Ok(current.clone())
    }

    /// Woken whenever a newer snapshot becomes current (register with `notified()` before
    /// looking at the snapshot, so a reload between the two is not missed).
    pub fn reloaded(&self) -> &tokio::sync::Notify {
        &self.reloaded
    }

    /// Starts the task that keeps the snapshot current with other proxies' writes: it listens
    /// on [`NOTIFY_CHANNEL`] and also compares `catalog_version` every 500 ms (a notification
    /// is lost while its connection is down). It runs until `shutdown` completes.
    pub fn spawn_watcher(
        self: &Arc<Self>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> JoinHandle<()> {
        tokio::spawn(watch::run(self.clone(), shutdown))
    }

    /// Records a table in state CREATING, with its chunks, partition sets and partitions.
    pub async fn create_table(&self, table: &NewTable) -> Result<TableId, CatalogError> {
        let id = store::create_table(&mut *self.client().await?, table, &self.shard_names).await?;
        self.refresh().await;
        Ok(id)
    }

    /// Moves a table along CREATING → ACTIVE → DROPPING (or CREATING → DROPPING), or from
    /// UPDATING back to ACTIVE.
    pub async fn set_state(&self, id: TableId, state: TableState) -> Result<(), CatalogError> {
        store::set_state(&mut *self.client().await?, id, state, None).await?;
        self.refresh().await;
        Ok(())
    }

    /// Marks an ACTIVE table UPDATING while `holder` runs an ALTER TABLE or CREATE INDEX on it.
    pub async fn begin_update(
        &self,
        id: TableId,
        holder: &UpdateHolder,
    ) -> Result<(), CatalogError> {
        store::set_state(
            &mut *self.client().await?,
            id,
            TableState::Updating,
            Some(holder),
        )
        .await?;
        self.refresh().await;
        Ok(())
    }

    pub async fn set_ttl(
        &self,
        id: TableId,
        ttl: Option<crate::model::Ttl>,
    ) -> Result<(), CatalogError> {
        store::set_ttl(&mut *self.client().await?, id, ttl).await?;
        self.refresh().await;
        Ok(())
    }

    pub async fn set_row_movement(
        &self,
        id: TableId,
        movement: RowMovement,
    ) -> Result<(), CatalogError> {
        store::set_row_movement(&mut *self.client().await?, id, movement).await?;
        self.refresh().await;
        Ok(())
    }

    /// Records a view in state CREATING; its id.
    pub async fn create_view(&self, view: &NewView) -> Result<TableId, CatalogError> {
        let id = view_store::create_view(&mut *self.client().await?, view).await?;
        self.refresh().await;
        Ok(id)
    }

    /// Makes a view's entry say what the shards now have, ACTIVE.
    pub async fn finish_view(&self, id: TableId, view: &NewView) -> Result<(), CatalogError> {
        view_store::finish_view(&mut *self.client().await?, id, view).await?;
        self.refresh().await;
        Ok(())
    }

    /// Sets views' state (CREATING while replaced, DROPPING while dropped).
    pub async fn set_view_state(
        &self,
        views: &[TableId],
        state: TableState,
    ) -> Result<(), CatalogError> {
        view_store::set_view_state(&mut *self.client().await?, views, state).await?;
        self.refresh().await;
        Ok(())
    }

    /// Removes views' entries.
    pub async fn delete_views(&self, views: &[TableId]) -> Result<(), CatalogError> {
        view_store::delete_views(&mut *self.client().await?, views).await?;
        self.refresh().await;
        Ok(())
    }

    /// Removes a table entry with its chunks and partitions; refused while it has children.
    pub async fn delete_table(&self, id: TableId) -> Result<(), CatalogError> {
        store::delete_table(&mut *self.client().await?, id).await?;
        self.refresh().await;
        Ok(())
    }

    /// Creates a tablespace set over `shards` (in that order); no shards means every shard.
    pub async fn create_tablespace_set(
        &self,
        name: &str,
        shards: &[ShardId],
    ) -> Result<TablespaceSetId, CatalogError> {
        let names = if shards.is_empty() {
            self.shard_names.clone()
        } else {
            store::shard_names(shards, &self.shard_names)?
        };
        let id = store::create_tablespace_set(&mut *self.client().await?, name, &names).await?;
        self.refresh().await;
        Ok(id)
    }

    /// Replaces the shards of a tablespace set (by name, in dealing order).
    pub async fn set_tablespace_set_members(
        &self,
        set: TablespaceSetId,
        shards: &[String],
    ) -> Result<(), CatalogError> {
        store::set_tablespace_set_members(&mut *self.client().await?, set, shards).await?;
        self.refresh().await;
        Ok(())
    }

    /// Drops a tablespace set; refused while a table or partition set uses it.
    pub async fn drop_tablespace_set(&self, name: &str) -> Result<(), CatalogError> {
        store::drop_tablespace_set(&mut *self.client().await?, name).await?;
        self.refresh().await;
        Ok(())
    }

    /// Records a tablespace of user-defined sharding on `shard`.
    pub async fn create_tablespace(&self, name: &str, shard: ShardId) -> Result<(), CatalogError> {
        let shard = store::shard_names(&[shard], &self.shard_names)?.remove(0);
        store::create_tablespace(&mut *self.client().await?, name, &shard).await?;
        self.refresh().await;
        Ok(())
    }

    /// Records that sharding-key column `column` of table `id` takes generated values.
    pub async fn record_key_sequence(
        &self,
        id: TableId,
        column: &str,
        always: bool,
    ) -> Result<(), CatalogError> {
        store::record_key_sequence(&mut *self.client().await?, id, column, always).await?;
        self.refresh().await;
        Ok(())
    }

    /// Takes `count` values of a generated key's sequence: the first one (the rest follow it).
    /// One atomic UPDATE, so proxies sharing the catalog never take the same values.
    pub async fn take_key_values(
        &self,
        id: TableId,
        column: &str,
        count: i64,
    ) -> Result<i64, CatalogError> {
        store::take_key_values(&mut *self.client().await?, id, column, count).await
    }

    /// Drops a tablespace; refused while a partition uses it.
    pub async fn drop_tablespace(&self, name: &str) -> Result<(), CatalogError> {
        store::drop_tablespace(&mut *self.client().await?, name).await?;
        self.refresh().await;
        Ok(())
    }

    /// Makes a committed write visible here at once. A failed reload does not undo the write,
    /// so it is not the caller's error; the watcher retries.
    /// Records a move of `chunk` of family `table` from its shard to `target`, PLANNED, run
    /// by `owner`; refused when the chunk is no longer as given, or the family is splitting.
    pub async fn plan_move(
        &self,
        table: TableId,
        chunk: Chunk,
        target: ShardId,
        owner: &MoveOwner,
    ) -> Result<MoveId, CatalogError> {
        let shards = (self.shard_name(chunk.shard)?, self.shard_name(target)?);
        moves::plan(&mut *self.client().await?, table, chunk, shards, owner).await
    }

    fn shard_name(&self, shard: ShardId) -> Result<&str, CatalogError> {
        self.shard_names
            .get(shard.index())
            .map(String::as_str)
            .ok_or(CatalogError::UnknownShard(shard))
    }

    /// Records a split of `chunk` of family `table`, PREPARING, run by `owner`.
    pub async fn begin_split(
        &self,
        table: TableId,
        chunk: Chunk,
        owner: &MoveOwner,
    ) -> Result<i64, CatalogError> {
        let shard = self.shard_name(chunk.shard)?;
        splits::begin(&mut *self.client().await?, table, chunk, shard, owner).await
    }

    /// Gives the chunk map split `id`'s two halves (a new version, loaded here unless the
    /// reload fails, when the watcher loads it) and records the split RECORDED.
    pub async fn record_split(&self, id: i64) -> Result<(), CatalogError> {
        splits::record(&mut *self.client().await?, id).await?;
        self.refresh().await;
        Ok(())
    }

    /// Ends split `id` in `state` if it is still `from` (and run by `owner`, where given).
    pub async fn finish_split(
        &self,
        id: i64,
        from: SplitState,
        state: SplitState,
        owner: Option<&MoveOwner>,
    ) -> Result<bool, CatalogError> {
        splits::finish(&*self.client().await?, id, from, state, owner).await
    }

    /// The splits not yet ended.
    pub async fn unfinished_splits(&self) -> Result<Vec<SplitRecord>, CatalogError> {
        splits::unfinished(&*self.client().await?).await
    }

    /// Takes over a move whose owner is gone; `false` when another proxy did first.
    pub async fn claim_move(
        &self,
        id: MoveId,
        state: MoveState,
        from: &MoveOwner,
        to: &MoveOwner,
    ) -> Result<bool, CatalogError> {
        moves::claim(&*self.client().await?, id, state, from, to).await
    }

    /// CANCEL MOVE: the move's state when asked (`None`: no such move).
    pub async fn request_move_cancel(&self, id: MoveId) -> Result<Option<MoveState>, CatalogError> {
        moves::request_cancel(&*self.client().await?, id).await
    }

    /// Records the step a move is about to take, or how it ended.
    pub async fn set_move_state(
        &self,
        id: MoveId,
        state: MoveState,
        error: Option<&str>,
    ) -> Result<(), CatalogError> {
        moves::set_state(&*self.client().await?, id, state, error).await
    }

    pub async fn set_move_progress(
        &self,
        id: MoveId,
        rows: i64,
        bytes: i64,
    ) -> Result<(), CatalogError> {
        moves::set_progress(&*self.client().await?, id, rows, bytes).await
    }

    /// Gives a CUTTING_OVER move's chunk to its target in the chunk map (a new version, loaded
    /// here before this returns) and records the move CLEANING_UP.
    pub async fn hand_over_chunk(&self, id: MoveId, pause_ms: i64) -> Result<(), CatalogError> {
        moves::hand_over(&mut *self.client().await?, id, pause_ms).await?;
        self.reload().await.map(drop)
    }

    /// Records that the source's tables of CLEANING_UP move `id` are kept for `keep`.
    pub async fn keep_move_source(
        &self,
        id: MoveId,
        keep: std::time::Duration,
    ) -> Result<(), CatalogError> {
        moves::keep_source(&*self.client().await?, id, keep).await
    }

    /// Records that move `id` holds every proxy's statements for attempt `attempt`, for at most
    /// `valid` (a new version, loaded here).
    pub async fn hold_cutover(
        &self,
        id: MoveId,
        attempt: i32,
        valid: Duration,
    ) -> Result<(), CatalogError> {
        holds::hold(&mut *self.client().await?, id, attempt, valid).await?;
        self.refresh().await;
        Ok(())
    }

    /// Ends move `id`'s hold, if it has one.
    pub async fn release_cutover(&self, id: MoveId) -> Result<(), CatalogError> {
        holds::release(&mut *self.client().await?, id).await?;
        self.refresh().await;
        Ok(())
    }

    /// Records that `who` holds its statements for attempt `attempt` of move `id` (nothing if
    /// that hold has ended).
    pub async fn acknowledge_hold(
        &self,
        id: MoveId,
        attempt: i32,
        who: &MoveOwner,
    ) -> Result<(), CatalogError> {
        holds::acknowledge(&*self.client().await?, id, attempt, who).await
    }

    /// The proxies that acknowledged attempt `attempt` of move `id`.
    pub async fn hold_acknowledgements(
        &self,
        id: MoveId,
        attempt: i32,
    ) -> Result<Vec<MoveOwner>, CatalogError> {
        holds::acknowledged(&*self.client().await?, id, attempt).await
    }

    /// Every recorded move, oldest first.
    pub async fn moves(&self) -> Result<Vec<MoveRecord>, CatalogError> {
        moves::list(&*self.client().await?).await
    }

    pub async fn move_record(&self, id: MoveId) -> Result<Option<MoveRecord>, CatalogError> {
        moves::get(&*self.client().await?, id).await
    }

    async fn refresh(&self) {
        if let Err(e) = self.reload().await {
            tracing::warn!(error = %e, "catalog written but not reloaded; the watcher will retry");
        }
    }

    /// The catalog connection, connecting first when there is none or it was lost.
    async fn client(&self) -> Result<MappedMutexGuard<'_, Client>, CatalogError> {
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_none_or(Client::is_closed) {
            *guard = Some(schema::connect(&self.endpoint, self.connect_timeout).await?);
        }
        Ok(MutexGuard::map(guard, |c| {
            c.as_mut().expect("connected just above")
        }))
    }
}

//! Growing a sharded database while clients use it: a chunk of a family moved to another
//! shard by PostgreSQL's logical replication (`chunk_move`, what moves in `plan`, the
//! publication and subscription in `replication`), how a move ends whoever ends it (`settle`),
//! moves whose proxy died taken over and CANCEL MOVE (`recovery`), statements held while the
//! chunk changes hands (`fence`) at every proxy sharing the catalog (`hold`), the family's
//! tables on a shard new to it (`family_schema`), REBALANCE (`rebalance`), a tablespace set's
//! shards (`membership`), SPLIT CHUNK (`split`), and the operator's proof of placement
//! (`placement`). The statements are DESIGN.md §2 "Growth"; what a move does step by step is
//! in docs/operations.md.

mod chunk_move;
mod family_schema;
mod fence;
mod hold;
mod membership;
mod placement;
mod plan;
mod rebalance;
mod recovery;
mod replication;
mod settle;
mod split;

pub use chunk_move::{move_chunk, MoveRequest, Moved};
pub use fence::{Fence, Flight};
pub use hold::follow_holds;
pub use membership::change_members;
pub use placement::{check_placement, PlacementRow};
pub use rebalance::rebalance;
pub use recovery::{cancel_move, recover_moves, run_recovery_until};
pub use split::{split_chunk, Split, SplitRequest};

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::error::SqlState;

use crate::catalog::{Catalog, CatalogError, MoveOwner};
use crate::config::Config;
use crate::failpoint::FailPoints;
use crate::metrics::MoveMetrics;
use crate::txn::control::ConnectError;
use crate::txn::lease::Incarnation;
use crate::txn::ControlPools;

/// What a move or a placement check needs of the proxy. Owned, so a move runs on a task of
/// its own: a client that goes away mid-move must not drop it between two steps.
#[derive(Clone)]
pub struct Growth {
    pub catalog: Arc<Catalog>,
    pub control: Arc<ControlPools>,
    pub config: Arc<Config>,
    pub fence: Arc<Fence>,
    /// This proxy, as its lease names it: the owner of the moves it runs.
    pub me: Incarnation,
    pub failpoints: FailPoints,
    pub metrics: MoveMetrics,
}

impl Growth {
    fn owner(&self) -> MoveOwner {
        owner_of(&self.me)
    }

    /// Counts a move that ended in `state` here.
    fn count_ended(&self, state: crate::model::MoveState) {
        use crate::model::MoveState as S;
        let counter = match state {
            S::Done => &self.metrics.done,
            S::Failed => &self.metrics.failed,
            S::Canceled => &self.metrics.canceled,
            S::RolledBack => &self.metrics.rolled_back,
            S::Planned | S::Copying | S::CatchingUp | S::CuttingOver | S::CleaningUp => return,
        };
        counter.increment(1);
    }
}

fn owner_of(who: &Incarnation) -> MoveOwner {
    MoveOwner {
        cluster: who.cluster.as_str().to_owned(),
        proxy: who.proxy.as_str().to_owned(),
        epoch: i64::try_from(who.epoch).unwrap_or(i64::MAX),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GrowthError {
    #[error("table {0} is not in the catalog")]
    NoSuchTable(String),
    #[error("{0}")]
    NotMovable(String),
    #[error("table {table} has no chunk {chunk}: SHOW CHUNKS FOR {table} lists its chunks")]
    NoSuchChunk { table: String, chunk: u32 },
    #[error("shard \"{0}\" is not in the configuration")]
    NoSuchShard(String),
    #[error("tablespace set \"{0}\" does not exist")]
    NoSuchTablespaceSet(String),
    #[error("chunk {chunk} of {table} is already on shard \"{shard}\"")]
    AlreadyThere {
        table: String,
        chunk: u32,
        shard: String,
    },
    #[error(
        "shard \"{shard}\" is not in tablespace set \"{set}\" of {table}: add it first with \
         ALTER TABLESPACE SET {set} ADD SHARD {shard}"
    )]
    NotInSet {
        table: String,
        shard: String,
        set: String,
    },
    #[error(
        "tablespace set \"{set}\" places {user}, which is not a consistent-hash family: adding \
         or removing a shard of it is not supported (only sets of consistent-hash families grow)"
    )]
    SetPlacesCopies { set: String, user: String },
    #[error("shard \"{shard}\" is already in tablespace set \"{set}\"")]
    AlreadyMember { set: String, shard: String },
    #[error("shard \"{shard}\" is not in tablespace set \"{set}\"")]
    NotMember { set: String, shard: String },
    #[error("shard \"{shard}\" is the last of tablespace set \"{set}\", which needs one")]
    LastMember { set: String, shard: String },
    #[error(
        "shard \"{shard}\" still holds chunks of {tables} in tablespace set \"{set}\": move them \
         to the set's other shards first (MOVE CHUNK), then remove it"
    )]
    MemberHoldsChunks {
        set: String,
        shard: String,
        tables: String,
    },
    #[error(
        "the tables of {table}'s family changed (DDL ran on them) while the move copied them to \
         shard \"{shard}\", which held none of the family's chunks; nothing was moved: run the \
         move again"
    )]
    FamilyChanged { table: String, shard: String },
    #[error(
        "views read {table}'s family ({views}), and moving chunk {chunk} {why}: the views would \
         not follow the tables; drop the views, move the chunk, and make them again"
    )]
    FamilyHasViews {
        table: String,
        chunk: u32,
        views: String,
        why: &'static str,
    },
    #[error(
        "shard \"{shard}\" has wal_level = {level}; a chunk move copies its rows by logical \
         replication: set wal_level = logical in that shard's postgresql.conf and restart it"
    )]
    WalLevel { shard: String, level: String },
    #[error("shard \"{shard}\": {}", crate::client_error::with_causes(source))]
    Shard {
        shard: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("shard \"{shard}\": {source}")]
    Connect {
        shard: String,
        #[source]
        source: ConnectError,
    },
    #[error("the copy of chunk {chunk} to shard \"{shard}\" failed there; its log says why")]
    CopyFailed { chunk: u32, shard: String },
    #[error(
        "move {id}: the target's copy of the chunk has {target} rows where the source has \
         {source_rows}; nothing was changed"
    )]
    CopyMismatch {
        id: crate::model::MoveId,
        source_rows: i64,
        target: i64,
    },
    #[error(
        "the cutover of chunk {chunk} could not hold its statements within {pause:?} in \
         {attempts} attempts (long transactions on the chunk); nothing was changed: try again \
         when they are done, or raise [moves] cutover_pause_ms"
    )]
    CutoverGaveUp {
        chunk: u32,
        pause: Duration,
        attempts: u32,
    },
    #[error("the proxy shut down during the move: SHOW MOVES says how far it came")]
    Interrupted,
    #[error("move {0} was canceled (CANCEL MOVE); nothing was changed")]
    Canceled(crate::model::MoveId),
    #[error("there is no move {0}: SHOW MOVES lists them")]
    NoSuchMove(crate::model::MoveId),
    #[error("move {id} is {state} and cannot be canceled: only a move that has not cut over can")]
    NotCancelable {
        id: crate::model::MoveId,
        state: crate::model::MoveState,
    },
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

impl crate::client_error::ClientError for GrowthError {
    fn client_message(&self) -> String {
        self.to_string()
    }

    fn sqlstate(&self) -> SqlState {
        match self {
            GrowthError::NoSuchTable(_) => SqlState::UNDEFINED_TABLE,
            GrowthError::NotMovable(_) => SqlState::WRONG_OBJECT_TYPE,
            GrowthError::NoSuchChunk { .. } | GrowthError::AlreadyThere { .. } => {
                SqlState::INVALID_PARAMETER_VALUE
            }
            GrowthError::NoSuchShard(_)
            | GrowthError::NoSuchTablespaceSet(_)
            | GrowthError::NotMember { .. } => SqlState::UNDEFINED_OBJECT,
            GrowthError::AlreadyMember { .. } => SqlState::DUPLICATE_OBJECT,
            GrowthError::SetPlacesCopies { .. } => SqlState::FEATURE_NOT_SUPPORTED,
            GrowthError::NotInSet { .. }
            | GrowthError::WalLevel { .. }
            | GrowthError::FamilyHasViews { .. }
            | GrowthError::FamilyChanged { .. }
            | GrowthError::LastMember { .. }
            | GrowthError::MemberHoldsChunks { .. } => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            GrowthError::Shard { source, .. } => source
                .code()
                .cloned()
                .unwrap_or(SqlState::CONNECTION_FAILURE),
            GrowthError::Connect { .. } => SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
            GrowthError::CopyFailed { .. } | GrowthError::CopyMismatch { .. } => {
                SqlState::SYSTEM_ERROR
            }
            GrowthError::CutoverGaveUp { .. } => SqlState::LOCK_NOT_AVAILABLE,
            GrowthError::Interrupted => SqlState::ADMIN_SHUTDOWN,
            GrowthError::Canceled(_) => SqlState::QUERY_CANCELED,
            GrowthError::NoSuchMove(_) => SqlState::UNDEFINED_OBJECT,
            GrowthError::NotCancelable { .. } => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            GrowthError::Catalog(e) => e.sqlstate(),
        }
    }
}

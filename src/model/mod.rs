//! The model every layer shares: typed ids, the sharding-key types, what a sharded table is
//! (kind, method, key columns, stored bounds) and where its chunks are (`chunks`). It depends
//! on nothing else in the crate, so `ddl`, `catalog` and `router` can all use it without
//! importing each other.

pub mod chunks;
pub mod ids;
pub mod key_type;
pub mod table;

pub use chunks::{Chunk, ChunkMap, ChunkMapError};
pub use ids::{ChunkId, MoveId, ShardId, TableId, TablespaceSetId};
pub use key_type::{KeyType, KeyTypeError, NumericTypmod};
pub use table::{
    nosql_view_schema, BoundValue, KeyColumn, MoveState, PartitionBound, RowMovement,
    ShardingMethod, TableKind, TableState, Ttl, TtlUnit, ViewShape, ROWS_SCHEMA_SUFFIX,
};

//! The model every layer shares: typed ids and the sharding-key types. It depends on nothing
//! else in the crate, so `ddl`, `catalog` and `router` can all use it without importing each
//! other.

pub mod ids;
pub mod key_type;

pub use ids::{ChunkId, ShardId, TableId, TablespaceSetId};
pub use key_type::{KeyType, KeyTypeError, NumericTypmod};

//! Where a statement goes, decided before anything is sent.

use crate::catalog::ShardId;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Exactly one shard holds everything the statement touches.
    Single(ShardId),
    /// These shards, gathered and merged.
    Multi(Vec<ShardId>),
    /// Every shard.
    All,
}

/// Until sharded tables exist every statement goes to the first shard, where unsharded tables
/// live by design.
pub fn route_unsharded() -> Route {
    Route::Single(ShardId(0))
}

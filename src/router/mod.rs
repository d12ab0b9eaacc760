//! Routing: which shard or shards a statement goes to.

pub mod hash;
pub mod route;

pub use route::Route;

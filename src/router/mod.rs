//! Routing: which shard or shards a statement goes to.

pub mod route;

pub use route::Route;

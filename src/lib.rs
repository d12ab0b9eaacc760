//! shardwire: a PostgreSQL-wire-compatible sharding proxy.
//!
//! Data flows left to right (DESIGN.md §4):
//!
//! ```text
//! client ─▶ frontend ─▶ sql ─▶ router ─▶ executor ─▶ txn ─▶ backend ─▶ shards
//! ```
//!
//! - [`server`]: the accept loop, `run(listener, shutdown, deps)`, its runtime and logging.
//! - [`context`]: what sessions share ([`context::ServerCtx`]), readied before the first client;
//!   the executor and admin take only the pieces of it they use.
//! - [`frontend`]: client startup, TLS and authentication (pgwire), then the session loop over raw
//!   frames: transaction pooling, statement-name mapping, cancel; its sockets are read through
//!   tokio's readiness flags without tokio's per-poll cost (`frontend::socket`); on one thread all
//!   sessions run in one task (`frontend::driver`).
//! - [`protocol`]: the length-prefixed frame codec and the few message encoders the proxy needs.
//! - [`ddl`]: shardwire's own parser for the sharding DDL (CREATE SHARDED TABLE, …), its AST, and
//!   the rewrite to plain PostgreSQL per shard with the sharding rules.
//! - [`sql`]: cheap lexical classification of statements (what pins a session, what drops the
//!   backend's prepared statements).
//! - [`router`]: where a statement goes ([`router::Route`]).
//! - [`model`]: what `ddl`, `catalog` and `router` share (typed ids, key types); it imports
//!   none of them.
//! - [`catalog`]: the shard catalog in schema `shardwire_catalog`, cached as immutable snapshots.
//! - [`backend`]: our own backend connections (startup, md5/SCRAM) pooled by bb8, with a stack
//!   of just-returned connections in front for the per-transaction checkout.
//! - [`executor`]: what the proxy runs itself: sharding DDL and DDL fanned out to every shard.
//! - [`movement`]: the statements that move rows whose sharding key an UPDATE changed, with
//!   their family's rows, to the shard that owns the new key.
//! - [`txn`]: two-phase commit over several shards, its decision log, each proxy's lease and
//!   in-flight registry, in-doubt recovery.
//! - [`config`]: the TOML configuration and its validation.
//! - [`tls`]: certificates and keys, TLS to the shards as each URL's `sslmode` asks (for our own
//!   connections and tokio-postgres's), channel binding.
//! - [`pgcluster`]: local PostgreSQL clusters for `shardwire dev` and the tests.
//! - [`dev`]: the `shardwire dev` command.
//! - [`admin`]: the SHOW statements the proxy answers itself.
//! - [`metrics`]: every metric name in one place.
//! - [`failpoint`]: named steps where crash tests make the proxy die or stop (feature
//!   `failpoints`; nothing without it).
//! - [`error`]: the one mapping from each layer's errors to SQLSTATE and client-safe text.

pub mod admin;
pub mod backend;
pub mod catalog;
pub mod config;
pub mod context;
pub mod ddl;
pub mod dev;
pub mod error;
pub mod executor;
pub mod failpoint;
pub mod frontend;
pub mod metrics;
pub mod model;
pub mod movement;
pub mod pgcluster;
pub mod protocol;
pub mod router;
pub mod server;
pub mod sql;
pub mod tls;
pub mod txn;

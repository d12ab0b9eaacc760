//! shardwire: a PostgreSQL-wire-compatible sharding proxy.
//!
//! Data flows left to right (docs/architecture.md):
//!
//! ```text
//! client ─▶ frontend ─▶ sql ─▶ router ─▶ executor / movement ─▶ txn ─▶ backend ─▶ shards
//! ```
//!
//! The modules in their layers, lowest first: each uses only modules listed before it
//! (`scripts/layers.py src --order`, run by the test command, checks this order, that no import
//! cycle exists, and that docs/architecture.md §5 lists the same order).
//!
//! Beside every layer, importing nothing above themselves:
//! - [`model`]: what every layer shares: typed ids, key types, table kinds, partition bounds.
//! - [`protocol`]: the length-prefixed frame codec and the few message encoders the proxy needs.
//! - [`tls`]: certificates and keys, TLS to the shards as each URL's `sslmode` asks (for our own
//!   connections and tokio-postgres's), channel binding.
//! - [`client_error`]: the trait through which each layer's error says its SQLSTATE and
//!   client-safe text.
//! - [`metrics`]: every metric name in one place.
//! - [`failpoint`]: named steps where crash tests make the proxy die or stop (feature
//!   `failpoints`; nothing without it).
//!
//! The layers:
//! 1. [`config`]: the TOML configuration and its validation.
//! 2. [`sql`]: cheap lexical classification of statements (what pins a session, what drops the
//!    backend's prepared statements), quoting, search_path, statement splitting.
//! 3. [`ddl`]: shardwire's own parser for the sharding DDL (CREATE SHARDED TABLE, …), its AST,
//!    the rewrite to plain PostgreSQL per shard with the sharding rules, and NoSQL row TTL.
//! 4. [`catalog`]: the shard catalog in schema `shardwire_catalog`, cached as immutable
//!    snapshots.
//! 5. [`backend`]: our own backend connections (startup, md5/SCRAM) pooled by bb8, with a stack
//!    of just-returned connections in front for the per-transaction checkout; the shards' type
//!    OIDs.
//! 6. [`router`]: where a statement goes ([`router::Route`]) and the plans for multi-shard reads
//!    and writes.
//! 7. [`txn`]: two-phase commit over several shards, its decision log, each proxy's lease and
//!    in-flight registry, in-doubt recovery.
//! 8. [`executor`]: what the proxy runs itself: sharding DDL and DDL fanned out to every shard,
//!    the statements over several shards (on the session's connections, through the
//!    [`executor::host::Host`] the session lends them), merging shards' results, the general
//!    path, two-phase commit, COPY splitting, TTL purge.
//! 9. [`movement`]: the statements that move rows whose sharding key an UPDATE changed, with
//!    their family's rows, to the shard that owns the new key.
//! 10. [`growth`]: growing online: a chunk moved to another shard by logical replication, the
//!     cutover's hold on statements, the placement check.
//! 11. [`admin`]: the SHOW statements and growth statements the proxy answers itself.
//! 12. [`frontend`]: client startup, TLS and authentication (pgwire), what sessions share
//!     ([`frontend::context::ServerCtx`]), then the session loop over raw frames: transaction
//!     pooling, statement-name mapping, cancel; its sockets are read through tokio's readiness
//!     flags without tokio's per-poll cost (`frontend::socket`); on one thread all sessions run
//!     in one task (`frontend::driver`).
//! 13. [`server`]: the accept loop, `run(listener, shutdown, deps)`, its runtime and logging.
//!
//! Tools on top: [`pgcluster`] (local PostgreSQL clusters for `shardwire dev` and the tests) and
//! [`dev`] (the `shardwire dev` command).

pub mod admin;
pub mod backend;
pub mod catalog;
pub mod client_error;
pub mod config;
pub mod ddl;
pub mod dev;
pub mod executor;
pub mod failpoint;
pub mod frontend;
pub mod growth;
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

//! Execution of what the proxy does itself rather than forward: sharding DDL and the DDL that
//! must reach every shard holding a table, and statements that span several shards. Those run
//! on the session's connections through [`host::Host`], without knowing the session
//! (docs/architecture.md §6).

pub mod columns;
pub mod combiner;
pub mod commit;
pub mod copy;
pub mod cursor;
pub mod cursor_list;
pub mod ddl;
pub mod fan_out;
pub mod gather;
pub mod general;
pub mod grouped;
pub mod host;
mod index_concurrently;
mod index_names;
mod index_shard;
pub mod insert_select;
pub mod layout;
pub mod merge;
pub mod nosql;
pub mod participants;
mod recognise;
pub mod script;
pub mod split;
pub mod ttl_purge;
mod view_ddl;

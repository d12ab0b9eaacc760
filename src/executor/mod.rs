//! Execution of what the proxy does itself rather than forward: sharding DDL and the DDL that
//! must reach every shard holding a table.

pub mod ddl;
pub mod layout;
mod recognise;

//! Merges the proxy computes itself over the shards' rows: grouped reads (`aggregate`), with
//! exact numeric addition (`numeric`).

pub mod aggregate;
mod numeric;

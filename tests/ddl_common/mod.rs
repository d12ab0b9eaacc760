//! Helpers shared by the DDL parser tests.
#![allow(dead_code)] // each test crate uses a different subset

use shardwire::ddl::{parse, CreateTable, Ident, Statement};

/// Parses `sql`, which must be one CREATE TABLE.
pub fn create(sql: &str) -> CreateTable {
    match parse(sql) {
        Ok(Statement::CreateTable(t)) => t,
        other => panic!("expected CREATE TABLE, got {other:?}"),
    }
}

pub fn names(idents: &[Ident]) -> Vec<&str> {
    idents.iter().map(Ident::as_str).collect()
}

/// Column name → PostgreSQL type, in declaration order.
pub fn pg_types(t: &CreateTable) -> Vec<(&str, String)> {
    t.columns
        .iter()
        .map(|c| (c.name.as_str(), c.data_type.pg.to_string()))
        .collect()
}

/// The sharding key's column names.
pub fn key(t: &CreateTable) -> Vec<&str> {
    t.sharding_key()
        .expect("sharding key")
        .into_iter()
        .map(Ident::as_str)
        .collect()
}

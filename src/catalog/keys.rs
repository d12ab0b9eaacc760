//! Generated sharding-key values: each proxy takes blocks of a column's cluster-wide sequence
//! from the catalog and hands them out from memory, so an INSERT usually needs no catalog round
//! trip and no two proxies ever give out the same value.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{Catalog, CatalogError};
use crate::model::TableId;

/// Values taken from the catalog per round trip, at least.
const BLOCK: i64 = 1000;

#[derive(Default)]
pub struct KeyBlocks {
    /// Per (table, column): the next value to hand out and the end of its block.
    blocks: Mutex<HashMap<(TableId, String), (i64, i64)>>,
}

impl KeyBlocks {
    /// `count` fresh values of the sequence of `table`'s key column `column`, ascending.
    pub async fn take(
        &self,
        catalog: &Catalog,
        table: TableId,
        column: &str,
        count: usize,
    ) -> Result<Vec<i64>, CatalogError> {
        let mut out = Vec::with_capacity(count);
        let key = (table, column.to_string());
        loop {
            {
                let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((next, end)) = blocks.get_mut(&key) {
                    while out.len() < count && *next < *end {
                        out.push(*next);
                        *next += 1;
                    }
                }
            }
            if out.len() == count {
                return Ok(out);
            }
            let want = ((count - out.len()) as i64).max(BLOCK);
            let start = catalog.take_key_values(table, column, want).await?;
            let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
            // A block taken meanwhile by another session of this proxy is simply replaced;
            // its rest is never handed out, which costs values, not uniqueness.
            blocks.insert(key.clone(), (start, start + want));
        }
    }
}

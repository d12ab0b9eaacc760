//! Views over recorded tables, as the catalog records them and as the router reads them: a
//! family or duplicated view is named in a statement where a table could be, so the snapshot
//! gives each one a [`Table`] of its family ([`View::as_table`]); an expanded view is planned
//! through its definition and only its DDL uses that table (for its name and shards).

use super::model::Table;
use crate::model::{ChunkMap, TableState, ViewShape};
use crate::model::{KeyColumn, RowMovement, ShardId, ShardingMethod, TableId, TableKind};

/// Where materialized views are held: PostgreSQL statements that name no recorded table go to
/// the first shard, so an index on a materialized view, `\d` and `pg_matviews` find it there.
pub const MATVIEW_SHARD: ShardId = ShardId(0);
/// The schema, on [`MATVIEW_SHARD`], of the tables materialized views are refreshed from.
pub const MATVIEW_SCHEMA: &str = "shardwire_matview";

/// The table a materialized view of catalog id `id` is refreshed from, quoted.
pub fn staging_table(id: TableId) -> String {
    format!("{MATVIEW_SCHEMA}.m{}", id.0)
}

/// A view's catalog entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewEntry {
    /// From the table ids' sequence: a view and a table never share an id.
    pub id: TableId,
    pub schema: String,
    pub name: String,
    pub state: TableState,
    pub shape: ViewShape,
    /// Family: the family's root; duplicated: a duplicated table it reads (where it is, the
    /// view is); expanded: none.
    pub placed_like: Option<TableId>,
    /// `pg_get_viewdef` under an empty search_path: every name qualified, so it means the
    /// same under any session's search_path.
    pub definition: String,
    /// Family: per sharding-key column of the root, then per partition-set column, the view's
    /// column that holds it (`None` where the view does not show it).
    pub key_columns: Vec<Option<String>>,
    /// The recorded tables and views its definition names.
    pub reads: Vec<TableId>,
}

/// A view with what the snapshot derives from the catalog around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub entry: ViewEntry,
    /// The view read as a table: of its family (sharded, placed with the root), duplicated, or
    /// for an expanded view a duplicated table on its shards that no read is planned over.
    pub as_table: Table,
    /// Every shard holding it (where all it reads is), ascending.
    pub shards: Vec<ShardId>,
}

/// A view entry to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewView {
    pub schema: String,
    pub name: String,
    pub shape: ViewShape,
    pub placed_like: Option<TableId>,
    pub definition: String,
    pub key_columns: Vec<Option<String>>,
    pub reads: Vec<TableId>,
}

impl View {
    /// `schema.name`, for messages.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.entry.schema, self.entry.name)
    }

    pub fn is_expanded(&self) -> bool {
        self.entry.shape == ViewShape::Expanded
    }

    /// The table a materialized view's refresh fills (its rows, which the materialized view on
    /// the shard reads when PostgreSQL refreshes it), quoted.
    pub fn staging_table(&self) -> String {
        staging_table(self.entry.id)
    }

    /// The table the router reads `entry` as; `placed_like` is its entry's table.
    pub(super) fn as_table(entry: &ViewEntry, placed_like: Option<&Table>) -> Table {
        let mut table = Table {
            id: entry.id,
            schema: entry.schema.clone(),
            name: entry.name.clone(),
            kind: TableKind::Duplicated,
            method: None,
            key_columns: Vec::new(),
            partition_set_columns: Vec::new(),
            primary_key: Vec::new(),
            root: entry.id,
            parent: None,
            row_movement: RowMovement::Disabled,
            state: entry.state,
            tablespace_set: placed_like.and_then(|t| t.tablespace_set),
            chunks: ChunkMap::default(),
            partition_sets: Vec::new(),
            partitions: Vec::new(),
            generated: Vec::new(),
            nosql: false,
            ttl: None,
        };
        if entry.shape == ViewShape::Materialized {
            table.kind = TableKind::Unsharded;
            table.chunks = ChunkMap::uniform(vec![MATVIEW_SHARD]);
        }
        if let (ViewShape::Family, Some(root)) = (entry.shape, placed_like) {
            // A key column the view does not show is named "", which no column reference
            // can name: conditions never pin it, and an INSERT through the view lacks it.
            let own = |i: usize, root_column: &KeyColumn| KeyColumn {
                name: entry
                    .key_columns
                    .get(i)
                    .cloned()
                    .flatten()
                    .unwrap_or_default(),
                pg_type: root_column.pg_type.clone(),
            };
            let width = root.key_columns.len();
            table.kind = TableKind::Sharded;
            table.method = Some(ShardingMethod::Reference);
            table.root = root.id;
            table.parent = Some(root.id);
            table.key_columns = root
                .key_columns
                .iter()
                .enumerate()
                .map(|(i, c)| own(i, c))
                .collect();
            table.partition_set_columns = root
                .partition_set_columns
                .iter()
                .enumerate()
                .map(|(i, c)| own(width + i, c))
                .collect();
        }
        table
    }
}

//! An immutable, consistent view of the catalog at one `catalog_version`, with the lookups the
//! planner, router and executor need.

use std::collections::HashMap;

use super::model::{Shard, Table, Tablespace, TablespaceSet};
use super::view::{View, ViewEntry};
use crate::model::{ChunkId, ChunkMap, ShardId, TableId, TableKind, TablespaceSetId, ViewShape};

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    version: i64,
    shards: Vec<Shard>,
    tablespace_sets: Vec<TablespaceSet>,
    tablespaces: Vec<Tablespace>,
    /// Ordered by id, so families and listings come out in creation order, and a table is
    /// found by its id with a binary search (cheaper than hashing it, on every routed
    /// statement).
    tables: Vec<Table>,
    by_name: HashMap<(String, String), usize>,
    children: HashMap<TableId, Vec<TableId>>,
    /// Whether a NoSQL table three or more levels down (`a.b.c`, stored as `a."b.c"`) exists.
    nested_names: bool,
    /// Whether any table is an Oracle NoSQL table (whose rows may carry a time to live).
    nosql: bool,
    /// Views over recorded tables, ordered by id.
    views: Vec<View>,
    view_names: HashMap<(String, String), usize>,
    /// Whether some view is planned through its definition.
    expanded_views: bool,
    /// Cutovers holding every proxy's statements.
    holds: Vec<super::CutoverHold>,
}

impl Snapshot {
    /// Builds the indexes over what the store loaded (or a test made). `shards` are the
    /// configured shards, in configuration order. Public for the fuzz targets (fuzz/), which
    /// route against a catalog made in memory.
    pub fn new(
        version: i64,
        shards: Vec<Shard>,
        tablespace_sets: Vec<TablespaceSet>,
        tablespaces: Vec<Tablespace>,
        mut tables: Vec<Table>,
    ) -> Snapshot {
        tables.sort_by_key(|t| t.id);
        let by_name = tables
            .iter()
            .enumerate()
            .map(|(i, t)| ((t.schema.clone(), t.name.clone()), i))
            .collect();
        let mut children: HashMap<TableId, Vec<TableId>> = HashMap::new();
        for t in &tables {
            if let Some(parent) = t.parent {
                children.entry(parent).or_default().push(t.id);
            }
        }
        let nested_names = tables.iter().any(|t| t.nosql && t.name.contains('.'));
        let nosql = tables.iter().any(|t| t.nosql);
        Snapshot {
            nested_names,
            nosql,
            version,
            shards,
            tablespace_sets,
            tablespaces,
            tables,
            by_name,
            children,
            views: Vec::new(),
            view_names: HashMap::new(),
            expanded_views: false,
            holds: Vec::new(),
        }
    }

    /// The snapshot with these views, each made readable as a table of what it reads. A view
    /// reads only tables and views made before it, so in id order every view it reads is
    /// placed before it is.
    pub fn with_holds(mut self, holds: Vec<super::CutoverHold>) -> Snapshot {
        self.holds = holds;
        self
    }

    /// The cutovers holding every proxy's statements now.
    pub fn holds(&self) -> &[super::CutoverHold] {
        &self.holds
    }

    pub fn with_views(mut self, mut entries: Vec<ViewEntry>) -> Snapshot {
        entries.sort_by_key(|v| v.id);
        for entry in entries {
            let placed_like = entry.placed_like.and_then(|id| self.table(id)).cloned();
            let as_table = View::as_table(&entry, placed_like.as_ref());
            let shards = match entry.placed_like {
                _ if entry.shape == ViewShape::Materialized => vec![super::view::MATVIEW_SHARD],
                Some(id) => self.shards_of(id),
                None => {
                    let mut shards: Vec<ShardId> = self.shards.iter().map(|s| s.id).collect();
                    for read in &entry.reads {
                        let theirs = self.shards_of(*read);
                        shards.retain(|s| theirs.contains(s));
                    }
                    shards
                }
            };
            self.view_names
                .insert((entry.schema.clone(), entry.name.clone()), self.views.len());
            self.views.push(View {
                entry,
                as_table,
                shards,
            });
        }
        self.expanded_views = self.views.iter().any(View::is_expanded);
        self
    }

    /// Every view, in creation order.
    pub fn views(&self) -> &[View] {
        &self.views
    }

    /// The view with this id.
    pub fn view(&self, id: TableId) -> Option<&View> {
        let i = self.views.binary_search_by_key(&id, |v| v.entry.id).ok()?;
        Some(&self.views[i])
    }

    /// The view `schema.name`; both as the parser folded them.
    pub fn view_by_name(&self, schema: &str, name: &str) -> Option<&View> {
        self.view_names
            .get(&(schema.to_string(), name.to_string()))
            .map(|&i| &self.views[i])
    }

    /// Whether some view is planned through its definition: only then may a statement need
    /// its views expanded.
    pub fn has_expanded_views(&self) -> bool {
        self.expanded_views
    }

    /// The table `schema.name` or, failing that, the view read as a table: what a name in a
    /// query means to the router.
    pub fn relation_by_name(&self, schema: &str, name: &str) -> Option<&Table> {
        self.table_by_name(schema, name)
            .or_else(|| self.view_by_name(schema, name).map(|v| &v.as_table))
    }

    /// Whether client SQL may name a table as `a.b.c` ([`crate::sql::nested_names`]).
    pub fn has_nested_names(&self) -> bool {
        self.nested_names
    }

    /// Whether SQL may write a NoSQL table, and so may hold `SET TTL` ([`crate::ddl::row_ttl`]).
    pub fn has_nosql_tables(&self) -> bool {
        self.nosql
    }

    /// Whether `schema`.`table` is a NoSQL table named with three or more parts.
    pub fn is_nested_name(&self, schema: &str, table: &str) -> bool {
        table.contains('.') && self.table_by_name(schema, table).is_some_and(|t| t.nosql)
    }

    /// The `catalog_version` this snapshot was read at; every catalog write increments it.
    pub fn version(&self) -> i64 {
        self.version
    }

    /// The configured shards, in configuration order (`ShardId` is the position).
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    pub fn shard(&self, id: ShardId) -> Option<&Shard> {
        self.shards.get(id.index())
    }

    pub fn shard_by_name(&self, name: &str) -> Option<&Shard> {
        self.shards.iter().find(|s| s.name == name)
    }

    pub fn tablespace_sets(&self) -> &[TablespaceSet] {
        &self.tablespace_sets
    }

    pub fn tablespace_set(&self, id: TablespaceSetId) -> Option<&TablespaceSet> {
        self.tablespace_sets.iter().find(|s| s.id == id)
    }

    pub fn tablespace_set_by_name(&self, name: &str) -> Option<&TablespaceSet> {
        self.tablespace_sets.iter().find(|s| s.name == name)
    }

    pub fn tablespaces(&self) -> &[Tablespace] {
        &self.tablespaces
    }

    pub fn tablespace(&self, name: &str) -> Option<&Tablespace> {
        self.tablespaces.iter().find(|t| t.name == name)
    }

    /// Every table, in creation order.
    pub fn tables(&self) -> &[Table] {
        &self.tables
    }

    /// The table with this id, or the view read as a table.
    pub fn table(&self, id: TableId) -> Option<&Table> {
        match self.tables.binary_search_by_key(&id, |t| t.id) {
            Ok(i) => Some(&self.tables[i]),
            Err(_) => self.view(id).map(|v| &v.as_table),
        }
    }

    /// The table `schema.name`; both as the parser folded them.
    /// A NoSQL table is also found by its data table's name, which statements setting a row's
    /// time to live are rewritten to write.
    pub fn table_by_name(&self, schema: &str, name: &str) -> Option<&Table> {
        let lookup = |schema: &str| {
            self.by_name
                .get(&(schema.to_string(), name.to_string()))
                .map(|&i| &self.tables[i])
        };
        lookup(schema).or_else(|| {
            crate::model::nosql_view_schema(schema)
                .and_then(lookup)
                .filter(|t| t.nosql)
        })
    }

    /// A recorded table named `name` in a schema other than `public`: an unqualified `name`
    /// may mean it under a `search_path` the proxy does not know.
    pub fn named_outside_public(&self, name: &str) -> Option<&Table> {
        self.tables
            .iter()
            .chain(self.views.iter().map(|v| &v.as_table))
            .find(|t| t.name == name && t.schema != "public")
    }

    /// An unqualified name resolved as PostgreSQL resolves it, among the recorded tables: the
    /// first schema of `search_path` that has a table of that name.
    pub fn resolve_table(&self, search_path: &[String], name: &str) -> Option<&Table> {
        search_path
            .iter()
            .find_map(|schema| self.table_by_name(schema, name))
    }

    /// [`Snapshot::resolve_table`] among tables and views read as tables.
    pub fn resolve_relation(&self, search_path: &[String], name: &str) -> Option<&Table> {
        search_path
            .iter()
            .find_map(|schema| self.relation_by_name(schema, name))
    }

    /// The root of `id`'s family (the table itself when it is a root).
    pub fn root_of(&self, id: TableId) -> Option<&Table> {
        self.table(self.table(id)?.root)
    }

    /// The direct children of `id`, in creation order.
    pub fn children(&self, id: TableId) -> Vec<&Table> {
        self.children
            .get(&id)
            .map(|ids| ids.iter().filter_map(|&c| self.table(c)).collect())
            .unwrap_or_default()
    }

    /// The whole family `id` belongs to, root first, every parent before its children
    /// (depth-first): the order to lock and insert in; reversed, the order to delete in.
    pub fn family(&self, id: TableId) -> Vec<&Table> {
        let mut out = Vec::new();
        let mut stack: Vec<&Table> = self.root_of(id).into_iter().collect();
        while let Some(t) = stack.pop() {
            out.push(t);
            stack.extend(self.children(t.id).into_iter().rev());
        }
        out
    }

    /// How deep `id` is nested in its family: 0 for a root.
    pub fn depth(&self, id: TableId) -> Option<usize> {
        let mut table = self.table(id)?;
        let mut depth = 0;
        while let Some(parent) = table.parent {
            table = self.table(parent)?;
            depth += 1;
        }
        Some(depth)
    }

    /// For a family member: (its column, the root's sharding-key column) pairs, in the order
    /// of the root's key. For a root, each key column maps to itself.
    pub fn root_key_mapping(&self, id: TableId) -> Vec<(&str, &str)> {
        let (Some(table), Some(root)) = (self.table(id), self.root_of(id)) else {
            return Vec::new();
        };
        table
            .key_columns
            .iter()
            .zip(&root.key_columns)
            .map(|(own, root)| (own.name.as_str(), root.name.as_str()))
            .collect()
    }

    /// Tables placed on tablespace set `id`, directly or through a partition set.
    pub fn tables_using_tablespace_set(&self, id: TablespaceSetId) -> Vec<&Table> {
        self.tables
            .iter()
            .filter(|t| {
                t.tablespace_set == Some(id)
                    || t.partition_sets.iter().any(|s| s.tablespace_set == id)
            })
            .collect()
    }

    /// The chunk map of `id`'s family (its root's chunks). Empty for tables placed by
    /// partition sets or partitions.
    pub fn chunks(&self, id: TableId) -> &ChunkMap {
        static NONE: ChunkMap = ChunkMap::empty();
        self.root_of(id).map_or(&NONE, |root| &root.chunks)
    }

    /// The shard holding chunk `chunk` of `id`'s family.
    pub fn chunk_shard(&self, id: TableId, chunk: ChunkId) -> Option<ShardId> {
        self.chunks(id).chunk(chunk).map(|c| c.shard)
    }

    /// Every shard that holds some of `id`, ascending: where DDL on it must go.
    pub fn shards_of(&self, id: TableId) -> Vec<ShardId> {
        if let Some(view) = self.view(id) {
            return view.shards.clone();
        }
        let Some(table) = self.table(id) else {
            return Vec::new();
        };
        let mut shards: Vec<ShardId> = match table.kind {
            TableKind::Duplicated => match table.tablespace_set {
                Some(set) => self
                    .tablespace_set(set)
                    .map(|s| s.shards.clone())
                    .unwrap_or_default(),
                None => self.shards.iter().map(|s| s.id).collect(),
            },
            TableKind::Sharded | TableKind::Unsharded => {
                let root = self.root_of(id).unwrap_or(table);
                root.chunks
                    .iter()
                    .copied()
                    .chain(
                        root.partition_sets
                            .iter()
                            .flat_map(|s| s.chunks.iter().copied()),
                    )
                    .chain(root.partitions.iter().map(|p| p.shard))
                    .collect()
            }
        };
        shards.sort();
        shards.dedup();
        shards
    }
}

//! Routing: which shard or shards a statement goes to.
//!
//! - [`plan`]: what a statement's text says about routing, read once from PostgreSQL's parse
//!   tree and cached per text ([`PlanCache`]).
//! - [`route`]: a plan plus Bind parameter values → [`Route`].
//! - [`place`]: sharding-key values → the shard holding the row.
//! - [`hash`]: PostgreSQL's hash-partition hash, computed locally.

pub mod hash;
pub mod normalize;
pub mod place;
pub mod plan;
pub mod route;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use plan::Plan;
pub use route::Route;

use crate::catalog::Snapshot;
use crate::model::TableId;

/// A session's `search_path` as the router reads unqualified names with it (schemas in order,
/// `$user` expanded), or unknown to the proxy; and what sets the plans made with it apart in the
/// cache.
#[derive(Debug, PartialEq, Eq)]
pub struct SearchPath {
    schemas: Option<Vec<String>>,
    /// Appended to a text's cache key; empty for the proxy's default path, whose plans are
    /// keyed by their text alone.
    key: Box<[u8]>,
}

impl SearchPath {
    /// A path the session set, `$user` meaning `user`.
    pub fn known(schemas: Vec<String>, user: &str) -> SearchPath {
        let schemas: Vec<String> = schemas
            .into_iter()
            .map(|s| if s == "$user" { user.to_string() } else { s })
            .collect();
        // NUL, which no statement text holds, before each schema, and after the last: an
        // empty path is not the default one.
        let mut key = Vec::new();
        for s in &schemas {
            key.push(0);
            key.extend_from_slice(s.as_bytes());
        }
        key.push(0);
        SearchPath {
            schemas: Some(schemas),
            key: key.into(),
        }
    }

    /// A path the proxy cannot follow (set by `set_config`, inside a block, …).
    pub fn unknown() -> SearchPath {
        SearchPath {
            schemas: None,
            key: (*b"\0?").into(),
        }
    }

    /// The schemas, when known.
    pub fn schemas(&self) -> Option<&[String]> {
        self.schemas.as_deref()
    }

    /// The same path as the proxy's default, whose plans it can share.
    fn as_default(&self) -> SearchPath {
        SearchPath {
            schemas: self.schemas.clone(),
            key: Box::default(),
        }
    }
}

/// The cache key of `text` planned under `path`: the text itself under the default path.
fn cache_key<'t>(text: &'t [u8], path: &SearchPath) -> std::borrow::Cow<'t, [u8]> {
    if path.key.is_empty() {
        text.into()
    } else {
        [text, &path.key].concat().into()
    }
}

/// A plan shared by simple queries that differ in literals: valid for a text whose literals at
/// the `fixed` positions have these values (the plan was built with them).
struct SharedPlan {
    /// The normalised text it was made for, with its search path's key.
    key: Box<[u8]>,
    plan: Arc<Plan>,
    fixed: Vec<(usize, Box<str>)>,
}

impl SharedPlan {
    fn fits(&self, literals: &normalize::Literals<'_>) -> bool {
        self.fixed
            .iter()
            .all(|(i, v)| literals.get(*i).is_some_and(|l| *l.value == **v))
    }
}

/// What a session keeps between its simple queries: the buffer their normalised texts are
/// written to, and the last shared plan it used, which a query repeated with other literals
/// finds again without the shared cache's lock or a hash.
#[derive(Default)]
pub struct SimpleMemo {
    key: Vec<u8>,
    last: Option<(i64, Arc<SharedPlan>)>,
    /// The session's search path; `None`: the proxy's default.
    path: Option<Arc<SearchPath>>,
}

impl SimpleMemo {
    /// The session's search path changed (`None`: back to the proxy's default): its queries'
    /// plans are others from now on.
    pub fn set_search_path(&mut self, path: Option<Arc<SearchPath>>) {
        self.path = path;
        self.last = None;
    }

    /// Normalises `sql` into the session's key buffer ([`SimpleMemo::key`]): its literals, or
    /// `None` when the text cannot be normalised (the buffer then holds no key).
    pub fn normalise<'q>(&mut self, sql: &'q [u8]) -> Option<normalize::Literals<'q>> {
        normalize::normalize_into(sql, &mut self.key)
    }

    /// The normalised text of the query [`SimpleMemo::normalise`] read last.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

/// A simple query's literal values, in the order routing reads them.
pub type LiteralValues<'q> = smallvec::SmallVec<[std::borrow::Cow<'q, str>; 4]>;

/// Plans by statement text, shared by every session of a proxy. A plan is valid for the catalog
/// version it was made at; a newer snapshot makes every older plan a miss.
pub struct PlanCache {
    inner: Mutex<CacheInner>,
    capacity: usize,
    /// The search path the proxy's connections to the shards start with.
    default_path: SearchPath,
}

#[derive(Default)]
struct CacheInner {
    version: i64,
    /// By exact text: prepared statements.
    plans: foldhash::HashMap<Box<[u8]>, (Arc<Plan>, u64)>,
    /// By normalised text: simple queries (with the clock when last used).
    shared: foldhash::HashMap<Box<[u8]>, (Arc<SharedPlan>, u64)>,
    columns: HashMap<TableId, Arc<Vec<String>>>,
    column_defs: HashMap<TableId, Arc<Vec<plan::ColumnDef>>>,
    /// Bumped on every hit, so eviction can drop the least recently used half.
    clock: u64,
}

impl PlanCache {
    pub fn new(capacity: usize) -> PlanCache {
        PlanCache {
            inner: Mutex::new(CacheInner::default()),
            capacity: capacity.max(16),
            default_path: SearchPath::unknown().as_default(),
        }
    }

    /// Sets the path the proxy's connections to the shards start with (`None`: not known),
    /// which is also what a session's path is until it sets another.
    pub fn set_default_path(&mut self, path: Option<&SearchPath>) {
        self.default_path = path.unwrap_or(&SearchPath::unknown()).as_default();
    }

    /// The path a session starts with when its startup packet gives none.
    pub fn default_path(&self) -> &SearchPath {
        &self.default_path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The plan of `sql` at `snapshot`'s version, made (with a parse, counted in `parses`) on a
    /// miss. `None`: the INSERT needs the columns of a table first ([`PlanCache::set_columns`]).
    /// `path`: the session's search path (`None`: the proxy's default).
    pub fn plan(
        &self,
        sql: &[u8],
        path: Option<&SearchPath>,
        snapshot: &Snapshot,
        parses: &metrics::Counter,
    ) -> Result<Arc<Plan>, TableId> {
        let path = path.unwrap_or(&self.default_path);
        let key = cache_key(sql, path);
        {
            let mut inner = self.lock();
            inner.renew(snapshot.version());
            inner.clock += 1;
            let now = inner.clock;
            if let Some((plan, used)) = inner.plans.get_mut(&*key) {
                *used = now;
                return Ok(plan.clone());
            }
        }
        parses.increment(1);
        let text = String::from_utf8_lossy(sql);
        let made = {
            let columns = ColumnsOf(self);
            plan::plan_in(&text, snapshot, path.schemas(), &columns)
        };
        let plan = match made {
            plan::Planned::Plan(p) => Arc::new(p),
            plan::Planned::NeedColumns(t) => return Err(t),
        };
        let mut inner = self.lock();
        if inner.version == snapshot.version() {
            if inner.plans.len() >= self.capacity {
                let mut ages: Vec<u64> = inner.plans.values().map(|(_, u)| *u).collect();
                ages.sort_unstable();
                let cutoff = ages[ages.len() / 2];
                inner.plans.retain(|_, (_, u)| *u > cutoff);
            }
            let now = inner.clock;
            inner.plans.insert(key.into(), (plan.clone(), now));
        }
        Ok(plan)
    }

    /// The general path of the single SELECT `sql` (not cached: a SCROLL cursor's, rare).
    pub fn plan_combined(
        &self,
        sql: &str,
        path: Option<&SearchPath>,
        snapshot: &Snapshot,
    ) -> Result<Option<Arc<plan::CombinePlan>>, TableId> {
        let path = path.unwrap_or(&self.default_path);
        let columns = ColumnsOf(self);
        plan::combine_in(sql, snapshot, path.schemas(), &columns).map(|c| c.map(Arc::new))
    }

    /// The plan of a simple query, shared with every query that differs from it in plain
    /// literals only where the plan does not depend on them; with the query's literals, which
    /// routing reads through [`plan::Operand::Literal`]. `memo` is the session's: a hit there
    /// does not count as a use in the shared cache's eviction order. `literals`: what
    /// [`SimpleMemo::normalise`] made of `sql` just before.
    pub fn plan_simple<'q>(
        &self,
        sql: &'q [u8],
        literals: Option<normalize::Literals<'q>>,
        snapshot: &Snapshot,
        parses: &metrics::Counter,
        memo: &mut SimpleMemo,
    ) -> Result<(Arc<Plan>, LiteralValues<'q>), TableId> {
        let path = memo.path.as_deref().unwrap_or(&self.default_path);
        let Some(literals) = literals else {
            return self
                .plan(sql, Some(path), snapshot, parses)
                .map(|p| (p, LiteralValues::new()));
        };
        let values = || literals.iter().map(|l| l.value.clone()).collect();
        // Under the default path the key is the normalised text itself, read where it lies.
        let key = cache_key(&memo.key, path);
        if let Some((version, shared)) = &memo.last {
            if *version == snapshot.version() && *shared.key == *key && shared.fits(&literals) {
                return Ok((shared.plan.clone(), values()));
            }
        }
        {
            let mut inner = self.lock();
            inner.renew(snapshot.version());
            inner.clock += 1;
            let now = inner.clock;
            if let Some((shared, used)) = inner.shared.get_mut(&*key) {
                if shared.fits(&literals) {
                    *used = now;
                    memo.last = Some((snapshot.version(), shared.clone()));
                    return Ok((shared.plan.clone(), values()));
                }
            }
        }
        parses.increment(1);
        let text = String::from_utf8_lossy(sql);
        let made = plan::plan_in(&text, snapshot, path.schemas(), &ColumnsOf(self));
        let mut plan = match made {
            plan::Planned::Plan(p) => p,
            plan::Planned::NeedColumns(t) => return Err(t),
        };
        let offsets: Vec<usize> = literals.iter().map(|l| l.offset).collect();
        let free = plan.localize(&offsets, sql);
        let fixed = literals
            .iter()
            .enumerate()
            .filter(|(i, _)| !free.contains(i))
            .map(|(i, l)| (i, l.value.as_ref().into()))
            .collect();
        let shared = Arc::new(SharedPlan {
            key: key.into(),
            plan: Arc::new(plan),
            fixed,
        });
        memo.last = Some((snapshot.version(), shared.clone()));
        let mut inner = self.lock();
        if inner.version == snapshot.version() {
            if inner.shared.len() >= self.capacity {
                let mut ages: Vec<u64> = inner.shared.values().map(|(_, u)| *u).collect();
                ages.sort_unstable();
                let cutoff = ages[ages.len() / 2];
                inner.shared.retain(|_, (_, u)| *u > cutoff);
            }
            let used = inner.clock;
            inner
                .shared
                .insert(shared.key.clone(), (shared.clone(), used));
        }
        Ok((shared.plan.clone(), values()))
    }

    /// Records a table's columns in order (fetched from a shard) for INSERTs without a column
    /// list, valid until the catalog version changes. Columns read at a newer version than the
    /// cache's renew it first: dropping them would send the caller back to fetch them again,
    /// and with other sessions' DDL in between, again and again.
    pub fn set_columns(&self, version: i64, table: TableId, columns: Vec<plan::ColumnDef>) {
        let mut inner = self.lock();
        if version > inner.version {
            inner.renew(version);
        }
        if inner.version == version {
            let names = columns.iter().map(|c| c.name.clone()).collect();
            inner.columns.insert(table, Arc::new(names));
            inner.column_defs.insert(table, Arc::new(columns));
        }
    }

    /// A table's columns recorded by [`PlanCache::set_columns`], while the catalog is still at
    /// `version`.
    pub fn columns(&self, version: i64, table: TableId) -> Option<Arc<Vec<String>>> {
        let mut inner = self.lock();
        inner.renew(version);
        inner.columns.get(&table).cloned()
    }

    /// Forgets every plan and column list: a table's columns changed.
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.plans.clear();
        inner.shared.clear();
        inner.columns.clear();
        inner.column_defs.clear();
    }
}

impl CacheInner {
    /// Drops everything made at an older catalog version.
    fn renew(&mut self, version: i64) {
        if self.version != version {
            self.plans.clear();
            self.shared.clear();
            self.columns.clear();
            self.column_defs.clear();
            self.version = version;
        }
    }
}

struct ColumnsOf<'a>(&'a PlanCache);

impl plan::ColumnSource for ColumnsOf<'_> {
    fn columns(&self, table: TableId) -> Option<Arc<Vec<String>>> {
        self.0.lock().columns.get(&table).cloned()
    }

    fn column_defs(&self, table: TableId) -> Option<Arc<Vec<plan::ColumnDef>>> {
        self.0.lock().column_defs.get(&table).cloned()
    }
}

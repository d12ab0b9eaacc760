//! User-defined types' OIDs on each shard, translated to the first shard's.
//!
//! A type made through the proxy (an enum, a domain, a composite, and the array type PostgreSQL
//! makes with each) exists on every shard under another OID on each, and clients cache OIDs:
//! asyncpg and tokio-postgres look a type up once by the OID a RowDescription or
//! ParameterDescription names, psycopg maps a registered enum's OID to its Python class. So
//! every OID a client sees is the first shard's — where the proxy sends the statements that
//! name no recorded table, the catalog lookups among them — and every OID a client sends is
//! turned into the shard's own before it reaches the shard. Built-in types (OIDs below
//! [`FIRST_NORMAL_OID`]) are the same on every server of one major version and pass as they
//! are.
//!
//! The maps are read from the shards' `pg_type` by name (schema and type name), when the proxy
//! starts and again after it is marked stale: by DDL through the proxy that may change types,
//! and by an answer naming an OID the map does not know (a type made elsewhere). Such an answer
//! passes unchanged; the next statement on the shard waits for the new map.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::model::ShardId;

/// PostgreSQL's `FirstNormalObjectId`: OIDs from here on are assigned at run time, so the same
/// type has another one on each server.
pub const FIRST_NORMAL_OID: u32 = 16384;

/// What each shard is asked: its types made at run time, by schema and name. Temporary schemas
/// are listed too, so that a session's own temporary row types are known not to be shared.
pub const LIST_TYPES_SQL: &str = "SELECT t.oid::int8, n.nspname::text, t.typname::text, \
     CASE WHEN t.typcategory = 'A' THEN t.typelem::int8 END \
     FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace \
     WHERE t.oid >= 16384";

/// One run-time type of a shard as [`LIST_TYPES_SQL`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedType {
    pub oid: u32,
    pub schema: String,
    pub name: String,
    /// An array type's element type.
    pub element: Option<u32>,
}

/// One shard's run-time types against the first shard's.
#[derive(Debug, Default)]
struct TypeMap {
    /// The shard's OID → the first shard's, where they differ.
    to_first: HashMap<u32, u32>,
    /// The first shard's OID → the shard's, where they differ.
    from_first: HashMap<u32, u32>,
    /// The shard's run-time types the first shard has under the same OID, or has not at all:
    /// they pass as they are.
    unchanged: HashSet<u32>,
    /// The shard's array types whose element type has another OID on the first shard: a
    /// binary array value names its element type, so such values need it changed too.
    /// Array OID → (the shard's element OID, the first shard's).
    arrays: HashMap<u32, (u32, u32)>,
}

/// The columns of the result being read whose values are binary arrays naming the shard's own
/// element type (set by a RowDescription, applied to each DataRow until the result ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinaryArrays(Box<[ArrayColumn]>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ArrayColumn {
    column: u16,
    shard_element: u32,
    first_element: u32,
}

/// The translation of one shard's type OIDs, shared by its connections.
#[derive(Debug)]
pub struct ShardTypes {
    map: RwLock<Arc<TypeMap>>,
    /// Some OID differs: Parse messages are translated.
    differs: AtomicBool,
    stale: Arc<AtomicBool>,
}

impl ShardTypes {
    fn map(&self) -> Arc<TypeMap> {
        match self.map.read() {
            Ok(m) => m.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Translates one frame from the shard in place: the type OIDs of a RowDescription (`T`)
    /// or ParameterDescription (`t`) become the first shard's, and so does the element OID
    /// inside each binary array value of a user-defined type in the DataRows (`D`) of the
    /// result a RowDescription began — `arrays` holds which columns those are until the result
    /// ends. An OID the map does not know marks the maps stale and passes unchanged. Built-in
    /// types only (the usual answer) cost a walk over a description's fields.
    pub fn translate(&self, tag: u8, body: &mut [u8], arrays: &mut Option<BinaryArrays>) {
        match tag {
            b'T' | b't' => {}
            b'D' => {
                if let Some(a) = arrays {
                    a.apply(body);
                }
                return;
            }
            // The result ends (or is suspended: a later Execute may not describe it again).
            b'C' | b'E' | b'Z' | b's' | b'I' => {
                *arrays = None;
                return;
            }
            _ => return,
        }
        let mut map: Option<Arc<TypeMap>> = None;
        let mut unknown = false;
        let mut binary_arrays = Vec::new();
        let mut translate = |column: usize, oid: u32, binary: bool| -> Option<u32> {
            if oid < FIRST_NORMAL_OID {
                return None;
            }
            let m = map.get_or_insert_with(|| self.map());
            let first = m.to_first.get(&oid).copied();
            unknown |= first.is_none() && !m.unchanged.contains(&oid);
            if let (true, Some(&(shard_element, first_element))) = (binary, m.arrays.get(&oid)) {
                binary_arrays.push(ArrayColumn {
                    column: column as u16,
                    shard_element,
                    first_element,
                });
            }
            first
        };
        if tag == b'T' {
            for_each_row_type(body, &mut translate);
        } else {
            for_each_oid_list(body, &mut |oid| translate(0, oid, false));
        }
        if unknown {
            self.stale.store(true, Ordering::Relaxed);
        }
        if tag == b'T' {
            *arrays = (!binary_arrays.is_empty()).then(|| BinaryArrays(binary_arrays.into()));
        }
    }

    /// Whether some type's OID differs from the first shard's (Parse messages need a look).
    pub fn differs(&self) -> bool {
        self.differs.load(Ordering::Relaxed)
    }

    /// A Parse's parameter types (a count, then the OIDs) with the first shard's OIDs turned
    /// into this shard's; `None` when nothing changes.
    pub fn from_first(&self, param_types: &[u8]) -> Option<Vec<u8>> {
        if !self.differs.load(Ordering::Relaxed) {
            return None;
        }
        let needs = oids_of_list(param_types).any(|oid| oid >= FIRST_NORMAL_OID);
        if !needs {
            return None;
        }
        let map = self.map();
        let mut out = param_types.to_vec();
        for_each_oid_list(&mut out, &mut |oid| map.from_first.get(&oid).copied());
        (out != param_types).then_some(out)
    }
}

/// Every shard's translation, and whether the maps must be read again.
#[derive(Debug)]
pub struct TypeOids {
    /// Index: shard number. The first shard's entry is never consulted.
    shards: Vec<Arc<ShardTypes>>,
    stale: Arc<AtomicBool>,
    /// One refresh at a time; the others wait for it and find the maps fresh. It holds when
    /// the next may start: a shard that cannot be read is not asked again at once.
    refreshing: tokio::sync::Mutex<Option<Instant>>,
}

/// How long after a failed refresh the next may start.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// A refresh under way: [`TypeOids::install`] its result, or drop it when the shards could not
/// be read.
pub struct Refresh<'a>(tokio::sync::MutexGuard<'a, Option<Instant>>);

impl Drop for Refresh<'_> {
    fn drop(&mut self) {
        if self.0.is_some() {
            *self.0 = Some(Instant::now() + RETRY_AFTER);
        }
    }
}

impl TypeOids {
    /// Maps for `shards` shards, stale until first installed.
    pub fn new(shards: usize) -> TypeOids {
        let stale = Arc::new(AtomicBool::new(true));
        TypeOids {
            shards: (0..shards)
                .map(|_| {
                    Arc::new(ShardTypes {
                        map: RwLock::new(Arc::default()),
                        differs: AtomicBool::new(false),
                        stale: stale.clone(),
                    })
                })
                .collect(),
            stale,
            refreshing: tokio::sync::Mutex::new(None),
        }
    }

    /// The translation a connection to `shard` applies; none for the first shard.
    pub fn of(&self, shard: ShardId) -> Option<Arc<ShardTypes>> {
        match shard.0 {
            0 => None,
            i => self.shards.get(i as usize).cloned(),
        }
    }

    pub fn is_stale(&self) -> bool {
        self.stale.load(Ordering::Relaxed)
    }

    /// The shards' types may have changed: read them again before the next statement on a
    /// shard other than the first.
    pub fn mark_stale(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }

    /// Held while the maps are read; `None` when another refresh made them fresh meanwhile,
    /// or the last one failed a moment ago.
    pub async fn begin_refresh(&self) -> Option<Refresh<'_>> {
        let mut guard = self.refreshing.lock().await;
        if !self.is_stale() || guard.is_some_and(|next| Instant::now() < next) {
            return None;
        }
        *guard = Some(Instant::now());
        Some(Refresh(guard))
    }

    /// Installs the maps from every shard's listed types, the first shard's first. Cleared
    /// staleness first: a change marked while the lists were read is read again.
    pub fn install(&self, refresh: Refresh<'_>, listed: &[Vec<ListedType>]) {
        let mut refresh = refresh;
        *refresh.0 = None;
        self.stale.store(false, Ordering::Relaxed);
        let Some(first) = listed.first() else {
            return;
        };
        let first: HashMap<(&str, &str), u32> = first
            .iter()
            .map(|t| ((t.schema.as_str(), t.name.as_str()), t.oid))
            .collect();
        for (shard, types) in self.shards.iter().zip(listed).skip(1) {
            let mut map = TypeMap::default();
            for t in types {
                match first.get(&(t.schema.as_str(), t.name.as_str())) {
                    Some(&f) if f != t.oid => {
                        map.to_first.insert(t.oid, f);
                        map.from_first.insert(f, t.oid);
                    }
                    _ => {
                        map.unchanged.insert(t.oid);
                    }
                }
            }
            for t in types {
                let Some(element) = t.element else { continue };
                if let Some(&first_element) = map.to_first.get(&element) {
                    map.arrays.insert(t.oid, (element, first_element));
                }
            }
            shard
                .differs
                .store(!map.to_first.is_empty(), Ordering::Relaxed);
            match shard.map.write() {
                Ok(mut m) => *m = Arc::new(map),
                Err(poisoned) => *poisoned.into_inner() = Arc::new(map),
            }
        }
    }
}

/// Calls `f` on each field of a RowDescription body (its number, type OID, and whether its
/// format is binary), storing the OID it returns.
fn for_each_row_type(body: &mut [u8], f: &mut dyn FnMut(usize, u32, bool) -> Option<u32>) {
    let Some(count) = body.get(..2).map(|c| u16::from_be_bytes([c[0], c[1]])) else {
        return;
    };
    let mut at = 2;
    for column in 0..count as usize {
        // Name, then table OID (4), column number (2), type OID (4), size (2), modifier (4),
        // format (2).
        let Some(nul) = body.get(at..).and_then(|b| b.iter().position(|&c| c == 0)) else {
            return;
        };
        let oid_at = at + nul + 1 + 6;
        let binary = body.get(oid_at + 10..oid_at + 12) == Some(&[0, 1][..]);
        let Some(oid) = body.get_mut(oid_at..oid_at + 4) else {
            return;
        };
        if let Some(new) = f(
            column,
            u32::from_be_bytes([oid[0], oid[1], oid[2], oid[3]]),
            binary,
        ) {
            oid.copy_from_slice(&new.to_be_bytes());
        }
        at = oid_at + 4 + 8;
    }
}

/// Whether [`ShardTypes::translate`] has anything to do with a frame tagged `tag`: the cheap
/// test the forwarding loop makes per frame.
#[inline]
pub fn translated(tag: u8, arrays: &Option<BinaryArrays>) -> bool {
    matches!(tag, b'T' | b't') || arrays.is_some()
}

impl BinaryArrays {
    /// Gives each listed column's binary array value in a DataRow body the first shard's
    /// element OID. An array value begins: dimensions (4), null flag (4), element OID (4).
    fn apply(&self, body: &mut [u8]) {
        let mut at = 2;
        let mut next = self.0.iter().peekable();
        let mut column = 0u16;
        while let Some(c) = next.peek() {
            let Some(len) = body.get(at..at + 4) else {
                return;
            };
            let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
            at += 4;
            let value = len.max(0) as usize;
            if column == c.column {
                if let Some(oid) = body.get_mut(at + 8..at + 12).filter(|_| value >= 12) {
                    if oid == c.shard_element.to_be_bytes() {
                        oid.copy_from_slice(&c.first_element.to_be_bytes());
                    }
                }
                next.next();
            }
            at += value;
            column += 1;
        }
    }
}

/// Calls `f` on each OID of a count-prefixed OID list (a ParameterDescription body, a Parse's
/// parameter types), storing what it returns.
fn for_each_oid_list(list: &mut [u8], f: &mut dyn FnMut(u32) -> Option<u32>) {
    let Some(count) = list.get(..2).map(|c| u16::from_be_bytes([c[0], c[1]])) else {
        return;
    };
    for i in 0..count as usize {
        let Some(oid) = list.get_mut(2 + 4 * i..6 + 4 * i) else {
            return;
        };
        if let Some(new) = f(u32::from_be_bytes([oid[0], oid[1], oid[2], oid[3]])) {
            oid.copy_from_slice(&new.to_be_bytes());
        }
    }
}

fn oids_of_list(list: &[u8]) -> impl Iterator<Item = u32> + '_ {
    let count = list
        .get(..2)
        .map_or(0, |c| u16::from_be_bytes([c[0], c[1]]) as usize);
    list.get(2..)
        .unwrap_or_default()
        .chunks_exact(4)
        .take(count)
        .map(|o| u32::from_be_bytes([o[0], o[1], o[2], o[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(oid: u32, name: &str) -> ListedType {
        ListedType {
            oid,
            schema: "public".into(),
            name: name.into(),
            element: None,
        }
    }

    fn array(oid: u32, name: &str, element: u32) -> ListedType {
        ListedType {
            element: Some(element),
            ..listed(oid, name)
        }
    }

    fn row_description(fields: &[(&str, u32)]) -> Vec<u8> {
        described(fields, 0)
    }

    fn described(fields: &[(&str, u32)], format: u16) -> Vec<u8> {
        let mut b = (fields.len() as u16).to_be_bytes().to_vec();
        for (name, oid) in fields {
            b.extend_from_slice(name.as_bytes());
            b.push(0);
            b.extend_from_slice(&7u32.to_be_bytes());
            b.extend_from_slice(&1u16.to_be_bytes());
            b.extend_from_slice(&oid.to_be_bytes());
            b.extend_from_slice(&(-1i16).to_be_bytes());
            b.extend_from_slice(&(-1i32).to_be_bytes());
            b.extend_from_slice(&format.to_be_bytes());
        }
        b
    }

    fn oid_list(oids: &[u32]) -> Vec<u8> {
        let mut b = (oids.len() as u16).to_be_bytes().to_vec();
        for o in oids {
            b.extend_from_slice(&o.to_be_bytes());
        }
        b
    }

    fn oids() -> TypeOids {
        let oids = TypeOids::new(2);
        let refresh = futures::executor::block_on(oids.begin_refresh()).expect("stale at first");
        oids.install(
            refresh,
            &[
                vec![
                    listed(20000, "mood"),
                    array(20001, "_mood", 20000),
                    listed(20100, "same"),
                ],
                vec![
                    listed(30000, "mood"),
                    array(30001, "_mood", 30000),
                    listed(20100, "same"),
                ],
            ],
        );
        oids
    }

    #[test]
    fn descriptions_carry_the_first_shards_oids() {
        let oids = oids();
        assert!(!oids.is_stale());
        let shard = oids.of(ShardId(1)).expect("second shard");
        let mut body = row_description(&[("a", 23), ("m", 30000), ("ms", 30001), ("s", 20100)]);
        shard.translate(b'T', &mut body, &mut None);
        assert_eq!(
            body,
            row_description(&[("a", 23), ("m", 20000), ("ms", 20001), ("s", 20100)])
        );
        let mut params = oid_list(&[30001, 25, 30000]);
        shard.translate(b't', &mut params, &mut None);
        assert_eq!(params, oid_list(&[20001, 25, 20000]));
        assert!(!oids.is_stale());
        assert!(oids.of(ShardId(0)).is_none());
    }

    #[test]
    fn parse_types_become_the_shards_own() {
        let oids = oids();
        let shard = oids.of(ShardId(1)).expect("second shard");
        assert_eq!(
            shard.from_first(&oid_list(&[20000, 0, 20001])),
            Some(oid_list(&[30000, 0, 30001]))
        );
        assert_eq!(shard.from_first(&oid_list(&[23, 0])), None);
        assert_eq!(shard.from_first(&oid_list(&[])), None);
    }

    #[test]
    fn an_unknown_run_time_oid_marks_the_maps_stale() {
        let oids = oids();
        let shard = oids.of(ShardId(1)).expect("second shard");
        let mut body = row_description(&[("x", 40000)]);
        shard.translate(b'T', &mut body, &mut None);
        assert_eq!(body, row_description(&[("x", 40000)]));
        assert!(oids.is_stale());
    }

    #[test]
    fn malformed_descriptions_are_left_alone() {
        let oids = oids();
        let shard = oids.of(ShardId(1)).expect("second shard");
        for mut body in [vec![], vec![0, 3, b'a'], vec![0, 1, b'a', 0, 1, 2]] {
            let before = body.clone();
            shard.translate(b'T', &mut body, &mut None);
            shard.translate(b't', &mut body, &mut None);
            assert_eq!(body, before);
        }
    }

    /// A DataRow body of `values` (None: NULL).
    fn data_row(values: &[Option<Vec<u8>>]) -> Vec<u8> {
        let mut b = (values.len() as u16).to_be_bytes().to_vec();
        for v in values {
            match v {
                Some(v) => {
                    b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    b.extend_from_slice(v);
                }
                None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        b
    }

    /// A one-dimensional binary array of `element` holding one 2-byte value.
    fn binary_array(element: u32) -> Vec<u8> {
        let mut b = Vec::new();
        for word in [1u32, 0, element, 1, 1, 2] {
            b.extend_from_slice(&word.to_be_bytes());
        }
        b.extend_from_slice(b"ok");
        b
    }

    #[test]
    fn binary_arrays_name_the_first_shards_element_type_until_the_result_ends() {
        let oids = oids();
        let shard = oids.of(ShardId(1)).expect("second shard");
        let mut arrays = None;
        let fields = [("a", 23), ("ms", 30001), ("ms2", 30001)];
        shard.translate(b'T', &mut described(&fields, 1), &mut arrays);
        assert!(arrays.is_some());
        let int4 = Some(7i32.to_be_bytes().to_vec());
        let mut row = data_row(&[int4.clone(), Some(binary_array(30000)), None]);
        shard.translate(b'D', &mut row, &mut arrays);
        assert_eq!(
            row,
            data_row(&[int4.clone(), Some(binary_array(20000)), None])
        );
        // An empty array names its element type too; a short value is left alone.
        let empty = |e: u32| [0u32, 0, e].iter().flat_map(|w| w.to_be_bytes()).collect();
        let mut row = data_row(&[None, Some(empty(30000)), Some(vec![1, 2])]);
        shard.translate(b'D', &mut row, &mut arrays);
        assert_eq!(row, data_row(&[None, Some(empty(20000)), Some(vec![1, 2])]));
        shard.translate(b'C', &mut b"SELECT 2\0".to_vec(), &mut arrays);
        assert!(arrays.is_none());
        // Text results, and the first shard's arrays, are not touched.
        shard.translate(b'T', &mut described(&fields, 0), &mut arrays);
        assert!(arrays.is_none());
    }
}

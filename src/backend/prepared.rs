//! The statements one backend connection has prepared for clients, by text, under names of the
//! proxy's own (`shardwire:N`), with a use counter so the least recently used can be dropped
//! when a connection collects too many.

use std::sync::Arc;

/// A prepared statement as the client defined it: shared by the client's registry and the
/// backend connections that have it prepared.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct StatementText {
    pub query: Box<[u8]>,
    pub param_types: Box<[u8]>,
}

impl StatementText {
    pub fn is(&self, query: &[u8], param_types: &[u8]) -> bool {
        *self.query == *query && *self.param_types == *param_types
    }
}

/// More than this many statements on one connection, and the least recently used are dropped
/// (DEALLOCATE) the next time a client takes the connection.
pub const MAX_PREPARED_PER_CONNECTION: usize = 1000;

struct Entry {
    name: Arc<str>,
    last_used: u64,
}

#[derive(Default)]
pub struct PreparedStatements {
    by_text: foldhash::HashMap<Arc<StatementText>, Entry>,
    next_name: u64,
    clock: u64,
}

impl PreparedStatements {
    /// The backend name of `statement`, if prepared here; counts as a use.
    pub fn get(&mut self, statement: &StatementText) -> Option<Arc<str>> {
        self.clock += 1;
        let now = self.clock;
        self.by_text.get_mut(statement).map(|e| {
            e.last_used = now;
            e.name.clone()
        })
    }

    /// Registers `statement` under a fresh name, which a client could not have chosen by accident.
    pub fn insert(&mut self, statement: Arc<StatementText>) -> Arc<str> {
        self.next_name += 1;
        self.clock += 1;
        let name: Arc<str> = Arc::from(format!("shardwire:{}", self.next_name));
        self.by_text.insert(
            statement,
            Entry {
                name: name.clone(),
                last_used: self.clock,
            },
        );
        name
    }

    pub fn remove(&mut self, statement: &StatementText) {
        self.by_text.remove(statement);
    }

    /// Forgets everything (after DISCARD ALL or DEALLOCATE ALL ran on the connection).
    pub fn clear(&mut self) {
        self.by_text.clear();
    }

    pub fn len(&self) -> usize {
        self.by_text.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_text.is_empty()
    }

    /// More statements than a connection keeps: the next checkout evicts some.
    pub fn has_excess(&self) -> bool {
        self.by_text.len() > MAX_PREPARED_PER_CONNECTION
    }

    /// Past the limit: forgets the least recently used quarter and returns their names, for
    /// the caller to DEALLOCATE.
    pub fn evict_excess(&mut self) -> Vec<Arc<str>> {
        if !self.has_excess() {
            return Vec::new();
        }
        let mut uses: Vec<u64> = self.by_text.values().map(|e| e.last_used).collect();
        uses.sort_unstable();
        let cutoff = uses[MAX_PREPARED_PER_CONNECTION / 4];
        let mut evicted = Vec::new();
        self.by_text.retain(|_, e| {
            let keep = e.last_used > cutoff;
            if !keep {
                evicted.push(e.name.clone());
            }
            keep
        });
        evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(i: usize) -> Arc<StatementText> {
        Arc::new(StatementText {
            query: format!("select {i}").into_bytes().into(),
            param_types: Box::new([0, 0]),
        })
    }

    #[test]
    fn least_recently_used_go_first() {
        let mut p = PreparedStatements::default();
        let all: Vec<_> = (0..=MAX_PREPARED_PER_CONNECTION).map(stmt).collect();
        for s in &all {
            p.insert(s.clone());
        }
        // Statement 0 is used again, so it must survive.
        assert!(p.get(&all[0]).is_some());
        let evicted = p.evict_excess();
        assert!(!evicted.is_empty());
        assert!(p.get(&all[0]).is_some());
        assert!(p.get(&all[1]).is_none());
        assert_eq!(p.len() + evicted.len(), MAX_PREPARED_PER_CONNECTION + 1);
        assert!(p.evict_excess().is_empty());
    }
}

//! A step's statements for one shard, as the proxy sends them: most as unnamed statements,
//! parsed and planned at each use; those a move runs again and again with the same text (the
//! locking read of a client's UPDATE, the DELETE of one partition, a one-row INSERT) kept
//! prepared on each backend connection, so PostgreSQL plans them once per connection (for the
//! locking read, a generic plan: pruned at execution, where planning it for the parameters'
//! values cost more than running it).

use crate::protocol::Extended;
use std::sync::Arc;

use bytes::BytesMut;

use crate::backend::prepared::StatementText;
use crate::backend::BackendConn;

/// One parameter of a statement the proxy sends: format code and value (`None`: NULL).
pub type Param<'a> = (i16, Option<&'a [u8]>);

enum Part {
    /// Complete messages.
    Messages(BytesMut),
    /// A statement kept prepared: its text, and its Bind after the statement's name.
    Prepared {
        text: Arc<StatementText>,
        bind: BytesMut,
        describe: bool,
    },
}

/// Extended-protocol statements without a Sync, to be sent on one connection.
#[derive(Default)]
pub struct Statements {
    parts: Vec<Part>,
}

impl Statements {
    /// Parse, Bind, Describe (when rows come back) and Execute of an unnamed statement.
    pub fn unnamed(
        &mut self,
        sql: &str,
        types: &[u8],
        params: &[Param<'_>],
        result_formats: &[u8],
        describe: bool,
    ) {
        let out = self.messages();
        Extended::new(out)
            .parse(b"", sql.as_bytes(), counted(types))
            .bind(b"", &bind_tail(params, result_formats));
        describe_execute(out, describe);
    }

    /// The same as [`Statements::unnamed`], kept prepared on the connection it runs on.
    pub fn prepared(
        &mut self,
        sql: &str,
        types: &[u8],
        params: &[Param<'_>],
        result_formats: &[u8],
        describe: bool,
    ) {
        let text = Arc::new(StatementText {
            query: sql.as_bytes().into(),
            param_types: counted(types).into(),
        });
        self.parts.push(Part::Prepared {
            text,
            bind: bind_tail(params, result_formats),
            describe,
        });
    }

    /// A statement of the proxy's own with no parameters (COMMIT, PREPARE TRANSACTION …).
    pub fn plain(&mut self, sql: &str) {
        self.unnamed(sql, &[], &[], &[], false);
    }

    /// `other`'s statements after these.
    pub fn append(&mut self, other: Statements) {
        self.parts.extend(other.parts);
    }

    /// The messages for `conn`: a prepared statement the connection lacks is parsed first
    /// under a new name and registered; `fresh` collects those, for the caller to forget if
    /// the batch fails (its Parse may not have run).
    pub fn assemble(
        self,
        conn: &mut BackendConn,
        out: &mut BytesMut,
        fresh: &mut Vec<Arc<StatementText>>,
    ) {
        for part in self.parts {
            match part {
                Part::Messages(m) => out.extend_from_slice(&m),
                Part::Prepared {
                    text,
                    bind,
                    describe,
                } => {
                    let name = match conn.prepared.get(&text) {
                        Some(name) => name,
                        None => {
                            let name = conn.prepared.insert(text.clone());
                            Extended::new(out).parse(
                                name.as_bytes(),
                                &text.query,
                                &text.param_types,
                            );
                            fresh.push(text);
                            name
                        }
                    };
                    Extended::new(out).bind(name.as_bytes(), &bind);
                    describe_execute(out, describe);
                }
            }
        }
    }

    fn messages(&mut self) -> &mut BytesMut {
        if !matches!(self.parts.last(), Some(Part::Messages(_))) {
            self.parts.push(Part::Messages(BytesMut::new()));
        }
        match self.parts.last_mut() {
            Some(Part::Messages(m)) => m,
            _ => unreachable!("a Messages part was just pushed"),
        }
    }
}

/// A count-prefixed list as given, or an empty one (Parse's parameter types, Bind's result
/// formats).
fn counted(list: &[u8]) -> &[u8] {
    if list.is_empty() {
        &[0, 0]
    } else {
        list
    }
}

/// A Bind's parameters and result formats: what follows its portal and statement names.
fn bind_tail(params: &[Param<'_>], result_formats: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    out.extend_from_slice(&(params.len() as i16).to_be_bytes());
    for (format, _) in params {
        out.extend_from_slice(&format.to_be_bytes());
    }
    out.extend_from_slice(&(params.len() as i16).to_be_bytes());
    for (_, value) in params {
        match value {
            Some(v) => {
                out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                out.extend_from_slice(v);
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    out.extend_from_slice(counted(result_formats));
    out
}

fn describe_execute(out: &mut BytesMut, describe: bool) {
    let mut messages = Extended::new(out);
    if describe {
        messages.describe_portal();
    }
    messages.execute();
}

//! `SELECT nextval('<key sequence>')` and `currval(…)`, answered by the proxy: the values come
//! from the cluster-wide sequence the generated keys take theirs from, which the shards' own
//! sequences know nothing of.

use super::{Session, SessionError};
use crate::catalog::TableId;
use crate::client_error::ClientError;
use crate::executor::gather;
use crate::frontend::pipeline::Pending;
use crate::frontend::FrontendError;
use crate::protocol::{self, Frame, MessageBuilder};
use crate::router::plan::{SequenceCall, SequenceFunction};
use bytes::BytesMut;
use std::collections::HashMap;

/// PostgreSQL's type OID of `nextval`'s result, int8.
const INT8_OID: i32 = 20;

/// The session's generated key values.
#[derive(Default)]
pub(super) struct KeyState {
    /// Generated key values taken for the INSERT being routed.
    pub pending: Vec<i64>,
    /// The last value this session got from each key sequence, which `currval` answers.
    pub last: LastValues,
}

/// The last value the session got from each key sequence (by table and column), from nextval
/// or from an INSERT's generated key, as PostgreSQL's currval keeps it per session.
#[derive(Default)]
pub(super) struct LastValues(HashMap<(TableId, String), i64>);

impl LastValues {
    pub(super) fn set(&mut self, table: TableId, column: &str, value: i64) {
        match self.0.get_mut(&(table, column.to_string())) {
            Some(v) => *v = value,
            None => {
                self.0.insert((table, column.to_string()), value);
            }
        }
    }

    fn get(&self, table: TableId, column: &str) -> Option<i64> {
        self.0.get(&(table, column.to_string())).copied()
    }
}

/// How the client asked for the call's answer.
pub(super) enum Asked {
    /// A simple query: the rows, then ReadyForQuery.
    Simple,
    /// A Bind: the value becomes the portal's one row, in the format the Bind asks for.
    Bind { portal: Box<[u8]>, binary: bool },
    /// A Describe of the prepared statement: no parameters, one int8 column.
    Describe,
}

pub(super) struct SequenceAnswer {
    call: SequenceCall,
    asked: Asked,
}

impl SequenceAnswer {
    pub(super) fn simple(call: &SequenceCall) -> SequenceAnswer {
        SequenceAnswer {
            call: call.clone(),
            asked: Asked::Simple,
        }
    }

    pub(super) fn bound(call: &SequenceCall, portal: &[u8], rest: &[u8]) -> SequenceAnswer {
        SequenceAnswer {
            call: call.clone(),
            asked: Asked::Bind {
                portal: portal.into(),
                binary: first_result_format(rest) == Some(1),
            },
        }
    }

    pub(super) fn describe(call: &SequenceCall) -> SequenceAnswer {
        SequenceAnswer {
            call: call.clone(),
            asked: Asked::Describe,
        }
    }
}

/// The format code of a Bind's first result column (`rest`: what follows the portal and
/// statement names); `None` when the Bind gives none (text).
fn first_result_format(rest: &[u8]) -> Option<i16> {
    let mut b = rest;
    let nformats = protocol::take_i16(&mut b, "Bind").ok()?.max(0) as usize;
    b = b.get(2 * nformats..)?;
    let nvalues = protocol::take_i16(&mut b, "Bind").ok()?.max(0);
    for _ in 0..nvalues {
        let len = protocol::take_i32(&mut b, "Bind").ok()?;
        if len > 0 {
            b = b.get(len as usize..)?;
        }
    }
    match protocol::take_i16(&mut b, "Bind").ok()? {
        n if n > 0 => protocol::take_i16(&mut b, "Bind").ok(),
        _ => None,
    }
}

/// The RowDescription of the call's one column, as PostgreSQL describes `nextval`'s.
fn description(name: &str, binary: bool) -> bytes::Bytes {
    protocol::one_column_description(name, INT8_OID, 8, binary)
}

fn data_row(value: i64, binary: bool) -> bytes::Bytes {
    let mut out = BytesMut::new();
    let mut m = MessageBuilder::new(&mut out, b'D');
    m.i16(1);
    if binary {
        m.i32(8).bytes(&value.to_be_bytes());
    } else {
        let text = value.to_string();
        m.i32(text.len() as i32).bytes(text.as_bytes());
    }
    m.finish();
    out.freeze()
}

impl Session {
    pub(super) async fn answer_sequence(
        &mut self,
        answer: SequenceAnswer,
        frame: &Frame<&[u8]>,
    ) -> Result<(), SessionError> {
        let SequenceAnswer { call, asked } = answer;
        if let Asked::Describe = asked {
            let mut out = BytesMut::new();
            MessageBuilder::new(&mut out, b't').i16(0).finish();
            out.extend_from_slice(&description(&call.result_name, false));
            self.pipeline
                .push(Pending::composed(out.freeze()), &mut self.cout);
            return Ok(());
        }
        let value = match call.function {
            SequenceFunction::Nextval => {
                let taken = self
                    .ctx
                    .keys
                    .take(&self.ctx.catalog, call.table, &call.column, 1)
                    .await;
                match taken.map(|v| v.first().copied()) {
                    Ok(Some(v)) => {
                        self.keys.last.set(call.table, &call.column, v);
                        v
                    }
                    Ok(None) => {
                        let e = FrontendError::KeysMissing;
                        return self
                            .refuse_query(frame, &e.sqlstate(), &e.client_message())
                            .await;
                    }
                    Err(e) => {
                        return self
                            .refuse_query(frame, &e.sqlstate(), &e.to_string())
                            .await
                    }
                }
            }
            SequenceFunction::Currval => match self.keys.last.get(call.table, &call.column) {
                Some(v) => v,
                None => {
                    let e = FrontendError::CurrvalUndefined(call.sequence.clone());
                    return self
                        .refuse_query(frame, &e.sqlstate(), &e.client_message())
                        .await;
                }
            },
        };
        match asked {
            Asked::Simple => {
                let mut out = BytesMut::new();
                out.extend_from_slice(&description(&call.result_name, false));
                out.extend_from_slice(&data_row(value, false));
                protocol::command_complete(&mut out, "SELECT 1");
                protocol::ready_for_query(&mut out, self.links.status());
                self.pipeline
                    .push(Pending::composed(out.freeze()), &mut self.cout);
            }
            Asked::Bind { portal, binary } => {
                self.pipeline.push(
                    Pending::composed(protocol::empty_message(b'2')),
                    &mut self.cout,
                );
                let rows = gather::Rows {
                    description: Some(description(&call.result_name, binary)),
                    rows: [data_row(value, binary)].into(),
                    tag: Some("SELECT 1".into()),
                    ..Default::default()
                };
                self.portals.put_buffered(portal, rows);
            }
            Asked::Describe => {}
        }
        Ok(())
    }
}

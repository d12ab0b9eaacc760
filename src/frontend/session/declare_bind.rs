//! A DECLARE sent through the extended protocol (psycopg 3's named cursors, SQLAlchemy's
//! `stream_results` over psycopg): its shards, and whether the proxy merges them, depend on the
//! Bind's values, so its Parse is answered by the proxy and the cursor declared at its Bind,
//! the values written into the statement as literals of the Parse's types.

use super::cursors::{Declared, Refusal};
use super::dest::Dest;
use super::{Session, SessionError};
use crate::frontend::pipeline::Pending;
use crate::frontend::socket::ClientSocket;
use crate::frontend::statements::ClientFrame;
use crate::protocol;
use crate::sql::cursor::{self, CursorStatement};
use bytes::BytesMut;
use tokio_postgres::error::SqlState;

impl Session {
    /// Where a DECLARE sent through the extended protocol goes, while the catalog records
    /// tables: held at its Parse, declared by the proxy at its Bind (its shards, and whether
    /// the proxy merges them, depend on the Bind's values).
    pub(super) fn declare_extended(&self, text: &[u8], parsed: ClientFrame<'_>) -> Option<Dest> {
        const DECLARE: u128 = crate::sql::classify::keyword(b"declare");
        if !self.ctx.catalog.has_tables() || crate::sql::classify::first_keyword(text) != DECLARE {
            return None;
        }
        match parsed {
            ClientFrame::Parse { .. } => Some(Dest::Hold),
            ClientFrame::Bind {
                portal,
                statement,
                rest,
            } => {
                let held = self.statements.get(statement)?;
                Some(Dest::DeclareBind(Box::new(DeclareBind {
                    portal: portal.into(),
                    sql: held.query.to_vec(),
                    param_types: held.param_types.to_vec(),
                    rest: rest.to_vec(),
                })))
            }
            _ => Some(Dest::LocalDescribe(text.into())),
        }
    }

    /// The Bind of a DECLARE held at its Parse: declared now, its parameters written into it;
    /// the portal's Execute answers `DECLARE CURSOR`.
    pub(super) async fn declare_at_bind(
        &mut self,
        bound: DeclareBind,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        self.drain_current().await?;
        let text = match with_parameters(&bound) {
            Ok(text) => text,
            Err(refusal) => return self.fail_bind(refusal),
        };
        let Some(CursorStatement::Declare(d)) = cursor::read(&text) else {
            return self.fail_bind(Refusal(
                SqlState::SYNTAX_ERROR,
                "a DECLARE shardwire cannot read".into(),
            ));
        };
        let failure = match self.declare(d, text.as_bytes(), true, client).await? {
            Declared::NotOurs | Declared::Done => None,
            Declared::Refused(refusal) => return self.fail_bind(refusal),
            Declared::Failed(error) => Some(error),
        };
        match failure {
            None => {
                self.pipeline.push(
                    Pending::composed(protocol::empty_message(b'2')),
                    &mut self.cout,
                );
                let rows = crate::executor::gather::Rows {
                    tag: Some("DECLARE CURSOR".into()),
                    ..Default::default()
                };
                self.portals.put_buffered(bound.portal, rows);
            }
            Some(error) => {
                self.pipeline.push(Pending::composed(error), &mut self.cout);
                self.batch.skip_until_sync = true;
            }
        }
        self.release_parked_if_idle();
        Ok(())
    }

    fn fail_bind(&mut self, Refusal(code, message): Refusal) -> Result<(), SessionError> {
        let mut error = BytesMut::new();
        protocol::error_response(&mut error, protocol::Severity::Error, &code, &message);
        self.pipeline
            .push(Pending::composed(error.freeze()), &mut self.cout);
        self.batch.skip_until_sync = true;
        // An open block fails at the batch's Sync, as with any refused message.
        self.batch.fail_block_at_sync = Some(message);
        Ok(())
    }
}

/// A DECLARE's Bind: its statement's text and parameter types, and the Bind's values.
pub(super) struct DeclareBind {
    pub portal: Box<[u8]>,
    pub sql: Vec<u8>,
    /// The Parse's parameter type count and OIDs, as sent.
    pub param_types: Vec<u8>,
    /// The Bind after its portal and statement names.
    pub rest: Vec<u8>,
}

/// The DECLARE's text with the Bind's values in place of its parameters, each cast to the
/// type the Parse gave it. Values in text format only.
fn with_parameters(bound: &DeclareBind) -> Result<String, Refusal> {
    let sql = std::str::from_utf8(&bound.sql).map_err(|_| {
        Refusal(
            SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            "DECLARE is not UTF-8".into(),
        )
    })?;
    let parts = crate::router::route::BindParts::read(&bound.rest)
        .map_err(|e| Refusal(SqlState::PROTOCOL_VIOLATION, e.to_string()))?;
    if parts.values.is_empty() {
        return Ok(sql.to_string());
    }
    let oids: Vec<u32> = {
        let mut b = &bound.param_types[..];
        let n = protocol::take_i16(&mut b, "Parse").unwrap_or(0).max(0);
        (0..n)
            .map(|_| protocol::take_i32(&mut b, "Parse").unwrap_or(0) as u32)
            .collect()
    };
    let mut types = Vec::with_capacity(parts.values.len());
    let mut args = Vec::with_capacity(parts.values.len());
    for (i, (value, format)) in parts.values.iter().zip(&parts.formats).enumerate() {
        let oid = oids.get(i).copied().unwrap_or(0);
        let text = match (value, *format) {
            (None, _) => None,
            (Some(v), 0) => Some(String::from_utf8_lossy(v).into_owned()),
            (Some(v), _) => Some(binary_as_text(oid, v).ok_or_else(|| {
                Refusal(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    format!(
                        "a DECLARE over several shards takes binary parameters of integer, \
                         float, boolean and text types only (parameter ${} has type OID {oid}); \
                         send it in text format",
                        i + 1
                    ),
                )
            })?),
        };
        let Some(type_name) = builtin_type_name(oid) else {
            return Err(Refusal(
                SqlState::FEATURE_NOT_SUPPORTED,
                format!(
                    "a DECLARE over several shards takes parameters of built-in types only \
                     (parameter ${} has type OID {oid})",
                    i + 1
                ),
            ));
        };
        types.push(type_name.to_string());
        args.push(crate::sql::prepare::Argument {
            text: match text {
                Some(v) => crate::sql::quote::quote_literal(&v),
                None => "NULL".into(),
            },
            constant: true,
        });
    }
    let prepared = crate::sql::prepare::Prepared::of(sql, types)
        .map_err(|e| Refusal(SqlState::SYNTAX_ERROR, e.to_string()))?;
    crate::sql::prepare::substitute("DECLARE", &prepared, &args)
        .map_err(|e| Refusal(SqlState::PROTOCOL_VIOLATION, e.to_string()))
}

/// A binary parameter value of built-in type `oid` in the type's text form.
fn binary_as_text(oid: u32, v: &[u8]) -> Option<String> {
    Some(match (oid, v.len()) {
        (16, 1) => if v[0] != 0 { "t" } else { "f" }.to_string(),
        (20, 8) => i64::from_be_bytes(v.try_into().ok()?).to_string(),
        (21, 2) => i16::from_be_bytes(v.try_into().ok()?).to_string(),
        (23, 4) => i32::from_be_bytes(v.try_into().ok()?).to_string(),
        (26, 4) => u32::from_be_bytes(v.try_into().ok()?).to_string(),
        // Shortest round-trip forms, which PostgreSQL reads back exactly.
        (700, 4) => f32::from_be_bytes(v.try_into().ok()?).to_string(),
        (701, 8) => f64::from_be_bytes(v.try_into().ok()?).to_string(),
        (0 | 25 | 1043 | 1042 | 19 | 705, _) => String::from_utf8(v.to_vec()).ok()?,
        _ => return None,
    })
}

/// The name a parameter of built-in type `oid` is cast to (`unknown` for an unspecified one,
/// which PostgreSQL types by its context).
fn builtin_type_name(oid: u32) -> Option<&'static str> {
    Some(match oid {
        // No cast: PostgreSQL types it by its context, as it would the parameter.
        0 | 705 => "",
        16 => "bool",
        17 => "bytea",
        18 => "\"char\"",
        19 => "name",
        20 => "int8",
        21 => "int2",
        23 => "int4",
        25 => "text",
        26 => "oid",
        114 => "json",
        700 => "float4",
        701 => "float8",
        1042 => "bpchar",
        1043 => "varchar",
        1082 => "date",
        1083 => "time",
        1114 => "timestamp",
        1184 => "timestamptz",
        1186 => "interval",
        1700 => "numeric",
        2950 => "uuid",
        3802 => "jsonb",
        _ => return None,
    })
}

//! Client statements with Oracle NoSQL's `SET TTL` clause are handled as if the client had
//! written the statement on the table's data table: see [`crate::ddl::row_ttl`].

use super::{Session, SessionError};
use crate::client_error::ClientError;
use crate::ddl::model::QualifiedName;
use crate::ddl::row_ttl::{rewrite_row_ttl, RowTtl, TtlTable};
use crate::frontend::statements::ClientFrame;
use crate::frontend::FrontendError;
use crate::protocol::{Extended, Frame, MessageBuilder};
use bytes::BytesMut;
use tokio_postgres::error::SqlState;

/// How often one statement may ask for columns: DDL of another session can drop them between
/// the fetch and their use.
const COLUMN_FETCHES: usize = 8;

impl Session {
    /// Whether a Query or Parse frame may carry `SET TTL` (cheap: no parse), so that it takes
    /// the path that rewrites it.
    pub(super) fn may_set_row_ttl(&mut self, frame: &Frame<&[u8]>) -> bool {
        if !matches!(frame.tag, b'Q' | b'P') || !self.ctx.catalog.has_tables() {
            return false;
        }
        let snapshot = self
            .ctx
            .catalog
            .refresh_snapshot(&mut self.routing.snapshot);
        snapshot.has_nosql_tables()
            && frame
                .body()
                .windows(3)
                .any(|w| w.eq_ignore_ascii_case(b"ttl"))
    }

    /// A Query or Parse frame with its SET TTL clause rewritten; `Ok(None)` when it has none,
    /// `Err` with the refusal the client gets when the clause cannot be carried out.
    pub(super) async fn with_row_ttl(
        &mut self,
        frame: &Frame<&[u8]>,
    ) -> Result<Result<Option<BytesMut>, (SqlState, String)>, SessionError> {
        if !self.may_set_row_ttl(frame) {
            return Ok(Ok(None));
        }
        let (sql, parse) = match ClientFrame::parse(frame)? {
            ClientFrame::Query(sql) => (sql, None),
            ClientFrame::Parse { name, query, types } => (query, Some((name, types))),
            _ => return Ok(Ok(None)),
        };
        let Ok(sql) = std::str::from_utf8(sql) else {
            return Ok(Ok(None));
        };
        for _ in 0..COLUMN_FETCHES {
            let snapshot = self
                .ctx
                .catalog
                .refresh_snapshot(&mut self.routing.snapshot);
            let table = |schema: &str, name: &str| {
                snapshot
                    .table_by_name(schema, name)
                    .filter(|t| t.nosql)
                    .map(|t| TtlTable {
                        id: t.id,
                        name: QualifiedName::new(&t.schema, &t.name),
                        ttl: t.ttl,
                    })
            };
            let plans = &self.ctx.plans;
            let columns = |id| plans.columns(snapshot.version(), id);
            let rewritten = match rewrite_row_ttl(sql, &table, &columns) {
                Ok(RowTtl::Unchanged) => return Ok(Ok(None)),
                Ok(RowTtl::Rewritten(s)) => s,
                Ok(RowTtl::NeedColumns(id)) => {
                    if let Err(e) = self.fetch_columns(id).await {
                        let e = FrontendError::ColumnsUnreadable(e);
                        return Ok(Err((e.sqlstate(), e.client_message())));
                    }
                    continue;
                }
                Err(e) => return Ok(Err((e.sqlstate(), e.client_message()))),
            };
            let mut out = BytesMut::new();
            match parse {
                None => MessageBuilder::new(&mut out, b'Q')
                    .cstr(rewritten.as_bytes())
                    .finish(),
                Some((name, types)) => {
                    Extended::new(&mut out).parse(name, rewritten.as_bytes(), types);
                }
            }
            return Ok(Ok(Some(out)));
        }
        let e = FrontendError::ColumnsUnknown;
        Ok(Err((e.sqlstate(), e.client_message())))
    }
}

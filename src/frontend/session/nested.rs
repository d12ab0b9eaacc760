//! Client statements are handled as if the client had written what the shards can answer:
//! three-level NoSQL table names (`a.b.c`) as the name the shards know (`a."b.c"`, see
//! [`crate::sql::nested_names`]), and views the router plans through their definitions as
//! those definitions (see [`crate::router::plan::expand_views`]).

use super::{Session, SessionError};
use crate::frontend::statements::ClientFrame;
use crate::protocol::{Extended, Frame, MessageBuilder};
use crate::router::plan::expand_views;
use crate::sql::nested_names::rewrite_nested_names;
use bytes::BytesMut;

impl Session {
    /// A Query or Parse frame with its grandchild names and expanded views rewritten; `None`
    /// when it has none (always, unless the catalog records a three-level table or a view
    /// planned through its definition).
    pub(super) fn with_nested_names(
        &mut self,
        frame: &Frame<&[u8]>,
    ) -> Result<Option<BytesMut>, SessionError> {
        if !matches!(frame.tag, b'Q' | b'P') || !self.ctx.catalog.has_tables() {
            return Ok(None);
        }
        let snapshot = self
            .ctx
            .catalog
            .refresh_snapshot(&mut self.routing.snapshot);
        if !snapshot.has_nested_names() && !snapshot.has_expanded_views() {
            return Ok(None);
        }
        let is_nested = |schema: &str, table: &str| snapshot.is_nested_name(schema, table);
        let path = match self.routing.search_path.as_deref() {
            Some(path) => path.schemas(),
            None => self.ctx.plans.default_path().schemas(),
        };
        let text = |sql: &[u8]| {
            let sql = std::str::from_utf8(sql).ok()?;
            let nested = snapshot
                .has_nested_names()
                .then(|| rewrite_nested_names(sql, is_nested))
                .flatten();
            let sql_now = nested.as_deref().unwrap_or(sql);
            expand_views(sql_now, snapshot, path).or(nested)
        };
        let mut out = BytesMut::new();
        match ClientFrame::parse(frame)? {
            ClientFrame::Query(sql) => {
                let Some(sql) = text(sql) else {
                    return Ok(None);
                };
                MessageBuilder::new(&mut out, b'Q')
                    .cstr(sql.as_bytes())
                    .finish();
            }
            ClientFrame::Parse { name, query, types } => {
                let Some(query) = text(query) else {
                    return Ok(None);
                };
                Extended::new(&mut out).parse(name, query.as_bytes(), types);
            }
            _ => return Ok(None),
        }
        Ok(Some(out))
    }
}

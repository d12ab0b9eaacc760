//! Client statements naming three-level NoSQL tables (`a.b.c`) are handled as if the client
//! had written the name the shards know (`a."b.c"`): see [`crate::sql::nested_names`].

use super::{Session, SessionError};
use crate::frontend::statements::ClientFrame;
use crate::protocol::{Extended, Frame, MessageBuilder};
use crate::sql::nested_names::rewrite_nested_names;
use bytes::BytesMut;

impl Session {
    /// A Query or Parse frame with its grandchild names rewritten; `None` when it has none
    /// (always, unless the catalog records a three-level table).
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
        if !snapshot.has_nested_names() {
            return Ok(None);
        }
        let is_nested = |schema: &str, table: &str| snapshot.is_nested_name(schema, table);
        let text = |sql: &[u8]| {
            std::str::from_utf8(sql)
                .ok()
                .and_then(|sql| rewrite_nested_names(sql, is_nested))
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

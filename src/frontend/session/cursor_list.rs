//! `pg_cursors` read while the proxy follows the session's cursors: they live on several
//! connections (each shard the session touched, the combining connections kept for cursors over
//! combined rows), so the view is answered from all of them ([`crate::executor::cursor_list`])
//! and the client's statement reads that list in its place.

use super::host::shared;
use super::{Session, SessionError};
use crate::executor::cursor_list::{self, ListedCursor};
use crate::frontend::socket::ClientSocket;
use crate::frontend::statements::ClientFrame;
use crate::protocol::{Extended, Frame, MessageBuilder};
use crate::router::plan::replace_catalog_view;
use bytes::{Bytes, BytesMut};

const VIEW: &str = "pg_cursors";

impl Session {
    /// Whether `frame` may read `pg_cursors` while the proxy follows cursors: then it is not
    /// sent as written.
    pub(super) fn may_read_cursor_list(&self, frame: &Frame<&[u8]>) -> bool {
        !self.cursors.is_empty()
            && matches!(frame.tag, b'Q' | b'P')
            && frame
                .raw
                .windows(VIEW.len())
                .any(|w| w.eq_ignore_ascii_case(VIEW.as_bytes()))
    }

    /// A simple query, or a Parse of the unnamed statement (run at once by every driver), that
    /// reads `pg_cursors` while the proxy follows cursors, with the view replaced by the list
    /// of the cursors on all the session's connections; `None` when it is not one. A named
    /// statement keeps the view (its list would be stale by its next execution): it reads the
    /// connection it runs on.
    pub(super) async fn with_cursor_list(
        &mut self,
        frame: &Frame<&[u8]>,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Option<BytesMut>, SessionError> {
        if !self.may_read_cursor_list(frame) {
            return Ok(None);
        }
        let parsed = ClientFrame::parse(frame)?;
        let (text, parse_types) = match parsed {
            ClientFrame::Query(sql) => (sql, None),
            ClientFrame::Parse {
                name: b"",
                query,
                types,
            } => (query, Some(types)),
            _ => return Ok(None),
        };
        let Ok(text) = std::str::from_utf8(text) else {
            return Ok(None);
        };
        let snapshot = self.ctx.catalog.snapshot();
        // Whether it reads the view at all is known before any shard is asked.
        if replace_catalog_view(text, &snapshot, VIEW, "SELECT").is_none() {
            return Ok(None);
        }
        // A connection that refused (its block failed) refuses the client's statement too,
        // sent as written.
        let Ok(listed) = self.listed_cursors(client).await? else {
            return Ok(None);
        };
        let query = cursor_list::as_query(&listed);
        let Some(rewritten) = replace_catalog_view(text, &snapshot, VIEW, &query) else {
            return Ok(None);
        };
        let mut out = BytesMut::new();
        match parse_types {
            None => {
                MessageBuilder::new(&mut out, b'Q')
                    .cstr(rewritten.as_bytes())
                    .finish();
            }
            Some(types) => {
                Extended::new(&mut out).parse(b"", rewritten.as_bytes(), types);
            }
        }
        Ok(Some(out))
    }

    /// The cursors on every connection the session holds, as the client declared them.
    async fn listed_cursors(
        &mut self,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Result<Vec<ListedCursor>, Bytes>, SessionError> {
        self.drain_current().await?;
        let mut shards: Vec<_> = self.links.iter().map(|l| l.shard()).collect();
        shards.sort();
        shards.dedup();
        let ctx = self.ctx.clone();
        // Taken out while the session's host runs, and put back whatever the outcome.
        let mut cursors = std::mem::take(&mut self.cursors);
        let listed = cursor_list::list(
            &mut self.host(Some(client)),
            shared(&ctx),
            &shards,
            &mut cursors.combining_conns(),
        )
        .await;
        self.cursors = cursors;
        Ok(listed?.map(|listed| self.cursors.as_declared(listed)))
    }
}

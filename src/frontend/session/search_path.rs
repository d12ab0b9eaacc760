//! The session's `search_path`, followed so that the router reads unqualified names as the
//! shards will (`sql::search_path` says which statements it can follow). `None` stands for the
//! proxy's default path, whose plans every such session shares.

use super::Session;
use crate::backend::Settings;
use crate::frontend::context::ServerCtx;
use crate::protocol::TxStatus;
use crate::router::SearchPath;
use crate::sql::search_path::{change_of, split_setting, PathChange};
use std::sync::Arc;

impl Session {
    /// The path the client's startup packet gave, if any.
    pub(super) fn startup_search_path(
        ctx: &ServerCtx,
        settings: &Settings,
    ) -> Option<Arc<SearchPath>> {
        let (_, value) = settings.iter().find(|(name, _)| name == "search_path")?;
        match split_setting(value) {
            Some(schemas) => known_path(ctx, schemas),
            None => Some(Arc::new(SearchPath::unknown())),
        }
    }

    /// Follows what `sql`, on its way to the current shard, does to the session's search path.
    /// Sure of its outcome only when it is a simple query sent with nothing else under way (no
    /// BEGIN on its way either) and no transaction block open: then it takes effect as written.
    pub(super) fn note_search_path(&mut self, sql: &[u8], simple: bool) {
        let sure = simple
            && !self.under_way.script
            && self.links.current_status() == TxStatus::Idle
            && self.pipeline.is_empty();
        let path = match change_of(sql, sure) {
            PathChange::Keeps => return,
            PathChange::To(schemas) => known_path(&self.ctx, schemas),
            // Back to the startup packet's path, which the proxy restores after the RESET.
            PathChange::Resets => self.routing.start_path.clone(),
            PathChange::Unknown => Some(Arc::new(SearchPath::unknown())),
        };
        if path != self.routing.search_path {
            tracing::debug!(
                known = path.as_ref().is_none_or(|p| p.schemas().is_some()),
                "the session's search_path changed"
            );
            self.routing.simple_memo.set_search_path(path.clone());
            self.routing.last_plan = Default::default();
            self.routing.search_path = path;
        }
    }
}

/// `schemas` as the session's path: `None` when it is the proxy's default.
fn known_path(ctx: &ServerCtx, schemas: Vec<String>) -> Option<Arc<SearchPath>> {
    let user = ctx.config.shard_endpoint(0).user;
    let path = SearchPath::known(schemas, &user);
    let default = ctx.plans.default_path();
    (default.schemas().is_none() || path.schemas() != default.schemas()).then(|| Arc::new(path))
}

//! The session's `search_path`, followed so that the router reads unqualified names as the
//! shards will (`sql::search_path` says which statements it can follow). `None` stands for the
//! proxy's default path, whose plans every such session shares.

use super::Session;
use crate::backend::Settings;
use crate::frontend::context::ServerCtx;
use crate::protocol::{self, Frame, TxStatus};
use crate::router::SearchPath;
use crate::sql::reset::{resets, Reset};
use crate::sql::search_path::{change_of, split_setting, PathChange};
use std::sync::Arc;

/// What a statement prepared through the extended protocol does when it runs: to the session's
/// settings, to search_path, and to the settings the proxy gives back their startup values
/// after a RESET.
#[derive(Clone, Debug)]
struct PathEffect {
    settings: bool,
    change: PathChange,
    reset: Option<Reset>,
}

/// The extended protocol's changes of search_path, followed as PostgreSQL makes them: what a
/// statement does is read from its text at Parse, happens at its Execute, and stands once the
/// batch's Sync reports no error and no block open. Meanwhile the path is unknown.
#[derive(Default)]
pub(super) struct ExtendedPaths {
    /// The client's prepared statements (by name) that change settings.
    statements: Vec<(Box<[u8]>, PathEffect)>,
    /// The portal last bound to one of them.
    bound: Option<(Box<[u8]>, PathEffect)>,
    /// What the batch's executed statements did, outside a block (the last path set wins).
    executed: Option<PathEffect>,
    /// The change that stands if the ReadyForQuery of the Sync sent says idle.
    at_ready: Option<PathChange>,
}

impl ExtendedPaths {
    /// A Parse of `name` replaces what the name meant; `query` may change settings (by its
    /// session effect).
    pub fn parsed(&mut self, name: &[u8], query: &[u8], may_change: bool, startup: &Settings) {
        if !self.statements.is_empty() {
            self.statements.retain(|(n, _)| **n != *name);
        }
        if !may_change {
            return;
        }
        let change = change_of(query, true);
        let reset = if startup.is_empty() {
            None
        } else {
            resets(query)
        };
        if change != PathChange::Keeps || reset.is_some() || may_change {
            let effect = PathEffect {
                settings: may_change,
                change,
                reset,
            };
            self.statements.push((name.into(), effect));
        }
    }

    /// A Bind of `statement` to `portal`.
    pub fn bound(&mut self, portal: &[u8], statement: &[u8]) {
        if self.statements.is_empty() && self.bound.is_none() {
            return;
        }
        self.bound = self
            .statements
            .iter()
            .find(|(n, _)| **n == *statement)
            .map(|(_, effect)| (portal.into(), effect.clone()));
    }

    /// Whether a statement of the batch changed something.
    pub fn executed_any(&self) -> bool {
        self.executed.is_some()
    }

    /// A statement of the batch failed (on a shard, or refused by the proxy): whatever it
    /// changed was rolled back with it, or was never made; the proxy no longer knows which.
    pub fn failed(&mut self) {
        if let Some(executed) = &mut self.executed {
            executed.change = PathChange::Unknown;
        }
        if let Some(change) = &mut self.at_ready {
            *change = PathChange::Unknown;
        }
    }
}

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
        self.set_search_path(change_of(sql, sure));
    }

    /// An Execute: a statement bound to its portal that changes search_path does so now, to
    /// stand at the batch's Sync when nothing there undoes it.
    pub(super) fn note_execute_path(&mut self, execute: &Frame<&[u8]>) {
        let paths = &mut self.batch.paths;
        let Some((bound, effect)) = paths.bound.take() else {
            return;
        };
        let portal = protocol::take_cstr(&mut &execute.raw[5..], "Execute").unwrap_or_default();
        if *bound != *portal {
            paths.bound = Some((bound, effect));
            return;
        }
        let sure = !self.under_way.script
            && self.links.current_status() == TxStatus::Idle
            && self.links.status() == TxStatus::Idle;
        let executed = paths.executed.get_or_insert(PathEffect {
            settings: false,
            change: PathChange::Keeps,
            reset: None,
        });
        // Read back from this connection before another shard serves the session.
        self.settings.changed |= effect.settings;
        if effect.change != PathChange::Keeps {
            executed.change = if sure {
                effect.change
            } else {
                PathChange::Unknown
            };
        }
        executed.reset = match (executed.reset.take(), effect.reset) {
            (Some(Reset::All), _) | (_, Some(Reset::All)) => Some(Reset::All),
            (Some(Reset::Names(mut a)), Some(Reset::Names(b))) => {
                a.extend(b);
                Some(Reset::Names(a))
            }
            (a, b) => a.or(b),
        };
        if executed.change != PathChange::Keeps {
            // Until the Sync says whether it stands; later statements of the batch read
            // names as if it were unknown.
            self.set_search_path(PathChange::Unknown);
        }
    }

    /// The Bind of a statement that ends or opens a block after a path change in the same
    /// batch: the change may be rolled back with it.
    pub(super) fn note_block_control_path(&mut self) {
        if let Some(executed) = &mut self.batch.paths.executed {
            if executed.change != PathChange::Keeps {
                executed.change = PathChange::Unknown;
            }
        }
    }

    /// The batch's Sync goes to the current connection: the change waits for its
    /// ReadyForQuery. Returns the settings a RESET of the batch gave back to the server's
    /// defaults, for the startup values to be restored after the Sync.
    pub(super) fn note_sync_path(&mut self) -> Option<Reset> {
        let executed = self.batch.paths.executed.take()?;
        if executed.change != PathChange::Keeps {
            let paths = &mut self.batch.paths;
            paths.at_ready = Some(match paths.at_ready.take() {
                // Two batches in flight, each changing the path: not followed.
                Some(_) => PathChange::Unknown,
                None => executed.change,
            });
        }
        executed.reset
    }

    /// A Sync the proxy answered without sending it on: what the batch changed is not known.
    pub(super) fn sync_not_sent(&mut self) {
        if self.batch.paths.executed.take().is_some() {
            self.set_search_path(PathChange::Unknown);
        }
    }

    /// The ReadyForQuery of a Sync came from the current connection with `status`.
    pub(super) fn note_ready_path(&mut self, status: TxStatus) {
        let Some(change) = self.batch.paths.at_ready.take() else {
            return;
        };
        self.set_search_path(if status == TxStatus::Idle {
            change
        } else {
            PathChange::Unknown
        });
    }

    fn set_search_path(&mut self, change: PathChange) {
        let path = match change {
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

//! What a session routes with beyond the catalog: its search_path, the catalog snapshot it last
//! used, and memos of the statements it routed last (drivers send the same texts again and
//! again, so one comparison usually replaces the work).

use super::dest::PlanMemo;
use super::local::FactsMemo;
use crate::router::{SearchPath, SimpleMemo};
use std::sync::Arc;

pub(super) struct RoutingState {
    /// The session's search_path as the router reads names with it (`search_path`); `None`: the
    /// proxy's default.
    pub search_path: Option<Arc<SearchPath>>,
    /// The search_path the session's startup packet gave (`None`: none, the proxy's default).
    pub start_path: Option<Arc<SearchPath>>,
    /// The catalog snapshot last routed with (refreshed when the catalog's version moves).
    pub snapshot: Option<Arc<crate::catalog::Snapshot>>,
    /// Spreads reads of duplicated tables over their shards.
    pub round_robin: usize,
    /// The last statement text found not to be one the proxy answers itself.
    pub not_local: Vec<u8>,
    /// The normalising buffer and last shared plan of the session's simple queries.
    pub simple_memo: SimpleMemo,
    /// What the last normalised simple query's words say.
    pub simple_facts: FactsMemo,
    /// The last prepared statement text planned.
    pub last_plan: PlanMemo,
    /// Statements prepared with SQL PREPARE that the proxy holds.
    pub sql_prepared: super::sql_prepared::SqlStatements,
}

impl RoutingState {
    pub fn new(start_path: Option<Arc<SearchPath>>) -> RoutingState {
        let mut simple_memo = SimpleMemo::default();
        simple_memo.set_search_path(start_path.clone());
        RoutingState {
            search_path: start_path.clone(),
            start_path,
            snapshot: None,
            round_robin: 0,
            not_local: Vec::new(),
            simple_memo,
            simple_facts: Default::default(),
            last_plan: Default::default(),
            sql_prepared: Default::default(),
        }
    }
}

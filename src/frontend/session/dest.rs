//! Where each client frame goes: the statement's plan (from the plan cache) with its Bind
//! parameters or literals, the session's transaction, and the statements the proxy answers
//! itself through the extended protocol.

use super::local::{local_kind, LocalKind};
use super::per_shard::{portal_messages, MultiPortal};
use super::sequence::SequenceAnswer;
use super::{Session, SessionError};
use crate::admin;
use crate::catalog::{ShardId, Snapshot, TableId};
use crate::client_error::ClientError;
use crate::executor::ddl;
use crate::executor::fan_out::Multi;
use crate::executor::gather::Combine;
use crate::frontend::statements::ClientFrame;
use crate::frontend::FrontendError;
use crate::protocol::{self, Frame, TxStatus};
use crate::router::normalize::Literals;
use crate::router::plan::{Plan, UtilityKind};
use crate::router::route::{self as routing, Params, Route};
use crate::sql::classify::{first_keyword, keyword};
use crate::sql::signal::SignalCall;
use std::sync::Arc;
use tokio_postgres::error::SqlState;

/// Where a client frame goes. Kept two words wide, the rare destinations' data boxed: the
/// keyed path returns one through several calls and drops it per statement.
pub(super) enum Dest {
    /// A statement that names no recorded table: the connection held while a block or batch
    /// is open on it, else the first shard ([`Session::unrouted_shard`]). Other frames: the
    /// connection held, else one the session's batch is on.
    Here,
    Shard(ShardId),
    /// A Parse held back until its Bind, which decides its shard.
    Hold,
    /// A simple query the executor runs on several shards.
    Multi(Box<Multi>),
    /// Answered with an error here; the SQLSTATE and text of one of the layers' errors.
    Refuse(Box<(SqlState, String)>),
    /// An INSERT without a column list needs the table's columns first.
    NeedColumns(TableId),
    /// A Bind executed on several shards.
    MultiPortal(Box<MultiPortal>),
    /// Describe, Execute or Close of the multi-shard portal: answered from its result.
    Portal,
    /// A Bind of a statement the proxy answers itself (admin SHOW, sharding DDL).
    LocalPortal(Box<LocalPortal>),
    /// A Describe of such a statement.
    LocalDescribe(Box<[u8]>),
    /// An UPDATE of a sharding key whose rows may move between shards.
    KeyUpdate(Box<crate::movement::run::KeyUpdateJob>),
    /// An INSERT … SELECT the proxy runs in two steps.
    InsertSelect(Arc<crate::router::plan::ShardedPlan>),
    /// An INSERT needs values of a generated key column first.
    NeedKeys(Box<KeysNeeded>),
    /// A COPY the session splits (FROM) or gathers (TO) over several shards.
    Copy(Box<crate::executor::copy::copy_in::CopyJob>),
    /// `nextval`/`currval` of a key sequence, answered from the cluster-wide sequence.
    Sequence(Box<super::sequence::SequenceAnswer>),
    /// A read over several shards the general path answers.
    Combining(Box<crate::executor::general::CombineJob>),
    /// A grouped read over several shards the proxy merges itself.
    Aggregate(Box<crate::executor::grouped::AggregateJob>),
    /// EXPLAIN of a statement over several shards, answered by the proxy.
    Explain(Box<super::explain::ExplainAnswer>),
    /// A query string whose statements go to several shards, run one by one.
    Script,
    /// A Bind of a DECLARE over recorded tables (held at its Parse): declared by the proxy.
    DeclareBind(Box<super::declare_bind::DeclareBind>),
    /// EXPLAIN ANALYZE of a read the general path answers.
    ExplainCombined(Box<super::explain::ExplainCombined>),
}

/// A Bind of a statement the proxy answers itself: its portal's name and the statement.
pub(super) struct LocalPortal {
    pub portal: Box<[u8]>,
    pub sql: Vec<u8>,
    /// A signal call, with its pid as the text or the Bind gives it.
    pub bound_signal: Option<SignalCall>,
}

/// `count` values of `table`'s generated key `column`, taken before the INSERT is routed.
pub(super) struct KeysNeeded {
    pub table: TableId,
    pub column: String,
    pub count: usize,
}

impl Dest {
    /// Work the proxy runs itself, over connections of its own choosing: it starts once the
    /// current connection has answered everything owed.
    pub(super) fn runs_apart(&self) -> bool {
        matches!(
            self,
            Dest::InsertSelect(_)
                | Dest::Explain(_)
                | Dest::Aggregate(_)
                | Dest::Combining(_)
                | Dest::KeyUpdate(_)
                | Dest::Sequence(_)
                | Dest::Script
                | Dest::ExplainCombined(_)
        )
    }

    #[cold]
    pub(super) fn refuse(e: &impl ClientError) -> Dest {
        Dest::Refuse(Box::new((e.sqlstate(), e.client_message())))
    }
}

/// Where a plain sharded statement whose key names one shard goes (counted in
/// `routed_single`), found with shared borrows only; `None` for every other statement, which
/// [`Session::dest_for`] places — routing it again, which only multi-shard statements and
/// refusals pay.
fn keyed_dest(
    plan: &Plan,
    snapshot: &Snapshot,
    params: &Params<'_>,
    tx_failed: bool,
    routed_single: &metrics::Counter,
) -> Option<Dest> {
    let Plan::Sharded(p) = plan else {
        return None;
    };
    if tx_failed || !is_plain(p) {
        return None;
    }
    match routing::route(snapshot, p, params).ok()?.route {
        Route::Single(s) => {
            routed_single.increment(1);
            Some(Dest::Shard(s))
        }
        Route::Multi(_) | Route::All => None,
    }
}

/// A sharded statement the router alone places: no INSERT … SELECT, key update or generated key
/// for the proxy to carry out.
fn is_plain(p: &crate::router::plan::ShardedPlan) -> bool {
    p.insert_select.is_none() && p.key_update.is_none() && p.generated.is_none()
}

/// The last statement text a session planned, at a catalog version, and its plan: a prepared
/// statement bound again and again is routed without a look into the shared cache.
#[derive(Default)]
pub(super) struct PlanMemo(Option<(Box<[u8]>, i64, Arc<Plan>)>);

impl PlanMemo {
    /// `path`: the session's search path (the memo is emptied when it changes).
    fn plan(
        &mut self,
        plans: &crate::router::PlanCache,
        parses: &metrics::Counter,
        sql: &[u8],
        path: Option<&crate::router::SearchPath>,
        snapshot: &Snapshot,
    ) -> Result<&Arc<Plan>, TableId> {
        let known = matches!(&self.0, Some((text, version, _))
            if *version == snapshot.version() && **text == *sql);
        if !known {
            let plan = plans.plan(sql, path, snapshot, parses)?;
            self.0 = Some((sql.into(), snapshot.version(), plan));
        }
        Ok(&self.0.as_ref().expect("planned above").2)
    }
}

/// Where a statement's text came from, which decides how it may run on several shards.
pub(super) enum Source<'a> {
    Simple(&'a [u8]),
    Bind {
        portal: &'a [u8],
        statement: &'a crate::backend::StatementText,
        rest: &'a [u8],
    },
    /// A Parse or Describe: placed, not executed.
    Placement,
}

impl Session {
    /// Where `frame` goes. Cheap when the catalog records no table (everything goes where it
    /// always went) and when the statement's plan is cached. `normalised`: a simple query's
    /// literals (taken from there), when the caller normalised it already
    /// ([`crate::router::SimpleMemo`]); a reference, so that the extended protocol's frames do
    /// not copy an empty list of them around.
    pub(super) fn decide<'q>(
        &mut self,
        frame: &Frame<&'q [u8]>,
        parsed: ClientFrame<'q>,
        normalised: Option<&mut Option<Literals<'q>>>,
    ) -> Result<Dest, SessionError> {
        if !self.portals.is_empty() && self.names_a_portal(frame, parsed) {
            return Ok(Dest::Portal);
        }
        if !matches!(frame.tag, b'Q' | b'P' | b'B' | b'D') {
            return Ok(Dest::Here);
        }
        if frame.tag != b'Q' {
            if let Some(local) = self.local_extended(parsed) {
                return Ok(local);
            }
        }
        if !self.ctx.catalog.has_tables() && !self.may_make_shared_object(parsed) {
            return Ok(Dest::Here);
        }
        // The snapshot, the statement and its plan are borrowed field by field, not cloned, up
        // to where a keyed statement's shard is known: each Arc clone and drop is a locked
        // instruction, and a prepared read's frames would take a dozen.
        let tx_failed = self.links.current_status() == TxStatus::Failed;
        let snapshot = self
            .ctx
            .catalog
            .refresh_snapshot(&mut self.routing.snapshot);
        let parses = &self.ctx.metrics.statement_parses;
        match parsed {
            ClientFrame::Query(sql) => {
                let literals = match normalised {
                    Some(literals) => literals.take(),
                    None => self.routing.simple_memo.normalise(sql),
                };
                let memo = &mut self.routing.simple_memo;
                let shared = self
                    .ctx
                    .plans
                    .plan_simple(sql, literals, snapshot, parses, memo);
                let (plan, literals) = match shared {
                    Ok(p) => p,
                    Err(t) => return Ok(Dest::NeedColumns(t)),
                };
                let params = Params::literals(literals);
                let single = &self.ctx.metrics.routed_single;
                if let Some(dest) = keyed_dest(&plan, snapshot, &params, tx_failed, single) {
                    return Ok(dest);
                }
                let snapshot = snapshot.clone();
                Ok(self.dest_for(&plan, &snapshot, &params, Source::Simple(sql)))
            }
            ClientFrame::Parse { query, .. } => {
                let plan = match self.routing.last_plan.plan(
                    &self.ctx.plans,
                    parses,
                    query,
                    self.routing.search_path.as_deref(),
                    snapshot,
                ) {
                    Ok(p) => p,
                    Err(t) => return Ok(Dest::NeedColumns(t)),
                };
                Ok(match &**plan {
                    Plan::Sharded(_)
                    | Plan::Combine(_)
                    | Plan::Explain(_)
                    | Plan::Every(_)
                    | Plan::Utility(_)
                    | Plan::AnyOf(_)
                    | Plan::Copy(_)
                    | Plan::Sequence(_) => Dest::Hold,
                    _ => {
                        let (plan, snapshot) = (plan.clone(), snapshot.clone());
                        self.dest_for(&plan, &snapshot, &Params::default(), Source::Placement)
                    }
                })
            }
            ClientFrame::Bind {
                portal,
                statement,
                rest,
            } => {
                let Some(st) = self.statements.get(statement) else {
                    return Ok(Dest::Here);
                };
                let plan = match self.routing.last_plan.plan(
                    &self.ctx.plans,
                    parses,
                    &st.query,
                    self.routing.search_path.as_deref(),
                    snapshot,
                ) {
                    Ok(p) => p,
                    Err(t) => return Ok(Dest::NeedColumns(t)),
                };
                let params = Params::parse(rest, &st.param_types)?;
                let single = &self.ctx.metrics.routed_single;
                if let Some(dest) = keyed_dest(plan, snapshot, &params, tx_failed, single) {
                    return Ok(dest);
                }
                // The parameters borrow the session's statement, which `dest_for` may change:
                // read again from the clone.
                drop(params);
                let (st, plan, snapshot) = (st.clone(), plan.clone(), snapshot.clone());
                let params = Params::parse(rest, &st.param_types)?;
                let source = Source::Bind {
                    portal,
                    statement: &st,
                    rest,
                };
                Ok(self.dest_for(&plan, &snapshot, &params, source))
            }
            ClientFrame::Describe { kind: b'S', name } => {
                let snapshot = snapshot.clone();
                Ok(self.describe_dest(name, &snapshot))
            }
            _ => Ok(Dest::Here),
        }
    }

    /// Whether the statement may make, change or drop an object every shard gets (a type, a
    /// schema, …: `router::plan::utility`), which is routed even before the catalog records a
    /// table — a sharded table's columns are to find it on every shard.
    #[inline(never)]
    fn may_make_shared_object(&self, parsed: ClientFrame<'_>) -> bool {
        if self.ctx.config.shards.len() < 2 {
            return false;
        }
        let text: &[u8] = match parsed {
            ClientFrame::Query(sql) => sql,
            ClientFrame::Parse { query, .. } => query,
            ClientFrame::Bind { statement, .. } => match self.statements.get(statement) {
                Some(st) => &st.query,
                None => return false,
            },
            _ => return false,
        };
        const CREATE: u128 = keyword(b"create");
        const DROP: u128 = keyword(b"drop");
        const ALTER: u128 = keyword(b"alter");
        const GRANT: u128 = keyword(b"grant");
        const REVOKE: u128 = keyword(b"revoke");
        const COMMENT: u128 = keyword(b"comment");
        matches!(
            first_keyword(text),
            CREATE | DROP | ALTER | GRANT | REVOKE | COMMENT
        )
    }

    /// Whether `frame` names a multi-shard portal the session answers from its result; keeps
    /// the portals' lifetimes on the way.
    #[inline(never)]
    fn names_a_portal(&mut self, frame: &Frame<&[u8]>, parsed: ClientFrame<'_>) -> bool {
        let named = match parsed {
            ClientFrame::Describe { kind: b'P', name }
            | ClientFrame::Close { kind: b'P', name } => Some(name),
            ClientFrame::Execute => protocol::take_cstr(&mut &frame.raw[5..], "Execute").ok(),
            // A Sync ends the portals unless a transaction block keeps them, as
            // PostgreSQL's portals live until their transaction ends; a new Bind of a
            // portal's name replaces it.
            ClientFrame::Sync => {
                if self.links.status() != TxStatus::InBlock {
                    self.portals.clear();
                }
                None
            }
            ClientFrame::Bind { portal: name, .. } => {
                self.portals.forget(name);
                None
            }
            _ => None,
        };
        named.is_some_and(|n| self.portals.has(n))
    }

    /// Where a Describe of a prepared statement goes.
    #[inline(never)]
    fn describe_dest(&mut self, name: &[u8], snapshot: &Snapshot) -> Dest {
        let Some(st) = self.statements.get(name).cloned() else {
            return Dest::Here;
        };
        let plan = match self.plan(&st.query, snapshot) {
            Ok(p) => p,
            Err(t) => return Dest::NeedColumns(t),
        };
        if let Plan::Sequence(call) = &*plan {
            return Dest::Sequence(Box::new(SequenceAnswer::describe(call)));
        }
        // Any shard holding the tables describes the statement: their schemas are equal.
        let shards = match &*plan {
            Plan::Sharded(p) => p.shards.clone(),
            Plan::Every(s) | Plan::AnyOf(s) => s.clone(),
            Plan::Utility(u) => u.shards.clone(),
            Plan::Fixed(s) => vec![*s],
            Plan::Copy(c) => c.shards.clone(),
            Plan::Combine(_) | Plan::Explain(_) => vec![ShardId(0)],
            Plan::Anywhere | Plan::Refused(_) | Plan::Sequence(_) | Plan::Script => {
                return Dest::Here
            }
        };
        match self.links.current_shard() {
            Some(c) if shards.contains(&c) => Dest::Shard(c),
            _ => shards.first().map_or(Dest::Here, |s| Dest::Shard(*s)),
        }
    }

    /// Statements the proxy answers itself, sent through the extended protocol (JDBC, asyncpg
    /// and most ORMs send everything so): held at Parse, answered at Bind and Describe.
    fn local_extended(&mut self, parsed: ClientFrame<'_>) -> Option<Dest> {
        let text: &[u8] = match &parsed {
            ClientFrame::Parse { query, .. } => query,
            ClientFrame::Bind { statement, .. }
            | ClientFrame::Describe {
                kind: b'S',
                name: statement,
            } => match self.statements.get(statement) {
                Some(st) => &st.query,
                None => return None,
            },
            _ => return None,
        };
        if let Some(dest) = self.declare_extended(text, parsed) {
            return Some(dest);
        }
        // The Parse, Bind and Describe of a statement ask about one text, and clients send the
        // same statements again and again: a text found to be none of these is remembered.
        if *self.routing.not_local == *text {
            return None;
        }
        let mut bound_signal = None;
        let is_local = match local_kind(text) {
            Some(LocalKind::Show) => admin::parse(text).is_some(),
            Some(LocalKind::Growth) => admin::parse_growth(text).is_some(),
            Some(LocalKind::Ddl) => ddl::recognise(text, &self.ctx.catalog.snapshot()).is_some(),
            Some(LocalKind::Signal) => match &parsed {
                ClientFrame::Bind { rest, .. } => {
                    bound_signal = self.proxy_signal_at_bind(text, rest).map(|(call, _)| call);
                    bound_signal.is_some()
                }
                _ => self.proxy_signal(text).is_some(),
            },
            None => {
                // Only this answer depends on the text alone, not on the catalog or sessions.
                self.routing.not_local.clear();
                self.routing.not_local.extend_from_slice(text);
                false
            }
        };
        if !is_local {
            return None;
        }
        let sql = text.to_vec();
        match parsed {
            ClientFrame::Parse { .. } => Some(Dest::Hold),
            ClientFrame::Bind { portal, .. } => Some(Dest::LocalPortal(Box::new(LocalPortal {
                portal: portal.into(),
                sql,
                bound_signal,
            }))),
            _ => Some(Dest::LocalDescribe(sql.into())),
        }
    }

    /// The plan of a statement text; the session keeps the last one, so a prepared statement
    /// executed again and again finds its plan without the shared cache's lock.
    fn plan(&mut self, sql: &[u8], snapshot: &Snapshot) -> Result<Arc<Plan>, TableId> {
        let parses = &self.ctx.metrics.statement_parses;
        self.routing
            .last_plan
            .plan(
                &self.ctx.plans,
                parses,
                sql,
                self.routing.search_path.as_deref(),
                snapshot,
            )
            .cloned()
    }

    /// Where a planned statement goes; `source` says whether and how it may run on several
    /// shards.
    fn dest_for(
        &mut self,
        plan: &Plan,
        snapshot: &Snapshot,
        params: &Params<'_>,
        source: Source<'_>,
    ) -> Dest {
        // A failed transaction block refuses everything but its end, wherever it runs.
        if self.links.current_status() == TxStatus::Failed {
            return Dest::Here;
        }
        // The common case here, the rest out of line: the code a keyed statement runs stays
        // small, and so does what each statement has to bring into the instruction cache.
        match plan {
            Plan::Sharded(p) if is_plain(p) => self.sharded_dest(p, snapshot, params, source),
            _ => self.special_dest(plan, snapshot, params, source),
        }
    }

    /// A statement every one of `shards` runs alike (the shards but the first run `elsewhere`
    /// instead, when given), the client hearing one answer.
    fn every_dest(
        &mut self,
        shards: &[ShardId],
        elsewhere: Option<&str>,
        combine: Combine,
        source: Source<'_>,
    ) -> Dest {
        let text_on = |shard: ShardId, own: &[u8]| -> Vec<u8> {
            match elsewhere {
                Some(other) if shard != ShardId(0) => other.as_bytes().to_vec(),
                _ => own.to_vec(),
            }
        };
        match (shards, source) {
            ([one], _) => Dest::Shard(*one),
            (_, Source::Simple(sql)) => {
                self.ctx.metrics.routed_multi.increment(1);
                Dest::Multi(Box::new(Multi {
                    shards: shards.to_vec(),
                    sql: shards
                        .iter()
                        .map(|&s| String::from_utf8_lossy(&text_on(s, sql)).into_owned())
                        .collect(),
                    combine,
                }))
            }
            (
                _,
                Source::Bind {
                    portal,
                    statement,
                    rest,
                },
            ) => {
                self.ctx.metrics.routed_multi.increment(1);
                let messages = shards
                    .iter()
                    .map(|&s| {
                        let text = text_on(s, &statement.query);
                        portal_messages(&text, &statement.param_types, rest, (0, 0))
                    })
                    .collect();
                Dest::MultiPortal(Box::new(MultiPortal {
                    shards: shards.to_vec(),
                    portal: portal.into(),
                    messages,
                    combine,
                }))
            }
            (_, Source::Placement) => Dest::Shard(shards[0]),
        }
    }

    /// Where a plan other than a plain sharded statement goes.
    #[inline(never)]
    fn special_dest(
        &mut self,
        plan: &Plan,
        snapshot: &Snapshot,
        params: &Params<'_>,
        source: Source<'_>,
    ) -> Dest {
        match plan {
            Plan::Anywhere => Dest::Here,
            Plan::Fixed(s) => Dest::Shard(*s),
            Plan::AnyOf(shards) => match self.links.current_shard() {
                Some(c) if shards.contains(&c) => Dest::Shard(c),
                _ => {
                    self.routing.round_robin = self.routing.round_robin.wrapping_add(1);
                    Dest::Shard(shards[self.routing.round_robin % shards.len()])
                }
            },
            Plan::Every(shards) => self.every_dest(shards, None, Combine::Copies, source),
            Plan::Utility(u) => {
                // DDL of shared objects may make or drop types: their OIDs are read again.
                self.ctx.pools.types().mark_stale();
                let elsewhere = u.elsewhere.as_deref();
                match u.kind {
                    UtilityKind::Atomic => {
                        self.every_dest(&u.shards, elsewhere, Combine::Copies, source)
                    }
                    // Out of a block, PostgreSQL's error comes from one shard.
                    UtilityKind::InBlock if self.links.current_status() == TxStatus::Idle => {
                        Dest::Shard(u.shards[0])
                    }
                    UtilityKind::InBlock => {
                        self.every_dest(&u.shards, elsewhere, Combine::Copies, source)
                    }
                    UtilityKind::EachOnItsOwn => {
                        self.every_dest(&u.shards, elsewhere, Combine::Each, source)
                    }
                }
            }
            Plan::Refused(r) => Dest::refuse(r),
            // Through the extended protocol, the shard reports what PostgreSQL does of a
            // statement with several commands.
            Plan::Script => match source {
                Source::Simple(_) => Dest::Script,
                Source::Bind { .. } | Source::Placement => Dest::Here,
            },
            Plan::Sequence(call) => match source {
                Source::Simple(_) => Dest::Sequence(Box::new(SequenceAnswer::simple(call))),
                Source::Bind { portal, rest, .. } => {
                    Dest::Sequence(Box::new(SequenceAnswer::bound(call, portal, rest)))
                }
                // A Parse is held; a Describe of the statement is answered above.
                Source::Placement => Dest::Here,
            },
            Plan::Sharded(p) if p.insert_select.is_some() => match source {
                Source::Simple(_) => Dest::InsertSelect(p.clone()),
                Source::Bind { .. } => Dest::refuse(&FrontendError::PreparedInsertSelect),
                Source::Placement => Dest::Shard(p.shards[0]),
            },
            Plan::Sharded(p) if p.key_update.is_some() => {
                self.key_update_dest(p, snapshot, params, source)
            }
            Plan::Sharded(p) if p.generated.is_some() => {
                self.generated_insert(p, snapshot, params, source)
            }
            Plan::Copy(c) => self.copy_dest(c, snapshot, params, source),
            Plan::Combine(c) => super::combining::combining_dest(c, source, ShardId(0), Vec::new()),
            Plan::Explain(x) => {
                let (portal, describer) = match source {
                    Source::Bind { portal, .. } => (Some(portal), None),
                    Source::Simple(_) => (None, None),
                    Source::Placement => (None, Some(ShardId(0))),
                };
                self.explain_dest(x, snapshot, params, portal, describer)
            }
            Plan::Sharded(p) => self.sharded_dest(p, snapshot, params, source),
        }
    }

    /// A plain sharded statement: routed by its key.
    #[inline]
    fn sharded_dest(
        &mut self,
        p: &crate::router::plan::ShardedPlan,
        snapshot: &Snapshot,
        params: &Params<'_>,
        source: Source<'_>,
    ) -> Dest {
        let routed = match routing::route(snapshot, p, params) {
            Ok(r) => r,
            Err(e) => return Dest::refuse(&e),
        };
        if let Route::Single(s) = routed.route {
            self.ctx.metrics.routed_single.increment(1);
            return Dest::Shard(s);
        }
        let shards = routed.route.into_shards(snapshot);
        self.multi_shard_dest(p, &routed.rows, shards, params, source)
    }

    /// Where a sharding-key UPDATE goes: as it is to the one shard holding its rows when the new
    /// key (a constant or parameter) is that shard's too and no family rows must follow;
    /// otherwise the proxy runs it, moving the rows that change shard.
    fn key_update_dest(
        &mut self,
        p: &Arc<crate::router::plan::ShardedPlan>,
        snapshot: &Snapshot,
        params: &Params<'_>,
        source: Source<'_>,
    ) -> Dest {
        let Some(k) = p.key_update.as_deref() else {
            return Dest::Here;
        };
        let routed = match routing::route(snapshot, p, params) {
            Ok(r) => r,
            Err(e) => return Dest::refuse(&e),
        };
        let sources = routed.route.into_shards(snapshot);
        if let (Source::Placement, Some(&first)) = (&source, sources.first()) {
            return Dest::Shard(first);
        }
        if let ([only], Some(new_key), true) =
            (sources.as_slice(), &k.new_key, k.descendants.is_empty())
        {
            if routing::key_shard(snapshot, p, new_key, params).ok() == Some(*only) {
                self.ctx.metrics.routed_single.increment(1);
                return Dest::Shard(*only);
            }
        }
        self.ctx.metrics.routed_multi.increment(1);
        let bound = match source {
            Source::Simple(_) | Source::Placement => None,
            Source::Bind {
                portal,
                statement,
                rest,
            } => {
                // Read once already, for routing.
                let Ok(parts) = routing::BindParts::read(rest) else {
                    return Dest::Here;
                };
                let used: Vec<usize> = (0..k.client_params.min(parts.values.len())).collect();
                let bind = crate::movement::ClientBind {
                    params: used
                        .iter()
                        .map(|&i| (parts.formats[i], parts.values[i].map(<[u8]>::to_vec)))
                        .collect(),
                    types: routing::select_param_types(&statement.param_types, &used),
                    result_formats: parts.result_formats.to_vec(),
                };
                Some((Box::<[u8]>::from(portal), bind))
            }
        };
        Dest::KeyUpdate(Box::new(crate::movement::run::KeyUpdateJob {
            plan: p.clone(),
            sources,
            bound,
        }))
    }

    /// Fetches a table's columns from a shard holding it, for INSERTs that name none.
    pub(super) async fn fetch_columns(&mut self, table: TableId) -> Result<(), String> {
        let snapshot = self.ctx.catalog.snapshot();
        let (Some(t), Some(shard)) = (
            snapshot.table(table),
            snapshot.shards_of(table).first().copied(),
        ) else {
            return Err("the table is no longer in the catalog".into());
        };
        let columns = crate::executor::columns::fetch(&self.ctx.control, shard, &t.schema, &t.name)
            .await
            .map_err(|e| e.to_string())?;
        self.ctx
            .plans
            .set_columns(snapshot.version(), table, columns);
        Ok(())
    }
}

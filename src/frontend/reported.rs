//! What a client is told of its own startup settings. PostgreSQL checks each run-time parameter
//! of the startup packet (a bad name or value ends the login with FATAL) and then reports, for
//! the parameters it always reports (ParameterStatus), the value as it shows it: `utf8` becomes
//! `UTF8`, `iso` becomes `ISO, MDY`. The proxy asks the first shard the same, once per distinct
//! set of settings, by setting them locally in a transaction it rolls back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::error::FrontendError;
use crate::frontend::context::ServerCtx;
use crate::model::ShardId;

/// Distinct settings sets remembered before the cache starts over.
const CAPACITY: usize = 1024;

/// Settings as (name, value) pairs.
type Pairs = Vec<(String, String)>;
/// The values as the server shows them, in the order of the set.
type Shown = Arc<[(String, String)]>;

/// Each settings set's values as the server shows them.
#[derive(Default)]
pub struct ReportedSettings {
    shown: Mutex<HashMap<Pairs, Shown>>,
}

impl ReportedSettings {
    fn cached(&self, settings: &[(String, String)]) -> Option<Shown> {
        let shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        shown.get(settings).cloned()
    }

    fn remember(&self, settings: Pairs, values: Shown) {
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        if shown.len() >= CAPACITY {
            shown.clear();
        }
        shown.insert(settings, values);
    }
}

/// The client's settings as the server shows them, or the refusal PostgreSQL would give the
/// login.
pub(super) async fn shown(
    ctx: &ServerCtx,
    settings: &[(String, String)],
) -> Result<Shown, FrontendError> {
    if let Some(values) = ctx.reported.cached(settings) {
        return Ok(values);
    }
    let shard = ctx.control.shard(ShardId(0));
    let unreachable = |reason: String| FrontendError::ShardUnreachable {
        shard: shard.label.name.clone(),
        reason,
    };
    let mut conn = shard
        .pool
        .get()
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let tx = conn
        .transaction()
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let (names, values): (Vec<&str>, Vec<&str>) = settings
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .unzip();
    // One row per setting, in order: set_config returns the value as SHOW (and ParameterStatus)
    // gives it.
    let rows = tx
        .query(
            "SELECT s.n, pg_catalog.set_config(s.n, s.v, true) \
             FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS s(n, v, i) ORDER BY s.i",
            &[&names, &values],
        )
        .await;
    // Rolled back whatever happened: the settings were only tried.
    drop(tx);
    let rows = rows.map_err(|e| match e.as_db_error() {
        Some(db) => FrontendError::StartupSetting {
            code: db.code().clone(),
            message: db.message().to_owned(),
        },
        None => unreachable(e.to_string()),
    })?;
    let shown: Shown = rows
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
        .collect();
    ctx.reported.remember(settings.to_vec(), shown.clone());
    Ok(shown)
}

//! A session's run-time settings on its backend connections.

use crate::backend::Settings;
use crate::sql::quote::{quote_ident, quote_literal};

/// The client's settings: what its connections must carry, and what RESET goes back to.
pub(super) struct ClientSettings {
    /// The settings as the client has them now; a connection that serves the client takes
    /// them on first.
    pub current: Settings,
    /// The settings of the client's startup packet, which RESET goes back to.
    pub startup: Settings,
    /// A SET or RESET ran on the current connection since the session's settings were last
    /// read from it: the session's other shards must take them on before they next serve it.
    pub changed: bool,
}

/// What brings a connection's settings in line with a client's, and drops the statements it holds
/// beyond the limit. Kept out of `Session::adopt`, whose common case needs none of it.
#[cold]
#[inline(never)]
pub(super) fn settings_sql(conn: &mut crate::backend::BackendConn, settings: &Settings) -> String {
    let mut set = String::new();
    if conn.applied != *settings {
        // What an earlier client set and this one did not ask for goes back to the default.
        for (name, _) in conn.applied.iter() {
            if !settings.iter().any(|(n, _)| n == name) {
                set.push_str(&format!("RESET {};", quote_ident(name)));
            }
        }
        for (name, value) in settings.iter() {
            if !conn.applied.iter().any(|(n, v)| n == name && v == value) {
                push_set_config(&mut set, name, value);
            }
        }
    }
    conn.applied = settings.clone();
    // No portal is open on an idle connection, so dropping statements here is safe.
    for name in conn.prepared.evict_excess() {
        set.push_str(&format!("DEALLOCATE {};", quote_ident(&name)));
    }
    set
}

/// What gives the client's startup values (`startup`) back to the settings a statement of its
/// reset to the server's defaults (it ran on `conn` just before). `if_reset`: only to a setting
/// that has its reset value now (the statement may not have taken effect).
pub(super) fn restore_sql(
    conn: &mut crate::backend::BackendConn,
    startup: &Settings,
    reset: &crate::sql::reset::Reset,
    if_reset: bool,
) -> String {
    use crate::sql::reset::Reset;
    let restored = |name: &str| match reset {
        Reset::All => true,
        Reset::Names(names) => names.iter().any(|n| n.eq_ignore_ascii_case(name)),
    };
    if *reset == Reset::All {
        conn.applied = startup.clone();
    }
    let mut set = String::new();
    for (name, value) in startup.iter().filter(|(name, _)| restored(name)) {
        if if_reset {
            set.push_str(&format!(
                "SELECT pg_catalog.set_config(name, {}, false) FROM pg_catalog.pg_settings \
                 WHERE name = {} AND setting = reset_val;",
                quote_literal(value),
                quote_literal(name)
            ));
        } else {
            push_set_config(&mut set, name, value);
        }
    }
    set
}

/// Appends the session-level setting of `name` to `value`. set_config takes the value as the
/// client gave it, as the startup packet does (a SET literal would make `a, b` one search_path
/// entry).
fn push_set_config(sql: &mut String, name: &str, value: &str) {
    sql.push_str(&format!(
        "SELECT pg_catalog.set_config({}, {}, false);",
        quote_literal(name),
        quote_literal(value)
    ));
}

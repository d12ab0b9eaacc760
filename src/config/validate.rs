//! Validation of a parsed configuration: every error names the file and the key.

use std::collections::HashSet;
use std::net::SocketAddr;

use super::{
    Config, Endpoint, LimitsConfig, PoolConfig, ProxyConfig, ShardConfig, TablespaceConfig,
    TablespaceSetConfig, TlsConfig, TransactionsConfig, UserConfig,
};
use crate::tls::{RootCerts, ShardTls, ShardTlsSettings, SslMode};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: {message}")]
    Syntax { file: String, message: String },
    #[error("{file}: {key}: {message}")]
    Invalid {
        file: String,
        key: String,
        message: String,
    },
}

pub(super) fn validate(c: &Config, file: &str) -> Result<(), ConfigError> {
    let bad = |key: String, message: String| ConfigError::Invalid {
        file: file.to_string(),
        key,
        message,
    };
    check_proxy(&c.proxy, &bad)?;
    check_users(&c.users, &bad)?;
    let shard_names = check_shards(&c.shards, &bad)?;
    if let Some(cat) = &c.catalog {
        parse_url(&cat.url).map_err(|m| bad("catalog.url".into(), m))?;
    }
    check_tablespace_sets(&c.tablespace_sets, &shard_names, &bad)?;
    check_tablespaces(&c.tablespaces, &shard_names, &bad)?;
    check_at_least_one(c, &bad)?;
    check_prepare_deadline(&c.transactions, &bad)?;
    check_max_message(&c.limits, &bad)?;
    check_pool(&c.pool, &bad)?;
    if let Some(tls) = &c.tls {
        check_tls_files(tls, &bad)?;
    }
    Ok(())
}

/// `[proxy]`: where to listen, and the database and chunk counts clients are served with.
fn check_proxy(
    p: &ProxyConfig,
    bad: &dyn Fn(String, String) -> ConfigError,
) -> Result<(), ConfigError> {
    check_addr(&p.listen).map_err(|m| bad("proxy.listen".into(), m))?;
    if let Some(m) = &p.metrics_listen {
        check_addr(m).map_err(|m| bad("proxy.metrics_listen".into(), m))?;
    }
    if p.database.is_empty() {
        return Err(bad("proxy.database".into(), "must not be empty".into()));
    }
    if p.chunks_per_shard == 0 {
        return Err(bad(
            "proxy.chunks_per_shard".into(),
            "must be at least 1".into(),
        ));
    }
    if p.workers == Some(0) {
        return Err(bad("proxy.workers".into(), "must be at least 1".into()));
    }
    Ok(())
}

/// `[[users]]`: at least one, with distinct names, so logins are unambiguous.
fn check_users(
    users: &[UserConfig],
    bad: &dyn Fn(String, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if users.is_empty() {
        return Err(bad(
            "users".into(),
            "at least one [[users]] entry is needed, or no client can log in".into(),
        ));
    }
    let mut seen = HashSet::new();
    for (i, u) in users.iter().enumerate() {
        if u.name.is_empty() {
            return Err(bad(format!("users[{i}].name"), "must not be empty".into()));
        }
        if !seen.insert(u.name.as_str()) {
            return Err(bad(
                format!("users[{i}].name"),
                format!("duplicate user \"{}\"", u.name),
            ));
        }
    }
    Ok(())
}

/// `[[shards]]`; their names, which tablespace sets and tablespaces must refer to.
fn check_shards<'c>(
    shards: &'c [ShardConfig],
    bad: &dyn Fn(String, String) -> ConfigError,
) -> Result<HashSet<&'c str>, ConfigError> {
    if shards.is_empty() {
        return Err(bad(
            "shards".into(),
            "at least one [[shards]] entry is needed".into(),
        ));
    }
    let mut shard_names = HashSet::new();
    for (i, s) in shards.iter().enumerate() {
        check_name(&s.name).map_err(|m| bad(format!("shards[{i}].name"), m))?;
        if !shard_names.insert(s.name.as_str()) {
            return Err(bad(
                format!("shards[{i}].name"),
                format!("duplicate shard \"{}\"", s.name),
            ));
        }
        parse_url(&s.url).map_err(|m| bad(format!("shards[{i}].url"), m))?;
    }
    Ok(shard_names)
}

/// `[[tablespace_sets]]`: distinct names, each over at least one configured shard.
fn check_tablespace_sets(
    sets: &[TablespaceSetConfig],
    shard_names: &HashSet<&str>,
    bad: &dyn Fn(String, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let mut set_names = HashSet::new();
    for (i, ts) in sets.iter().enumerate() {
        check_name(&ts.name).map_err(|m| bad(format!("tablespace_sets[{i}].name"), m))?;
        if !set_names.insert(ts.name.as_str()) {
            return Err(bad(
                format!("tablespace_sets[{i}].name"),
                format!("duplicate tablespace set \"{}\"", ts.name),
            ));
        }
        if ts.shards.is_empty() {
            return Err(bad(
                format!("tablespace_sets[{i}].shards"),
                "must name at least one shard".into(),
            ));
        }
        for (j, s) in ts.shards.iter().enumerate() {
            if !shard_names.contains(s.as_str()) {
                return Err(bad(
                    format!("tablespace_sets[{i}].shards[{j}]"),
                    format!("no shard named \"{s}\" in [[shards]]"),
                ));
            }
        }
    }
    Ok(())
}

/// `[[tablespaces]]`: distinct names, each on a configured shard.
fn check_tablespaces(
    tablespaces: &[TablespaceConfig],
    shard_names: &HashSet<&str>,
    bad: &dyn Fn(String, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let mut tbs_names = HashSet::new();
    for (i, t) in tablespaces.iter().enumerate() {
        check_name(&t.name).map_err(|m| bad(format!("tablespaces[{i}].name"), m))?;
        if !tbs_names.insert(t.name.as_str()) {
            return Err(bad(
                format!("tablespaces[{i}].name"),
                format!("duplicate tablespace \"{}\"", t.name),
            ));
        }
        if !shard_names.contains(t.shard.as_str()) {
            return Err(bad(
                format!("tablespaces[{i}].shard"),
                format!("no shard named \"{}\" in [[shards]]", t.shard),
            ));
        }
    }
    Ok(())
}

/// Intervals, timeouts and limits for which zero would mean never, or nothing at all.
fn check_at_least_one(
    c: &Config,
    bad: &dyn Fn(String, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let t = &c.transactions;
    for (key, value) in [
        ("transactions.recovery_interval_ms", t.recovery_interval_ms),
        ("transactions.recovery_grace_ms", t.recovery_grace_ms),
        ("transactions.prepare_deadline_ms", t.prepare_deadline_ms),
        ("transactions.lease_ms", t.lease_ms),
        ("queries.combine_row_limit", c.queries.combine_row_limit),
        ("ttl.purge_interval_ms", c.ttl.purge_interval_ms),
        ("ttl.purge_batch_rows", u64::from(c.ttl.purge_batch_rows)),
        (
            "limits.max_client_connections",
            u64::from(c.limits.max_client_connections),
        ),
        ("limits.login_timeout_ms", c.limits.login_timeout_ms),
    ] {
        if value == 0 {
            return Err(bad(key.into(), "must be at least 1".into()));
        }
    }
    Ok(())
}

/// Recovery must not roll back a prepared transaction its coordinator may still commit.
fn check_prepare_deadline(
    t: &TransactionsConfig,
    bad: &dyn Fn(String, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if t.prepare_deadline_ms >= t.recovery_grace_ms {
        return Err(bad(
            "transactions.prepare_deadline_ms".into(),
            format!(
                "must be shorter than transactions.recovery_grace_ms ({}), or recovery could roll \
                 back a transaction its coordinator is about to commit",
                t.recovery_grace_ms
            ),
        ));
    }
    Ok(())
}

/// `limits.max_message_bytes` must admit ordinary statements and stay within PostgreSQL's.
fn check_max_message(
    limits: &LimitsConfig,
    bad: &dyn Fn(String, String) -> ConfigError,
) -> Result<(), ConfigError> {
    // Below it a client could not send an ordinary statement, nor Bind its parameters.
    const SMALLEST_MAX_MESSAGE: u32 = 8192;
    if !(SMALLEST_MAX_MESSAGE..=super::POSTGRESQL_MAX_MESSAGE).contains(&limits.max_message_bytes) {
        return Err(bad(
            "limits.max_message_bytes".into(),
            format!(
                "must be between {SMALLEST_MAX_MESSAGE} and {} (PostgreSQL's own limit)",
                super::POSTGRESQL_MAX_MESSAGE
            ),
        ));
    }
    Ok(())
}

/// `[pool]`: an empty pool or a zero timeout could never give out a connection.
fn check_pool(
    pool: &PoolConfig,
    bad: &dyn Fn(String, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if pool.size == 0 {
        return Err(bad("pool.size".into(), "must be at least 1".into()));
    }
    if pool.connect_timeout_ms == 0 {
        return Err(bad(
            "pool.connect_timeout_ms".into(),
            "must be at least 1".into(),
        ));
    }
    Ok(())
}

/// `[tls]`: the certificate and key must exist now, not fail the first TLS client later.
fn check_tls_files(
    tls: &TlsConfig,
    bad: &dyn Fn(String, String) -> ConfigError,
) -> Result<(), ConfigError> {
    for (key, path) in [("tls.cert", &tls.cert), ("tls.key", &tls.key)] {
        if !path.is_file() {
            return Err(bad(
                key.into(),
                format!("file \"{}\" does not exist", path.display()),
            ));
        }
    }
    Ok(())
}

fn check_addr(s: &str) -> Result<(), String> {
    s.parse::<SocketAddr>()
        .map(|_| ())
        .map_err(|_| format!("invalid address \"{s}\": expected IP:PORT, e.g. \"127.0.0.1:6432\""))
}

/// Names become parts of identifiers and gids, so they stay simple.
fn check_name(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 48
        && s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid name \"{s}\": use letters, digits and _ (starting with a letter, at most 48)"
        ))
    }
}

/// Parses `postgres://user[:password]@host[:port]/dbname[?sslmode=…&sslrootcert=…]`; the TLS
/// files the URL names are read here, so a bad one is reported with the configuration.
pub(super) fn parse_url(url: &str) -> Result<Endpoint, String> {
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
        .ok_or_else(|| format!("\"{}\" must start with postgres://", mask_url_password(url)))?;
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let tls = ShardTls::new(parse_tls_query(query)?)?;
    let (authority, dbname) = rest.split_once('/').ok_or_else(|| {
        "missing database name: expected postgres://user@host:port/dbname".to_string()
    })?;
    if dbname.is_empty() {
        return Err("missing database name: expected postgres://user@host:port/dbname".into());
    }
    let (userinfo, hostport) = authority
        .rsplit_once('@')
        .ok_or_else(|| "missing user: expected postgres://user@host:port/dbname".to_string())?;
    let (user, password) = match userinfo.split_once(':') {
        Some((u, p)) => (u, Some(percent_decode(p)?)),
        None => (userinfo, None),
    };
    if user.is_empty() {
        return Err("missing user: expected postgres://user@host:port/dbname".into());
    }
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => {
            let port: u16 = p
                .parse()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("invalid port \"{p}\""))?;
            (h, port)
        }
        None => (hostport, 5432),
    };
    if host.is_empty() {
        return Err("missing host".into());
    }
    Ok(Endpoint {
        host: host.to_string(),
        port,
        user: percent_decode(user)?,
        password,
        dbname: percent_decode(dbname)?,
        tls,
    })
}

/// The URL's query: libpq's TLS parameters, nothing else.
fn parse_tls_query(query: &str) -> Result<ShardTlsSettings, String> {
    let mut settings = ShardTlsSettings::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("URL parameter \"{pair}\" has no value: write {pair}=…"))?;
        let value = percent_decode(value)?;
        match key {
            "sslmode" => settings.mode = SslMode::parse(&value)?,
            "sslrootcert" if value == "system" => settings.root_certs = Some(RootCerts::System),
            "sslrootcert" => settings.root_certs = Some(RootCerts::File(value.into())),
            "sslcert" => settings.cert = Some(value.into()),
            "sslkey" => settings.key = Some(value.into()),
            other => {
                return Err(format!(
                    "unknown URL parameter \"{other}\": shard and catalog URLs take sslmode, \
                     sslrootcert, sslcert and sslkey"
                ))
            }
        }
    }
    Ok(settings)
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("invalid percent-escape in \"{}\"", mask_url_password(s)))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "URL is not valid UTF-8 after percent-decoding".into())
}

/// The URL with its password, if any, replaced by `********`.
pub(super) fn mask_url_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let end = url.find('?').unwrap_or(url.len());
    let after = &url[scheme_end + 3..end];
    let Some(at) = after.rfind('@') else {
        return url.to_string();
    };
    match after[..at].split_once(':') {
        Some((user, _)) => format!(
            "{}{}:********{}",
            &url[..scheme_end + 3],
            user,
            &url[scheme_end + 3 + at..]
        ),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &str) -> String {
        format!(
            "[proxy]\nlisten = \"127.0.0.1:6432\"\ndatabase = \"app\"\n[[users]]\nname = \"app\"\npassword = \"app\"\n{extra}"
        )
    }

    #[test]
    fn bad_port_names_the_key() {
        let text = cfg("[[shards]]\nname=\"s1\"\nurl=\"postgres://u@h:5432/d\"\n[[shards]]\nname=\"s2\"\nurl=\"postgres://u@h:5433/d\"\n[[shards]]\nname=\"s3\"\nurl=\"postgres://u@h:99999/d\"\n");
        let e = Config::parse(&text, "x.toml").unwrap_err().to_string();
        assert_eq!(e, "x.toml: shards[2].url: invalid port \"99999\"");
    }

    #[test]
    fn unknown_key_is_named() {
        let text = cfg("[[shards]]\nname=\"s1\"\nurl=\"postgres://u@h/d\"\nwhatever = 1\n");
        let e = Config::parse(&text, "x.toml").unwrap_err().to_string();
        assert!(e.contains("unknown field `whatever`"), "{e}");
    }

    #[test]
    fn url_parts_and_masking() {
        let ep = parse_url("postgres://bob:s%40cret@db.local:6000/app").unwrap();
        assert_eq!(ep.user, "bob");
        assert_eq!(ep.password.as_deref(), Some("s@cret"));
        assert_eq!(
            (ep.host.as_str(), ep.port, ep.dbname.as_str()),
            ("db.local", 6000, "app")
        );
        assert_eq!(
            mask_url_password("postgres://bob:secret@h:1/d"),
            "postgres://bob:********@h:1/d"
        );
        assert!(!format!("{ep:?}").contains("cret"));
    }

    #[test]
    fn url_tls_parameters() {
        let ep = parse_url("postgres://u:p@h/d?sslmode=require").unwrap();
        assert_eq!(ep.tls.as_ref().map(|t| t.mode()), Some(SslMode::Require));
        assert_eq!(
            ep.to_string(),
            "postgres://u:********@h:5432/d?sslmode=require"
        );
        assert!(parse_url("postgres://u@h/d?sslmode=disable")
            .unwrap()
            .tls
            .is_none());
        let e = parse_url("postgres://u@h/d?sslmode=verify-full").unwrap_err();
        assert!(e.contains("needs sslrootcert"), "{e}");
        let e = parse_url("postgres://u@h/d?sslmode=verify-ca&sslrootcert=/no/such/ca.pem")
            .unwrap_err();
        assert!(e.contains("/no/such/ca.pem"), "{e}");
        let e = parse_url("postgres://u@h/d?connect_timeout=3").unwrap_err();
        assert!(
            e.contains("unknown URL parameter \"connect_timeout\""),
            "{e}"
        );
        let e = parse_url("postgres://u@h/d?sslmode").unwrap_err();
        assert!(e.contains("has no value"), "{e}");
        assert_eq!(
            mask_url_password("postgres://u:pw@h/d?sslrootcert=/a@b/ca.pem"),
            "postgres://u:********@h/d?sslrootcert=/a@b/ca.pem"
        );
    }

    #[test]
    fn tablespace_set_must_name_known_shards() {
        let text = cfg("[[shards]]\nname=\"s1\"\nurl=\"postgres://u@h/d\"\n[[tablespace_sets]]\nname=\"ts1\"\nshards=[\"s1\",\"s9\"]\n");
        let e = Config::parse(&text, "x.toml").unwrap_err().to_string();
        assert_eq!(
            e,
            "x.toml: tablespace_sets[0].shards[1]: no shard named \"s9\" in [[shards]]"
        );
    }
}

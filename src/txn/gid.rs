//! Global transaction ids: `sw_<cluster>_<proxy>_<epoch>_<seq>`, from `[a-z0-9_]` only.
//!
//! The prefix and the cluster tag let recovery pick out exactly the prepared transactions of its
//! own shardwire cluster (a shard may hold other software's prepared transactions too); the proxy
//! id, start time and counter make every gid unique without any coordination between proxies.
//!
//! A participant prepares under the gid itself, unless its shard shares a PostgreSQL server with
//! another configured shard: prepared-transaction names are the server's, so there the name is
//! `<gid>_<shard number>` ([`Gid::prepared_name`]).

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rand::Rng;

use crate::config::Endpoint;
use crate::model::ShardId;

const PREFIX: &str = "sw";
const PROXY_ID_LEN: usize = 8;

fn is_tag(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Names one shardwire cluster (the proxies sharing one catalog) inside its gids.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClusterTag(String);

impl ClusterTag {
    /// A tag of `[a-z0-9]`; `None` for anything else (an underscore would break parsing).
    pub fn new(tag: &str) -> Option<ClusterTag> {
        is_tag(tag).then(|| ClusterTag(tag.to_string()))
    }

    /// Eight hex digits of a stable hash (FNV-1a, not std's hasher, whose output may change
    /// between Rust releases) of the catalog's host, port and database: every proxy configured
    /// with the same catalog address derives the same tag.
    pub fn from_catalog(endpoint: &Endpoint) -> ClusterTag {
        let key = format!(
            "{}:{}/{}",
            endpoint.host.to_ascii_lowercase(),
            endpoint.port,
            endpoint.dbname
        );
        let hash = key.bytes().fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        ClusterTag(format!("{hash:08x}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClusterTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One proxy process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProxyId(String);

impl ProxyId {
    pub fn new(id: &str) -> Option<ProxyId> {
        is_tag(id).then(|| ProxyId(id.to_string()))
    }

    pub fn random() -> ProxyId {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let mut rng = rand::thread_rng();
        let id = (0..PROXY_ID_LEN)
            .map(|_| char::from(ALPHABET[rng.gen_range(0..ALPHABET.len())]))
            .collect();
        ProxyId(id)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProxyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A shardwire global transaction id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Gid {
    pub cluster: ClusterTag,
    pub proxy: ProxyId,
    /// The proxy's start time, seconds since the Unix epoch.
    pub epoch: u64,
    pub seq: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{0}\" is not a shardwire gid (sw_<cluster>_<proxy>_<epoch>_<seq>, [a-z0-9_] only)")]
pub struct GidParseError(pub String);

impl Gid {
    /// Parses the text form; anything not exactly of the shardwire form is refused, so recovery
    /// never touches a prepared transaction that is not ours.
    pub fn parse(text: &str) -> Result<Gid, GidParseError> {
        let fail = || GidParseError(text.to_string());
        let parts: Vec<&str> = text.split('_').collect();
        let [PREFIX, cluster, proxy, epoch, seq] = parts.as_slice() else {
            return Err(fail());
        };
        let number = |s: &str| -> Option<u64> {
            // Only the canonical decimal form, so parse and format round-trip exactly.
            let canonical =
                s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
            canonical.then(|| s.parse().ok()).flatten()
        };
        Ok(Gid {
            cluster: ClusterTag::new(cluster).ok_or_else(fail)?,
            proxy: ProxyId::new(proxy).ok_or_else(fail)?,
            epoch: number(epoch).ok_or_else(fail)?,
            seq: number(seq).ok_or_else(fail)?,
        })
    }

    /// The name the transaction is prepared under on `shard`: the gid, followed by the shard's
    /// number where the shard `shares_server` with another configured shard.
    pub fn prepared_name(&self, shard: ShardId, shares_server: bool) -> String {
        match shares_server {
            true => format!("{self}_{}", shard.0),
            false => self.to_string(),
        }
    }

    /// The gid of a prepared transaction's name, in either form.
    pub fn of_prepared(name: &str) -> Result<Gid, GidParseError> {
        let numbered = name.rsplit_once('_').and_then(|(gid, shard)| {
            let shard_number = !shard.is_empty() && shard.bytes().all(|b| b.is_ascii_digit());
            shard_number.then(|| Gid::parse(gid).ok()).flatten()
        });
        match numbered {
            Some(gid) => Ok(gid),
            None => Gid::parse(name),
        }
    }
}

/// A prepared transaction's name as an SQL string literal, for `PREPARE TRANSACTION` and
/// `COMMIT PREPARED`, which take no parameters. Safe for the names of [`Gid::prepared_name`]
/// and of listings that [`Gid::of_prepared`] read: `[a-z0-9_]` only.
pub fn quoted(name: &str) -> String {
    debug_assert!(
        name.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
        "{name:?} is not a shardwire prepared name"
    );
    format!("'{name}'")
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}_{}_{}_{}_{}",
            self.cluster, self.proxy, self.epoch, self.seq
        )
    }
}

impl FromStr for Gid {
    type Err = GidParseError;

    fn from_str(s: &str) -> Result<Gid, GidParseError> {
        Gid::parse(s)
    }
}

/// Hands out this proxy's gids.
#[derive(Debug)]
pub struct GidGenerator {
    cluster: ClusterTag,
    proxy: ProxyId,
    epoch: u64,
    last_seq: AtomicU64,
}

impl GidGenerator {
    /// A random proxy id and the current time as epoch.
    pub fn new(cluster: ClusterTag) -> GidGenerator {
        let epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        GidGenerator::with_identity(cluster, ProxyId::random(), epoch)
    }

    /// A generator whose gids are known in advance: the first has sequence number 1.
    pub fn with_identity(cluster: ClusterTag, proxy: ProxyId, epoch: u64) -> GidGenerator {
        GidGenerator {
            cluster,
            proxy,
            epoch,
            last_seq: AtomicU64::new(0),
        }
    }

    pub fn cluster(&self) -> &ClusterTag {
        &self.cluster
    }

    /// The cluster, proxy id and epoch every gid of this generator carries.
    pub fn incarnation(&self) -> super::lease::Incarnation {
        super::lease::Incarnation {
            cluster: self.cluster.clone(),
            proxy: self.proxy.clone(),
            epoch: self.epoch,
        }
    }

    pub fn next_gid(&self) -> Gid {
        Gid {
            cluster: self.cluster.clone(),
            proxy: self.proxy.clone(),
            epoch: self.epoch,
            seq: self.last_seq.fetch_add(1, Ordering::Relaxed) + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_back() {
        let generator = GidGenerator::new(ClusterTag::new("c0ffee").unwrap());
        let gid = generator.next_gid();
        let text = gid.to_string();
        assert!(text.starts_with("sw_c0ffee_"), "{text}");
        assert!(text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
        assert_eq!(Gid::parse(&text), Ok(gid.clone()));
        assert_ne!(generator.next_gid(), gid);
    }

    #[test]
    fn a_prepared_name_carries_the_shard_only_on_a_shared_server() {
        let gid = GidGenerator::new(ClusterTag::new("c0ffee").unwrap()).next_gid();
        assert_eq!(gid.prepared_name(ShardId(3), false), gid.to_string());
        let numbered = gid.prepared_name(ShardId(3), true);
        assert_eq!(numbered, format!("{gid}_3"));
        for name in [gid.to_string(), numbered] {
            assert_eq!(Gid::of_prepared(&name), Ok(gid.clone()), "{name}");
        }
        for name in [
            "sw_a_b_1_2_",
            "sw_a_b_1_2_x",
            "sw_a_b_1_2_3_4",
            "xw_a_b_1_2_3",
        ] {
            assert!(Gid::of_prepared(name).is_err(), "{name:?} read");
        }
    }

    #[test]
    fn refuses_what_is_not_ours() {
        for text in [
            "",
            "sw",
            "sw_a_b_1",
            "sw_a_b_1_2_3",
            "xw_a_b_1_2",
            "SW_a_b_1_2",
            "sw_A_b_1_2",
            "sw_a_b-c_1_2",
            "sw__b_1_2",
            "sw_a_b_01_2",
            "sw_a_b_1_x",
            "sw_a_b_1_+2",
            "sw_a_b_1_99999999999999999999999",
            "sw_a_b_1_2 ",
            "sw_a_b_1_2'",
        ] {
            assert!(Gid::parse(text).is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn cluster_tag_depends_on_the_catalog_only() {
        let endpoint = |host: &str, port| Endpoint {
            host: host.into(),
            port,
            user: "u".into(),
            password: None,
            dbname: "app".into(),
            tls: None,
        };
        let a = ClusterTag::from_catalog(&endpoint("db1", 5432));
        assert_eq!(a, ClusterTag::from_catalog(&endpoint("DB1", 5432)));
        assert_ne!(a, ClusterTag::from_catalog(&endpoint("db1", 5433)));
        assert_eq!(a.as_str().len(), 8);
        assert!(ClusterTag::new(a.as_str()).is_some());
    }
}

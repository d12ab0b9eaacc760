//! DDL the proxy runs itself: CREATE SHARDED/DUPLICATED TABLE, CREATE/DROP TABLESPACE SET,
//! ALTER TABLE … ROW MOVEMENT, and DROP TABLE / ALTER TABLE / CREATE INDEX on tables the catalog
//! knows, on every shard that holds them under one two-phase commit.

use tokio_postgres::error::SqlState;

use crate::catalog::Snapshot;
use crate::error::ClientError;
use crate::server::ServerCtx;

/// A statement the proxy executes itself, recognised by [`recognise`].
#[derive(Debug)]
pub struct ProxyDdl {
    pub sql: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("sharding DDL is not available yet")]
    NotAvailable,
}

impl ClientError for ExecError {
    fn sqlstate(&self) -> SqlState {
        match self {
            ExecError::NotAvailable => SqlState::FEATURE_NOT_SUPPORTED,
        }
    }
    fn client_message(&self) -> String {
        self.to_string()
    }
}

/// Whether the proxy must execute `sql` itself. Runs for every simple query whose first word is
/// CREATE, DROP or ALTER, so it decides from the leading words before parsing anything.
pub fn recognise(sql: &[u8], _snapshot: &Snapshot) -> Option<ProxyDdl> {
    let text = std::str::from_utf8(sql).ok()?;
    crate::ddl::is_sharding_ddl(text).then(|| ProxyDdl {
        sql: text.to_string(),
    })
}

/// Runs a recognised statement; the result is its command tag.
pub async fn execute(_ctx: &ServerCtx, _ddl: ProxyDdl) -> Result<String, ExecError> {
    Err(ExecError::NotAvailable)
}

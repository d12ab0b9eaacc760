//! Where the client's extended-protocol batch stands when the proxy answers parts of it itself:
//! a message it refused (the rest of the batch is skipped up to Sync, as PostgreSQL does), and
//! Parses it holds back until it knows where their statement runs.

use crate::sql::classify::LastEffect;

#[derive(Default)]
pub(super) struct BatchState {
    /// What the last Parse's statement text does to the session (clients repeat their Parses).
    pub parse_effect: LastEffect,
    /// After the proxy itself failed an extended-protocol message: drop input up to Sync.
    pub skip_until_sync: bool,
    /// The proxy refused an extended-protocol message: if a transaction block is open, it fails
    /// on its shards at the Sync (not before: the shards are in the middle of the batch).
    pub fail_block_at_sync: Option<String>,
    /// How much of `cout` is the proxy's answers to held Parses and nothing else (0: none).
    pub deferred_parse_len: usize,
    /// search_path changes made through the extended protocol, until they stand.
    pub paths: super::search_path::ExtendedPaths,
}

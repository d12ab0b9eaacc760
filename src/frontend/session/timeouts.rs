//! The proxy's own time limits on a session (`limits.idle_in_transaction_timeout_ms`,
//! `limits.query_timeout_ms`): a client that holds a transaction block open without using it
//! keeps shard connections from every other client, and a statement the shards never finish
//! (one stuck on a shard that stopped answering, which no cancel reaches) would hold its client
//! for ever. Either ends the session with a FATAL, as PostgreSQL ends one for
//! idle_in_transaction_session_timeout: its connections are closed (the shards roll back what
//! they held) and what still runs on them is canceled.

use super::Session;
use crate::executor::participants::ShardLink;
use crate::frontend::FrontendError;
use std::time::{Duration, Instant};

/// Which limit a wait ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    IdleInTransaction,
    Query { limit_ms: u64 },
}

impl Expiry {
    pub fn error(self) -> FrontendError {
        match self {
            Expiry::IdleInTransaction => FrontendError::IdleInTransactionTimeout,
            Expiry::Query { limit_ms } => FrontendError::QueryTimeout { limit_ms },
        }
    }
}

/// The limits, and since when the session has been in the state one of them bounds.
pub(super) struct Timeouts {
    idle_in_transaction: Option<Duration>,
    query: Option<Duration>,
    since: Option<(Instant, State)>,
}

/// What a session waits for, as far as the limits go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Answers owed to the client (a statement runs, or its results wait to be read).
    Busy,
    /// Nothing owed, inside a transaction block.
    IdleInTransaction,
}

impl Timeouts {
    pub fn new(limits: &crate::config::LimitsConfig) -> Timeouts {
        let limit = |ms: u64| (ms > 0).then(|| Duration::from_millis(ms));
        Timeouts {
            idle_in_transaction: limit(limits.idle_in_transaction_timeout_ms),
            query: limit(limits.query_timeout_ms),
            since: None,
        }
    }

    fn off(&self) -> bool {
        self.idle_in_transaction.is_none() && self.query.is_none()
    }

    /// The deadline of a general-path step starting now (it owes the client its answer).
    pub fn step_deadline(&mut self) -> Option<(Instant, Expiry)> {
        self.deadline(Some(State::Busy))
    }

    fn deadline(&mut self, state: Option<State>) -> Option<(Instant, Expiry)> {
        let Some(state) = state else {
            self.since = None;
            return None;
        };
        let since = match self.since {
            Some((since, was)) if was == state => since,
            _ => {
                let now = Instant::now();
                self.since = Some((now, state));
                now
            }
        };
        match state {
            State::Busy => self.query.map(|limit| {
                let limit_ms = limit.as_millis() as u64;
                (since + limit, Expiry::Query { limit_ms })
            }),
            State::IdleInTransaction => self
                .idle_in_transaction
                .map(|limit| (since + limit, Expiry::IdleInTransaction)),
        }
    }
}

impl Session {
    /// When the wait the session loop is about to begin must end, if a limit bounds it.
    pub(super) fn wait_deadline(&mut self) -> Option<(Instant, Expiry)> {
        if self.timeouts.off() {
            return None;
        }
        let state = if !self.pipeline.is_empty() {
            Some(State::Busy)
        } else if self.in_transaction_block() {
            Some(State::IdleInTransaction)
        } else {
            None
        };
        self.timeouts.deadline(state)
    }

    /// A connection the session holds is inside a transaction block.
    fn in_transaction_block(&self) -> bool {
        let in_block = |link: &ShardLink| link.tx_status.in_block();
        self.links.current.as_ref().is_some_and(in_block) || self.links.parked.iter().any(in_block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeouts(idle_ms: u64, query_ms: u64) -> Timeouts {
        Timeouts::new(&crate::config::LimitsConfig {
            idle_in_transaction_timeout_ms: idle_ms,
            query_timeout_ms: query_ms,
            ..Default::default()
        })
    }

    #[test]
    fn a_deadline_counts_from_when_its_state_began() {
        let mut t = timeouts(1_000, 5_000);
        let (first, expiry) = t.deadline(Some(State::Busy)).unwrap();
        assert_eq!(expiry, Expiry::Query { limit_ms: 5_000 });
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(
            t.deadline(Some(State::Busy)).unwrap().0,
            first,
            "still busy"
        );
        let (idle, expiry) = t.deadline(Some(State::IdleInTransaction)).unwrap();
        assert_eq!(expiry, Expiry::IdleInTransaction);
        assert!(idle < first, "a new state starts its own count");
        assert_eq!(t.deadline(None), None);
        assert!(t.deadline(Some(State::Busy)).unwrap().0 > first);
    }

    #[test]
    fn a_limit_of_zero_is_off() {
        let mut t = timeouts(0, 5_000);
        assert!(!t.off());
        assert_eq!(t.deadline(Some(State::IdleInTransaction)), None);
        assert!(timeouts(0, 0).off());
    }
}

//! How many client sessions the proxy serves at once, in all and per user
//! (`limits.max_client_connections`, `limits.max_connections_per_user`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use dashmap::DashMap;

use super::FrontendError;
use crate::config::LimitsConfig;

pub struct ConnectionLimits {
    max_total: u32,
    /// 0: none.
    max_per_user: u32,
    total: AtomicU32,
    per_user: DashMap<String, u32>,
}

/// A session's place under the limits, given back when it drops.
pub struct Admitted {
    limits: Arc<ConnectionLimits>,
    user: String,
}

impl ConnectionLimits {
    pub fn new(config: &LimitsConfig) -> ConnectionLimits {
        ConnectionLimits {
            max_total: config.max_client_connections,
            max_per_user: config.max_connections_per_user,
            total: AtomicU32::new(0),
            per_user: DashMap::new(),
        }
    }

    /// Counts a session of `user` in, unless that would pass a limit.
    pub fn admit(self: &Arc<Self>, user: &str) -> Result<Admitted, FrontendError> {
        let counted = self
            .total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_total).then_some(n + 1)
            });
        if counted.is_err() {
            return Err(FrontendError::TooManyClients);
        }
        let mut mine = self.per_user.entry(user.to_owned()).or_insert(0);
        if self.max_per_user > 0 && *mine >= self.max_per_user {
            drop(mine);
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(FrontendError::TooManyForUser {
                user: user.to_owned(),
            });
        }
        *mine += 1;
        Ok(Admitted {
            limits: self.clone(),
            user: user.to_owned(),
        })
    }

    /// Client sessions served now.
    pub fn sessions(&self) -> u32 {
        self.total.load(Ordering::Acquire)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let limits = &self.limits;
        limits.per_user.remove_if_mut(&self.user, |_, n| {
            *n -= 1;
            *n == 0
        });
        limits.total.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: u32, per_user: u32) -> Arc<ConnectionLimits> {
        Arc::new(ConnectionLimits::new(&LimitsConfig {
            max_client_connections: total,
            max_connections_per_user: per_user,
            ..LimitsConfig::default()
        }))
    }

    #[test]
    fn sessions_are_counted_in_all_and_per_user_and_given_back() {
        let l = limits(3, 2);
        let a1 = l.admit("a").unwrap();
        let a2 = l.admit("a").unwrap();
        assert!(matches!(
            l.admit("a"),
            Err(FrontendError::TooManyForUser { .. })
        ));
        let b1 = l.admit("b").unwrap();
        assert!(matches!(l.admit("c"), Err(FrontendError::TooManyClients)));
        assert_eq!(l.sessions(), 3);
        drop(a1);
        let a3 = l.admit("a").unwrap();
        drop((a2, a3, b1));
        assert_eq!(l.sessions(), 0);
        assert!(l.per_user.is_empty());
    }
}

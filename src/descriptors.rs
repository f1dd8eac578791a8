//! File descriptors: the process's `RLIMIT_NOFILE` against what the listeners may hold.
//!
//! Each connection is a descriptor, and both listeners may hold `[server] max_connections` of
//! them; besides, the process needs a fixed [`HEADROOM`] (librdkafka's broker sockets and
//! wake-up pipes, Redis, the Schema Registry's and the JWKS' HTTP clients, the state file,
//! the runtime's own, and the few newcomers a full listener has accepted and holds waiting
//! for a slot). A soft limit below that — systemd's and many containers' default is
//! 1,024 — lets a flood of idle connections take every descriptor: `accept` then fails for
//! everyone, Kafka and Redis included. So at start-up the soft limit is raised to the hard
//! limit, and if `2 × max_connections + HEADROOM` still does not fit, each listener's
//! `max_connections` is **clamped** to what does (logged as a warning; never below
//! [`MIN_CONNECTIONS`]): the listener then keeps its extra clients waiting in the kernel's
//! backlog instead of failing them and the process's own connections.
//!
//! Layer: foundations. Imports nothing of floodgate's.

/// Descriptors the process needs besides its connections: 128 of its own, and each
/// listener's newcomers accepted while it is full, waiting for a slot (at most
/// [`WAITING_NEWCOMERS`] each).
pub const HEADROOM: u64 = 128 + 2 * WAITING_NEWCOMERS as u64;

/// Newcomers a full listener holds at most, accepted and waiting for a slot.
pub const WAITING_NEWCOMERS: usize = 64;

/// The fewest connections a clamped listener keeps.
pub const MIN_CONNECTIONS: usize = 32;

/// What start-up found and decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptors {
    /// The soft limit before and after raising it, and the hard limit.
    pub soft_before: u64,
    pub soft: u64,
    pub hard: u64,
    /// Connections each listener may hold: the configured number, or less when it did not fit.
    pub max_connections: usize,
}

impl Descriptors {
    pub fn clamped(&self, configured: usize) -> bool {
        self.max_connections < configured
    }
}

/// Connections each of the two listeners may hold under a soft limit of `limit` descriptors.
pub fn fit(limit: u64, configured: usize) -> usize {
    let room = limit.saturating_sub(HEADROOM) / 2;
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    configured.min(room.max(MIN_CONNECTIONS))
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and fits `configured` connections per
/// listener into it. Where the limit cannot be read, nothing changes.
pub fn prepare(configured: usize) -> Descriptors {
    let Ok((soft_before, hard)) = rlimit::getrlimit(rlimit::Resource::NOFILE) else {
        return Descriptors {
            soft_before: u64::MAX,
            soft: u64::MAX,
            hard: u64::MAX,
            max_connections: configured,
        };
    };
    let soft = rlimit::increase_nofile_limit(hard).unwrap_or(soft_before);
    Descriptors {
        soft_before,
        soft,
        hard,
        max_connections: fit(soft, configured),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_listeners_and_the_headroom_fit_in_the_limit() {
        assert_eq!(fit(1_048_576, 4_096), 4_096, "fits: unchanged");
        assert_eq!(fit(8_448, 4_096), 4_096, "exactly");
        assert_eq!(fit(8_447, 4_096), 4_095);
        assert_eq!(fit(1_024, 4_096), 384, "(1024 - 256) / 2");
        assert_eq!(fit(100, 4_096), MIN_CONNECTIONS, "never below the floor");
        assert_eq!(fit(100, 10), 10, "nor above what was configured");
    }

    /// The soft limit is raised to the hard one (this process may raise its own).
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_limit() {
        let d = prepare(4_096);
        assert!(d.soft >= d.soft_before);
        let (soft, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).expect("limit");
        assert_eq!((d.soft, d.hard), (soft, hard));
        assert!(soft == hard || cfg!(target_os = "macos"), "{soft} < {hard}");
        assert_eq!(d.max_connections, fit(soft, 4_096));
    }
}

//! How many members to divide a budget among while Redis is away, and this replica's place
//! among them: what the heartbeats counted, remembered across a Redis that comes back empty.
//!
//! Why not the last count: a Redis that restarts has forgotten the members, and each
//! replica's first heartbeat after it counts only those that have beaten since. Had Redis
//! failed again in that while, each replica would have kept its own short count — the first
//! to beat "1 of 1" — and taken that much of every budget (review 36b of #37: three replicas
//! each took the whole share, 91–92 records in 30 s of a budget of 1 a second, after a few
//! flaps). So a count goes up at once, but down only once heartbeats have gone on without a
//! failure for a whole member lifetime (`member_ttl`), by when every live replica has beaten
//! and a missing one has lapsed; until then the higher count holds, and this replica takes
//! the smallest place (⌊budget / N⌋, [`crate::budget::fallback_of`]), so the members' shares
//! add up to the budget at most.

/// A count with its place, as the shares use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    pub members: u32,
    pub rank: u32,
}

#[derive(Debug)]
pub struct Headcount {
    /// The count the shares follow.
    held: u32,
    /// Since when (local ns) heartbeats have answered without a failure; `None` after one
    /// failed, until the next answers.
    steady_since: Option<u64>,
    /// How long heartbeats must have gone on before a lower count is believed.
    member_ttl_ns: u64,
}

impl Headcount {
    /// Before any heartbeat: as many members as expected.
    pub fn new(expected: u32, member_ttl_ns: u64) -> Self {
        Self {
            held: expected.max(1),
            steady_since: None,
            member_ttl_ns,
        }
    }

    /// A heartbeat answered at `now_ns`, counting `members` with this replica at `rank`.
    pub fn heard(&mut self, members: u32, rank: u32, now_ns: u64) -> Count {
        let members = members.max(1);
        let since = *self.steady_since.get_or_insert(now_ns);
        let settled = now_ns.saturating_sub(since) >= self.member_ttl_ns;
        if members >= self.held || settled {
            self.held = members;
            return Count { members, rank };
        }
        Count {
            members: self.held,
            rank: 0,
        }
    }

    /// A heartbeat failed: the next count is judged from the next answer on.
    pub fn failed(&mut self) {
        self.steady_since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: u64 = 10_000;

    #[test]
    fn a_count_goes_up_at_once() {
        let mut h = Headcount::new(1, TTL);
        assert_eq!(
            h.heard(3, 2, 0),
            Count {
                members: 3,
                rank: 2
            }
        );
    }

    #[test]
    fn a_redis_that_comes_back_empty_does_not_shrink_the_count() {
        let mut h = Headcount::new(3, TTL);
        assert_eq!(
            h.heard(3, 1, 0),
            Count {
                members: 3,
                rank: 1
            }
        );
        h.failed();
        // Redis restarted empty: this replica beats first and is counted alone.
        let first = h.heard(1, 0, 50_000);
        assert_eq!(
            first,
            Count {
                members: 3,
                rank: 0
            },
            "the smallest place of the held count"
        );
        // It fails again at once, and comes back: still three, however often.
        for at in [60_000, 70_000, 80_000] {
            h.failed();
            assert_eq!(h.heard(1, 0, at).members, 3);
        }
        // The others beat again: their count is heard at once.
        assert_eq!(
            h.heard(3, 2, 81_000),
            Count {
                members: 3,
                rank: 2
            }
        );
    }

    #[test]
    fn a_member_that_left_is_believed_gone_after_a_lifetime_of_steady_heartbeats() {
        let mut h = Headcount::new(3, TTL);
        h.heard(3, 0, 0);
        assert_eq!(h.heard(2, 0, TTL - 1).members, 3);
        assert_eq!(
            h.heard(2, 1, TTL),
            Count {
                members: 2,
                rank: 1
            }
        );
        // And a failure on the way starts the wait again.
        let mut h = Headcount::new(3, TTL);
        h.heard(3, 0, 0);
        h.failed();
        assert_eq!(h.heard(2, 1, TTL).members, 3);
        assert_eq!(h.heard(2, 1, 2 * TTL - 1).members, 3);
        assert_eq!(h.heard(2, 1, 2 * TTL).members, 2);
    }
}

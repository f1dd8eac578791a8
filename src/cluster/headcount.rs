//! How many members to divide a budget among while Redis is away, and this replica's place
//! among them: what the heartbeats counted, remembered across a Redis that comes back empty.
//!
//! Why not the last count: a Redis that restarts has forgotten the members, and each
//! replica's first heartbeat after it counts only those that have beaten since. Had Redis
//! failed again in that while, each replica would have kept its own short count — the first
//! to beat "1 of 1" — and taken that much of every budget (review 36b of #37: three replicas
//! each took the whole share, 91–92 records in 30 s of a budget of 1 a second, after a few
//! flaps). So a count goes up at once, but down only once heartbeats have gone on without a
//! failure for a whole member lifetime (`member_ttl`, counted in heartbeats: the clock the
//! budgets follow may be a test's), by when every live replica has beaten and a missing one
//! has lapsed; until then the higher count holds, and this replica takes the smallest place
//! (⌊budget / N⌋, [`crate::budget::fallback_of`]), so the members' shares add up to the
//! budget at most. The first count after start is taken as it is: there is none to keep.

/// A count with its place, as the shares use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    pub members: u32,
    pub rank: u32,
}

#[derive(Debug)]
pub struct Headcount {
    /// The count the shares follow; `None` before the first heartbeat answered.
    held: Option<u32>,
    /// Heartbeats answered since the last one failed (or since start).
    steady: u32,
    /// How many must have answered before a lower count is believed: a member lifetime's
    /// worth, and one more.
    needed: u32,
}

impl Headcount {
    /// For heartbeats every `heartbeat_ns`, members lapsing after `member_ttl_ns`.
    pub fn new(heartbeat_ns: u64, member_ttl_ns: u64) -> Self {
        let beats = member_ttl_ns
            .div_ceil(heartbeat_ns.max(1))
            .saturating_add(1);
        Self {
            held: None,
            steady: 0,
            needed: u32::try_from(beats).unwrap_or(u32::MAX),
        }
    }

    /// A heartbeat answered, counting `members` with this replica at `rank`.
    pub fn heard(&mut self, members: u32, rank: u32) -> Count {
        let members = members.max(1);
        self.steady = self.steady.saturating_add(1);
        match self.held {
            Some(held) if members < held && self.steady < self.needed => Count {
                members: held,
                rank: 0,
            },
            _ => {
                self.held = Some(members);
                Count { members, rank }
            }
        }
    }

    /// A heartbeat failed: the next lower count waits for a lifetime of answers again.
    pub fn failed(&mut self) {
        self.steady = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Heartbeats every 500 ms, members lapsing after 2 s: a lower count believed at the 5th.
    fn count(members: u32, rank: u32) -> Count {
        Count { members, rank }
    }

    fn headcount() -> Headcount {
        Headcount::new(500, 2_000)
    }

    #[test]
    fn the_first_count_is_taken_and_a_count_goes_up_at_once() {
        let mut h = headcount();
        assert_eq!(h.heard(1, 0), count(1, 0));
        assert_eq!(h.heard(3, 2), count(3, 2));
    }

    #[test]
    fn a_redis_that_comes_back_empty_does_not_shrink_the_count() {
        let mut h = headcount();
        assert_eq!(h.heard(3, 1), count(3, 1));
        h.failed();
        // Redis restarted empty: this replica beats first and is counted alone.
        assert_eq!(h.heard(1, 0), count(3, 0), "the smallest place");
        // It fails again at once, and comes back: still three, however often.
        for _ in 0..10 {
            h.failed();
            assert_eq!(h.heard(1, 0).members, 3);
        }
        // The others beat again: their count is heard at once.
        assert_eq!(h.heard(3, 2), count(3, 2));
    }

    #[test]
    fn a_member_that_left_is_believed_gone_after_a_lifetime_of_heartbeats() {
        let mut h = headcount();
        h.heard(3, 0);
        h.failed();
        for _ in 0..4 {
            assert_eq!(h.heard(2, 1).members, 3);
        }
        assert_eq!(h.heard(2, 1), count(2, 1));
        // In a steady run a member that lapses is believed gone at once.
        assert_eq!(h.heard(1, 0), count(1, 0));
    }
}

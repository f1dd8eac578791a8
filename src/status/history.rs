//! The status page's memory: what each busy tenant did in each of the last [`SECONDS`]
//! seconds, kept by a sampler that runs once a second whether or not anyone is looking, so a
//! page opened after an incident shows it.
//!
//! Bounded: a ring of per-second counts for each tenant that had traffic in the window, and
//! nothing for idle ones; at most [`MAX_TRACKED`] tenants (when more are busy, the least busy
//! give way). Finding which tenants moved costs one look at each tenant's counters a second:
//! the cumulative values last sampled are kept in the tenant's own counters
//! (`TenantStats::sampled`), not here.

use std::collections::{HashMap, VecDeque};

use crate::identity::TenantId;
use crate::refusal::Reason;
use crate::tenant::{Tenant, TenantCounts as Cumulative};

/// Seconds of history kept.
pub const SECONDS: usize = 60;
/// Most tenants with a ring at once.
pub const MAX_TRACKED: usize = 5_000;

/// One tenant's second (saturating counts: a second's traffic fits).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Second {
    pub admitted_requests: u32,
    pub admitted_records: u32,
    pub refused_requests: u32,
    /// Records of refused requests whose body was read (a request refused before its body
    /// counts none).
    pub refused_records: u32,
    /// Refused requests by reason, indexed like [`Reason::ALL`].
    pub refused_by_reason: [u16; Reason::ALL.len()],
}

impl Second {
    /// Adds another second's counts (saturating).
    fn add(&mut self, other: &Second) {
        self.admitted_requests = self
            .admitted_requests
            .saturating_add(other.admitted_requests);
        self.admitted_records = self.admitted_records.saturating_add(other.admitted_records);
        self.refused_requests = self.refused_requests.saturating_add(other.refused_requests);
        self.refused_records = self.refused_records.saturating_add(other.refused_records);
        for (a, b) in self
            .refused_by_reason
            .iter_mut()
            .zip(other.refused_by_reason)
        {
            *a = a.saturating_add(b);
        }
    }

    fn activity(&self) -> u64 {
        u64::from(self.admitted_requests) + u64::from(self.refused_requests)
    }

    /// What moved between two cumulative readings of a tenant's counters.
    fn between(old: &Cumulative, new: &Cumulative) -> Self {
        let d = |a: u64, b: u64| u32::try_from(b.saturating_sub(a)).unwrap_or(u32::MAX);
        Self {
            admitted_requests: d(old.admitted_requests, new.admitted_requests),
            admitted_records: d(old.admitted_records, new.admitted_records),
            refused_requests: d(old.refused_total(), new.refused_total()),
            refused_records: d(old.refused_records, new.refused_records),
            refused_by_reason: std::array::from_fn(|i| {
                u16::try_from(new.refused[i].saturating_sub(old.refused[i])).unwrap_or(u16::MAX)
            }),
        }
    }
}

/// One busy tenant's last seconds, oldest first, each with the second it stands for.
#[derive(Debug, Default)]
pub struct Ring {
    pub seconds: VecDeque<(u64, Second)>,
}

impl Ring {
    /// Requests admitted and refused in the window.
    pub fn activity(&self) -> u64 {
        self.seconds.iter().map(|(_, s)| s.activity()).sum()
    }

    /// The seconds from `from` on.
    pub fn since(&self, from: u64) -> impl Iterator<Item = &Second> {
        self.seconds
            .iter()
            .filter(move |(at, _)| *at >= from)
            .map(|(_, s)| s)
    }
}

/// The rings, and the second last sampled.
#[derive(Debug, Default)]
pub struct History {
    pub rings: HashMap<TenantId, Ring>,
    /// The last second sampled (clock seconds), `None` before the first.
    pub second: Option<u64>,
}

impl History {
    /// One second's sample: every tenant whose counters moved since the last one gets what
    /// moved in its ring; rings older than the window are trimmed, and empty ones dropped.
    /// Returns every tenant's traffic in the second, summed (ringed or not).
    pub fn sample<'a>(
        &mut self,
        second: u64,
        tenants: impl Iterator<Item = &'a std::sync::Arc<Tenant>>,
    ) -> Second {
        let oldest = second.saturating_sub(SECONDS as u64 - 1);
        let mut total = Second::default();
        // The rings from the quietest up, made once a second when the table is full and a
        // newcomer needs room (not once per newcomer: at 6,000 busy tenants that was most of
        // the gateway's CPU).
        let mut quietest: Option<Vec<(u64, TenantId)>> = None;
        for tenant in tenants {
            let Some(stats) = tenant.stats_if_any() else {
                continue; // never counted anything
            };
            let now = stats.counts();
            let before = stats.swap_sampled(now);
            if before == now {
                continue;
            }
            let moved = Second::between(&before, &now);
            total.add(&moved);
            if moved.activity() == 0 && moved.refused_records == 0 && moved.admitted_records == 0 {
                continue;
            }
            if !self.rings.contains_key(&tenant.id)
                && !self.make_room(moved.activity(), second, &mut quietest)
            {
                continue;
            }
            let ring = self.rings.entry(tenant.id.clone()).or_default();
            ring.seconds.push_back((second, moved));
        }
        for ring in self.rings.values_mut() {
            while ring.seconds.front().is_some_and(|(at, _)| *at < oldest) {
                ring.seconds.pop_front();
            }
        }
        self.rings.retain(|_, ring| !ring.seconds.is_empty());
        self.second = Some(second);
        total
    }

    /// Whether a tenant this busy this second may have a ring: always while there is room;
    /// when the table is full, the least busy tenant gives way if it did less in its whole
    /// window than the newcomer did now. A ring that took this second's counts already is not
    /// given up for one that has not.
    fn make_room(
        &mut self,
        activity: u64,
        second: u64,
        quietest: &mut Option<Vec<(u64, TenantId)>>,
    ) -> bool {
        if self.rings.len() < MAX_TRACKED {
            return true;
        }
        let candidates = quietest.get_or_insert_with(|| {
            let mut by_activity: Vec<(u64, TenantId)> = self
                .rings
                .iter()
                .map(|(id, ring)| (ring.activity(), id.clone()))
                .collect();
            // Busiest first, so the quietest is popped from the end.
            by_activity.sort_unstable_by_key(|a| std::cmp::Reverse(a.0));
            by_activity
        });
        while let Some((least, id)) = candidates.pop() {
            let Some(ring) = self.rings.get(&id) else {
                continue; // gave way already
            };
            if ring.seconds.back().is_some_and(|(at, _)| *at == second) {
                continue; // busy this very second
            }
            if least < activity {
                self.rings.remove(&id);
                return true;
            }
            candidates.push((least, id));
            return false;
        }
        false
    }

    /// The `n` busiest tenants over the window (admitted plus refused requests), busiest first.
    pub fn busiest(&self, n: usize) -> Vec<TenantId> {
        let mut by_activity: Vec<(u64, &TenantId)> = self
            .rings
            .iter()
            .map(|(id, ring)| (ring.activity(), id))
            .filter(|(a, _)| *a > 0)
            .collect();
        by_activity.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.as_str().cmp(b.1.as_str())));
        by_activity
            .into_iter()
            .take(n)
            .map(|(_, id)| id.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{Dimension, Scope};
    use crate::config::TenantConfig;

    fn tenant(id: &str) -> std::sync::Arc<Tenant> {
        std::sync::Arc::new(
            Tenant::from_config(&TenantConfig {
                id: id.into(),
                topics: vec!["t.*".into()],
                ..TenantConfig::default()
            })
            .expect("valid"),
        )
    }

    #[test]
    fn only_tenants_that_moved_get_a_ring_and_it_keeps_the_window() {
        let (busy, idle) = (tenant("busy"), tenant("idle"));
        let mut h = History::default();
        h.sample(1, [&busy, &idle].into_iter());
        assert!(h.rings.is_empty(), "nothing moved yet");
        for second in 2..=70u64 {
            busy.stats()
                .rejected(Reason::Budget(Scope::Tenant, Dimension::Records));
            busy.stats().decided(
                3,
                30,
                Some(Reason::Budget(Scope::Tenant, Dimension::Records)),
                true,
            );
            h.sample(second, [&busy, &idle].into_iter());
        }
        assert_eq!(h.rings.len(), 1, "the idle tenant has nothing");
        let ring = &h.rings[&busy.id];
        assert_eq!(ring.seconds.len(), SECONDS);
        assert_eq!(ring.seconds.front().map(|(at, _)| *at), Some(11));
        let last = ring.seconds.back().map(|(_, s)| *s).unwrap_or_default();
        assert_eq!((last.refused_requests, last.refused_records), (1, 3));
        assert_eq!(
            last.refused_by_reason[Reason::Budget(Scope::Tenant, Dimension::Records).index()],
            1
        );
        // A minute of quiet and the ring is gone.
        for second in 71..=131u64 {
            h.sample(second, [&busy, &idle].into_iter());
        }
        assert!(h.rings.is_empty());
    }

    #[test]
    fn the_busiest_come_first_and_a_full_table_lets_the_quietest_go() {
        let mut h = History::default();
        let tenants: Vec<_> = (0..MAX_TRACKED).map(|i| tenant(&format!("t{i}"))).collect();
        for t in &tenants {
            t.stats().admitted(1, 1);
        }
        h.sample(1, tenants.iter());
        assert_eq!(h.rings.len(), MAX_TRACKED);
        let loud = tenant("loud");
        for _ in 0..10 {
            loud.stats().admitted(1, 1);
        }
        h.sample(2, std::iter::once(&loud));
        assert_eq!(h.rings.len(), MAX_TRACKED, "bounded");
        assert!(
            h.rings.contains_key(&loud.id),
            "the busier newcomer has a ring"
        );
        assert_eq!(h.busiest(1), vec![loud.id.clone()]);
    }

    #[test]
    fn many_newcomers_in_one_second_push_out_the_quietest_but_not_a_ring_busy_this_second() {
        let mut h = History::default();
        let tenants: Vec<_> = (0..MAX_TRACKED).map(|i| tenant(&format!("t{i}"))).collect();
        for t in &tenants {
            t.stats().admitted(1, 1);
        }
        h.sample(1, tenants.iter());
        // Second 2: the first old tenant moves again, and 100 busier newcomers arrive.
        tenants[0].stats().admitted(1, 1);
        let newcomers: Vec<_> = (0..100).map(|i| tenant(&format!("new{i}"))).collect();
        for t in &newcomers {
            for _ in 0..5 {
                t.stats().admitted(1, 1);
            }
        }
        h.sample(2, std::iter::once(&tenants[0]).chain(newcomers.iter()));
        assert_eq!(h.rings.len(), MAX_TRACKED, "bounded");
        assert!(newcomers.iter().all(|t| h.rings.contains_key(&t.id)));
        assert!(
            h.rings.contains_key(&tenants[0].id),
            "a ring that took this second's counts is not given up"
        );
    }
}

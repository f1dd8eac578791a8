//! Which tenants a snapshot holds: how many, in which order, narrowed by id prefix.

use std::sync::Arc;

use crate::tenant::Tenant;

use super::history::History;
use super::window::Sums;

/// Tenants in a snapshot unless asked otherwise, and at most.
pub const LIMIT_DEFAULT: usize = 50;
pub const LIMIT_MAX: usize = 1000;

/// Which tenants a snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub limit: usize,
    pub sort: Sort,
    /// Only ids that start with this.
    pub prefix: String,
}

impl Default for Query {
    fn default() -> Self {
        Self {
            limit: LIMIT_DEFAULT,
            sort: Sort::Refused,
            prefix: String::new(),
        }
    }
}

/// How the tenants are chosen and ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    /// The most refused requests per second first, then the most admitted.
    Refused,
    /// The most admitted records per second first.
    Admitted,
    /// By id.
    Id,
}

impl Sort {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "refused" => Some(Self::Refused),
            "admitted" => Some(Self::Admitted),
            "id" => Some(Self::Id),
            _ => None,
        }
    }
}

/// The tenants a query asks for: the busiest (by its order) among those with history,
/// then — when fewer are busy than asked for, or ordered by id — the others by id.
pub(super) fn choose(
    registry: &crate::tenant::Directory,
    history: &History,
    query: &Query,
    from: u64,
    window: u64,
) -> Vec<Arc<Tenant>> {
    let mut chosen: Vec<Arc<Tenant>> = Vec::with_capacity(query.limit);
    if query.sort != Sort::Id {
        let mut busy: Vec<(Sums, Arc<Tenant>)> = history
            .rings
            .iter()
            .filter(|(id, _)| id.as_str().starts_with(&query.prefix))
            .filter_map(|(id, ring)| {
                let sums = Sums::of_ring(ring, from, window);
                Some((sums, registry.get(id.as_str())?.clone()))
            })
            .collect();
        busy.sort_by(|(a, ta), (b, tb)| {
            let key = |s: &Sums| match query.sort {
                Sort::Admitted => (s.admitted_records, s.refused_requests),
                _ => (s.refused_requests, s.admitted_records),
            };
            key(b)
                .cmp(&key(a))
                .then_with(|| ta.id.as_str().cmp(tb.id.as_str()))
        });
        chosen.extend(busy.into_iter().take(query.limit).map(|(_, t)| t));
    }
    if chosen.len() < query.limit {
        let taken: std::collections::HashSet<&str> = chosen.iter().map(|t| t.id.as_str()).collect();
        let rest: Vec<Arc<Tenant>> = registry
            .tenants_from(&query.prefix)
            .take_while(|t| t.id.as_str().starts_with(&query.prefix))
            .filter(|t| !taken.contains(t.id.as_str()))
            .take(query.limit - chosen.len())
            .cloned()
            .collect();
        chosen.extend(rest);
    }
    chosen
}

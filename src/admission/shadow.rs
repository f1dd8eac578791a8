//! Shadow mode (`budget_mode`, `[global] mode`, a quota's `mode`): a limit that refuses
//! nothing. What it would refuse is noted with the reason it would have given, and the
//! request goes on as if the limit were not there: the limit is not charged for it, as a
//! refusal would not have charged it. So on the same load, what shadow mode counts is what
//! enforce mode refuses (while the other limits do not refuse either).
//!
//! In cluster mode a budget whose slice is short asks Redis as an enforced one does; a lease
//! Redis refused counts as a would-be refusal for as long as it answers enforced requests
//! ([`REFUSAL_MEMO`]).

use crate::budget::{Scope, Short, Slice, REFUSAL_MEMO};
use crate::refusal::Reason;

/// The reason a budget in shadow mode would refuse `check` with, if it would.
pub(super) fn would_refuse<T>(
    check: &Result<T, Short>,
    slice: Option<&Slice>,
    now: u64,
    scope: Scope,
) -> Option<Reason> {
    match check {
        Err(Short::Wait(s)) => Some(Reason::Budget(scope, s.dimension)),
        Err(Short::Lease(_)) => slice
            .and_then(|s| s.refused_lately(now, REFUSAL_MEMO))
            .map(|(_, d)| Reason::Budget(scope, d)),
        Ok(_) => None,
    }
}

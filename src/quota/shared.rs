//! Quotas counted by several replicas: the count lives in Redis (cluster mode), and a
//! replica spends an allowance it leased from it.
//!
//! **Leased allowances.** Redis keeps one count per tenant, window kind and window, which
//! includes every allowance leased from it. A replica admits against what its allowance
//! holds, without asking anyone; a request the allowance cannot cover asks Redis for the
//! rest (plus a top-up) before it is answered, and Redis grants only what the quota has
//! left. So while Redis answers, what all replicas admit in a window is at most the quota:
//! **exact**, never over. The price is on the other side: an allowance leased and not spent
//! is counted as used, so a request may be refused while other replicas hold up to
//! `slice_fraction × quota` unspent between them (leases shrink as the quota runs out, see
//! the lease script, and are given back when a replica leaves).
//!
//! **Redis unreachable.** A replica spends what its allowance holds, then an outage part of
//! its own: `slice_fraction × quota / N` per window (N the members it last counted), kept
//! across any number of outages in that window and reported to Redis when it answers again.
//! So across pauses, kills and flaps, a window admits at most **quota × (1 + slice_fraction)**
//! while the member count holds. A Redis restarted empty has forgotten the counts: the first
//! replica to call on one sets it to the count it last heard, so what is lost is at most what
//! other replicas leased after that replica last heard.
//!
//! Layer: foundations, like the calendar beside it.

use super::{Calendar, QuotaShort, QuotaSpec, QuotaUse, Span, Window};
use crate::dimension::PerDimension;
use crate::record::Charge;

/// One replica's part of a shared quota count, for one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allowance {
    /// The window these figures are for; another window's count for nothing.
    pub window: Option<(Window, i64)>,
    /// Leased from the shared count and not admitted yet.
    pub held: Charge,
    /// The shared count (every replica's admissions and allowances) at the last answer.
    pub heard: Charge,
    /// When that answer came (the budgets' clock, ns; 0: never).
    pub heard_at_ns: u64,
    /// Admitted beyond the allowance while Redis did not answer, not yet added to its count.
    pub unreported: Charge,
    /// Admitted beyond the allowance in this window in all (the outage part is per window).
    pub outage: Charge,
    /// Granted to this replica in this window, as it heard the answers (see `quota.lua`).
    pub received: Charge,
}

impl Allowance {
    /// This allowance if it is for `span`'s window, else a fresh one for it.
    fn for_window(&self, window: Window, span: Span) -> Self {
        if self.window == Some((window, span.start)) {
            *self
        } else {
            Self {
                window: Some((window, span.start)),
                ..Self::default()
            }
        }
    }

    /// What the tenant has used of the window as this replica knows it: the shared count
    /// without its own unspent allowance, plus what it has not reported.
    pub fn used(&self) -> Charge {
        PerDimension::from_fn(|d| {
            self.heard[d]
                .saturating_sub(self.held[d])
                .saturating_add(self.unreported[d])
        })
    }

    /// What the quota has left that no allowance holds, as last heard.
    fn room(&self, limit: u64, d: crate::dimension::Dimension) -> u64 {
        limit
            .saturating_sub(self.heard[d])
            .saturating_sub(self.unreported[d])
    }
}

/// How a replica stands with the shared count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Standing {
    /// Redis answers: admit from the allowance, lease the rest.
    Leased,
    /// Redis does not: admit from the allowance, then from an outage part of
    /// `fraction / members` of each quota.
    Outage { members: u32, fraction: f64 },
}

/// Why the shared quotas did not take a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedShort {
    /// A quota cannot take it (as last heard, or from the outage part).
    Short { short: QuotaShort, outage: bool },
    /// The allowances of these windows (a bit per window, `1 << window`) lack for it, and
    /// Redis may still have it: lease first.
    Lease(u8),
}

/// How long a count heard from Redis is trusted to refuse without asking it again: a quota
/// used up is refused locally, and a replica asks Redis again at most this often whether an
/// allowance came back (a replica that left gives its allowance back).
pub const HEARD_TRUSTED_NS: u64 = 1_000_000_000;

/// When a take happens: the wall clock (the calendar's windows) and the budgets' clock (how
/// old what was heard is).
#[derive(Debug, Clone, Copy)]
pub struct At {
    pub unix_s: i64,
    pub now_ns: u64,
}

/// What a take leaves: the allowances and the uses after it, and what a quota in shadow mode
/// would have refused (it was left as it was).
pub type Taken = ([Allowance; 3], [QuotaUse; 3], Option<QuotaShort>);

/// Takes `charge` from every shared quota, or from none: the allowances and the uses after
/// it, or why not. Refusals come before leases: a request some quota refuses costs no call.
pub fn take(
    specs: &[QuotaSpec],
    allowances: &[Allowance; 3],
    calendar: &Calendar,
    at: At,
    standing: Standing,
    charge: Charge,
    waived: bool,
) -> Result<Taken, SharedShort> {
    let At { unix_s, now_ns } = at;
    let mut after = *allowances;
    let mut lease = 0u8;
    let mut short: Option<(QuotaShort, bool)> = None;
    let mut shadow: Option<QuotaShort> = None;
    // `waived`: another limit in shadow mode would refuse the request: quotas in shadow mode
    // are left as they are, as its refusal would leave them.
    for spec in specs.iter().filter(|s| !(waived && s.shadow)) {
        // Larger than a whole window: enforced, a 413 (`admission::quota`), no quota refusal.
        if spec.shadow && spec.larger_than_window(charge) {
            continue;
        }
        let mut this: Option<(QuotaShort, bool)> = None;
        let slot = spec.window as usize;
        let span = calendar.span(spec.window, unix_s);
        let mut a = allowances[slot].for_window(spec.window, span);
        let mut missing = Charge::default();
        for (d, limit) in spec.limit.iter() {
            let Some(limit) = *limit else { continue };
            let short = QuotaShort {
                dimension: d,
                window: spec.window,
                reset_in_s: super::reset_in(span, unix_s),
            };
            // What this replica knows was used, plus the request, past the limit: a limit
            // lowered below the use admits nothing more, whatever allowance is held (review
            // 1 of #41: lowered to 3 on every replica, 75 more were admitted from allowances). Never
            // true otherwise: the count never passes the limit, and `held` covers the request.
            let over = a.used()[d].saturating_add(charge[d]) > limit;
            let from_held = charge[d].min(a.held[d]);
            let rest = charge[d] - from_held;
            a.held[d] -= from_held;
            if rest == 0 {
                if over {
                    this.get_or_insert((short, false));
                }
                continue;
            }
            let room = a.room(limit, d);
            let refused = match standing {
                Standing::Leased => {
                    let trusted = a.heard_at_ns != 0
                        && now_ns.saturating_sub(a.heard_at_ns) < HEARD_TRUSTED_NS;
                    missing[d] = rest;
                    trusted && rest > room
                }
                Standing::Outage { members, fraction } => {
                    let part = (fraction * limit as f64 / f64::from(members.max(1))) as u64;
                    let left = part.saturating_sub(a.outage[d]).min(room);
                    a.outage[d] += rest;
                    a.unreported[d] += rest;
                    rest > left
                }
            };
            if refused {
                this.get_or_insert((short, matches!(standing, Standing::Outage { .. })));
            }
        }
        match this {
            // Shadow mode: noted, and the quota left as it was, as a refusal would leave it.
            Some((s, _)) if spec.shadow => {
                shadow.get_or_insert(s);
                continue;
            }
            Some((s, outage)) if short.is_none_or(|(k, _)| s.reset_in_s > k.reset_in_s) => {
                short = Some((s, outage));
            }
            _ => {}
        }
        if missing != Charge::default() {
            lease |= 1 << slot;
        }
        after[slot] = a;
    }
    if let Some((short, outage)) = short {
        return Err(SharedShort::Short { short, outage });
    }
    if lease != 0 {
        return Err(SharedShort::Lease(lease));
    }
    Ok((after, uses(specs, &after, calendar, unix_s), shadow))
}

/// The uses the views show (status page, metrics, RateLimit fields): each shared quota's
/// count as this replica knows it.
pub fn uses(
    specs: &[QuotaSpec],
    allowances: &[Allowance; 3],
    calendar: &Calendar,
    unix_s: i64,
) -> [QuotaUse; 3] {
    let mut used = [QuotaUse::default(); 3];
    for spec in specs {
        let slot = spec.window as usize;
        let span = calendar.span(spec.window, unix_s);
        let a = allowances[slot].for_window(spec.window, span);
        used[slot] = QuotaUse {
            window: Some((spec.window, span.start)),
            used: a.used(),
            ends: span.end,
        };
    }
    used
}

/// The allowance for the window holding `unix_s`, and that window.
pub fn current(
    allowance: &Allowance,
    spec: &QuotaSpec,
    calendar: &Calendar,
    unix_s: i64,
) -> (Allowance, Span) {
    let span = calendar.span(spec.window, unix_s);
    (allowance.for_window(spec.window, span), span)
}

/// What a lease answered, as the allowance it is for takes it.
#[derive(Debug, Clone, Copy)]
pub struct Leased {
    /// The window leased for (its kind and first second).
    pub window: (Window, i64),
    pub granted: Charge,
    /// The shared count Redis answered.
    pub count: Charge,
    /// What the lease added to the count of the allowance's unreported admissions.
    pub reported: Charge,
}

impl super::Quotas {
    /// Takes a lease's answer: its grant joins the allowance, its count is what is heard. The
    /// window may have turned meanwhile (the allowance then starts afresh without it: the
    /// count it was leased from is gone with the window).
    pub fn leased(&mut self, leased: Leased, calendar: &Calendar, unix_s: i64, now_ns: u64) {
        let (window, start) = leased.window;
        let slot = window as usize;
        let a = &mut self.shared[slot];
        if a.window != Some(leased.window) {
            if calendar.span(window, unix_s).start != start {
                return;
            }
            *a = Allowance {
                window: Some(leased.window),
                ..Allowance::default()
            };
        }
        let (held, unreported, received) = (a.held, a.unreported, a.received);
        a.held = PerDimension::from_fn(|d| held[d].saturating_add(leased.granted[d]));
        a.received = PerDimension::from_fn(|d| received[d].saturating_add(leased.granted[d]));
        a.unreported = PerDimension::from_fn(|d| unreported[d].saturating_sub(leased.reported[d]));
        a.heard = leased.count;
        a.heard_at_ns = now_ns.max(1);
        self.used = uses(&self.specs, &self.shared, calendar, unix_s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dimension::Dimension;

    const T: i64 = 1_814_400_000; // 2027-07-01 00:00:00 UTC
    const NOW: u64 = 5_000_000_000;

    fn day(records: u64) -> Vec<QuotaSpec> {
        vec![QuotaSpec {
            window: Window::Day,
            limit: PerDimension {
                records: Some(records),
                bytes: None,
            },
            shadow: false,
        }]
    }

    fn heard(records: u64, held: u64) -> [Allowance; 3] {
        let mut a = [Allowance::default(); 3];
        a[Window::Day as usize] = Allowance {
            window: Some((Window::Day, T)),
            held: Charge::new(held, 0),
            heard: Charge::new(records, 0),
            heard_at_ns: NOW,
            ..Allowance::default()
        };
        a
    }

    fn take_now(
        a: &[Allowance; 3],
        standing: Standing,
        records: u64,
    ) -> Result<Taken, SharedShort> {
        take(
            &day(10),
            a,
            &Calendar::default(),
            At {
                unix_s: T + 60,
                now_ns: NOW,
            },
            standing,
            Charge::new(records, 7),
            false,
        )
    }

    #[test]
    fn an_allowance_admits_without_a_lease_and_a_short_one_asks_for_the_rest() {
        let a = heard(6, 4);
        let (after, used, _) = take_now(&a, Standing::Leased, 3).expect("held");
        let slot = Window::Day as usize;
        assert_eq!(after[slot].held.records, 1);
        // 6 counted in Redis, 1 of them still held here: 5 used.
        assert_eq!(used[slot].used.records, 5);
        // 6 wanted, 4 held: the day's allowance is leased for; nothing taken meanwhile.
        match take_now(&a, Standing::Leased, 6) {
            Err(SharedShort::Lease(l)) => assert_eq!(l, 1 << slot),
            other => panic!("expected a lease, got {other:?}"),
        }
    }

    #[test]
    fn a_quota_heard_spent_is_refused_without_asking_until_the_answer_is_old() {
        let a = heard(10, 0);
        match take_now(&a, Standing::Leased, 1) {
            Err(SharedShort::Short { short, outage }) => {
                assert_eq!(short.dimension, Dimension::Records);
                assert_eq!(short.reset_in_s, 86_400 - 60);
                assert!(!outage);
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // A second later Redis is asked again: another replica may have given some back.
        let later = take(
            &day(10),
            &a,
            &Calendar::default(),
            At {
                unix_s: T + 61,
                now_ns: NOW + HEARD_TRUSTED_NS,
            },
            Standing::Leased,
            Charge::new(1, 0),
            false,
        );
        assert!(matches!(later, Err(SharedShort::Lease(_))), "{later:?}");
    }

    #[test]
    fn without_redis_an_outage_part_is_admitted_once_per_window_whatever_the_flaps() {
        // Quota 10, slice fraction 0.6, 3 members: an outage part of 2 records.
        let outage = Standing::Outage {
            members: 3,
            fraction: 0.6,
        };
        let a = heard(3, 1);
        let (after, used, _) = take_now(&a, outage, 3).expect("1 held + 2 of the part");
        let slot = Window::Day as usize;
        assert_eq!(after[slot].unreported.records, 2);
        assert_eq!(used[slot].used.records, 3 + 2);
        // Redis answered in between (the count reported) and failed again: the part is spent.
        let mut reported = after;
        reported[slot].unreported = Charge::default();
        reported[slot].heard.records += 2;
        assert!(matches!(
            take_now(&reported, outage, 1),
            Err(SharedShort::Short { outage: true, .. })
        ));
        // The next window starts a new part.
        let tomorrow = take(
            &day(10),
            &reported,
            &Calendar::default(),
            At {
                unix_s: T + 86_400,
                now_ns: NOW,
            },
            outage,
            Charge::new(2, 0),
            false,
        );
        assert!(tomorrow.is_ok(), "{tomorrow:?}");
    }

    #[test]
    fn the_outage_part_never_goes_past_what_the_quota_has_left() {
        let outage = Standing::Outage {
            members: 1,
            fraction: 1.0,
        };
        // 9 of 10 counted: the part (10) is held to the 1 left.
        assert!(take_now(&heard(9, 0), outage, 1).is_ok());
        assert!(take_now(&heard(9, 0), outage, 2).is_err());
    }

    #[test]
    fn a_limit_lowered_below_the_use_admits_nothing_from_an_allowance() {
        // 6 counted, 4 of them held here: 2 used. Lowered to 2: the allowance admits nothing.
        let a = heard(6, 4);
        let lowered = |limit: u64| {
            let mut specs = day(limit);
            specs[0].limit.records = Some(limit);
            take(
                &specs,
                &a,
                &Calendar::default(),
                At {
                    unix_s: T + 60,
                    now_ns: NOW,
                },
                Standing::Leased,
                Charge::new(1, 0),
                false,
            )
        };
        assert!(matches!(
            lowered(2),
            Err(SharedShort::Short { outage: false, .. })
        ));
        assert!(lowered(3).is_ok(), "one more fits a limit of 3");
    }
}

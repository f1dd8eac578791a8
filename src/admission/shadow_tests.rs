//! Shadow mode on a stepped clock: the same scripted load against a tenant budget, a quota
//! and the global budget, first enforced, then in shadow mode. Shadow mode refuses nothing,
//! and what it counts as would-be refusals, reason by reason, is what enforce mode refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Admission, Blocked};
use crate::budget::{GlobalBudget, ManualClock};
use crate::buffer::Buffer;
use crate::config::{GlobalBudgetConfig, LimitMode, QuotaConfig, TenantConfig, WindowName};
use crate::record::Charge;
use crate::refusal::{Denial, Reason};
use crate::tenant::Tenant;

/// 2027-03-31 23:50:00 UTC: the day quota turns during the script.
const BEFORE_MIDNIGHT: u64 = 1_806_537_000;

fn tenant(mode: LimitMode) -> Tenant {
    Tenant::from_config(&TenantConfig {
        id: "a".into(),
        topics: vec!["*".into()],
        records_per_sec: Some(40),
        records_burst: Some(200),
        bytes_per_sec: Some(1_500),
        bytes_burst: Some(2_500),
        budget_mode: mode,
        quotas: vec![QuotaConfig {
            window: WindowName::Day,
            records: Some(1_000),
            bytes: None,
            mode,
        }],
        ..TenantConfig::default()
    })
    .expect("tenant")
}

fn global(mode: LimitMode) -> Arc<GlobalBudget> {
    let config = GlobalBudgetConfig {
        records_per_sec: Some(100),
        records_burst: Some(8),
        mode,
        ..GlobalBudgetConfig::default()
    };
    let global = GlobalBudget::new(config.spec().expect("valid"));
    global.set_shadow(mode.is_shadow());
    Arc::new(global)
}

/// The script: 1,200 steps, 25 of 50 ms then 25 of 2 s, a request of 1 to 7 records (60 bytes
/// each) at each step and a second one every third; midnight comes after about 600 s. What was refused, by reason, and what was admitted.
fn run(mode: LimitMode) -> (BTreeMap<&'static str, u64>, u64, Tenant) {
    let clock = Arc::new(ManualClock::at_unix_s(BEFORE_MIDNIGHT));
    let admission = Admission::new(
        clock.clone(),
        global(mode),
        Arc::new(Buffer::new(1 << 30, 1 << 20)),
    );
    let t = tenant(mode);
    let mut refused = BTreeMap::new();
    let mut admitted = 0;
    for step in 0..1_200u64 {
        clock.advance_ms(if step % 50 < 25 { 50 } else { 2_000 });
        let sizes = [1 + step % 7, 1 + (step * 5) % 7];
        for n in sizes.iter().take(if step % 3 == 0 { 2 } else { 1 }) {
            match admission.admit(&t, Charge::new(*n, 60 * n)).0 {
                Ok(lease) => {
                    admitted += n;
                    drop(lease);
                }
                Err(Blocked::Denied(Denial::Refused(r))) => {
                    *refused.entry(r.reason.as_str()).or_default() += 1;
                }
                Err(other) => panic!("unexpected {other:?}"),
            }
        }
    }
    (refused, admitted, t)
}

#[test]
fn shadow_mode_refuses_nothing_and_counts_what_enforce_mode_refuses() {
    let (enforced, _, _) = run(LimitMode::Enforce);
    // The script reaches each limit: the tenant's budget, the global one and the quota.
    for reason in ["tenant_bytes", "global_records", "tenant_quota"] {
        assert!(
            enforced.get(reason).copied().unwrap_or(0) > 0,
            "{enforced:?}"
        );
    }
    let (refused, admitted, t) = run(LimitMode::Shadow);
    assert!(refused.is_empty(), "shadow mode refused {refused:?}");
    let counted: BTreeMap<&'static str, u64> = Reason::ALL
        .iter()
        .map(|r| (r.as_str(), t.stats().shadowed_flow(*r).requests))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(counted, enforced);
    assert!(admitted > 0);
}

//! Review 41-r9 of #37: what a request reserved before registering its raw schemas is taken
//! for every other request of its tenant, until it is admitted or dropped.

use crate::admission::tests::{refusal, rig, tenant};
use crate::admission::*;
use crate::budget::{BudgetSpec, Dimension, Scope};
use crate::refusal::{Denial, Reason};
use std::sync::Arc;

#[test]
fn a_reservation_is_taken_for_the_tenants_other_requests_until_it_ends() {
    let r = rig(BudgetSpec::default(), 1 << 30, 1 << 20);
    let t = Arc::new(tenant("a", Some((1, 1)), None, 1.0));
    let other = tenant("b", Some((1, 1)), None, 1.0);
    let one = Charge::new(1, 10);
    let reserved = r
        .admission
        .reserve_to(&t, None, one)
        .expect("the one token");
    // A second registering request, and a plain one, find the token spoken for.
    let again = r.admission.reserve_to(&t, None, one);
    assert!(matches!(again, Err(Denial::Refused(_))), "{again:?}");
    assert!(r.admission.check(&t, one).is_err());
    let refused = refusal(r.admission.admit(&t, one).0);
    assert_eq!(
        refused.reason,
        Reason::Budget(Scope::Tenant, Dimension::Records)
    );
    // Another tenant's budget is its own.
    assert!(r.admission.admit(&other, one).0.is_ok());
    // Dropped unadmitted (the registration failed): the token was never taken.
    drop(reserved);
    assert!(r.admission.check(&t, one).is_ok());
    assert_eq!(t.admission_state().reserved, Charge::default());
}

#[test]
fn the_reserving_request_is_admitted_on_its_own_reservation_once() {
    let r = rig(BudgetSpec::default(), 1 << 30, 1 << 20);
    let t = Arc::new(tenant("a", Some((1, 2)), None, 1.0));
    let one = Charge::new(1, 10);
    let mut reserved = r.admission.reserve_to(&t, None, one).expect("a token");
    let _second = r
        .admission
        .reserve_to(&t, None, one)
        .expect("the other token");
    // Both tokens are spoken for: a plain request is refused, the reserving one is not.
    assert!(r.admission.check(&t, one).is_err());
    let (admitted, _) = r
        .admission
        .admit_reserved(&t, None, one, Some(&mut reserved));
    let _lease = admitted.expect("admitted on its reservation");
    assert_eq!(reserved.charge(), Charge::default(), "used up");
    assert_eq!(t.admission_state().reserved, one, "the second's is left");
    // Dropping the used-up reservation gives nothing back: the token stays taken.
    drop(reserved);
    assert_eq!(t.admission_state().reserved, one);
    assert!(
        r.admission.check(&t, one).is_err(),
        "one spent, one reserved"
    );
}

#[test]
fn a_reservation_counts_against_the_tenants_buffer_share() {
    // A share of 10 % of a 1,000-byte buffer: 100 bytes.
    let r = rig(BudgetSpec::default(), 1_000, 1 << 20);
    let t = Arc::new(tenant("a", None, None, 0.1));
    let _reserved = r
        .admission
        .reserve_to(&t, None, Charge::new(1, 80))
        .expect("80 of 100");
    let refused = refusal(r.admission.admit(&t, Charge::new(1, 40)).0);
    assert_eq!(refused.reason, Reason::TenantBuffer);
    assert!(r.admission.admit(&t, Charge::new(1, 20)).0.is_ok());
}

/// Review 41-r10 of #37: a request refused for another's reservation was told to come back in
/// a day (both at once never fit a burst of one). Its wait is until its own tokens are there
/// after the reserved ones are taken.
#[test]
fn a_refusal_for_a_reservation_waits_for_its_own_tokens_after_it() {
    let r = rig(BudgetSpec::default(), 1 << 30, 1 << 20);
    let t = Arc::new(tenant("a", Some((1, 1)), None, 1.0));
    let one = Charge::new(1, 10);
    let _reserved = r
        .admission
        .reserve_to(&t, None, one)
        .expect("the one token");
    let refused = refusal(r.admission.admit(&t, one).0);
    assert_eq!(
        refused.retry_after,
        std::time::Duration::from_secs(1),
        "one token a second, after the reserved one"
    );
}

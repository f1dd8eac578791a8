//! Tenants: settings applied in place, state made on first use, counters kept across a
//! registry's rebuilds.

use super::*;
use crate::identity::ApiKeyHash;
use crate::record::Charge;

fn tenant_config(key: &str) -> TenantConfig {
    TenantConfig {
        id: "acme".into(),
        api_key_sha256: vec![ApiKeyHash::of_key(key).to_hex()],
        topics: vec!["events.acme.*".into()],
        ..TenantConfig::default()
    }
}

#[test]
fn applying_a_new_budget_keeps_the_bucket_level() {
    let mut c = tenant_config("k");
    c.records_per_sec = Some(10);
    let tenant = Tenant::from_config(&c).expect("valid");
    let charge = tenant
        .admission_state()
        .buckets
        .check(0, Charge::new(8, 0))
        .expect("fits");
    tenant.admission_state().buckets.commit(charge);
    c.records_per_sec = Some(1000);
    tenant.apply(&TenantSettings::parse(&c).expect("valid"), 0);
    let records = tenant.admission_state().buckets.view(0).records;
    assert_eq!(records.map(|v| v.available), Some(2));
}

#[test]
fn an_idle_tenant_has_no_state_until_charged_and_gets_its_latest_settings() {
    let mut c = tenant_config("k");
    c.records_per_sec = Some(10);
    let tenant = Tenant::from_config(&c).expect("valid");
    // Readers that go over every tenant leave an idle one without state.
    assert_eq!(tenant.full_in_ns(0), 0);
    assert_eq!(tenant.spec().records.map(|r| r.burst), Some(10));
    assert!(tenant.admission_if_live().is_none());
    assert!(tenant.stats_if_any().is_none());
    // A change before its first request is what the state is made from.
    c.records_per_sec = Some(1000);
    tenant.apply(&TenantSettings::parse(&c).expect("valid"), 0);
    let records = tenant.admission_state().buckets.view(0).records;
    assert_eq!(
        records.map(|v| (v.spec.burst, v.available)),
        Some((1000, 1000))
    );
    assert!(tenant.admission_if_live().is_some());
}

#[test]
fn authenticates_by_key_digest_only() {
    let directory = Directory::from_configs(&[tenant_config("s3cret")]).expect("valid");
    assert_eq!(
        directory.authenticate("s3cret").map(|t| t.id.as_str()),
        Some("acme")
    );
    assert!(directory.authenticate("s3cret ").is_none());
    assert!(directory.authenticate("").is_none());
}

#[test]
fn topic_patterns_bound_what_a_tenant_may_write() {
    let tenant = Tenant::from_config(&tenant_config("k")).expect("valid");
    let ok = Topic::parse("events.acme.clicks").expect("legal");
    let other = Topic::parse("events.other.clicks").expect("legal");
    assert!(tenant.may_write(&ok));
    assert!(!tenant.may_write(&other));
}

#[test]
fn rejects_uppercase_or_short_digests() {
    let mut c = tenant_config("k");
    c.api_key_sha256 = vec!["ABC".into(), "A".repeat(64)];
    let problems = c.problems("tenants[0]");
    assert_eq!(problems.len(), 2);
    assert_eq!(problems[0].key, "tenants[0].api_key_sha256[0]");
}

#[test]
fn a_deleted_tenant_recreated_before_its_buckets_refill_keeps_them() {
    let mut c = tenant_config("k");
    c.records_per_sec = Some(10);
    c.records_burst = Some(10);
    let first = Directory::from_configs(std::slice::from_ref(&c)).expect("valid");
    let acme = first.get("acme").expect("acme").clone();
    let spent = acme
        .admission_state()
        .buckets
        .check(0, Charge::new(10, 0))
        .expect("fits");
    acme.admission_state().buckets.commit(spent);
    let empty = Directory::plan::<TenantConfig>(&[])
        .expect("valid")
        .build(&first, 0);
    assert!(empty.get("acme").is_none(), "deleted");
    assert!(empty.authenticate("k").is_none(), "its key is gone");
    // Back half a second later: the same buckets, 5 records refilled, not a fresh 10.
    let back = Directory::plan(std::slice::from_ref(&c))
        .expect("valid")
        .build(&empty, 500_000_000);
    let again = back.get("acme").expect("acme");
    assert!(Arc::ptr_eq(again, &acme));
    let records = again.admission_state().buckets.view(500_000_000).records;
    assert_eq!(records.map(|v| v.available), Some(5));
    // Once its buckets would have refilled, a deleted tenant is forgotten.
    let empty = Directory::plan::<TenantConfig>(&[])
        .expect("valid")
        .build(&first, 0);
    let later = Directory::plan::<TenantConfig>(&[])
        .expect("valid")
        .build(&empty, 2_000_000_000);
    let fresh = Directory::plan(std::slice::from_ref(&c))
        .expect("valid")
        .build(&later, 2_000_000_000);
    assert!(!Arc::ptr_eq(fresh.get("acme").expect("acme"), &acme));
}

#[test]
fn a_plan_that_is_never_built_changes_nothing() {
    let mut c = tenant_config("k");
    c.records_per_sec = Some(10);
    let directory = Directory::from_configs(std::slice::from_ref(&c)).expect("valid");
    c.records_per_sec = Some(1);
    c.records_burst = Some(1);
    let _plan = Directory::plan(std::slice::from_ref(&c)).expect("valid");
    let records = directory
        .get("acme")
        .expect("acme")
        .admission_state()
        .buckets
        .view(0)
        .records;
    assert_eq!(records.map(|v| v.spec.burst), Some(10));
}

#[test]
fn a_deleted_tenants_counters_stay_in_the_registrys_retired_totals_until_it_returns() {
    let sum =
        |r: &Directory| -> u64 { r.tenants().map(|t| t.totals()[2]).sum::<u64>() + r.retired()[2] };
    let mut c = tenant_config("k");
    c.records_per_sec = Some(10);
    c.records_burst = Some(10);
    let first = Directory::from_configs(std::slice::from_ref(&c)).expect("valid");
    let acme = first.get("acme").expect("acme").clone();
    // Spent buckets: a deleted tenant is remembered until they would have refilled.
    let spent = acme
        .admission_state()
        .buckets
        .check(0, Charge::new(10, 0))
        .expect("fits");
    acme.admission_state().buckets.commit(spent);
    acme.stats().admitted(7, 70);
    assert_eq!(sum(&first), 7);
    let empty = Directory::plan::<TenantConfig>(&[])
        .expect("valid")
        .build(&first, 0);
    assert_eq!(empty.retired()[2], 7, "deleted: its records stay counted");
    assert_eq!(sum(&empty), 7);
    // Back while remembered: the same counters, counted once, as a live tenant's.
    let back = Directory::plan(std::slice::from_ref(&c))
        .expect("valid")
        .build(&empty, 0);
    assert!(Arc::ptr_eq(back.get("acme").expect("acme"), &acme));
    assert_eq!(back.retired()[2], 0);
    assert_eq!(sum(&back), 7);
    // Deleted and forgotten, then made afresh: the old counts stay retired.
    let gone = Directory::plan::<TenantConfig>(&[])
        .expect("valid")
        .build(&back, 0);
    let forgotten = Directory::plan::<TenantConfig>(&[])
        .expect("valid")
        .build(&gone, u64::MAX / 2);
    let fresh = Directory::plan(std::slice::from_ref(&c))
        .expect("valid")
        .build(&forgotten, u64::MAX / 2);
    fresh.get("acme").expect("acme").stats().admitted(1, 10);
    assert_eq!(fresh.retired()[2], 7);
    assert_eq!(sum(&fresh), 8);
}

#[test]
fn a_next_plan_takes_unchanged_tenants_as_they_are_and_checks_the_changed_ones() {
    let mut a = tenant_config("ka");
    a.id = "a".into();
    a.records_per_sec = Some(10);
    let mut b = tenant_config("kb");
    b.id = "b".into();
    let (a, b) = (Arc::new(a), Arc::new(b));
    let first = Directory::plan_next(&Directory::default(), &[a.clone(), b.clone()])
        .expect("valid")
        .build(&Directory::default(), 0);
    let live_a = first.get("a").expect("a").clone();
    assert!(live_a.built_from(&a));
    // b changes (a new Arc): re-parsed and applied; a is the same tenant, untouched.
    let mut b2 = (*b).clone();
    b2.records_per_sec = Some(3);
    let b2 = Arc::new(b2);
    let next = first
        .plan_next(&[a.clone(), b2.clone()])
        .expect("valid")
        .build(&first, 0);
    assert!(Arc::ptr_eq(next.get("a").expect("a"), &live_a));
    assert_eq!(
        next.get("b").expect("b").spec().records.map(|r| r.per_sec),
        Some(3)
    );
    assert!(next.get("b").expect("b").built_from(&b2));
    assert!(next.authenticate("ka").is_some() && next.authenticate("kb").is_some());
    // A changed tenant is checked: a bad topic pattern is refused, naming it.
    let mut bad = (*b2).clone();
    bad.topics = vec!["events.[".into()]; // an unclosed glob class
    let err = next
        .plan_next(&[a, Arc::new(bad)])
        .expect_err("a bad pattern");
    assert!(err.key.starts_with("tenants[b].topics"), "{err:?}");
}

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::config::TenantConfig;
use crate::registry::log::{Entry, EntryKey};
use crate::registry::state::RegistryState;

fn tenant(id: &str, rate: u64) -> TenantConfig {
    TenantConfig {
        id: id.into(),
        api_key_sha256: vec![format!("{:064}", rate)],
        topics: vec!["t.*".into()],
        records_per_sec: Some(rate),
        ..TenantConfig::default()
    }
}

fn state_with(tenants: &[TenantConfig]) -> RegistryState {
    let mut s = RegistryState {
        version: super::super::VERSION,
        ..RegistryState::default()
    };
    for t in tenants {
        s.tenants
            .insert(t.id.clone(), std::sync::Arc::new(t.clone()));
    }
    s
}

#[test]
fn a_change_writes_one_entry_per_changed_key_from_its_current_version() {
    let mut current = state_with(&[tenant("a", 1), tenant("b", 2)]);
    current.versions.insert(EntryKey::tenant("a"), 4);
    let mut next = current.clone();
    next.tenants
        .insert("a".into(), std::sync::Arc::new(tenant("a", 10)));
    next.tenants.remove("b");
    let written = entries(&current, &next, "ops", "tenant.patch", "r1");
    assert_eq!(written.len(), 2);
    assert_eq!(
        (written[0].key.clone(), written[0].base),
        (EntryKey::Tenant("a".into()), 4)
    );
    assert_eq!(
        (
            written[1].key.clone(),
            written[1].base,
            written[1].value.clone()
        ),
        (EntryKey::Tenant("b".into()), 0, None),
        "a deletion is a tombstone"
    );
}

fn apply(state: &mut RegistryState, entry: &Entry) -> Result<(), Rejection> {
    Applier::new(state).apply(state, entry)
}

#[test]
fn of_two_changes_from_the_same_version_only_the_first_applies() {
    let current = state_with(&[tenant("a", 1)]);
    let mut one = current.clone();
    one.tenants
        .insert("a".into(), std::sync::Arc::new(tenant("a", 10)));
    let mut two = current.clone();
    two.tenants
        .insert("a".into(), std::sync::Arc::new(tenant("a", 20)));
    let first = entries(&current, &one, "ops", "x", "r1");
    let second = entries(&current, &two, "ops", "x", "r2");
    let mut replica = current.clone();
    assert_eq!(apply(&mut replica, &first[0]), Ok(()));
    assert_eq!(
        apply(&mut replica, &second[0]),
        Err(Rejection::Stale {
            key: EntryKey::tenant("a"),
            current: 1
        })
    );
    assert_eq!(replica.tenants["a"].records_per_sec, Some(10));
    assert_eq!(replica.version(&EntryKey::tenant("a")), 1);
    assert!(
        !is_echo(&replica, &second[0]),
        "the loser says something else"
    );
    assert!(is_echo(&replica, &first[0]));
}

#[test]
fn a_garbage_value_is_malformed_and_changes_nothing() {
    let mut s = state_with(&[]);
    let entry = Entry {
        key: EntryKey::Tenant("x".into()),
        base: 0,
        value: Some(b"not json".to_vec()),
        actor: "a".into(),
        action: "b".into(),
        replica: "c".into(),
    };
    assert!(matches!(
        apply(&mut s, &entry),
        Err(Rejection::Malformed(_))
    ));
    assert!(s.tenants.is_empty() && s.versions.is_empty());
}

#[test]
fn a_key_another_tenant_holds_is_invalid_and_freed_when_that_tenant_lets_it_go() {
    let mut s = state_with(&[]);
    let mut applier = Applier::new(&s);
    let put = |t: &TenantConfig, base: u64| Entry {
        key: EntryKey::Tenant(t.id.clone()),
        base,
        value: serde_json::to_vec(t).ok(),
        actor: "a".into(),
        action: "b".into(),
        replica: "c".into(),
    };
    let a = tenant("a", 7);
    let mut b = tenant("b", 7); // the same digest as a's
    assert_eq!(applier.apply(&mut s, &put(&a, 0)), Ok(()));
    assert!(matches!(
        applier.apply(&mut s, &put(&b, 0)),
        Err(Rejection::Invalid(d)) if d.contains("already belongs to tenant \"a\"")
    ));
    assert!(!s.tenants.contains_key("b"));
    let mut a2 = a.clone();
    a2.api_key_sha256 = vec![format!("{:064}", 8)];
    assert_eq!(applier.apply(&mut s, &put(&a2, 1)), Ok(()));
    assert_eq!(
        applier.apply(&mut s, &put(&b, 0)),
        Ok(()),
        "a's old key is free"
    );
    b.records_per_sec = Some(1);
    let mut deleted = put(&a2, 2);
    deleted.value = None;
    assert_eq!(applier.apply(&mut s, &deleted), Ok(()));
    assert!(!s.tenants.contains_key("a"));
    assert_eq!(
        s.version(&EntryKey::tenant("a")),
        3,
        "a deletion keeps its version"
    );
    // A replayed older record of a is refused: it does not bring the tenant back.
    assert!(matches!(
        applier.apply(&mut s, &put(&a, 0)),
        Err(Rejection::Stale { current: 3, .. })
    ));
}

/// Compaction keeps the last record of each Kafka key. With versions carried in the
/// records and every refused record followed by a rewrite of its key, a replica that reads
/// the compacted topic holds what the replicas that read it whole hold.
#[test]
fn a_replica_reading_the_compacted_log_holds_what_the_others_hold() {
    let put = |t: &TenantConfig, base: u64, replica: &str| Entry {
        key: EntryKey::Tenant(t.id.clone()),
        base,
        value: serde_json::to_vec(t).ok(),
        actor: "ops".into(),
        action: "x".into(),
        replica: replica.into(),
    };
    let (a1, a2, b1) = (tenant("a", 1), tenant("a", 2), tenant("b", 3));
    let mut deleted_b = put(&b1, 1, "r1");
    deleted_b.value = None;
    // a: created, then two replicas change it from version 1 (r2 loses); b: created, then
    // deleted; a record of b's creation replayed at the end.
    let mut log = vec![
        put(&a1, 0, "r1"),
        put(&b1, 0, "r1"),
        put(&a2, 1, "r1"),
        put(&tenant("a", 9), 1, "r2"),
        deleted_b,
        put(&b1, 0, "r1"),
    ];
    let mut whole = state_with(&[]);
    let mut applier = Applier::new(&whole);
    let mut to_rewrite = BTreeSet::new();
    for entry in &log {
        match applier.apply(&mut whole, entry) {
            Ok(()) => {
                to_rewrite.remove(&entry.key);
            }
            Err(_) if is_echo(&whole, entry) => {}
            Err(_) => {
                to_rewrite.insert(entry.key.clone());
            }
        }
    }
    assert_eq!(
        to_rewrite.len(),
        2,
        "a (the race's loser) and b (the replay)"
    );
    let versions = whole.versions.clone();
    for key in &to_rewrite {
        let again = rewrite(&whole, key, false, "r1");
        assert!(applier.apply(&mut whole, &again).is_err());
        assert!(is_echo(&whole, &again), "an echo: nothing moves");
        log.push(again);
    }
    assert_eq!(whole.versions, versions, "no version moved");
    // The compacted log: the last record of each key, in order.
    let mut last = BTreeMap::new();
    for (i, entry) in log.iter().enumerate() {
        last.insert(entry.key.clone(), i);
    }
    let mut kept: Vec<usize> = last.into_values().collect();
    kept.sort_unstable();
    let mut fresh = state_with(&[]);
    let mut fresh_applier = Applier::new(&fresh);
    for i in kept {
        assert_eq!(fresh_applier.apply(&mut fresh, &log[i]), Ok(()));
    }
    assert_eq!(fresh.tenants, whole.tenants);
    assert_eq!(
        fresh.tenants["a"].records_per_sec,
        Some(2),
        "the race's winner"
    );
    assert!(!fresh.tenants.contains_key("b"), "the deletion holds");
}

#[test]
fn signing_again_writes_the_same_version_and_value() {
    let mut s = state_with(&[]);
    let mut applier = Applier::new(&s);
    let t = tenant("a", 1);
    let entry = Entry {
        key: EntryKey::Tenant("a".into()),
        base: 0,
        value: serde_json::to_vec(&t).ok(),
        actor: "ops".into(),
        action: "x".into(),
        replica: "r".into(),
    };
    assert_eq!(applier.apply(&mut s, &entry), Ok(()));
    let again = rewrite(&s, &entry.key, true, "r");
    assert_eq!((again.base, again.version()), (0, Some(1)));
    let unknown = rewrite(&s, &EntryKey::Tenant("never".into()), false, "r");
    assert_eq!((unknown.version(), unknown.value), (Some(1), None));
    assert!(matches!(
        applier.apply(&mut s, &again),
        Err(Rejection::Stale { .. })
    ));
    assert!(is_echo(&s, &again), "nothing to write again after it");
}

use super::*;
use crate::budget::ManualClock;

fn key(tenant: &str, i: u32) -> TenantKey {
    let mut k = [0u8; 32];
    k[..4].copy_from_slice(&i.to_be_bytes());
    k[4..4 + tenant.len().min(28)].copy_from_slice(&tenant.as_bytes()[..tenant.len().min(28)]);
    TenantKey {
        tenant: TenantId::new(tenant),
        digest: KeyDigest(k),
    }
}

fn acme(i: u32) -> TenantKey {
    key("acme", i)
}

fn answer(body_len: usize) -> StoredAnswer {
    // status 200, no headers, then the body.
    let mut v = vec![0u8, 200, 0];
    v.extend(std::iter::repeat_n(b'x', body_len));
    StoredAnswer::decode(bytes::Bytes::from(v)).expect("answer")
}

fn store(ttl_ms: u64, max_entries: u64, max_bytes: u64) -> (Arc<ManualClock>, MemoryStore) {
    let clock = Arc::new(ManualClock::new());
    let bounds = MemoryBounds {
        ttl_ns: ttl_ms * 1_000_000,
        max_entries,
        max_bytes,
    };
    (clock.clone(), MemoryStore::new(bounds, clock))
}

const FP: Fingerprint = Fingerprint([7; 32]);

fn has(s: &MemoryStore, k: &TenantKey) -> bool {
    s.get(&k.digest).is_some()
}

#[test]
fn an_answer_expires_ttl_after_it_was_stored() {
    let (clock, s) = store(1_000, 100, 1 << 20);
    assert!(s.put(&acme(1), FP, answer(10)));
    clock.advance_ms(500);
    assert!(s.put(&key("beta", 2), FP, answer(10)));
    clock.advance_ms(499);
    assert!(has(&s, &acme(1)), "999 ms after it was stored");
    clock.advance_ms(1);
    assert!(!has(&s, &acme(1)), "1 s after");
    assert!(has(&s, &key("beta", 2)), "the younger one stays");
    clock.advance_ms(500);
    assert!(!has(&s, &key("beta", 2)));
    assert_eq!(s.counts.expirations.load(Relaxed), 2);
    assert_eq!(s.held(), (0, 0), "tenants holding nothing cost nothing");
    assert_eq!(
        s.counts.evictions.load(Relaxed),
        0,
        "expiry is not eviction"
    );
}

#[test]
fn the_oldest_is_evicted_first_when_the_entries_are_full() {
    let (clock, s) = store(60_000, 3, 1 << 20);
    for i in 1..=3 {
        assert!(s.put(&acme(i), FP, answer(1)));
        clock.advance_ms(1);
    }
    // Reading an entry does not make it younger: eviction follows the order of storing.
    assert!(has(&s, &acme(1)));
    assert!(s.put(&acme(4), FP, answer(1)));
    assert!(!has(&s, &acme(1)), "the oldest went");
    assert!(s.put(&acme(5), FP, answer(1)));
    assert!(!has(&s, &acme(2)), "then the next oldest");
    for i in 3..=5 {
        assert!(has(&s, &acme(i)), "{i}");
    }
    assert_eq!(s.counts.evictions.load(Relaxed), 2);
    assert_eq!(s.held().0, 3);
}

#[test]
fn the_bytes_never_exceed_max_bytes() {
    let max = TENANT_OVERHEAD + 10 * (ENTRY_OVERHEAD + 100);
    let (_clock, s) = store(60_000, 1_000_000, max);
    // 1,000 unique keys of 100-byte answers into a store that holds 10 of them.
    for i in 0..1_000 {
        assert!(s.put(&acme(i), FP, answer(97)));
        let (_, bytes) = s.held();
        assert!(bytes <= max, "{bytes} > {max}");
    }
    assert_eq!(s.held(), (10, max));
    assert_eq!(s.counts.evictions.load(Relaxed), 990);
    // The 10 kept are the 10 newest.
    assert!((990..1_000).all(|i| has(&s, &acme(i))));
    assert!(!has(&s, &acme(989)));
    // A large answer evicts as many old ones as it needs.
    assert!(s.put(
        &acme(5_000),
        FP,
        answer((3 * (ENTRY_OVERHEAD + 100) - ENTRY_OVERHEAD - 3) as usize)
    ));
    assert_eq!(s.held().0, 8);
    assert!(!has(&s, &acme(992)) && has(&s, &acme(993)));
    // One larger than the whole store is not kept, and evicts nothing.
    assert!(!s.put(&acme(6_000), FP, answer(max as usize)));
    assert_eq!(s.held().0, 8);
    assert_eq!(s.counts.too_large.load(Relaxed), 1);
}

#[test]
fn storing_a_key_again_replaces_it_and_keeps_the_count_right() {
    let (_clock, s) = store(60_000, 2, 1 << 20);
    assert!(s.put(&acme(1), FP, answer(1)));
    for _ in 0..500 {
        assert!(s.put(&acme(2), Fingerprint([9; 32]), answer(1)));
    }
    assert_eq!(s.held().0, 2);
    assert!(has(&s, &acme(1)), "replacing key 2 evicted nothing");
    assert_eq!(
        s.get(&acme(2).digest).map(|(f, _)| f),
        Some(Fingerprint([9; 32]))
    );
    // The replaced places are counted until they are popped, so they stay within the
    // byte bound and evict the oldest like any answer would.
    let (_, bytes) = s.held();
    assert!(bytes <= 1 << 20);
}

/// Another tenant's flood evicts its own answers, never the victim's: the victim holds less.
#[test]
fn a_tenants_flood_evicts_its_own_answers_not_anothers() {
    let (clock, s) = store(60_000, 1_000, 1 << 20);
    assert!(s.put(&key("victim", 1), FP, answer(100)));
    clock.advance_ms(1);
    // By bytes: 100,000 answers of 2 KiB into 1 MiB.
    for i in 0..100_000 {
        assert!(s.put(&key("flood", i), FP, answer(2_048)));
        assert!(s.held().1 <= 1 << 20);
    }
    assert!(has(&s, &key("victim", 1)), "the victim's answer stays");
    assert!(has(&s, &key("flood", 99_999)));
    // By count: 1,000 entries, the flood takes 999 of them.
    let (clock, s) = store(60_000, 1_000, 1 << 30);
    assert!(s.put(&key("victim", 1), FP, answer(1)));
    clock.advance_ms(1);
    for i in 0..10_000 {
        assert!(s.put(&key("flood", i), FP, answer(1)));
    }
    assert!(has(&s, &key("victim", 1)));
    assert_eq!(s.held().0, 1_000);
    assert_eq!(s.held_by(&TenantId::new("flood")).0, 999);
}

/// Each of N tenants keeps at least 1/N of the store, whatever the others store: the largest
/// holder is evicted from until the holdings meet.
#[test]
fn tenants_share_the_store_max_min_fairly() {
    let (clock, s) = store(60_000, 300, 1 << 30);
    // "big" fills the store first, then two others store 200 answers each.
    for i in 0..300 {
        assert!(s.put(&key("big", i), FP, answer(1)));
    }
    clock.advance_ms(1);
    for i in 0..200 {
        assert!(s.put(&key("left", i), FP, answer(1)));
        assert!(s.put(&key("right", i), FP, answer(1)));
    }
    let held = |t: &str| s.held_by(&TenantId::new(t)).0;
    assert_eq!((held("big"), held("left"), held("right")), (100, 100, 100));
    // The newest of each stay; "big" lost its oldest.
    assert!(has(&s, &key("big", 299)) && !has(&s, &key("big", 199)));
    assert!(has(&s, &key("left", 100)) && !has(&s, &key("left", 99)));
}

/// Expiry runs over every tenant's ring in age order, and a tenant holding nothing is dropped
/// (its overhead given back).
#[test]
fn expiry_takes_the_oldest_of_every_tenant() {
    let (clock, s) = store(1_000, 100, 1 << 20);
    for i in 0..10 {
        assert!(s.put(&key(&format!("t{i}"), i), FP, answer(1)));
        clock.advance_ms(100);
    }
    clock.advance_ms(1);
    // 1,001 ms after the first: t0 is gone, t1..t9 stay.
    assert!(!has(&s, &key("t0", 0)));
    assert!(has(&s, &key("t1", 1)));
    assert_eq!(s.held().0, 9);
    clock.advance_ms(1_000);
    assert!(
        !has(&s, &key("t9", 9)),
        "expired (and every older one with it)"
    );
    assert_eq!(s.held(), (0, 0));
}

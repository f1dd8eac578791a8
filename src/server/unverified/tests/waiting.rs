//! Newcomers waiting for a slot: how long a connection in one is kept, and when an address's
//! newcomers wait or are refused.

use super::*;

/// Review 27 of #37: a client's pool of TLS connections, opened at once, was closed by a
/// flood's newcomers mid-handshake (its address held the most unverified connections), and
/// eight addresses of twelve waiting newcomers each took every waiting place. An address's
/// connections make room only once they had a while to authenticate; an address holding no
/// slot waits with at most WAITING_PER_ADDRESS newcomers.
#[test]
fn a_clients_young_connections_are_kept_and_its_waiting_newcomers_bounded() {
    let guard = Unverified::new(4, 1_000, TrustedProxies::default());
    let (pool, c, d): (IpAddr, IpAddr, IpAddr) = (
        "10.0.0.1".parse().expect("ip"),
        "10.0.0.3".parse().expect("ip"),
        "10.0.0.4".parse().expect("ip"),
    );
    let handshaking: Vec<_> = (0..3).map(|_| seat(&guard, pool).expect("pool")).collect();
    let _newcomer = guard.admit(c).expect("c");
    assert_eq!(
        guard.make_room_for(c, WAITED, None),
        Room::Wait,
        "too young to close"
    );
    assert!(handshaking
        .iter()
        .all(|t| !t.0.evicted.load(Ordering::Acquire)));
    let waiting: Vec<_> = (0..WAITING_PER_ADDRESS)
        .map(|_| guard.admit(d).expect("d"))
        .collect();
    assert_eq!(
        guard.make_room_for(d, WAITED, None),
        Room::Wait,
        "wait together"
    );
    let _one_more = guard.admit(d).expect("d");
    assert_eq!(
        guard.make_room_for(d, WAITED, None),
        Room::Refused,
        "past its waiting places"
    );
    drop(waiting);
}

/// Review 28 of #37: the age that protects a connection's first while counted from its
/// accept, so one that had waited longer than that for its slot was closed as soon as it got
/// one, after its TLS handshake and before its first request. It counts from its seat.
#[test]
fn a_connection_that_waited_for_its_slot_has_its_while_from_its_seat() {
    let age = std::time::Duration::from_nanos(1);
    let guard = Unverified::aged(2, 1_000, TrustedProxies::default(), age);
    let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
        "10.0.0.1".parse().expect("ip"),
        "10.0.0.2".parse().expect("ip"),
        "10.0.0.3".parse().expect("ip"),
    );
    let waited = guard.admit(a).expect("a");
    let old = seat(&guard, b).expect("b");
    // `a` waited (as long as a test may pretend) and is seated only now, shaking hands.
    waited.seated();
    waited.heard(1);
    waited
        .0
        .seated_after_ns
        .store(u64::MAX - 1, Ordering::Release);
    let _newcomer = guard.admit(c).expect("c");
    assert_eq!(guard.make_room_for(c, WAITED, None), Room::Made);
    assert!(
        !waited.0.evicted.load(Ordering::Acquire),
        "just seated: kept, though it opened first"
    );
    assert!(
        old.0.evicted.load(Ordering::Acquire),
        "the one seated longest"
    );
}

/// Review 41-r7 of #37: with twice as many clients as the admin listener's slots reconnecting
/// whenever closed, each slot turned over once a [`ROOM_AGE`], and a probe waited 1.4–1.6 s
/// for its turn. A connection that has said nothing, or has had its answers and is idle, had
/// its while after a quarter of it; one that spoke and has no answer yet (a TLS handshake, a
/// request in flight) keeps the whole while.
#[test]
fn a_silent_or_answered_connection_makes_room_sooner() {
    let guard = Unverified::aged(
        3,
        1_000,
        TrustedProxies::default(),
        std::time::Duration::from_nanos(1),
    );
    let ip = |last: u8| IpAddr::from([10, 0, 0, last]);
    // Seated this instant: younger than the age (as a test may pretend).
    let just_seated = |last: u8| {
        let trust = seat(&guard, ip(last)).expect("seated");
        trust
            .0
            .seated_after_ns
            .store(u64::MAX - 1, Ordering::Release);
        trust
    };
    let shaking = just_seated(1);
    shaking.heard(1);
    let silent = just_seated(2);
    let answered = just_seated(3);
    answered.heard(1);
    let activity = Arc::new(crate::server::activity::Activity::new(
        std::time::Instant::now(),
        true,
    ));
    activity.served.store(1, Ordering::Release);
    answered.served(&activity);
    let _first = guard.admit(ip(4)).expect("newcomer");
    assert_eq!(guard.make_room_for(ip(4), WAITED, None), Room::Made);
    assert!(!shaking.is_evicted(), "spoke, no answer yet: kept");
    assert!(silent.is_evicted(), "said nothing");
    let _second = guard.admit(ip(5)).expect("newcomer");
    assert_eq!(guard.make_room_for(ip(5), WAITED, None), Room::Made);
    assert!(answered.is_evicted(), "had its answer, idle");
    let _third = guard.admit(ip(6)).expect("newcomer");
    assert_eq!(guard.make_room_for(ip(6), WAITED, None), Room::Wait);
    assert!(!shaking.is_evicted());
}

/// Review 28 of #37: while a flood's connections were all too young to make room (closed by
/// the flood itself at 0.9 s and reopened), a client's third and later newcomers were
/// refused as if its address held the most: a pool of eight got two served of each eight.
/// An address holding no slot is refused only while none holds more in slots than it does in
/// all.
#[test]
fn a_clients_newcomers_wait_while_another_address_holds_more() {
    let guard = Unverified::new(8, 1_000, TrustedProxies::default());
    let (flood, pool): (IpAddr, IpAddr) = (
        "10.0.0.1".parse().expect("ip"),
        "10.0.0.2".parse().expect("ip"),
    );
    let young: Vec<_> = (0..6)
        .map(|_| seat(&guard, flood).expect("flood"))
        .collect();
    let waiting: Vec<_> = (0..3).map(|_| guard.admit(pool).expect("pool")).collect();
    assert_eq!(
        guard.make_room_for(pool, WAITED, None),
        Room::Wait,
        "the flood holds more, too young to give one up"
    );
    let more: Vec<_> = (0..4).map(|_| guard.admit(pool).expect("pool")).collect();
    assert_eq!(
        guard.make_room_for(pool, WAITED, None),
        Room::Refused,
        "holding the most itself (7 against 6), past its waiting places"
    );
    drop((young, waiting, more));
    // An address holding a slot already is refused past its places as before (eight
    // addresses of twelve waiting newcomers each, some of each in slots, took every waiting
    // place: review 27).
    let guard = Unverified::new(8, 1_000, TrustedProxies::default());
    let young: Vec<_> = (0..6)
        .map(|_| seat(&guard, flood).expect("flood"))
        .collect();
    let seated = seat(&guard, pool).expect("pool");
    let waiting: Vec<_> = (0..3).map(|_| guard.admit(pool).expect("pool")).collect();
    assert_eq!(guard.make_room_for(pool, WAITED, None), Room::Refused);
    drop((young, seated, waiting));
    // Another address's newcomers waiting, not in slots, will never make room: they do not
    // keep a client's newcomers waiting past their places.
    let guard = Unverified::new(8, 1_000, TrustedProxies::default());
    let hog: Vec<_> = (0..6).map(|_| guard.admit(flood).expect("hog")).collect();
    let waiting: Vec<_> = (0..3).map(|_| guard.admit(pool).expect("pool")).collect();
    assert_eq!(guard.make_room_for(pool, WAITED, None), Room::Refused);
    drop((hog, waiting));
}

/// Review 31 of #37: against 200 addresses of two connections each, too young to make room,
/// a client's pool of eight got two served of each eight: each of its newcomers past
/// WAITING_PER_ADDRESS was refused, as an unknown address's is. An address a connection
/// authenticated from lately is not the flood's: its newcomers wait.
#[test]
fn an_address_that_authenticated_lately_waits_where_an_unknown_one_is_refused() {
    let guard = Unverified::new(4, 1_000, TrustedProxies::default());
    let (flood, known, unknown): (IpAddr, IpAddr, IpAddr) = (
        "10.0.0.1".parse().expect("ip"),
        "10.0.0.2".parse().expect("ip"),
        "10.0.0.3".parse().expect("ip"),
    );
    let before = seat(&guard, known).expect("known");
    assert!(before.verified_as("acme"));
    drop(before);
    let _young: Vec<_> = (0..3)
        .map(|_| seat(&guard, flood).expect("flood"))
        .collect();
    let mut newcomers = Vec::new();
    for address in [known, unknown] {
        newcomers.extend((0..=WAITING_PER_ADDRESS).map(|_| guard.admit(address).expect("admit")));
    }
    assert_eq!(
        guard.make_room_for(unknown, WAITED, None),
        Room::Refused,
        "past its waiting places"
    );
    assert_eq!(
        guard.make_room_for(known, WAITED, None),
        Room::Wait,
        "it authenticated lately"
    );
}

/// Review 32 of #37: an address known for an authentication was never refused past two, even
/// holding slots, so a flood with one valid key (one request per address) kept a new client
/// out up to 9.9 s. Holding a slot, a known address is refused past two as any is.
#[test]
fn a_known_address_holding_a_slot_is_refused_past_its_waiting_places() {
    let guard = Unverified::new(8, 1_000, TrustedProxies::default());
    let known: IpAddr = "10.0.0.2".parse().expect("ip");
    let before = seat(&guard, known).expect("known");
    assert!(before.verified_as("acme"));
    drop(before);
    let _seated = seat(&guard, known).expect("seated");
    let _waiting: Vec<_> = (0..=WAITING_PER_ADDRESS)
        .map(|_| guard.admit(known).expect("admit"))
        .collect();
    assert_eq!(guard.make_room_for(known, WAITED, None), Room::Refused);
}

/// Review 41-r3: an address whose two connections were both closed for room and wait again
/// holds no slot; its newcomer takes from a tenant holding two (over its share of one), as a
/// newcomer of an address holding nothing does. Counted with its own other newcomer (two), it
/// could take from nobody, and newcomers like it held every waiting place.
#[test]
fn an_address_whose_connections_all_wait_takes_from_a_tenant_holding_two() {
    let guard = Unverified::new(16, 1_000, TrustedProxies::default());
    guard.fit_to(4, 4);
    let ip = |n: u8| IpAddr::from([10, 0, 1, n]);
    let mut seated = Vec::new();
    for n in 1..=2 {
        for _ in 0..2 {
            let trust = seat(&guard, ip(n)).expect("seated");
            assert!(trust.verified_as(&format!("admin clients from {}", ip(n))));
            seated.push(trust);
        }
    }
    let _first = guard.admit(ip(3)).expect("waiting");
    let _second = guard.admit(ip(3)).expect("waiting");
    assert_eq!(guard.make_room_for(ip(3), WAITED, None), Room::Made);
    assert_eq!(
        seated
            .iter()
            .filter(|t| t.0.closing.load(Ordering::Acquire))
            .count(),
        1,
        "one idle connection of a tenant holding two"
    );
}

/// Review 41-r5 of #37 (F1): with many admin client groups, the share is one; an operator host
/// holding two keep-alive connections was a group over it, and lost requests to the flood's
/// newcomers. A connection a valid admin token came on is the operator's: counted in no group,
/// never closed to make room, though its host holds the most; a flooding group holding two
/// gives one up instead.
#[test]
fn an_operators_connections_are_never_closed_to_make_room() {
    let guard = Unverified::new(16, 1_000, TrustedProxies::default());
    guard.fit_to(4, 4);
    let ip = |n: u8| IpAddr::from([10, 0, 2, n]);
    let operator = ip(1);
    let mut operators = Vec::new();
    for _ in 0..3 {
        let trust = seat(&guard, operator).expect("seated");
        // A probe first (counted in its address's group), then an admin call.
        assert!(trust.verified_as(&format!("admin clients from {operator}")));
        trust.operator();
        assert!(trust.is_operator());
        operators.push(trust);
    }
    assert_eq!(guard.held_by(&format!("admin clients from {operator}")), 0);
    let mut flood = Vec::new();
    for n in 2..=3 {
        for _ in 0..2 {
            let trust = seat(&guard, ip(n)).expect("seated");
            assert!(trust.verified_as(&format!("admin clients from {}", ip(n))));
            flood.push(trust);
        }
    }
    for newcomer in 10..14 {
        let _waiting = guard.admit(ip(newcomer)).expect("waiting");
        guard.make_room_for(ip(newcomer), WAITED, None);
    }
    let closing = |t: &ConnectionTrust| t.0.closing.load(Ordering::Acquire);
    assert!(!operators.iter().any(closing), "the operator's are kept");
    assert!(flood.iter().any(closing), "the flood's give room");
    // An operator's connection is bound to no group again by a later probe.
    assert!(operators[0].verified_as(&format!("admin clients from {operator}")));
    assert_eq!(guard.held_by(&format!("admin clients from {operator}")), 0);
}

/// Review 41-r5 of #37 (F2), and this session's probe test: 127 admin addresses holding two
/// each (their share of 254 among 128 groups) left the others' newcomers waiting, none able to
/// take. On a listener sharing with waiters (the admin one), the addresses whose connections
/// all wait count in the share: a group holding two is over it, and gives one up.
#[test]
fn addresses_that_only_wait_count_in_the_admin_share() {
    let ip = |n: u8| IpAddr::from([10, 0, 3, n]);
    for sharing in [false, true] {
        let guard = Unverified::new(16, 1_000, TrustedProxies::default());
        let guard = if sharing {
            guard.sharing_with_waiters()
        } else {
            guard
        };
        guard.fit_to(8, 8);
        let mut seated = Vec::new();
        for n in 1..=3 {
            for _ in 0..2 {
                let trust = seat(&guard, ip(n)).expect("seated");
                assert!(trust.verified_as(&format!("admin clients from {}", ip(n))));
                seated.push(trust);
            }
        }
        // Three addresses holding nothing wait: share 8 / (3 + 1) = 2 counted apart, and
        // 8 / (3 + 3) = 1 with them.
        let waiting: Vec<_> = (10..13)
            .map(|n| guard.admit(ip(n)).expect("waiting"))
            .collect();
        let room = guard.make_room_for(ip(10), WAITED, None);
        let expected = if sharing { Room::Made } else { Room::Wait };
        assert_eq!(room, expected, "sharing with waiters: {sharing}");
        drop(waiting);
    }
}

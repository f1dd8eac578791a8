//! The allowances per address and per tenant, and the room a full listener makes.

use super::*;

/// A newcomer that has waited its grace: a busy connection may be cut for it.
const WAITED: std::time::Duration = ROOM_GRACE;

/// A connection from `ip` that holds a slot of the listener (not a newcomer waiting for one).
fn seat(guard: &Arc<Unverified>, ip: IpAddr) -> Option<ConnectionTrust> {
    let trust = guard.admit(ip)?;
    trust.seated();
    Some(trust)
}

#[test]
fn an_address_holds_at_most_its_allowance_until_a_connection_authenticates() {
    let proxies =
        TrustedProxies::parse(&["10.9.0.0/16".into()], Default::default()).expect("proxies");
    let guard = Unverified::new(2, 1_000, proxies);
    let a: IpAddr = "10.0.0.1".parse().expect("ip");
    let first = guard.admit(a).expect("1st");
    let second = guard.admit(a).expect("2nd");
    assert!(guard.admit(a).is_none(), "3rd: over");
    assert!(
        guard.admit("10.0.0.2".parse().expect("ip")).is_some(),
        "others unaffected"
    );
    first.verified();
    first.verified(); // once only
    assert_eq!(guard.held(a), 1);
    let third = guard.admit(a).expect("room after an authentication");
    drop(second);
    drop(first); // verified already: gives nothing back twice
    assert_eq!(guard.held(a), 1);
    drop(third);
    assert_eq!(guard.held(a), 0);
    assert_eq!(guard.refused.load(Ordering::Relaxed), 1);
    // A trusted proxy is not counted, and IPv6 counts per /64.
    let proxy: IpAddr = "10.9.1.1".parse().expect("ip");
    let held: Vec<_> = (0..10)
        .map(|_| guard.admit(proxy).expect("proxy"))
        .collect();
    assert_eq!(guard.held(proxy), 0);
    drop(held);
    let v6a = guard.admit("2001:db8::1".parse().expect("ip")).expect("v6");
    let _v6b = guard.admit("2001:db8::2".parse().expect("ip")).expect("v6");
    assert!(guard.admit("2001:db8::3".parse().expect("ip")).is_none());
    drop(v6a);
}

/// Review of #37 (F5): under a 1,024-descriptor limit each listener serves 384 of 4,096
/// configured connections, and 4 addresses x 128 silent ones took them all. The allowance
/// shrinks with the listener: 128 x 384 / 4,096 = 12.
#[test]
fn a_listener_serving_fewer_connections_allows_each_address_fewer() {
    let guard = Unverified::new(128, 1_024, TrustedProxies::default());
    guard.fit_to(4_096, 4_096);
    assert_eq!(guard.allowance(), 128, "nothing clamped: unchanged");
    guard.fit_to(384, 4_096);
    assert_eq!(guard.allowance(), 12);
    let a: IpAddr = "10.0.0.1".parse().expect("ip");
    let held: Vec<_> = (0..12).map(|_| guard.admit(a).expect("within")).collect();
    assert!(guard.admit(a).is_none(), "the 13th is over");
    drop(held);
    let tiny = Unverified::new(2, 8, TrustedProxies::default());
    tiny.fit_to(32, 4_096);
    assert_eq!(tiny.allowance(), 1, "never below one");
}

/// Review 20 of #37: addresses each within their allowance filled the listener, and a new
/// client waited in the backlog for a silent connection's deadline. The listener full, a
/// newcomer takes the slot of the oldest unverified connection of the address holding
/// the most — only if that holds more than the newcomer's own address.
#[tokio::test]
async fn a_full_listener_makes_room_from_the_address_holding_the_most() {
    let guard = Unverified::aged(
        4,
        1_000,
        TrustedProxies::default(),
        std::time::Duration::ZERO,
    );
    let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
        "10.0.0.1".parse().expect("ip"),
        "10.0.0.2".parse().expect("ip"),
        "10.0.0.3".parse().expect("ip"),
    );
    let from_a: Vec<_> = (0..4).map(|_| seat(&guard, a).expect("a")).collect();
    let from_b: Vec<_> = (0..2).map(|_| seat(&guard, b).expect("b")).collect();
    // a's first one authenticated: not a candidate, and no longer counted.
    assert!(from_a[0].verified_as("t"));
    let _newcomer = guard.admit(c).expect("c");
    assert_eq!(
        guard.make_room_for(c, WAITED, None),
        Room::Made,
        "a holds 3, c 1"
    );
    assert!(
        !from_a[0].0.evicted.load(Ordering::Acquire),
        "verified: kept"
    );
    assert!(
        from_a[1].0.evicted.load(Ordering::Acquire),
        "a's oldest unverified"
    );
    tokio::time::timeout(std::time::Duration::from_secs(1), from_a[1].evicted())
        .await
        .expect("told at once");
    assert!(!from_a[2].0.evicted.load(Ordering::Acquire));
    // Until it closes it still counts: a's 3 against b's 2 and c's 1.
    drop(from_a);
    assert_eq!(guard.held(a), 0);
    assert_eq!(
        guard.make_room_for(b, WAITED, None),
        Room::Refused,
        "b holds the most: its newcomer is closed"
    );
    let _second = guard.admit(c).expect("c");
    // b's 2 are not more than c's 2, but neither of c's holds a slot: not refused (review
    // 26), and the oldest unverified one in a slot makes room.
    assert_eq!(guard.make_room_for(c, WAITED, None), Room::Made);
    assert!(from_b[0].0.evicted.load(Ordering::Acquire));
    assert_eq!(guard.evicted.load(Ordering::Relaxed), 2);
    let lone = Unverified::new(4, 1_000, TrustedProxies::default());
    let _one = seat(&lone, a).expect("a");
    let _other = seat(&lone, b).expect("b");
    assert_eq!(
        lone.make_room_for(b, WAITED, None),
        Room::Wait,
        "one each: wait"
    );
}

/// Review 5 of #37: a tenant allowed 1 record/s opened and authenticated 4,096 connections
/// and kept them with 429s; no other tenant could connect. A tenant holds at most its
/// allowance; past it a request is refused and its connection told to close.
#[test]
fn an_authenticated_connection_counts_against_its_tenant() {
    let guard = Unverified::new(128, 2, TrustedProxies::default());
    let a: IpAddr = "10.0.0.1".parse().expect("ip");
    let first = guard.admit(a).expect("1st");
    let second = guard.admit(a).expect("2nd");
    let third = guard.admit(a).expect("3rd");
    assert!(first.verified_as("greedy"));
    assert!(first.verified_as("greedy"), "the same connection again");
    assert!(second.verified_as("greedy"));
    assert_eq!(guard.held_by("greedy"), 2);
    assert!(!third.verified_as("greedy"), "over its allowance");
    assert!(third.0.closing.load(Ordering::Acquire), "told to close");
    assert!(third.verified_as("other"), "another tenant's own");
    drop(first);
    assert_eq!(guard.held_by("greedy"), 1);
    let fourth = guard.admit(a).expect("4th");
    assert!(fourth.verified_as("greedy"), "room after one closed");
    guard.fit_to(1_024, 4_096);
    assert_eq!(
        guard.tenant_allowance(),
        1,
        "scaled with the listener, at least one"
    );
}

/// Review 22 of #37: tenants' keep-alive connections filled the listener. The listener full,
/// the tenant holding the most (more than the newcomer's address) gives up its oldest idle
/// connection, gracefully; a busy one is passed over, and a tenant holding one keeps it.
#[test]
fn a_full_listener_makes_room_from_the_tenant_holding_the_most() {
    let guard = Unverified::new(4, 1_000, TrustedProxies::default());
    let a: IpAddr = "10.0.0.1".parse().expect("ip");
    let c: IpAddr = "10.0.0.3".parse().expect("ip");
    let greedy: Vec<_> = (0..3).map(|_| seat(&guard, a).expect("a")).collect();
    let busy = std::sync::Arc::new(crate::server::activity::Activity::new(
        std::time::Instant::now(),
        true,
    ));
    busy.in_flight.store(1, Ordering::Release);
    greedy[0].served(&busy);
    for trust in &greedy {
        assert!(trust.verified_as("greedy"));
    }
    let lone = seat(&guard, a).expect("a");
    assert!(lone.verified_as("lone"));
    let _newcomer = guard.admit(c).expect("c");
    assert_eq!(
        guard.make_room_for(c, WAITED, None),
        Room::Made,
        "greedy holds 3, c 1"
    );
    assert!(
        !greedy[0].0.closing.load(Ordering::Acquire),
        "busy: passed over"
    );
    assert!(
        greedy[1].0.closing.load(Ordering::Acquire),
        "the oldest idle one"
    );
    assert!(
        !greedy[1].0.evicted.load(Ordering::Acquire),
        "closed gracefully, not cut"
    );
    assert_eq!(
        guard.make_room_for(c, WAITED, None),
        Room::Made,
        "still 3 until it closes"
    );
    assert!(
        greedy[2].0.closing.load(Ordering::Acquire),
        "the next idle one"
    );
    // Review 24: a busy one is taken last, and gets a short grace to finish.
    assert!(!greedy[0].0.made_room.load(Ordering::Acquire));
    assert_eq!(
        guard.make_room_for(c, WAITED, None),
        Room::Made,
        "then the busy one"
    );
    assert!(greedy[0].0.closing.load(Ordering::Acquire));
    assert!(greedy[0].made_room(), "cut after ROOM_GRACE");
    assert_eq!(
        guard.make_room_for(c, WAITED, None),
        Room::Wait,
        "all of greedy's closing"
    );
    drop(greedy);
    assert_eq!(
        guard.make_room_for(c, WAITED, None),
        Room::Wait,
        "lone's one is kept"
    );
    assert!(!lone.0.closing.load(Ordering::Acquire));
    assert_eq!(guard.evicted_bound.load(Ordering::Relaxed), 3);
    assert_eq!(guard.evicted.load(Ordering::Relaxed), 0);
}

/// Review 23 of #37: silent connections from many addresses closed a small tenant's
/// keep-alive connections one by one. Only a tenant holding more than its fair share of the
/// listener (its connections over the tenants holding any, plus the newcomer's) gives one up.
#[test]
fn only_a_tenant_over_its_share_of_the_listener_makes_room() {
    let guard = Unverified::new(4, 1_000, TrustedProxies::default());
    guard.fit_to(12, 12);
    let a: IpAddr = "10.0.0.1".parse().expect("ip");
    let held: Vec<_> = ["small", "small", "small", "small", "other"]
        .into_iter()
        .map(|tenant| {
            let trust = seat(&guard, a).expect("a");
            assert!(trust.verified_as(tenant));
            trust
        })
        .collect();
    let c: IpAddr = "10.0.0.3".parse().expect("ip");
    let _newcomer = guard.admit(c).expect("c");
    // 12 / (2 + 1) = 4: "small" holds 4, not more.
    assert_eq!(guard.make_room_for(c, WAITED, None), Room::Wait);
    assert!(held.iter().all(|t| !t.0.closing.load(Ordering::Acquire)));
    let fifth = seat(&guard, a).expect("a");
    assert!(fifth.verified_as("small"));
    assert_eq!(
        guard.make_room_for(c, WAITED, None),
        Room::Made,
        "5 of 12 is over its share"
    );
    assert!(held[0].0.closing.load(Ordering::Acquire));
}

/// Review 24 of #37: silent connections from 400 addresses, one each, filled the listener, and
/// a new client waited 8–10 s for their deadline. With no address holding more than the
/// newcomer's, the oldest unverified connection makes room, once it had a while to speak.
#[test]
fn a_listener_full_of_one_connection_per_address_makes_room_from_the_oldest() {
    let guard = Unverified::aged(
        4,
        1_000,
        TrustedProxies::default(),
        std::time::Duration::ZERO,
    );
    let ip = |n: u8| IpAddr::from([10, 0, 0, n]);
    let held: Vec<_> = (1..=3)
        .map(|n| seat(&guard, ip(n)).expect("one each"))
        .collect();
    assert!(held[0].verified_as("t"), "verified: out of the order");
    let newcomer = guard.admit(ip(9)).expect("newcomer");
    assert_eq!(guard.make_room_for(ip(9), WAITED, None), Room::Made);
    assert!(!held[0].0.evicted.load(Ordering::Acquire));
    assert!(
        held[1].0.evicted.load(Ordering::Acquire),
        "the oldest unverified"
    );
    assert!(!held[2].0.evicted.load(Ordering::Acquire));
    assert_eq!(guard.make_room_for(ip(9), WAITED, None), Room::Made);
    assert!(held[2].0.evicted.load(Ordering::Acquire), "then the next");
    assert_eq!(guard.evicted.load(Ordering::Relaxed), 2);
    // The newcomer, now the oldest unverified of all, is not closed for itself.
    drop(held);
    assert_eq!(guard.make_room_for(ip(9), WAITED, None), Room::Wait);
    assert!(!newcomer.0.evicted.load(Ordering::Acquire), "its own");
    // Younger than the age: kept (two floods would close each other's at once).
    let young = Unverified::new(4, 1_000, TrustedProxies::default());
    let _held: Vec<_> = (1..=3)
        .map(|n| seat(&young, ip(n)).expect("one each"))
        .collect();
    let _newcomer = young.admit(ip(9)).expect("newcomer");
    assert_eq!(young.make_room_for(ip(9), WAITED, None), Room::Wait);
}

/// Review 25 of #37: a flood of silent connections made every newcomer cut a busy upload of a
/// tenant over its share. The oldest silent connection makes room first; a busy one is cut
/// only when no silent one is old enough.
#[test]
fn a_silent_connection_makes_room_before_a_busy_one_is_cut() {
    let guard = Unverified::aged(
        4,
        1_000,
        TrustedProxies::default(),
        std::time::Duration::ZERO,
    );
    let a: IpAddr = "10.0.0.1".parse().expect("ip");
    let busy = std::sync::Arc::new(crate::server::activity::Activity::new(
        std::time::Instant::now(),
        true,
    ));
    busy.in_flight.store(1, Ordering::Release);
    let uploads: Vec<_> = (0..3)
        .map(|_| {
            let trust = seat(&guard, a).expect("a");
            trust.served(&busy);
            assert!(trust.verified_as("uploader"));
            trust
        })
        .collect();
    let silent = seat(&guard, "10.0.0.2".parse().expect("ip")).expect("silent");
    let c: IpAddr = "10.0.0.3".parse().expect("ip");
    let _newcomer = guard.admit(c).expect("c");
    assert_eq!(guard.make_room_for(c, WAITED, None), Room::Made);
    assert!(
        silent.0.evicted.load(Ordering::Acquire),
        "the silent one first"
    );
    assert!(uploads.iter().all(|u| !u.0.closing.load(Ordering::Acquire)));
    drop(silent);
    // No silent one left but the newcomer itself: the busy one is cut.
    let young = Unverified::new(4, 1_000, TrustedProxies::default());
    let uploads: Vec<_> = (0..3)
        .map(|_| {
            let trust = seat(&young, a).expect("a");
            trust.served(&busy);
            assert!(trust.verified_as("uploader"));
            trust
        })
        .collect();
    let _newcomer = young.admit(c).expect("c");
    assert_eq!(young.make_room_for(c, WAITED, None), Room::Made);
    assert!(uploads[0].made_room(), "cut after ROOM_GRACE");
}

/// Review 25 of #37: a flood's newcomers cut a tenant's uploads mid-request. Of a tenant's busy
/// connections, the one its peer has sent nothing on for a while is cut first, at once; one
/// still being sent to only once the newcomer has waited its grace (and the newcomer waits,
/// not refused, meanwhile).
#[test]
fn a_busy_connection_still_sent_to_is_cut_only_for_a_newcomer_that_waited() {
    let guard = Unverified::new(4, 1_000, TrustedProxies::default());
    let a: IpAddr = "10.0.0.1".parse().expect("ip");
    let c: IpAddr = "10.0.0.3".parse().expect("ip");
    let now = std::time::Instant::now();
    let busy = |opened| {
        let activity = std::sync::Arc::new(crate::server::activity::Activity::new(opened, true));
        activity.in_flight.store(1, Ordering::Release);
        activity
    };
    // Two uploads heard from just now, then one silent for two seconds.
    let (sending, quiet) = (busy(now), busy(now - 2 * ROOM_QUIET));
    let activities = [&sending, &sending, &quiet];
    let uploads: Vec<_> = activities
        .iter()
        .map(|activity| {
            let trust = seat(&guard, a).expect("a");
            trust.served(activity);
            assert!(trust.verified_as("uploader"));
            trust
        })
        .collect();
    let _first = guard.admit(c).expect("c");
    let _second = guard.admit(c).expect("c");
    let fresh = std::time::Duration::ZERO;
    assert_eq!(guard.make_room_for(c, fresh, None), Room::Made);
    assert!(uploads[2].made_room(), "the quiet one, though the youngest");
    assert!(uploads[..2]
        .iter()
        .all(|u| !u.0.closing.load(Ordering::Acquire)));
    assert_eq!(
        guard.make_room_for(c, fresh, None),
        Room::Wait,
        "c holds 2, but room can be made once it waited"
    );
    assert!(uploads[..2]
        .iter()
        .all(|u| !u.0.closing.load(Ordering::Acquire)));
    assert_eq!(guard.make_room_for(c, WAITED, None), Room::Made);
    assert!(uploads[0].made_room(), "then the oldest still sent to");
}

/// Review 26 of #37: while a tenant's busy connections, still being sent to, filled the
/// listener, every newcomer was reset after a second — a waiting newcomer was then the oldest
/// unverified connection, and closed itself or another waiting one, freeing no slot. Waiting
/// newcomers are passed over; the busy connection is cut.
#[test]
fn a_waiting_newcomer_is_never_closed_to_make_room() {
    let guard = Unverified::aged(
        4,
        1_000,
        TrustedProxies::default(),
        std::time::Duration::ZERO,
    );
    let sending = std::sync::Arc::new(crate::server::activity::Activity::new(
        std::time::Instant::now(),
        true,
    ));
    sending.in_flight.store(1, Ordering::Release);
    let streams: Vec<_> = (0..3)
        .map(|_| {
            let trust = seat(&guard, "10.0.0.1".parse().expect("ip")).expect("a");
            trust.served(&sending);
            assert!(trust.verified_as("streamer"));
            trust
        })
        .collect();
    let (first, second): (IpAddr, IpAddr) = (
        "10.0.0.5".parse().expect("ip"),
        "10.0.0.6".parse().expect("ip"),
    );
    let waiting = guard.admit(first).expect("first");
    let _newcomer = guard.admit(second).expect("second");
    assert_eq!(guard.make_room_for(second, WAITED, None), Room::Made);
    assert!(!waiting.0.evicted.load(Ordering::Acquire), "waits on");
    assert!(streams[0].made_room(), "the busy one is cut");
    assert_eq!(guard.evicted.load(Ordering::Relaxed), 0);
}

mod heir;
mod waiting;

//! The slot of a connection closed for a newcomer goes to that newcomer when it ends.

use super::*;

/// Review 41-r7 of #37: the slot freed for a probe went to the newcomer that had waited
/// longest on the listener's semaphore (one that could take from no one), and the probe waited
/// two seconds to ask again. Handed on, the slot reaches the newcomer it was made for, past
/// those queued before it; a connection that ends unclosed gives its slot back to the listener.
#[tokio::test]
async fn the_slot_made_for_a_newcomer_is_handed_to_it() {
    let guard = Unverified::aged(
        4,
        1_000,
        TrustedProxies::default(),
        std::time::Duration::ZERO,
    );
    let (a, b, probe): (IpAddr, IpAddr, IpAddr) = (
        "10.0.0.1".parse().expect("ip"),
        "10.0.0.2".parse().expect("ip"),
        "10.0.0.3".parse().expect("ip"),
    );
    let slots = Arc::new(tokio::sync::Semaphore::new(4));
    let mut seated = Vec::new();
    for ip in [a, a, a, b] {
        let permit = slots.clone().try_acquire_owned().expect("a free slot");
        seated.push((seat(&guard, ip).expect("seated"), permit));
    }
    // A newcomer of b's queued first on the semaphore: it could take from no one.
    let _queued = guard.admit(b).expect("b's newcomer");
    let queued = tokio::spawn(slots.clone().acquire_owned());
    tokio::task::yield_now().await;
    let _newcomer = guard.admit(probe).expect("probe");
    let (heir, mut handed) = tokio::sync::oneshot::channel();
    assert_eq!(guard.make_room_for(probe, WAITED, Some(heir)), Room::Made);
    let (closed, permit) = seated.remove(0);
    assert!(closed.is_evicted(), "a's oldest closes for it");
    closed.hand_on(permit);
    drop(closed);
    let _probes = handed.try_recv().expect("its slot went to the probe");
    assert_eq!(slots.available_permits(), 0, "and not to the semaphore");
    assert!(
        !queued.is_finished(),
        "the newcomer queued first still waits"
    );
    // One that ends without being closed for anyone gives its slot back.
    let (ended, permit) = seated.remove(0);
    ended.hand_on(permit);
    drop(ended);
    let got = tokio::time::timeout(std::time::Duration::from_secs(1), queued)
        .await
        .expect("the queued newcomer got it");
    let _queueds = got.expect("task").expect("a slot");
    // A newcomer gone before the slot is handed on: back to the listener.
    let _another = guard.admit(probe).expect("probe");
    let (heir, handed) = tokio::sync::oneshot::channel();
    assert_eq!(guard.make_room_for(probe, WAITED, Some(heir)), Room::Made);
    drop(handed);
    let (closed, permit) = seated.remove(0);
    assert!(closed.is_evicted());
    closed.hand_on(permit);
    assert_eq!(slots.available_permits(), 1, "back to the listener");
}

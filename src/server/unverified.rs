//! Connections that have not authenticated yet, bounded per client address: a connection
//! counts against its address from its accept until one of its requests carries a valid
//! credential (or until it closes). Without this, one client can hold every connection the
//! listener allows — silent sockets each live `header_read_timeout_ms` — and every other
//! client waits in the kernel's backlog. A connection over its address's allowance is closed
//! at once, before a byte is read (counted). Peers that are trusted proxies are not counted:
//! every client behind them shares their address, and the proxy bounds its own clients.
//! IPv6 addresses are counted per /64, as the failed-authentication limit counts them.
//! Once authenticated, a connection counts against its **tenant** instead
//! (`max_connections_per_tenant`): else one tenant with a valid key could open and keep every
//! connection the listener allows, and the others could not connect at all. A request that
//! would bind one more connection to a tenant holding its allowance is refused (429
//! `tenant_connections`) and its connection closed after the answer.
//! When the descriptor limit forces fewer connections than configured, the allowance shrinks
//! in the same proportion ([`Unverified::fit_to`]): else a few addresses would still take
//! every slot the listener has left. And when the listener is full all the same (many
//! addresses, each within its allowance: review 20 of #37 filled 4,096 slots from 32 addresses,
//! and a new client waited 9–11 s in the backlog), a new connection makes room: the oldest
//! unauthenticated connection of the address holding the most is closed, if it holds more than
//! the newcomer's address does ([`Unverified::make_room_for`]), so the slots are shared fairly
//! among addresses instead of kept by whoever came first.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::forwarded::TrustedProxies;

/// The allowance, per listener.
#[derive(Debug)]
pub struct Unverified {
    max: AtomicUsize,
    /// Authenticated connections a tenant may hold, and how many each holds.
    max_per_tenant: AtomicUsize,
    tenants: Mutex<HashMap<Arc<str>, usize>>,
    exempt: TrustedProxies,
    counts: Mutex<HashMap<IpAddr, Held>>,
    /// Connections closed at accept because their address held `max` unverified ones.
    pub refused: AtomicU64,
    /// Unverified connections closed to make room for another address's (the listener full).
    pub evicted: AtomicU64,
}

/// What a full listener does with a new connection ([`Unverified::make_room_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// Another address's oldest unverified connection is closing: wait for its slot.
    Made,
    /// Close the newcomer: its address holds the most unverified connections.
    Refused,
    /// Wait for a slot as the kernel's backlog does (no address holds more than one).
    Wait,
}

/// An address's unverified connections: how many, and each in the order they came (some
/// verified or gone since: skipped when one is chosen to make room).
#[derive(Debug, Default)]
struct Held {
    n: usize,
    slots: VecDeque<Weak<Slot>>,
}

/// A connection's mark, carried by each of its requests (an extension): the pipeline calls
/// [`ConnectionTrust::verified`] once a request authenticated.
#[derive(Debug, Clone)]
pub struct ConnectionTrust(Arc<Slot>);

#[derive(Debug)]
struct Slot {
    owner: Arc<Unverified>,
    address: IpAddr,
    counted: AtomicBool,
    /// A trusted proxy's connection: counted against neither an address nor a tenant.
    exempt: bool,
    /// The tenant the connection counts against once a request authenticated.
    tenant: Mutex<Option<Arc<str>>>,
    /// Set when the connection must close after its answers (over its tenant's allowance).
    closing: AtomicBool,
    close: tokio::sync::Notify,
    /// Set when the connection is closed at once to make room for another address's.
    evicted: AtomicBool,
    evict: tokio::sync::Notify,
}

impl Unverified {
    pub fn new(max: usize, max_per_tenant: usize, exempt: TrustedProxies) -> Arc<Self> {
        Arc::new(Self {
            max: AtomicUsize::new(max),
            max_per_tenant: AtomicUsize::new(max_per_tenant.max(1)),
            tenants: Mutex::new(HashMap::new()),
            exempt,
            counts: Mutex::new(HashMap::new()),
            refused: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        })
    }

    /// The listener serves `serving` connections of the `configured` ones: each address may
    /// hold the same share of them unverified as configured (at least one).
    pub fn fit_to(&self, serving: usize, configured: usize) {
        if serving >= configured || configured == 0 {
            return;
        }
        for bound in [&self.max, &self.max_per_tenant] {
            let _ = bound.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |max| {
                let scaled = (max as u128 * serving as u128 / configured as u128) as usize;
                Some(scaled.max(1))
            });
        }
    }

    /// Authenticated connections a tenant may hold now.
    pub fn tenant_allowance(&self) -> usize {
        self.max_per_tenant.load(Ordering::Relaxed)
    }

    /// Connections counted against `tenant` now.
    pub fn held_by(&self, tenant: &str) -> usize {
        self.tenant_counts().get(tenant).copied().unwrap_or(0)
    }

    fn tenant_counts(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, usize>> {
        self.tenants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Unverified connections an address may hold now.
    pub fn allowance(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Held>> {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new connection from `peer`: its mark, or `None` when its address already holds its
    /// allowance of unverified connections (close it).
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<ConnectionTrust> {
        let address = crate::auth_failures::source(peer);
        let counted = !self.exempt.trusts(peer);
        let slot = Arc::new(Slot {
            owner: self.clone(),
            address,
            counted: AtomicBool::new(false),
            exempt: !counted,
            tenant: Mutex::new(None),
            closing: AtomicBool::new(false),
            close: tokio::sync::Notify::new(),
            evicted: AtomicBool::new(false),
            evict: tokio::sync::Notify::new(),
        });
        if counted {
            let mut counts = self.counts();
            let held = counts.entry(address).or_default();
            if held.n >= self.max.load(Ordering::Relaxed) {
                if held.n == 0 {
                    counts.remove(&address);
                }
                drop(counts);
                self.refused.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            held.n += 1;
            // Verified or gone ones are dropped from the order now and then, not each time.
            if held.slots.len() > 2 * held.n + 8 {
                held.slots.retain(|w| {
                    w.upgrade()
                        .is_some_and(|s| s.counted.load(Ordering::Acquire))
                });
            }
            held.slots.push_back(Arc::downgrade(&slot));
            slot.counted.store(true, Ordering::Release);
        }
        Some(ConnectionTrust(slot))
    }

    /// The listener is full and `peer`'s new connection (admitted) waits for a slot: closes
    /// the oldest unverified connection of the address holding the most, if that is more than
    /// `peer`'s address holds ([`Room::Made`]); or, `peer`'s address holding the most itself
    /// (more than this one), says to close the newcomer ([`Room::Refused`]: waiting, it would
    /// hold every other newcomer in the backlog behind it).
    pub fn make_room_for(&self, peer: IpAddr) -> Room {
        let address = crate::auth_failures::source(peer);
        let mut counts = self.counts();
        let mine = counts.get(&address).map_or(0, |h| h.n);
        let heaviest = counts
            .iter_mut()
            .filter(|(a, h)| **a != address && h.n > mine)
            .max_by_key(|(_, h)| h.n);
        let Some((_, held)) = heaviest else {
            if mine > 1 {
                drop(counts);
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Room::Refused;
            }
            return Room::Wait;
        };
        while let Some(weak) = held.slots.pop_front() {
            let Some(slot) = weak.upgrade() else {
                continue;
            };
            if slot.counted.load(Ordering::Acquire) && !slot.evicted.swap(true, Ordering::AcqRel) {
                slot.evict.notify_one();
                self.evicted.fetch_add(1, Ordering::Relaxed);
                return Room::Made;
            }
        }
        Room::Wait
    }

    /// Unverified connections of `peer`'s address now.
    pub fn held(&self, peer: IpAddr) -> usize {
        let address = crate::auth_failures::source(peer);
        self.counts().get(&address).map_or(0, |h| h.n)
    }

    fn release(&self, address: IpAddr) {
        let mut counts = self.counts();
        if let Some(held) = counts.get_mut(&address) {
            held.n -= 1;
            if held.n == 0 {
                counts.remove(&address);
            }
        }
    }
}

impl ConnectionTrust {
    /// A request on this connection authenticated: it no longer counts against its address
    /// (reached through [`ConnectionTrust::verified_as`], which also counts it for its tenant).
    fn verified(&self) {
        if self.0.counted.swap(false, Ordering::AcqRel) {
            self.0.owner.release(self.0.address);
        }
    }

    /// A request on this connection authenticated as `tenant`: the connection counts against
    /// its address no more, and against the tenant from its first such request. `false` when
    /// the tenant already holds its allowance: refuse the request; the connection closes
    /// after its answers.
    pub fn verified_as(&self, tenant: &str) -> bool {
        let slot = &self.0;
        if !slot.exempt {
            let mut bound = slot
                .tenant
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if bound.is_none() {
                let owner = &slot.owner;
                let mut counts = owner.tenant_counts();
                let n = counts.entry(Arc::from(tenant)).or_insert(0);
                if *n >= owner.max_per_tenant.load(Ordering::Relaxed) {
                    drop(counts);
                    slot.closing.store(true, Ordering::Release);
                    slot.close.notify_one();
                    return false;
                }
                *n += 1;
                *bound = Some(Arc::from(tenant));
            }
        }
        self.verified();
        true
    }

    /// Resolves once the connection is to be closed at once, to make room for another
    /// address's ([`Unverified::make_room_for`]); never otherwise.
    pub async fn evicted(&self) {
        if self.0.evicted.load(Ordering::Acquire) {
            return;
        }
        self.0.evict.notified().await;
    }

    /// Resolves once the connection must close (a request was refused for its tenant's
    /// connections); never otherwise.
    pub async fn closing(&self) {
        if self.0.closing.load(Ordering::Acquire) {
            return;
        }
        self.0.close.notified().await;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.counted.swap(false, Ordering::AcqRel) {
            self.owner.release(self.address);
        }
        let bound = self
            .tenant
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(tenant) = bound {
            let mut counts = self.owner.tenant_counts();
            if let Some(n) = counts.get_mut(&tenant) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    counts.remove(&tenant);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let guard = Unverified::new(4, 1_000, TrustedProxies::default());
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "10.0.0.1".parse().expect("ip"),
            "10.0.0.2".parse().expect("ip"),
            "10.0.0.3".parse().expect("ip"),
        );
        let from_a: Vec<_> = (0..4).map(|_| guard.admit(a).expect("a")).collect();
        let from_b: Vec<_> = (0..2).map(|_| guard.admit(b).expect("b")).collect();
        // a's first one authenticated: not a candidate, and no longer counted.
        assert!(from_a[0].verified_as("t"));
        let _newcomer = guard.admit(c).expect("c");
        assert_eq!(guard.make_room_for(c), Room::Made, "a holds 3, c 1");
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
            guard.make_room_for(b),
            Room::Refused,
            "b holds the most: its newcomer is closed"
        );
        let _second = guard.admit(c).expect("c");
        assert_eq!(
            guard.make_room_for(c),
            Room::Refused,
            "b's 2 are not more than c's 2"
        );
        assert!(!from_b[0].0.evicted.load(Ordering::Acquire));
        assert_eq!(guard.evicted.load(Ordering::Relaxed), 1);
        let lone = Unverified::new(4, 1_000, TrustedProxies::default());
        let _one = lone.admit(a).expect("a");
        let _other = lone.admit(b).expect("b");
        assert_eq!(lone.make_room_for(b), Room::Wait, "one each: wait");
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
}

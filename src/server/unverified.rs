//! Connections that have not authenticated yet, bounded per client address: a connection counts
//! against its address from its accept until one of its requests carries a valid credential (or
//! until it closes); else one client's silent sockets hold every slot and the others wait in the
//! backlog. One over its address's allowance is closed at once (counted). Peers that are trusted
//! proxies are not counted: every client behind them shares their address, and the proxy bounds its
//! own clients. IPv6 addresses are counted per /64, as the failed-authentication limit counts them.
//! Once authenticated, a connection counts against its **tenant** instead
//! (`max_connections_per_tenant`, else one tenant's key could keep every slot): a request that
//! would bind one more to a tenant holding its allowance is refused (429 `tenant_connections`) and
//! its connection closed after the answer. When the descriptor limit forces fewer connections than
//! configured, the allowance shrinks in proportion ([`Unverified::fit_to`]). And when the listener
//! is full all the same (many addresses, each within its allowance: review 20 of #37 filled 4,096
//! slots from 32 addresses, and a new client waited 9–11 s in the backlog), a new connection makes
//! room: the oldest unauthenticated connection of the address holding the most is closed, if it
//! holds more than the newcomer's address does ([`Unverified::make_room_for`]), so the slots are
//! shared fairly among addresses instead of kept by whoever came first. Authenticated connections
//! take part in the same rule, counted per tenant (review 22 of #37: four tenants allowed 1
//! record/s held 4 × 1,024 keep-alive connections, each kept with one cheap 429 per 10 s, and a new
//! client waited 20 s and timed out): when the tenant holding the most connections holds more than
//! the newcomer's address does and more than its fair share of the listener, its oldest idle
//! connection is closed gracefully (an HTTP/1 keep-alive connection between requests, an HTTP/2
//! session with no stream open), as nginx reuses idle keep-alive connections when its connections
//! run out; with none idle, a busy one, cut after [`ROOM_GRACE`] — the one its client has been
//! quiet on longest if that is [`ROOM_QUIET`] or more, else one still being sent to only for a
//! newcomer that has waited [`ROOM_GRACE`] itself. A tenant within its share is never taken from
//! (review 23: silent connections from many addresses closed a small tenant's keep-alive
//! connections one by one). And when every address holds as many unauthenticated connections as the
//! newcomer's (one each), the oldest of them makes room once it is [`ROOM_AGE`] old.

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
    tenants: Mutex<HashMap<Arc<str>, Held>>,
    exempt: TrustedProxies,
    counts: Mutex<HashMap<IpAddr, Held>>,
    /// Connections closed at accept because their address held `max` unverified ones.
    pub refused: AtomicU64,
    /// Unverified connections closed to make room for another address's (the listener full).
    pub evicted: AtomicU64,
    /// Authenticated connections closed gracefully to make room (the listener full).
    pub evicted_bound: AtomicU64,
    /// The connections the listener serves (0 until told: no tenant's share is known).
    listener: AtomicUsize,
    /// Every unverified connection, oldest first (some verified or gone since), and how many
    /// are counted now: when every address holds as many as the newcomer's, the oldest one
    /// makes room.
    oldest: Mutex<Held>,
    /// Connections of anonymous clients (the admin listener's: a request without a token made
    /// them a group of their address's), in the order they became one: when every party
    /// holds one, the oldest idle one makes room ([`ConnectionTrust::anonymous_client`]).
    clients: Mutex<Held>,
    unverified_now: AtomicUsize,
    /// What their heads hold, against `max_unauthenticated_bytes`.
    heads: heads::Heads,
    room_age: std::time::Duration,
    known: Known,
    /// Addresses whose connections all wait for a slot count in a group's fair share
    /// ([`Unverified::sharing_with_waiters`]).
    waiters_share: AtomicBool,
}

/// What a full listener does with a new connection ([`Unverified::make_room_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// Another address's oldest unverified connection, or the heaviest tenant's oldest idle
    /// one, is closing: wait for its slot.
    Made,
    /// Close the newcomer: its address holds the most unverified connections.
    Refused,
    /// Wait for a slot as the kernel's backlog does (no address holds more than one).
    Wait,
}

/// An address's unverified connections, or a tenant's authenticated ones: how many, and each
/// in the order they came (some verified, closing or gone since: skipped when one is chosen
/// to make room, and dropped from the order now and then).
#[derive(Debug, Default)]
struct Held {
    n: usize,
    slots: VecDeque<Weak<Slot>>,
}

impl Held {
    /// Counts `slot` in, in its order; `still` says which of the older ones still count.
    fn push(&mut self, slot: &Arc<Slot>, still: impl Fn(&Slot) -> bool, looked: &mut Looked) {
        self.n += 1;
        if self.slots.len() > 2 * self.n + 8 {
            self.slots.retain(|w| looked.at(w).is_some_and(&still));
        }
        self.slots.push_back(Arc::downgrade(slot));
    }
}

/// Where the slot of a connection closed for a newcomer goes when it ends: to that newcomer.
pub type Heir = tokio::sync::oneshot::Sender<tokio::sync::OwnedSemaphorePermit>;

/// Who a connection's slot goes to when it ends ([`ConnectionTrust::hand_on`]).
#[derive(Debug, Default)]
enum Bequest {
    /// Back to the listener's semaphore.
    #[default]
    Listener,
    /// To the newcomer it was closed for.
    Heir(Heir),
    /// It ended: its slot went back already.
    Ended,
}

/// A connection's mark, carried by each of its requests: verified once one authenticated.
#[derive(Debug, Clone)]
pub struct ConnectionTrust(Arc<Slot>);

#[derive(Debug)]
struct Slot {
    owner: Arc<Unverified>,
    address: IpAddr,
    counted: AtomicBool,
    /// A trusted proxy's connection: counted against neither an address nor a tenant.
    exempt: bool,
    /// One a request carried an operator's credential on (`ConnectionTrust::operator`).
    operator: AtomicBool,
    /// The tenant the connection counts against once a request authenticated.
    tenant: Mutex<Option<Arc<str>>>,
    /// Set when the connection must close after its answers (over its tenant's allowance).
    closing: AtomicBool,
    /// Set when the connection is closed at once to make room for another address's.
    evicted: AtomicBool,
    /// Told when `closing` or `evicted` is set, and (shared with its `Activity`) when a
    /// streamed answer's deadline is added: the one signal its task waits on.
    told: Arc<tokio::sync::Notify>,
    /// Bytes it sent before it authenticated, counted in the listener's `heads`.
    heard: AtomicU64,
    /// What the connection is doing, once it is served: an idle one is closed first to make
    /// room.
    activity: std::sync::OnceLock<Weak<super::activity::Activity>>,
    /// Set when it is closing to make room: its answers in flight get [`ROOM_GRACE`], not the
    /// idle time.
    made_room: AtomicBool,
    /// Nanoseconds from `opened` until it got a slot ([`NOT_SEATED`] until then). A newcomer
    /// waiting frees no slot if closed, so it is never closed to make room; its while to
    /// authenticate counts from its seat (review 28 of #37: one that had waited seconds for
    /// its slot was closed after its TLS handshake, before its first request).
    seated_after_ns: AtomicU64,
    opened: std::time::Instant,
    /// Who its slot goes to when it ends.
    bequest: Mutex<Bequest>,
}

/// How long a busy connection closed to make room may finish what it is doing: a stream's
/// answer runs up to a minute, and the newcomer (and the accept loop behind it) waits for its
/// slot (review 24 of #37: busy streams and HTTP/2 sessions of four tenants kept new
/// connections out for 55–86 s).
pub const ROOM_GRACE: std::time::Duration = std::time::Duration::from_secs(1);
/// Newcomers of one address that may wait for slots together, none of its connections holding
/// one.
pub const WAITING_PER_ADDRESS: usize = 2;
/// A busy connection whose peer has sent nothing for this long is cut to make room before one
/// still being sent to.
pub const ROOM_QUIET: std::time::Duration = std::time::Duration::from_secs(1);
/// An unauthenticated connection younger than this is not closed to make room for a newcomer
/// whose address holds as many: else two floods would close each other's before a byte came.
/// One that has said nothing, or had its answers and is idle, had its while after a quarter
/// of it ([`room::ROOM_AGE_SPOKEN_FOR`]).
pub const ROOM_AGE: std::time::Duration = std::time::Duration::from_secs(1);

/// [`Slot::seated_after_ns`] of a newcomer still waiting for its slot.
const NOT_SEATED: u64 = u64::MAX;

impl Unverified {
    pub fn new(max: usize, max_per_tenant: usize, exempt: TrustedProxies) -> Arc<Self> {
        Self::aged(max, max_per_tenant, exempt, ROOM_AGE)
    }

    /// At most `max_bytes` heard from all unauthenticated connections before they authenticate.
    pub fn with_head_bytes(self: Arc<Self>, max_bytes: u64) -> Arc<Self> {
        self.heads.set_max(max_bytes);
        self
    }

    /// A group's fair share of the listener counts the addresses whose connections all wait
    /// for a slot, beside the groups holding some: for the admin listener, whose groups are
    /// its clients by address. Counted apart, 127 addresses holding two each (their fair share
    /// of 254 among 128, an operator holding two more) kept 73 others' newcomers waiting, none
    /// able to take, until the waiting places were full and a probe waited in the backlog past
    /// 5 s (`mock::slow_clients`; review 41-r5's F2 is of the same family). Not for tenants: a
    /// flood of silent addresses would shrink every tenant's share (review 23 of #37).
    pub fn sharing_with_waiters(self: Arc<Self>) -> Arc<Self> {
        self.waiters_share.store(true, Ordering::Relaxed);
        self
    }

    /// Unauthenticated connections closed for what their heads held (a spent budget).
    pub fn closed_for_heads(&self) -> u64 {
        self.heads.closed.load(Ordering::Relaxed)
    }

    /// [`Unverified::new`], an unverified connection making room once older than `room_age`.
    fn aged(
        max: usize,
        max_per_tenant: usize,
        exempt: TrustedProxies,
        room_age: std::time::Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            max: AtomicUsize::new(max),
            max_per_tenant: AtomicUsize::new(max_per_tenant.max(1)),
            tenants: Mutex::new(HashMap::new()),
            exempt,
            counts: Mutex::new(HashMap::new()),
            refused: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            evicted_bound: AtomicU64::new(0),
            listener: AtomicUsize::new(0),
            oldest: Mutex::default(),
            clients: Mutex::default(),
            unverified_now: AtomicUsize::new(0),
            heads: heads::Heads::new(u64::MAX),
            room_age,
            known: Known::default(),
            waiters_share: AtomicBool::new(false),
        })
    }

    /// The listener serves `serving` connections of the `configured` ones: each address may
    /// hold the same share of them unverified as configured (at least one), and a tenant's
    /// fair share of them is counted from `serving`.
    pub fn fit_to(&self, serving: usize, configured: usize) {
        self.listener.store(serving, Ordering::Relaxed);
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
        self.tenant_counts().get(tenant).map_or(0, |h| h.n)
    }

    fn tenant_counts(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Held>> {
        self.tenants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One connection of `tenant`'s is no longer counted against it.
    fn unbind(&self, tenant: &str) {
        let mut counts = self.tenant_counts();
        if let Some(held) = counts.get_mut(tenant) {
            held.n = held.n.saturating_sub(1);
            if held.n == 0 {
                counts.remove(tenant);
            }
        }
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
            operator: AtomicBool::new(false),
            tenant: Mutex::new(None),
            closing: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            told: Arc::default(),
            heard: AtomicU64::new(0),
            activity: std::sync::OnceLock::new(),
            made_room: AtomicBool::new(false),
            seated_after_ns: AtomicU64::new(NOT_SEATED),
            opened: std::time::Instant::now(),
            bequest: Mutex::default(),
        });
        let mut looked = Looked::default();
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
            held.push(&slot, |s| s.counted.load(Ordering::Acquire), &mut looked);
            slot.counted.store(true, Ordering::Release);
            // The order's count is what is unverified now, so it is compacted by that.
            let mut oldest = self.oldest();
            oldest.n = self.unverified_now.fetch_add(1, Ordering::Relaxed);
            oldest.push(&slot, |s| s.counted.load(Ordering::Acquire), &mut looked);
        }
        Some(ConnectionTrust(slot))
    }

    /// The listener is full and `peer`'s new connection (admitted) waits for a slot. The
    /// holder of the most connections gives one up, if it holds more than `peer`'s address
    /// does: an address its oldest unverified connection (closed at once), or a tenant its
    /// oldest idle authenticated one (closed gracefully) — [`Room::Made`]. Or, `peer`'s
    /// address holding the most itself (more than this one), says to close the newcomer
    /// ([`Room::Refused`]: waiting, it would hold every other newcomer in the backlog behind
    /// it). The slot of the connection closed for the newcomer is handed to `heir` when that
    /// connection ends ([`ConnectionTrust::hand_on`]). Left to the semaphore, it went to whichever newcomer had waited longest, often one that could take
    /// from no one; the newcomer it was freed for then waited two seconds to ask again (review
    /// 41-r7 of #37: probes from a new address waited 1.4–1.6 s on a full admin listener).
    pub fn make_room_for(
        &self,
        peer: IpAddr,
        waited: std::time::Duration,
        heir: Option<Heir>,
    ) -> Room {
        let address = crate::auth_failures::source(peer);
        let mut counts = self.counts();
        let mine = counts.get(&address).map_or(0, |h| h.n);
        let mut looked = Looked::default();
        let l = &mut looked;
        // Of this address's, those in a slot already (not newcomers waiting like this one).
        let seated_mine = counts.get(&address).map_or(0, |h| seated(h, l));
        // Addresses holding no slot, all their connections waiting (this one's among them).
        let waiting_parties = if self.waiters_share.load(Ordering::Relaxed) {
            counts.values().filter(|h| seated(h, l) == 0).count()
        } else {
            0
        };
        let mut tenants = self.tenant_counts();
        let address_most = counts
            .iter_mut()
            .filter(|(a, h)| **a != address && h.n > mine)
            .map(|(_, h)| h)
            .max_by_key(|h| h.n);
        // Only a tenant over its fair share of the listener gives a connection up: else
        // silent connections from many addresses closed a small tenant's keep-alive
        // connections one by one (review 23 of #37: 8 connections, 41 of 112 requests broken).
        // Compared with what this address would hold in slots with this newcomer seated, not
        // with its other newcomers waiting (review 41-r3 of #37: such waiters took every place
        // and could take from nobody; the accept loop stood still, probes waited 3–8 s).
        // The newcomer is one more party, unless its address is counted among the waiting.
        let newcomer = usize::from(waiting_parties == 0 || seated_mine > 0);
        let parties = tenants.len() + waiting_parties + newcomer;
        let share = self.listener.load(Ordering::Relaxed) / parties;
        let mut tenant_most = tenants
            .values_mut()
            .filter(|h| h.n > seated_mine + 1 && h.n > share)
            .max_by_key(|h| h.n);
        let idle = |t: &mut Held, l: &mut Looked| close_bound(t, l, Take::Idle);
        let age = self.room_age;
        // This address holds no slot, and another holds more in slots than this one holds in
        // all, though none of them may make room yet.
        let outheld =
            seated_mine == 0 && address_most.as_deref().is_some_and(|a| seated(a, l) > mine);
        let made = match (address_most, tenant_most.as_deref_mut()) {
            (Some(a), Some(t)) if t.n > a.n => idle(t, l).or_else(|| close_oldest(a, age, l, None)),
            (Some(a), t) => close_oldest(a, age, l, None).or_else(|| t.and_then(|t| idle(t, l))),
            (None, Some(t)) => idle(t, l),
            (None, None) => None,
        };
        // Every address holding one (review 24 of #37: 400 addresses' silent connections
        // filled the listener, and a new one waited 8–10 s for their deadline): the oldest
        // unverified one, if it had a while to speak, makes room for the newcomer — before a
        // tenant's busy connection is cut (review 25: a flood cut a tenant's uploads).
        let oldest = |l: &mut Looked| close_oldest(&mut self.oldest(), age, l, Some(address));
        let made = made.or_else(|| (seated_mine == 0).then(|| oldest(l)).flatten());
        // No unverified one either: every party an anonymous client holding one idle
        // keep-alive connection (review 41-r11 of #37: 257 addresses each asking `/healthz`
        // every 8 s on one connection kept every probe out, 10 s then reset). The oldest idle
        // one of them makes room for a newcomer that has waited a quarter of `ROOM_AGE`: by
        // then the unverified ones opened before it had their while, and are closed first (a
        // flood of silent connections does not close a client's keep-alive one).
        let client = |l: &mut Looked| close_idle_client(&mut self.clients(), age, l);
        let asked_long = waited >= age / room::ROOM_AGE_SPOKEN_FOR;
        let made = made.or_else(|| {
            (seated_mine == 0 && asked_long)
                .then(|| client(l))
                .flatten()
        });
        // A busy one last: first one its peer has sent nothing on for a while; one still
        // being sent to (an upload in progress) only once the newcomer has waited a grace of
        // its own — an upload may end meanwhile and leave its connection idle (review 25:
        // uploads cut mid-request), and a busy session that merely pings cannot keep a
        // newcomer out longer.
        let patient = waited >= ROOM_GRACE;
        let take = if patient { Take::Any } else { Take::Quiet };
        let over_share = tenant_most.is_some();
        let made = made.or_else(|| tenant_most.and_then(|t| close_bound(t, l, take)));
        // Told once its heir is named: ending for this, it hands its slot on.
        if let Some(closed) = &made {
            closed.tell(heir);
        }
        drop((counts, tenants));
        // A slot's last reference may be one of these, and its drop takes the locks.
        let made = made.map(drop).is_some();
        drop(looked);
        match made {
            true => Room::Made,
            // Room can be made from a tenant over its share once the newcomer has waited; a
            // client's newcomers wait together while none has a slot (review 26), up to
            // WAITING_PER_ADDRESS (review 27: eight addresses took every waiting place) —
            // but not, holding no slot, when another address holds more in slots, too young
            // to give one up (review 28: a flood closing at 0.9 s got a pool of eight two
            // served of each eight); nor, holding no slot, from an address authenticated
            // from lately ([`Known`], review 31; holding slots too: review 32, 9.9 s).
            false
                if (seated_mine > 0 || mine.saturating_sub(seated_mine) > WAITING_PER_ADDRESS)
                    && mine > 1
                    && !outheld
                    && (patient || !over_share)
                    && !(seated_mine == 0 && self.known.recent(&address)) =>
            {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Room::Refused
            }
            false => Room::Wait,
        }
    }

    /// Unverified connections of `peer`'s address now.
    pub fn held(&self, peer: IpAddr) -> usize {
        let address = crate::auth_failures::source(peer);
        self.counts().get(&address).map_or(0, |h| h.n)
    }

    fn oldest(&self) -> std::sync::MutexGuard<'_, Held> {
        self.oldest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn clients(&self) -> std::sync::MutexGuard<'_, Held> {
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn release(&self, address: IpAddr) {
        self.unverified_now.fetch_sub(1, Ordering::Relaxed);
        let mut counts = self.counts();
        if let Some(held) = counts.get_mut(&address) {
            held.n -= 1;
            if held.n == 0 {
                counts.remove(&address);
            }
        }
    }
}

mod heads;
mod known;
mod room;
mod trust;
use known::Known;
use room::{close_bound, close_idle_client, close_oldest, seated, Looked, Take};

#[cfg(test)]
mod tests;

//! A connection's mark ([`ConnectionTrust`]): what its requests tell of who holds it, and
//! how it is told to close; and what its end gives back.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Bequest, ConnectionTrust, Heir, Looked, Slot, NOT_SEATED};

impl ConnectionTrust {
    /// A request on this connection authenticated: it no longer counts against its address
    /// (reached through [`ConnectionTrust::verified_as`], which also counts it for its tenant).
    pub(in crate::server) fn verified(&self) {
        if self.0.counted.swap(false, Ordering::AcqRel) {
            self.0.owner.release(self.0.address);
            self.0.owner.known.note(self.0.address);
        }
        self.0.owner.heads.release(&self.0.heard);
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
            // Looked at under the lock `operator` takes after setting it: a request binding it
            // while another marks it the operator's leaves it bound to nothing.
            if bound.is_none() && !slot.operator.load(Ordering::Acquire) {
                let owner = &slot.owner;
                let mut counts = owner.tenant_counts();
                let held = counts.entry(Arc::from(tenant)).or_default();
                if held.n >= owner.max_per_tenant.load(Ordering::Relaxed) {
                    drop(counts);
                    slot.closing.store(true, Ordering::Release);
                    slot.told.notify_one();
                    return false;
                }
                let mut looked = Looked::default();
                held.push(slot, |s| !s.closing.load(Ordering::Acquire), &mut looked);
                *bound = Some(Arc::from(tenant));
                drop(counts);
                drop(looked);
            }
        }
        self.verified();
        true
    }

    /// A request without a credential made this connection an anonymous client's, counted
    /// in `group` (the admin listener's "admin clients from" its address): as
    /// [`ConnectionTrust::verified_as`], and in the order in which such connections make room
    /// when every party holds one.
    pub fn anonymous_client(&self, group: &str) {
        let slot = &self.0;
        // Called only on a connection no request verified yet (the admin listener's
        // middleware asks): a trusted proxy's is counted in no group, the operator's is
        // never closed for room.
        self.verified_as(group);
        if slot.exempt || slot.operator.load(Ordering::Acquire) {
            return;
        }
        let owner = &slot.owner;
        let mut looked = Looked::default();
        let mut clients = owner.clients();
        // Compacted now and then: those closing or gone leave.
        let bound = 2 * owner.listener.load(Ordering::Relaxed) + 8;
        if clients.slots.len() > bound {
            clients.slots.retain(|w| {
                looked
                    .at(w)
                    .is_some_and(|s| !s.closing.load(Ordering::Acquire))
            });
        }
        clients.slots.push_back(Arc::downgrade(slot));
        drop(clients);
        drop(looked);
    }

    /// A request on this connection carried an operator's credential (a valid admin token):
    /// the connection is the operator's, counted against neither an address nor a group, as
    /// a trusted proxy's is, and never closed to make room. Counted as "admin clients from"
    /// its address, an operator host holding two keep-alive connections was over its share
    /// of a listener that 200 flooding addresses shared, and lost 3 of 11 requests on each
    /// (review 41-r5 of #37). The listener's `max_connections` still bounds what the
    /// operator holds.
    pub fn operator(&self) {
        let slot = &self.0;
        if !slot.exempt && !slot.operator.swap(true, Ordering::AcqRel) {
            let bound = slot
                .tenant
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(group) = bound {
                slot.owner.unbind(&group);
            }
        }
        self.verified();
    }

    /// Whether a request on it carried an operator's credential.
    pub fn is_operator(&self) -> bool {
        self.0.operator.load(Ordering::Acquire)
    }

    /// Resolves once it is to be closed at once ([`super::Unverified::make_room_for`]); never else.
    pub async fn evicted(&self) {
        while !self.is_evicted() {
            self.0.told.notified().await;
        }
    }

    /// Whether it is to be closed at once, to make room ([`ConnectionTrust::evicted`]).
    pub(in crate::server) fn is_evicted(&self) -> bool {
        self.0.evicted.load(Ordering::Acquire)
    }

    /// Whether it must close gracefully (over its tenant's connections, or to make room).
    pub(in crate::server) fn is_closing(&self) -> bool {
        self.0.closing.load(Ordering::Acquire)
    }

    /// The signal told when it must close, for its `Activity` to share.
    pub(in crate::server) fn told(&self) -> Arc<tokio::sync::Notify> {
        self.0.told.clone()
    }

    /// Whether it is closing to make room (its answers in flight get [`super::ROOM_GRACE`]).
    pub fn made_room(&self) -> bool {
        self.0.made_room.load(Ordering::Acquire)
    }

    /// The connection is served now, doing what `activity` says (its idle ones are closed
    /// first to make room).
    pub(in crate::server) fn served(&self, activity: &Arc<crate::server::activity::Activity>) {
        let _ = self.0.activity.set(Arc::downgrade(activity));
    }

    /// The connection holds a slot of the listener now (it waited for one, or found one free).
    pub(in crate::server) fn seated(&self) {
        let waited = u64::try_from(self.0.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let waited = waited.min(NOT_SEATED - 1);
        self.0.seated_after_ns.store(waited, Ordering::Release);
    }
}

impl ConnectionTrust {
    /// The connection ended: its slot (`permit`) goes to the newcomer it was closed for, if
    /// one still waits, else back to the listener.
    pub(in crate::server) fn hand_on(&self, permit: tokio::sync::OwnedSemaphorePermit) {
        let bequest = std::mem::replace(&mut *self.0.bequest(), Bequest::Ended);
        if let Bequest::Heir(heir) = bequest {
            // A newcomer gone meanwhile gives it back: dropped, the permit returns.
            let _ = heir.send(permit);
        }
    }
}

impl Slot {
    /// Tells it to close (marked so already), its slot going to `heir` when it ends; to the
    /// listener if it ended first.
    pub(super) fn tell(&self, heir: Option<Heir>) {
        if let Some(heir) = heir {
            let mut bequest = self.bequest();
            if !matches!(*bequest, Bequest::Ended) {
                *bequest = Bequest::Heir(heir);
            }
        }
        self.told.notify_one();
    }

    fn bequest(&self) -> std::sync::MutexGuard<'_, Bequest> {
        self.bequest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.counted.swap(false, Ordering::AcqRel) {
            self.owner.release(self.address);
        }
        self.owner.heads.release(&self.heard);
        let bound = self
            .tenant
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(tenant) = bound {
            self.owner.unbind(&tenant);
        }
    }
}

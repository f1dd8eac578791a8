//! Registry call slots: at most `max_concurrent_calls` calls in flight over all tenants, and at
//! most `tenant_concurrent_calls` of them one tenant's. A tenant's calls wait for its own share
//! first, then for a slot of all: so one tenant can never hold more than its share of the
//! slots, nor queue more than its share ahead of another tenant's call. Before, one FIFO
//! semaphore served everyone: with a slow registry (0.8–1.5 s a call) a tenant allowed
//! 1 record/s kept all 16 slots busy with lookups of unknown ids (within its lookup rate), and
//! the other tenants' first records got 503.
//!
//! Waiting for a slot counts against the call's own timeout. A call that found its tenant's
//! share taken for all that time is the tenant's own doing ([`Waited::OwnShare`], 429
//! `schema_busy`); one that found every slot taken is the registry's (503).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::registry_client::CallError;
use super::Schemas;

/// The slots, shared by every request.
#[derive(Debug)]
pub(super) struct CallSlots {
    all: Arc<Semaphore>,
    share: usize,
    /// Each tenant with a call in flight or waiting: its share's semaphore. Dropped when its
    /// last user lets go, so the map holds only tenants with calls now.
    tenants: Mutex<HashMap<Arc<str>, Arc<Semaphore>>>,
}

/// One call's slot: let go when dropped.
pub(super) struct CallSlot<'a> {
    slots: &'a CallSlots,
    tenant: Arc<str>,
    lane: Option<Arc<Semaphore>>,
    own: Option<OwnedSemaphorePermit>,
    any: Option<OwnedSemaphorePermit>,
}

/// Why no slot was had in time.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Waited {
    /// The tenant's own calls held its whole share for the whole wait.
    OwnShare,
    /// Every slot was taken (by tenants within their shares) for the whole wait.
    AllSlots,
}

impl CallSlots {
    /// `total` slots, of which one tenant may hold `share` (both at least one).
    pub(super) fn new(total: usize, share: usize) -> Self {
        let total = total.max(1);
        Self {
            all: Arc::new(Semaphore::new(total)),
            share: share.clamp(1, total),
            tenants: Mutex::new(HashMap::new()),
        }
    }

    /// The tenant's share of the slots.
    pub(super) fn share(&self) -> usize {
        self.share
    }

    /// A slot for one of `tenant`'s calls, waiting at most `wait` in all.
    pub(super) async fn take(&self, tenant: &str, wait: Duration) -> Result<CallSlot<'_>, Waited> {
        let lane = {
            let mut tenants = self.tenants.lock();
            match tenants.get(tenant) {
                Some(lane) => lane.clone(),
                None => {
                    let lane = Arc::new(Semaphore::new(self.share));
                    tenants.insert(Arc::from(tenant), lane.clone());
                    lane
                }
            }
        };
        // The lane lives in the slot alone: its drop (on success, a timeout or a cancelled
        // wait) then sees every other holder (see `Drop`).
        let mut slot = CallSlot {
            slots: self,
            tenant: Arc::from(tenant),
            lane: Some(lane.clone()),
            own: None,
            any: None,
        };
        let acquire = lane.acquire_owned();
        let deadline = tokio::time::Instant::now() + wait;
        slot.own = Some(
            tokio::time::timeout_at(deadline, acquire)
                .await
                .map_err(|_| Waited::OwnShare)?
                .map_err(|_| Waited::AllSlots)?,
        );
        slot.any = Some(
            tokio::time::timeout_at(deadline, self.all.clone().acquire_owned())
                .await
                .map_err(|_| Waited::AllSlots)?
                .map_err(|_| Waited::AllSlots)?,
        );
        Ok(slot)
    }

    /// Tenants with a call in flight or waiting now (tests).
    #[cfg(test)]
    fn tenants_followed(&self) -> usize {
        self.tenants.lock().len()
    }
}

impl Schemas {
    /// One registry call of `tenant`'s request, in one of its slots (see the module).
    pub(super) async fn call<T>(
        &self,
        tenant: &str,
        f: impl std::future::Future<Output = Result<T, CallError>>,
    ) -> Result<T, CallError> {
        let timeout = Duration::from_millis(self.config.timeout_ms);
        // Waiting for a call slot counts against the same timeout as the call.
        let started = tokio::time::Instant::now();
        let permit = self.calls.take(tenant, timeout).await.map_err(|w| match w {
            Waited::OwnShare => {
                self.count_refusal("registry_calls");
                CallError::OwnShareTaken(format!(
                    "this tenant's requests had {} Schema Registry calls in flight, its most at once ([schema_registry] tenant_concurrent_calls), for {} ms",
                    self.calls.share(),
                    timeout.as_millis()
                ))
            }
            Waited::AllSlots => CallError::Unavailable(
                "the Schema Registry is busy: too many calls in flight".into(),
            ),
        })?;
        let left = timeout.saturating_sub(started.elapsed());
        let answer = tokio::time::timeout(left.max(Duration::from_millis(1)), f)
            .await
            .unwrap_or_else(|_| {
                Err(CallError::Unavailable(
                    "the Schema Registry did not answer in time".into(),
                ))
            });
        drop(permit);
        answer
    }
}

impl Drop for CallSlot<'_> {
    fn drop(&mut self) {
        self.any.take();
        self.own.take();
        let Some(lane) = self.lane.take() else {
            return;
        };
        // Under the map's lock every clone of the lane is counted: the map's and ours alone
        // mean nobody else holds or waits for this tenant's share.
        let mut tenants = self.slots.tenants.lock();
        if Arc::strong_count(&lane) == 2 {
            tenants.remove(&self.tenant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_millis(50);

    #[tokio::test]
    async fn a_tenant_holds_at_most_its_share_and_then_waits_for_its_own() {
        let slots = CallSlots::new(4, 2);
        let a1 = slots.take("a", WAIT).await.expect("first");
        let _a2 = slots.take("a", WAIT).await.expect("second");
        // Its share is taken: its third call waits for its own, not for a slot of all.
        assert_eq!(slots.take("a", WAIT).await.err(), Some(Waited::OwnShare));
        // The other tenant finds the slots the first could not take.
        let _b1 = slots.take("b", WAIT).await.expect("b first");
        let _b2 = slots.take("b", WAIT).await.expect("b second");
        // Every slot is taken now, each tenant within its share.
        assert_eq!(slots.take("c", WAIT).await.err(), Some(Waited::AllSlots));
        drop(a1);
        assert!(
            slots.take("a", WAIT).await.is_ok(),
            "its own slot came back"
        );
    }

    #[tokio::test]
    async fn a_waiting_call_gets_the_slot_let_go_within_its_wait() {
        let slots = Arc::new(CallSlots::new(1, 1));
        let held = slots.take("a", WAIT).await.expect("first");
        let waiter = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.take("a", Duration::from_secs(30)).await.is_ok() })
        };
        tokio::task::yield_now().await;
        drop(held);
        assert!(waiter.await.expect("task"));
    }

    #[tokio::test]
    async fn tenants_without_calls_are_forgotten() {
        let slots = CallSlots::new(8, 2);
        for n in 0..100 {
            let _slot = slots.take(&format!("t{n}"), WAIT).await.expect("slot");
        }
        assert_eq!(slots.tenants_followed(), 0);
        let a = slots.take("a", WAIT).await.expect("a");
        let a2 = slots.take("a", WAIT).await.expect("a2");
        // A call that gave up waiting lets go of its place too.
        assert_eq!(slots.take("a", WAIT).await.err(), Some(Waited::OwnShare));
        assert_eq!(slots.tenants_followed(), 1);
        drop(a);
        assert_eq!(slots.tenants_followed(), 1, "a2 still holds a slot");
        drop(a2);
        assert_eq!(slots.tenants_followed(), 0);
    }
}

//! The shape both agents share (`adaptive_agent`, `lag_agent`): a plan swapped whole and read
//! lock-free ([`PlanCell`], which also numbers the plans), and the loop that waits for each
//! tick and runs it ([`Agent`], [`start`]). What a tick reads and decides is the agent's own.
//!
//! Layer: foundations. Imports nothing of floodgate's: the plans it holds are the controllers'
//! (`adaptive::Plan`, `lag::LagPlan`), named by their rooms.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

/// The current plan, swapped whole by its agent, read lock-free by admission. The cell numbers
/// what the agent publishes (1, 2, ...): a plan's epoch changes with every plan, so a tenant's
/// bucket knows to follow.
#[derive(Debug, Default)]
pub struct PlanCell<P> {
    plan: ArcSwap<P>,
    /// The last epoch handed out by [`PlanCell::publish`] (0: none yet, the default plan's).
    epoch: AtomicU64,
}

impl<P> PlanCell<P> {
    /// The plan in force, borrowed (no reference count traffic on the request path).
    pub fn load(&self) -> arc_swap::Guard<Arc<P>> {
        self.plan.load()
    }

    /// Puts `plan` in force as it is (its epoch is the caller's).
    pub fn store(&self, plan: P) {
        self.plan.store(Arc::new(plan));
    }

    /// Puts in force the plan `make` writes with the next epoch.
    pub fn publish(&self, make: impl FnOnce(u64) -> P) {
        let epoch = self.epoch.fetch_add(1, Relaxed) + 1;
        self.store(make(epoch));
    }
}

/// What the loop asks of an agent. The loop is the same for both: wait until a tick is due
/// (looking again whenever the agent is woken), run it, wait again.
pub trait Agent: Send + Sync + 'static {
    /// Ticks call blocking clients (Kafka's offsets): run them where blocking is allowed.
    const BLOCKING: bool;

    /// Now on the agent's clock (the one its plans are timed by).
    fn now_ns(&self) -> u64;

    /// How long to sleep before looking again, after the tick at `last_ns` (zero: look now).
    fn wait(&self, last_ns: u64) -> Duration;

    /// Whether a tick is due, after the tick at `last_ns` (asked once the wait is over).
    fn due(&self, last_ns: u64) -> bool;

    /// One turn of the loop: a tick, or nothing if the agent is switched off.
    fn turn(&self);

    /// Changes whenever the wait must be read again at once (a settings change), rather than
    /// slept out at the wait read before it; `None`: nothing wakes the loop early.
    fn woken(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

/// Runs `agent`'s loop until the process ends.
pub fn start<A: Agent>(agent: &Arc<A>) -> tokio::task::JoinHandle<()> {
    let agent = agent.clone();
    let mut woken = agent.woken();
    tokio::spawn(async move {
        let mut last = agent.now_ns();
        loop {
            let wait = agent.wait(last);
            if !wait.is_zero() && !slept(wait, woken.as_mut()).await {
                continue;
            }
            if agent.due(last) {
                last = agent.now_ns();
                if A::BLOCKING {
                    let worker = agent.clone();
                    let _ = tokio::task::spawn_blocking(move || worker.turn()).await;
                } else {
                    agent.turn();
                }
            }
        }
    })
}

/// Sleeps out `wait`; false when woken first (the wait is to be read again, from the same
/// last tick).
async fn slept(wait: Duration, woken: Option<&mut tokio::sync::watch::Receiver<u64>>) -> bool {
    let Some(changed) = woken else {
        tokio::time::sleep(wait).await;
        return true;
    };
    tokio::select! {
        () = tokio::time::sleep(wait) => true,
        r = changed.changed() => {
            if r.is_ok() {
                return false;
            }
            // Nothing can wake the loop any more: the wait is slept out.
            tokio::time::sleep(wait).await;
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_plans_are_numbered_from_one() {
        let cell = PlanCell::<(u64, &str)>::default();
        assert_eq!(*cell.load().as_ref(), (0, ""));
        cell.publish(|epoch| (epoch, "first"));
        cell.publish(|epoch| (epoch, "second"));
        assert_eq!(*cell.load().as_ref(), (2, "second"));
        cell.store((7, "stored"));
        cell.publish(|epoch| (epoch, "third"));
        assert_eq!(*cell.load().as_ref(), (3, "third"));
    }
}

//! Membership: joining, the heartbeat that counts the members, a replica id held by another
//! instance (watched until it lapses or proves alive), and the switch between leased slices
//! and local shares as Redis goes and comes back (see the module's comment in `cluster`).

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use super::headcount::Headcount;
use super::{duration_ms, Cluster, Membership, StoreError};
use crate::budget::Mode;

/// Why a replica may not join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(
        "cluster.replica_id {0:?} is held by another live replica: give every replica its own \
         id (two replicas counted as one would each take too large a share)"
    )]
    DuplicateReplica(String),
}

impl Cluster {
    /// Joins the cluster: connects, announces this replica, switches to leased slices. If
    /// Redis cannot be reached the replica runs on its local share (1/`expected_replicas`
    /// until members are counted) and the agent keeps trying. A replica id held by another
    /// instance is watched: refused if that instance is alive, taken over once its entry
    /// lapses if it is not (see the module's comment).
    pub async fn join(&self) -> Result<(), JoinError> {
        let first = match self.heartbeat().await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    share = format!("1/{}", self.members()),
                    "cluster: Redis unreachable at start; admitting from a local share of \
                     every budget (expected_replicas, members not counted yet) until it answers"
                );
                return Ok(());
            }
        };
        if first.duplicate {
            tracing::warn!(
                replica = %self.settings.replica_id,
                ttl_ms = duration_ms(self.settings.member_ttl),
                "cluster: this replica_id is held by another instance; waiting for it to lapse \
                 (a previous process that died without leaving) unless it is alive"
            );
            let watch = DuplicateWatch::new(first.holder);
            // A lapse is decided by Redis's clock; this bounds the wait by ours, in case the
            // two disagree (a holder that neither beats nor lapses is not taken over).
            let most = (self
                .settings
                .member_ttl
                .saturating_add(self.settings.heartbeat))
            .saturating_mul(2);
            let deadline = Instant::now().checked_add(most);
            loop {
                tokio::time::sleep(self.settings.heartbeat).await;
                match self.heartbeat().await {
                    Ok(m) if !m.duplicate => break,
                    Ok(m)
                        if watch.alive(&m.holder)
                            || deadline.is_some_and(|d| Instant::now() >= d) =>
                    {
                        return Err(self.refuse());
                    }
                    Ok(_) => {}
                    // Redis went away meanwhile: serve on the local share; the agent watches.
                    Err(_) => return Ok(()),
                }
            }
        }
        tracing::info!(
            replica = %self.settings.replica_id,
            members = self.stats.members.load(Relaxed),
            "cluster: joined; budgets are shared through Redis"
        );
        Ok(())
    }

    /// This replica may not hold its id: another live instance does.
    fn refuse(&self) -> JoinError {
        self.stats.duplicate.store(true, Relaxed);
        tracing::error!(replica = %self.settings.replica_id,
            "cluster: another live replica holds this replica_id — give every replica its own id");
        JoinError::DuplicateReplica(self.settings.replica_id.clone())
    }

    /// Resolves once a live replica has been found holding this replica's id after start-up
    /// (Redis was unreachable at join): the run then drains and stops with
    /// [`JoinError::DuplicateReplica`]. Never resolves otherwise.
    pub async fn refused(&self) -> JoinError {
        let mut seen = self.refused.subscribe();
        let _ = seen.wait_for(|refused| *refused).await;
        JoinError::DuplicateReplica(self.settings.replica_id.clone())
    }

    async fn heartbeat(&self) -> Result<Membership, StoreError> {
        let result = async {
            self.store.connect().await?;
            self.store
                .heartbeat(
                    &self.settings.replica_id,
                    &self.settings.instance,
                    self.settings.member_ttl,
                    false,
                )
                .await
        }
        .await;
        match result {
            Ok(m) => {
                // Not held as this replica's holder, though it has beaten before: Redis forgot
                // it (restarted empty, flushed, failed over to an empty replica). Its member
                // count is as short as a restart's, though no call failed (review 3 of #41:
                // after a FLUSHALL the first replica to beat counted itself alone).
                let beaten_before = self.beaten.swap(true, Relaxed);
                let forgot = m.fresh && !m.duplicate && beaten_before;
                self.forgotten.store(forgot, Relaxed);
                if forgot {
                    self.lock_headcount().failed();
                }
                let count = self.lock_headcount().heard(m.members, m.rank);
                self.stats.members.store(count.members, Relaxed);
                self.sharing.set_rank(count.rank);
                self.recover();
                Ok(m)
            }
            Err(e) => {
                self.lock_headcount().failed();
                self.degrade(&e);
                Err(e)
            }
        }
    }

    /// The agent's heartbeat: counts the members, and watches an id held by another instance
    /// (possible only if Redis was unreachable at join) until it lapses or proves alive.
    pub(super) async fn beat(&self, watch: &mut Option<DuplicateWatch>) {
        let Ok(m) = self.heartbeat().await else {
            return;
        };
        // Redis forgot this replica, and with it the quotas' counts, which it is reminded of.
        if self.forgotten.swap(false, Relaxed) {
            tracing::warn!(
                "cluster: Redis had forgotten this replica; telling it the quota counts heard"
            );
            self.remind_quotas().await;
        }
        if !m.duplicate {
            *watch = None;
            return;
        }
        match watch {
            None => {
                tracing::warn!(replica = %self.settings.replica_id,
                    "cluster: Redis answers, and this replica_id is held by another instance; \
                     watching whether it is alive");
                *watch = Some(DuplicateWatch::new(m.holder));
            }
            // Once refused, the run is draining: said once.
            Some(w) if w.alive(&m.holder) && !*self.refused.borrow() => {
                let _ = self.refuse();
                self.refused.send_replace(true);
            }
            Some(_) => {}
        }
    }

    fn lock_headcount(&self) -> std::sync::MutexGuard<'_, Headcount> {
        self.headcount
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The members last counted, or as many as expected before any were.
    pub(super) fn members(&self) -> u32 {
        match self.stats.members.load(Relaxed) {
            0 => self.settings.expected_replicas,
            n => n,
        }
    }

    /// Redis failed: every bucket admits from its local share until it answers again.
    pub(super) fn degrade(&self, error: &StoreError) {
        self.stats.count_error(error.kind());
        let n = self.members();
        let now = self.clock.now_ns();
        self.sharing.set(Mode::Fallback(n), now);
        if !self.stats.degraded.swap(true, Relaxed) {
            self.stats.degraded_since(now);
            tracing::warn!(
                error = %error,
                share = format!("1/{n}"),
                place = self.sharing.rank(),
                "cluster: Redis unreachable; admitting from this replica's local share of every \
                 budget until it answers again"
            );
        }
    }

    fn recover(&self) {
        let now = self.clock.now_ns();
        self.sharing.set(Mode::Leased, now);
        if self.stats.degraded.swap(false, Relaxed) {
            self.stats.recovered(now);
            tracing::info!("cluster: Redis answers again; budgets are shared again");
        }
    }
}

/// Another instance holding this replica's id, as first seen: alive if its heartbeat count
/// (or the instance itself) has changed since.
#[derive(Debug)]
pub(super) struct DuplicateWatch {
    holder: Option<(String, u64)>,
}

impl DuplicateWatch {
    fn new(holder: Option<(String, u64)>) -> Self {
        Self { holder }
    }

    fn alive(&self, now: &Option<(String, u64)>) -> bool {
        *now != self.holder
    }
}

//! Room in the body budget for a newcomer: when the budget is spent, the uploads of the
//! owner (tenant) holding the most are cut, stalest first, for an owner holding less than an
//! equal share of the budget.
//!
//! Why: a tenant's bodies may hold its share of the budget (`max_buffer_share`, half by
//! default) with bytes it really sent, and refusing every newcomer while the budget is spent
//! let two tenants allowed 1 record a second, each keeping four 8 MiB bodies whole but for
//! their last byte, refuse every other tenant `server_busy` for about 2.2 MB a second of
//! upload (review 32 of #37). Refusing the newcomer lets the budget go to whoever took it
//! first; cutting whichever upload is stalled lets a client that trickles a byte now and then
//! keep its hold. An equal share is what every owner with a body in flight can be given at
//! once, so an owner over it gives way to one under it; within the owner, the upload that
//! made the least progress lately goes first.
//!
//! Only uploads being read are watched, once they hold [`WATCHED`] bytes or did not end with
//! their first chunk (small stalled uploads, many of them, would keep the budget too: review
//! 33), and a coded body's decoders with them; a body read to its end waits only for
//! admission (bounded there), and a body that came in one piece is never watched. The watch
//! costs a lock on the way in and out. A v3 stream's hold is not watched.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

/// A body holding this many bytes, while being read, may be cut for a newcomer.
pub const WATCHED: u64 = 64 * 1024;

/// Bytes an upload must receive to count as progressing again.
const PROGRESS_BYTES: u64 = 16 * 1024;

/// The uploads being read that hold at least [`WATCHED`] bytes.
#[derive(Debug, Default)]
pub(super) struct Uploads {
    next_id: AtomicU64,
    watched: Mutex<HashMap<u64, Arc<Upload>>>,
    /// Bytes newcomers wait for, from uploads cut for them.
    awaited: AtomicU64,
}

/// One watched upload: what it holds, when it last progressed, and whether it was cut.
#[derive(Debug)]
pub(super) struct Upload {
    id: u64,
    /// The owner's running total, by address: uploads of one owner share it.
    owner: usize,
    pub(super) bytes: AtomicU64,
    /// Bytes received since it last counted as progressing.
    recent: AtomicU64,
    /// When it last counted as progressing (ns since the budget's epoch).
    progressed_ns: AtomicU64,
    cut: AtomicBool,
    cut_told: Notify,
}

impl Uploads {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Upload>>> {
        self.watched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn watch(&self, owner: usize, bytes: u64, now_ns: u64) -> Arc<Upload> {
        let upload = Arc::new(Upload {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            owner,
            bytes: AtomicU64::new(bytes),
            recent: AtomicU64::new(0),
            progressed_ns: AtomicU64::new(now_ns),
            cut: AtomicBool::new(false),
            cut_told: Notify::new(),
        });
        self.lock().insert(upload.id, upload.clone());
        upload
    }

    pub(super) fn unwatch(&self, upload: &Upload) {
        self.lock().remove(&upload.id);
    }

    /// Cuts uploads so that `lacking` more bytes will be free, for `owner`, which holds
    /// `owner_held` and asks for `need`: only if it stays within an equal share of `max`
    /// among the owners with a watched upload (and itself), and only from owners over that
    /// share, the one holding the most first. What uploads cut already will give back, and
    /// other newcomers do not wait for, counts as free: newcomers arriving together cut once
    /// for all. `None`, and nothing cut, when that cannot free enough; else the newcomer's
    /// wait, to keep while it waits for the room.
    pub(super) fn make_room(
        &self,
        owner: usize,
        owner_held: u64,
        need: u64,
        lacking: u64,
        max: u64,
    ) -> Option<Awaiting<'_>> {
        let watched = self.lock();
        let cuts = self.plan(&watched, owner, owner_held, need, lacking, max)?;
        for id in cuts {
            if let Some(u) = watched.get(&id) {
                u.cut.store(true, Ordering::Release);
                u.cut_told.notify_one();
            }
        }
        self.awaited.fetch_add(need, Ordering::AcqRel);
        Some(Awaiting {
            uploads: self,
            need,
        })
    }

    /// Whether [`Uploads::make_room`] would make room; cuts nothing.
    pub(super) fn could_make_room(
        &self,
        owner: usize,
        owner_held: u64,
        need: u64,
        lacking: u64,
        max: u64,
    ) -> bool {
        let watched = self.lock();
        self.plan(&watched, owner, owner_held, need, lacking, max)
            .is_some()
    }

    /// The uploads to cut (their ids), as [`Uploads::make_room`] says.
    fn plan(
        &self,
        watched: &HashMap<u64, Arc<Upload>>,
        owner: usize,
        owner_held: u64,
        need: u64,
        lacking: u64,
        max: u64,
    ) -> Option<Vec<u64>> {
        let mut held: HashMap<usize, u64> = HashMap::new();
        let mut coming = 0u64;
        for u in watched.values() {
            let bytes = u.bytes.load(Ordering::Acquire);
            if u.is_cut() {
                coming = coming.saturating_add(bytes);
            } else {
                *held.entry(u.owner).or_default() += bytes;
            }
        }
        let owners = held.len() as u64 + u64::from(!held.contains_key(&owner));
        let fair = max / owners.max(1);
        if owner_held.saturating_add(need) > fair {
            return None;
        }
        let coming = coming.saturating_sub(self.awaited.load(Ordering::Acquire));
        let lacking = lacking.saturating_sub(coming);
        let mut cuts = Vec::new();
        let mut freed = 0u64;
        while freed < lacking {
            let (&heaviest, &bytes) = held.iter().max_by_key(|(_, b)| **b)?;
            if bytes <= fair || heaviest == owner {
                return None;
            }
            let stalest = watched
                .values()
                .filter(|u| u.owner == heaviest && !u.is_cut() && !cuts.contains(&u.id))
                .min_by_key(|u| {
                    (
                        u.progressed_ns.load(Ordering::Relaxed),
                        u64::MAX - u.bytes.load(Ordering::Relaxed),
                    )
                })?;
            let size = stalest.bytes.load(Ordering::Acquire);
            cuts.push(stalest.id);
            freed = freed.saturating_add(size);
            held.insert(heaviest, bytes.saturating_sub(size));
        }
        Some(cuts)
    }
}

/// A newcomer waiting for room cut uploads will give back: counted so others do not cut for
/// the same room.
pub(super) struct Awaiting<'a> {
    uploads: &'a Uploads,
    need: u64,
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        self.uploads.awaited.fetch_sub(self.need, Ordering::AcqRel);
    }
}

impl Upload {
    pub(super) fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    /// `more` bytes arrived at `now_ns`.
    pub(super) fn received(&self, more: u64, now_ns: u64) {
        self.bytes.fetch_add(more, Ordering::AcqRel);
        if self.recent.fetch_add(more, Ordering::Relaxed) + more >= PROGRESS_BYTES {
            self.recent.store(0, Ordering::Relaxed);
            self.progressed_ns.store(now_ns, Ordering::Relaxed);
        }
    }

    /// Resolves once the upload was cut for a newcomer.
    pub(super) async fn cut(&self) {
        while !self.is_cut() {
            self.cut_told.notified().await;
        }
    }
}

/// Nanoseconds since `epoch`.
pub(super) fn since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{BodyHold, InflightBodies};
    use super::*;

    const WAIT: Duration = Duration::from_secs(5);

    fn watched(budget: &Arc<InflightBodies>, owner: &Arc<AtomicU64>, bytes: u64) -> BodyHold {
        let mut hold = budget.hold(owner.clone(), 1.0);
        hold.watch_while_reading();
        assert!(hold.grow(bytes));
        hold
    }

    fn is_cut(hold: &BodyHold) -> bool {
        hold.upload.as_ref().is_some_and(|u| u.is_cut())
    }

    /// The reader of a watched upload: gives its hold back once it is cut.
    fn reader(hold: BodyHold) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            hold.cut().await;
            drop(hold);
        })
    }

    #[tokio::test]
    async fn a_newcomer_under_an_equal_share_has_the_heaviest_owners_stalest_upload_cut() {
        let budget = Arc::new(InflightBodies::new(400_000));
        let (a, b, c) = Default::default();
        let stalest = reader(watched(&budget, &a, 150_000));
        let fresher = watched(&budget, &a, 150_000);
        let other = watched(&budget, &b, 100_000);
        let mut newcomer = budget.hold(c, 1.0);
        assert!(!newcomer.grow(1_000), "the budget is spent");
        assert!(newcomer.grow_making_room(1_000, WAIT).await);
        stalest
            .await
            .expect("the stalest upload was cut and gave its hold back");
        assert!(!is_cut(&fresher) && !is_cut(&other));
        assert_eq!(budget.held(), 150_000 + 100_000 + 1_000);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn newcomers_arriving_together_cut_once_for_all() {
        let budget = Arc::new(InflightBodies::new(400_000));
        let (a, b) = Default::default();
        let first = watched(&budget, &a, 150_000);
        let second = watched(&budget, &a, 150_000);
        let _other = watched(&budget, &b, 100_000);
        let newcomer = |budget: &Arc<InflightBodies>| {
            let mut hold = budget.hold(Default::default(), 1.0);
            tokio::spawn(async move { hold.grow_making_room(1_000, WAIT).await.then_some(hold) })
        };
        let c = newcomer(&budget);
        while !is_cut(&first) && !is_cut(&second) {
            tokio::task::yield_now().await;
        }
        let d = newcomer(&budget);
        // d finds room coming from the upload cut for c, and waits for it too.
        while budget.uploads.awaited.load(Ordering::Acquire) < 2_000 {
            tokio::task::yield_now().await;
        }
        assert_eq!(u8::from(is_cut(&first)) + u8::from(is_cut(&second)), 1);
        let (cut, kept) = if is_cut(&first) {
            (first, second)
        } else {
            (second, first)
        };
        drop(cut);
        let c = c.await.expect("c").expect("room for c");
        let d = d.await.expect("d").expect("room for d");
        assert!(!is_cut(&kept));
        assert_eq!((c.bytes(), d.bytes()), (1_000, 1_000));
        assert_eq!(budget.uploads.awaited.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn an_owner_over_an_equal_share_gets_no_room_and_nothing_is_cut() {
        let budget = Arc::new(InflightBodies::new(400_000));
        let (a, b) = Default::default();
        let first = watched(&budget, &a, 300_000);
        let other = watched(&budget, &b, 100_000);
        let mut more = budget.hold(a, 1.0);
        assert!(!more.grow_making_room(1_000, WAIT).await);
        assert!(!more.fits_or_could_make_room(1_000));
        assert!(!is_cut(&first) && !is_cut(&other));
        assert_eq!(budget.held(), 400_000);
    }

    #[tokio::test]
    async fn small_holds_not_watched_and_bodies_read_to_their_end_are_never_cut() {
        let budget = Arc::new(InflightBodies::new(200_000));
        let (a, b, c) = Default::default();
        let small = watched(&budget, &a, WATCHED - 1);
        let mut read = watched(&budget, &b, 200_000 - WATCHED + 1);
        read.read();
        let mut newcomer = budget.hold(c, 1.0);
        assert!(!newcomer.fits_or_could_make_room(1_000));
        assert!(!newcomer.grow_making_room(1_000, WAIT).await);
        assert!(small.upload.is_none() && read.upload.is_none());
        assert_eq!(a.load(Ordering::Relaxed), WATCHED - 1);
        assert_eq!(budget.held(), 200_000);
    }
}

//! One memory budget for request bodies in flight, over every connection and HTTP/2 stream of
//! the produce listener: `[server] max_inflight_body_bytes`.
//!
//! A request holds its body's bytes as they arrive (one whose declared `Content-Length` does
//! not fit in what is free now is refused before it is read); it holds them until its records
//! are handed to the producer or it is refused. Reserving the declared length up front let a
//! request that sent 13 bytes of a declared 8 MiB hold 8 MiB for the body timeout: eight of
//! them, from two tenants allowed 1 record a second, took the whole budget (review 31 of
//! #37). A stream (Confluent v3) holds what it keeps for as long as it
//! keeps it — the record it is reading, its queued reports, its report window — growing and
//! shrinking its hold as that changes. When the budget is spent, a new body is refused at once (429
//! `server_busy`) rather than waiting: a wait would hold the client's connection and our
//! socket buffers for nothing, and the client is better told when to come back. The hint is
//! about one typical hold time (how long reservations are kept, a moving average) — unless
//! the newcomer's owner holds less than an equal share of the budget and uploads of an owner
//! over its share can be cut to make room (see [`room`]).
//!
//! A foundation module: it imports nothing of floodgate's.
//!
//! Layer: foundations. Imports nothing of floodgate's above the foundations.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

mod room;

pub use room::WATCHED;
use room::{Upload, Uploads};

/// Resolves once a hold was cut to make room for a newcomer (see [`room`]), for a reader that
/// keeps the hold beside it (a coded body's decoders, a stream's memory).
pub type CutSignal = std::pin::Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

const MIN_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct InflightBodies {
    bytes: Arc<Semaphore>,
    max: u64,
    hold_ewma_ns: AtomicU64,
    /// Uploads answered before their body was read to the end, indexed like [`Cut::ALL`].
    cut_short: [AtomicU64; Cut::ALL.len()],
    /// Large uploads being read, which may be cut to make room for a newcomer.
    uploads: Uploads,
    epoch: Instant,
}

/// Why an upload was answered before its body was read to the end (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    ExceedsBurst,
    RateLimited,
    TooManyRecords,
    BodyTooLarge,
    RecordTooLarge,
    Malformed,
    ServerBusy,
    /// Cut to make room for a newcomer (see [`room`]).
    MadeRoom,
}

impl Cut {
    pub const ALL: [Cut; 8] = [
        Cut::ExceedsBurst,
        Cut::RateLimited,
        Cut::TooManyRecords,
        Cut::BodyTooLarge,
        Cut::RecordTooLarge,
        Cut::Malformed,
        Cut::ServerBusy,
        Cut::MadeRoom,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Cut::ExceedsBurst => "exceeds_burst",
            Cut::RateLimited => "rate_limited",
            Cut::TooManyRecords => "too_many_records",
            Cut::BodyTooLarge => "body_too_large",
            Cut::RecordTooLarge => "record_too_large",
            Cut::Malformed => "malformed_body",
            Cut::ServerBusy => "server_busy",
            Cut::MadeRoom => "made_room",
        }
    }
}

/// Body bytes held by one request or stream; given back on drop.
#[derive(Debug)]
pub struct BodyHold {
    budget: Arc<InflightBodies>,
    permits: Option<OwnedSemaphorePermit>,
    since: Instant,
    /// The holder's own running total (a tenant's bytes in flight), and its ceiling.
    owner: Arc<AtomicU64>,
    owner_limit: u64,
    /// Whether it may be cut for a newcomer once it holds [`WATCHED`] bytes (a body being
    /// read), and its watch from then on.
    watchable: bool,
    upload: Option<Arc<Upload>>,
}

/// Why a hold could not grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Short {
    /// The owner's share of the budget.
    Share,
    /// The budget.
    Budget,
}

impl InflightBodies {
    pub fn new(max_bytes: u64) -> Self {
        let max = max_bytes.min(Semaphore::MAX_PERMITS as u64);
        Self {
            bytes: Arc::new(Semaphore::new(usize::try_from(max).unwrap_or(usize::MAX))),
            max,
            hold_ewma_ns: AtomicU64::new(0),
            cut_short: Default::default(),
            uploads: Uploads::default(),
            epoch: Instant::now(),
        }
    }

    /// Counts an upload answered before its body was read to the end.
    pub fn count_cut_short(&self, cut: Cut) {
        self.cut_short[cut as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Uploads answered before their body was read to the end, by reason.
    pub fn uploads_cut_short(&self) -> impl Iterator<Item = (Cut, u64)> + '_ {
        Cut::ALL
            .iter()
            .map(|c| (*c, self.cut_short[*c as usize].load(Ordering::Relaxed)))
    }

    pub fn max_bytes(&self) -> u64 {
        self.max
    }

    /// Bytes reserved now.
    pub fn held(&self) -> u64 {
        self.max - self.bytes.available_permits() as u64
    }

    /// An empty hold, to grow as a body arrives, for an owner (a tenant) whose holds together
    /// may not pass `share` of the budget, so one tenant's uploads cannot take it all.
    pub fn hold(self: &Arc<Self>, owner: Arc<AtomicU64>, share: f64) -> BodyHold {
        BodyHold {
            budget: self.clone(),
            permits: None,
            since: Instant::now(),
            owner,
            owner_limit: ((self.max as f64 * share) as u64).max(1),
            watchable: false,
            upload: None,
        }
    }

    /// How long a refused client should wait: about one typical hold.
    pub fn retry_hint(&self) -> Duration {
        Duration::from_nanos(self.hold_ewma_ns.load(Ordering::Relaxed)).clamp(MIN_RETRY, MAX_RETRY)
    }

    fn observe_hold(&self, held_for: Duration) {
        let sample = u64::try_from(held_for.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .hold_ewma_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(if old == 0 {
                    sample
                } else {
                    old - old / 8 + sample / 8
                })
            });
    }
}

impl BodyHold {
    /// Bytes this hold has reserved.
    pub fn bytes(&self) -> u64 {
        self.permits.as_ref().map_or(0, |p| p.num_permits() as u64)
    }

    /// Whether `more` bytes on top of what is held would fit now (the budget and the owner's
    /// share), reserving nothing.
    pub fn fits(&self, more: u64) -> bool {
        let owner = self.owner.load(Ordering::Acquire);
        let free = u64::try_from(self.budget.bytes.available_permits()).unwrap_or(u64::MAX);
        owner
            .checked_add(more)
            .is_some_and(|total| total <= self.owner_limit)
            && more <= free
    }

    /// Reserves `more` bytes on top of what is held; `false` (and nothing more reserved) when
    /// the budget does not have them now.
    pub fn grow(&mut self, more: u64) -> bool {
        self.try_grow(more).is_ok()
    }

    fn try_grow(&mut self, more: u64) -> Result<(), Short> {
        if more == 0 {
            return Ok(());
        }
        let more32 = u32::try_from(more).map_err(|_| Short::Budget)?;
        self.within_share(more)?;
        match self.budget.bytes.clone().try_acquire_many_owned(more32) {
            Ok(permits) => {
                self.add(permits);
                Ok(())
            }
            Err(_) => {
                self.owner.fetch_sub(more, Ordering::AcqRel);
                Err(Short::Budget)
            }
        }
    }

    /// Counts `more` bytes against the owner's share, if they fit in it.
    fn within_share(&self, more: u64) -> Result<(), Short> {
        let limit = self.owner_limit;
        self.owner
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(more).filter(|total| *total <= limit)
            })
            .map(|_| ())
            .map_err(|_| Short::Share)
    }

    fn add(&mut self, permits: OwnedSemaphorePermit) {
        let more = permits.num_permits() as u64;
        match &mut self.permits {
            Some(held) => held.merge(permits),
            None => self.permits = Some(permits),
        }
        match &self.upload {
            Some(upload) => upload.received(more, room::since(self.budget.epoch)),
            None if self.bytes() >= WATCHED => self.watch_now(),
            None => {}
        }
    }

    /// [`BodyHold::grow`], and when the budget (not the owner's share) is what lacks, cuts
    /// uploads of an owner over an equal share to make room (see [`room`]) and waits up to
    /// `wait` for them to give it back.
    pub async fn grow_making_room(&mut self, more: u64, wait: Duration) -> bool {
        match self.try_grow(more) {
            Ok(()) => true,
            Err(Short::Share) => false,
            Err(Short::Budget) => {
                if self.within_share(more).is_err() {
                    return false;
                }
                match self.wait_for_room(more, wait).await {
                    Some(permits) => {
                        self.add(permits);
                        true
                    }
                    None => false,
                }
            }
        }
    }

    /// Whether `more` bytes on top of what is held would fit, or room could be made for them
    /// as [`BodyHold::grow_making_room`] makes it; reserves and cuts nothing.
    pub fn fits_or_could_make_room(&self, more: u64) -> bool {
        if self.fits(more) {
            return true;
        }
        let held = self.owner.load(Ordering::Acquire);
        let free = self.budget.bytes.available_permits() as u64;
        held.checked_add(more)
            .is_some_and(|t| t <= self.owner_limit)
            && self.budget.uploads.could_make_room(
                Arc::as_ptr(&self.owner) as usize,
                held,
                more,
                more.saturating_sub(free),
                self.budget.max,
            )
    }

    /// With `more` counted against the owner's share already: cuts uploads for them and
    /// waits for the permits (given back to the owner's count when none come).
    async fn wait_for_room(&mut self, more: u64, wait: Duration) -> Option<OwnedSemaphorePermit> {
        let more32 = u32::try_from(more).ok();
        let free = self.budget.bytes.available_permits() as u64;
        let owner = Arc::as_ptr(&self.owner) as usize;
        let held = self.owner.load(Ordering::Acquire).saturating_sub(more);
        let awaiting = more32.and_then(|_| {
            self.budget.uploads.make_room(
                owner,
                held,
                more,
                more.saturating_sub(free),
                self.budget.max,
            )
        });
        let permits = match (awaiting, more32) {
            (Some(_awaiting), Some(more32)) => {
                let semaphore = self.budget.bytes.clone();
                tokio::time::timeout(wait, semaphore.acquire_many_owned(more32))
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            _ => None,
        };
        if permits.is_none() {
            self.owner.fetch_sub(more, Ordering::AcqRel);
        }
        permits
    }

    /// From now until [`BodyHold::read`], once it holds [`WATCHED`] bytes, the hold may be cut
    /// for a newcomer: its reader waits on [`BodyHold::cut`] beside the body.
    pub fn watch_while_reading(&mut self) {
        self.watchable = true;
    }

    /// The body was read to its end: no longer cut for a newcomer.
    pub fn read(&mut self) {
        self.watchable = false;
        if let Some(upload) = self.upload.take() {
            self.budget.uploads.unwatch(&upload);
        }
    }

    /// Watched from now on, whatever it holds (a body that did not end with its first chunk:
    /// small stalled uploads, many of them, would otherwise keep the budget).
    pub fn watch_now(&mut self) {
        if self.watchable && self.upload.is_none() {
            let owner = Arc::as_ptr(&self.owner) as usize;
            let now = room::since(self.budget.epoch);
            self.upload = Some(self.budget.uploads.watch(owner, self.bytes(), now));
        }
    }

    /// A future that resolves once the hold is cut for a newcomer, for a reader that keeps it
    /// beside the hold (a coded body's decoders); `None` until the hold is watched.
    pub fn cut_signal(&self) -> Option<CutSignal> {
        let upload = self.upload.clone()?;
        Some(Box::pin(async move { upload.cut().await }))
    }

    /// Resolves once the hold was cut for a newcomer (never, unless it is watched).
    pub async fn cut(&self) {
        match &self.upload {
            Some(upload) => upload.cut().await,
            None => std::future::pending().await,
        }
    }

    /// Holds exactly `bytes`: grows (`false`, and nothing changed, when the budget or the
    /// owner's share does not have the difference now) or gives the surplus back at once.
    pub fn resize(&mut self, bytes: u64) -> bool {
        let held = self.bytes();
        if bytes >= held {
            return self.grow(bytes - held);
        }
        let surplus = usize::try_from(held - bytes).unwrap_or(usize::MAX);
        let Some(permits) = self.permits.as_mut() else {
            return true;
        };
        if let Some(given_back) = permits.split(surplus) {
            let bytes = given_back.num_permits() as u64;
            self.owner.fetch_sub(bytes, Ordering::AcqRel);
            if let Some(upload) = &self.upload {
                upload.bytes.fetch_sub(bytes, Ordering::AcqRel);
            }
            drop(given_back);
        }
        true
    }
}

impl Drop for BodyHold {
    fn drop(&mut self) {
        if let Some(upload) = self.upload.take() {
            self.budget.uploads.unwatch(&upload);
        }
        if let Some(permits) = self.permits.take() {
            self.owner
                .fetch_sub(permits.num_permits() as u64, Ordering::AcqRel);
            self.budget.observe_hold(self.since.elapsed());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_share_one_budget_and_give_it_back() {
        let budget = Arc::new(InflightBodies::new(100));
        let owner = Arc::new(AtomicU64::new(0));
        let mut a = budget.hold(owner.clone(), 1.0);
        assert!(a.grow(60));
        let mut b = budget.hold(owner.clone(), 1.0);
        assert!(!b.grow(41), "only 40 left");
        assert_eq!(b.bytes(), 0, "a refused reservation takes nothing");
        assert!(b.grow(40));
        assert_eq!(budget.held(), 100);
        drop(a);
        assert_eq!(budget.held(), 40);
        assert!(b.grow(10));
        assert_eq!(b.bytes(), 50);
        drop(b);
        assert_eq!(budget.held(), 0);
        assert_eq!(owner.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn one_owner_holds_at_most_its_share() {
        let budget = Arc::new(InflightBodies::new(100));
        let greedy = Arc::new(AtomicU64::new(0));
        let mut a = budget.hold(greedy.clone(), 0.5);
        assert!(a.grow(50));
        let mut b = budget.hold(greedy.clone(), 0.5);
        assert!(!b.grow(1), "the greedy owner has its half");
        let mut other = budget.hold(Arc::new(AtomicU64::new(0)), 0.5);
        assert!(other.grow(50), "the rest is left for others");
        drop(a);
        assert!(b.grow(1));
    }

    #[test]
    fn a_hold_shrinks_and_grows_again() {
        let budget = Arc::new(InflightBodies::new(100));
        let owner = Arc::new(AtomicU64::new(0));
        let mut a = budget.hold(owner.clone(), 1.0);
        assert!(a.resize(80));
        assert!(!budget.hold(owner.clone(), 1.0).grow(21));
        assert!(a.resize(30));
        assert_eq!((a.bytes(), budget.held()), (30, 30));
        assert_eq!(owner.load(Ordering::Relaxed), 30);
        let mut b = budget.hold(owner.clone(), 1.0);
        assert!(b.grow(70), "what a gave back is there for others");
        assert!(!a.resize(31), "and no longer for a");
        assert_eq!(a.bytes(), 30, "a refused growth changes nothing");
        assert!(a.resize(0));
        assert_eq!((budget.held(), owner.load(Ordering::Relaxed)), (70, 70));
        drop(b);
        assert_eq!(budget.held(), 0);
    }
}

//! Which job a free schema thread takes next: the tenants' lanes of waiting jobs, each
//! tenant's thread time (its virtual time) and whether its checks or compiles run long, and
//! the job a thread staying with a request takes.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Job, Kind, PoolCore, CANCELLED, LONG_FOR, LONG_JOB};

/// Tenants whose order is remembered at most (those level with the queue are forgotten first).
const MAX_SEEN: usize = 10_000;

#[derive(Default)]
pub(super) struct Lane {
    pub(super) jobs: VecDeque<Job>,
    pub(super) running: usize,
    /// When the lane came to the queue (ties of the order go to the earliest).
    pub(super) since: u64,
}

/// A tenant's place in the order: the thread time its jobs took (its virtual time, in
/// nanoseconds), and until when (the clock's nanoseconds) it counts as running long jobs of
/// each [`Kind`].
#[derive(Default, Clone, Copy)]
pub(super) struct Seen {
    pub(super) vtime: u64,
    pub(super) long_until: [u64; 2],
    /// What its jobs of each kind ran past what their records pay for since `past_since`
    /// (nanoseconds): at [`LONG_JOB`] together they are long, as one such job is.
    pub(super) past: [u64; 2],
    pub(super) past_since: [u64; 2],
    /// Until when it counts as seen (a tenant not seen is held back as running long jobs).
    pub(super) known_until: u64,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) lanes: HashMap<Arc<str>, Lane>,
    pub(super) seen: HashMap<Arc<str>, Seen>,
    /// The virtual time of the job started last: a tenant's time is never behind it when
    /// its job is ordered, so one idle for a while does not take the threads to catch up.
    pub(super) floor: u64,
    /// Jobs running now of tenants that run long jobs.
    pub(super) long_running: usize,
    pub(super) arrivals: u64,
    pub(super) closed: bool,
}

/// A job taken to run, and what its end is counted by.
pub(super) struct Taken {
    pub(super) tenant: Arc<str>,
    pub(super) job: Job,
    /// The virtual time it started at.
    pub(super) start: u64,
    /// Counted in `long_running`.
    pub(super) long: bool,
}

impl State {
    /// The next job to run: of the tenants with a job waiting and a free share, the one whose
    /// jobs took the least thread time, unless it runs long jobs and they hold their threads.
    pub(super) fn next(&mut self, core: &PoolCore, now: u64) -> Option<Taken> {
        let mut best: Option<(u64, u64, Arc<str>, usize, bool)> = None;
        let mut gone = Vec::new();
        for (tenant, lane) in &mut self.lanes {
            while lane
                .jobs
                .front()
                .is_some_and(|j| j.state.load(Ordering::Acquire) == CANCELLED)
            {
                lane.jobs.pop_front();
            }
            if lane.jobs.is_empty() {
                if lane.running == 0 {
                    gone.push(tenant.clone());
                }
                continue;
            }
            if lane.running >= core.tenant_workers {
                continue;
            }
            let seen = self.seen.get(tenant).copied().unwrap_or_default();
            // Its first job of a kind that may run now (a check queued behind a compile held
            // back may go first).
            let held = self.long_running >= core.long_threads;
            // A tenant not seen lately may compile long for all the pool knows (a compile
            // cannot be stopped); its checks are stopped or foreseen as any tenant's are.
            let long = |j: &Job| {
                j.long
                    || seen.long_until[j.kind as usize] > now
                    || (j.kind == Kind::Compile && seen.known_until <= now)
            };
            let Some(at) = lane
                .jobs
                .iter()
                .position(|j| !(held && long(j)) && j.state.load(Ordering::Acquire) != CANCELLED)
            else {
                continue;
            };
            let key = (seen.vtime.max(self.floor), lane.since);
            if best.as_ref().is_none_or(|b| key < (b.0, b.1)) {
                let long = lane.jobs.get(at).is_some_and(long);
                best = Some((key.0, key.1, tenant.clone(), at, long));
            }
        }
        for tenant in gone {
            self.lanes.remove(&tenant);
        }
        let (start, _, tenant, at, long) = best?;
        let lane = self.lanes.get_mut(&tenant)?;
        let job = lane.jobs.remove(at)?;
        lane.running += 1;
        self.floor = self.floor.max(start);
        self.long_running += usize::from(long);
        Some(Taken {
            tenant,
            job,
            start,
            long,
        })
    }

    /// Whether `tenant`'s jobs of `kind` are held back as long ones now.
    pub(super) fn runs_long(&self, tenant: &str, kind: Kind, now: u64) -> bool {
        let unseen = |s: &Seen| kind == Kind::Compile && s.known_until <= now;
        self.seen.get(tenant).map_or(kind == Kind::Compile, |s| {
            s.long_until[kind as usize] > now || unseen(s)
        })
    }

    /// The next job of `request`, if it is queued and its tenant has a free share (a thread
    /// staying with the request: [`LINGER`]).
    pub(super) fn next_of(
        &mut self,
        core: &PoolCore,
        tenant: &Arc<str>,
        request: u64,
    ) -> Option<Taken> {
        let lane = self.lanes.get_mut(tenant)?;
        if lane.running >= core.tenant_workers {
            return None;
        }
        // Not one that may run long: it waits its turn with the long ones.
        let at = lane.jobs.iter().position(|j| {
            j.request.is_some_and(|(r, _)| r == request)
                && !j.long
                && j.state.load(Ordering::Acquire) != CANCELLED
        })?;
        let job = lane.jobs.remove(at)?;
        lane.running += 1;
        let vtime = self.seen.get(tenant).map_or(0, |s| s.vtime);
        Some(Taken {
            tenant: tenant.clone(),
            job,
            start: vtime.max(self.floor),
            long: false,
        })
    }

    /// `taken`'s job ended after `took` nanoseconds of its thread, at `now`; `unpaid` if no
    /// budget pays for any of it.
    pub(super) fn done(&mut self, taken: &Taken, took: u64, unpaid: bool, now: u64) {
        let tenant = &taken.tenant;
        self.long_running -= usize::from(taken.long);
        if self.seen.len() >= MAX_SEEN && !self.seen.contains_key(tenant) {
            let (floor, lanes) = (self.floor, &self.lanes);
            self.seen
                .retain(|t, s| s.vtime > floor || s.known_until > now || lanes.contains_key(t));
        }
        let seen = self.seen.entry(tenant.clone()).or_default();
        seen.vtime = seen.vtime.max(taken.start).saturating_add(took);
        let long_for = u64::try_from(LONG_FOR.as_nanos()).unwrap_or(u64::MAX);
        seen.known_until = now.saturating_add(long_for);
        let long = u64::try_from(LONG_JOB.as_nanos()).unwrap_or(u64::MAX);
        let kind = taken.job.kind as usize;
        if now.saturating_sub(seen.past_since[kind]) >= long_for {
            (seen.past[kind], seen.past_since[kind]) = (0, now);
        }
        let past = if unpaid {
            took
        } else {
            took.saturating_sub(taken.job.paid)
        };
        seen.past[kind] = seen.past[kind].saturating_add(past);
        if seen.past[kind] >= long {
            seen.long_until[kind] = now.saturating_add(long_for);
        }
        if let Some(lane) = self.lanes.get_mut(tenant) {
            lane.running = lane.running.saturating_sub(1);
            if lane.running == 0 && lane.jobs.is_empty() {
                self.lanes.remove(tenant);
            }
        }
    }
}

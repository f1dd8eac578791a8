//! Where the schema step's CPU goes, and its bounds: a value is checked or converted on the
//! request worker only when it is small and cheap by the cost model (a few KB); anything
//! more, and every compile, runs on the [`super::pool`] within the tenant's share, a record's
//! check within its CPU deadline. A compile that failed is remembered by its text's digest,
//! and a compiled raw schema the registry does not know yet is kept as a draft, so a client
//! repeating either costs no second compile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::avro::Until;
use super::compiled::{compile, within_bounds, Compiled, Written};
use super::lookups::{Lookups, INLINE_WORK};
use super::pool::{ForRecord, PoolError, Unpaid, LONG_JOB};
use super::raw::digest;
use super::thread_cpu::thread_cpu;
use super::unpaid_work::{ChecksOwed, UnpaidWork};
use super::{CompileError, Failure, Format, SchemaError, Schemas, Side};
use crate::budget::Clock;

/// A pool check's outcome: what it found, its CPU, and what its record owes for it; or why it
/// gave none.
type CheckRun = Result<(Written, Duration, ChecksOwed), Stopped>;

/// A check that refused its record, or gave no outcome, is paid by no budget: the pool counts
/// all its run against its tenant's short jobs, not only what it ran past its record's price.
impl Unpaid for CheckRun {
    fn unpaid(&self) -> bool {
        !matches!(self, Ok((Ok(_), _, _)))
    }
}

/// Why a pool check gave no outcome.
enum Stopped {
    /// Its request can no longer be admitted (asked before it ran).
    Inadmissible,
    /// Its tenant is out of unpaid time for this long.
    OutOfTime(Duration),
    /// Run as a short job, it reached [`LONG_JOB`] past what its record pays for: to be
    /// queued again with the long jobs ([`ForRecord`]).
    Overran,
}

/// The bounds of the step's work a refusal is counted under (the metric's `bound` label).
pub const WORK_BOUNDS: [&str; 9] = [
    "check_cpu",
    "check_work",
    "inadmissible",
    "lookups",
    "registrations",
    "registry_calls",
    "schema_memory",
    "unpaid_work",
    "wait",
];

/// How far past what its record pays for the cost model must price a check that cannot be
/// stopped (JSON Schema, Protobuf) for it to go with the long jobs from the start. The model
/// overestimates ordinary records 100–1,000× (review 26 of #37: at 100 ms, valid 4.85 KB
/// records with a `pattern` on array items, checked in a millisecond, waited behind attackers'
/// checks and were refused), and an adversarial check comes near its price (review 27: checks
/// priced ~1 s ran 0.5–0.9 s on the thread left for short jobs): such a check holds that
/// thread at most about this long, once per tenant per [`super::pool::LONG_FOR`].
const FORESEEN_LONG: Duration = Duration::from_millis(500);

/// A value at most this long is checked on the request worker when the cost model says it is
/// cheap: handing it to the pool would cost more than the check.
pub const INLINE_BYTES: usize = 4 * 1024;
/// Most failed compiles and drafts remembered.
const REMEMBERED: usize = 256;

impl Schemas {
    /// `data` (JSON text) checked against `schema` and, unless `keep_json`, written in its wire
    /// format (header id as the schema has it), with the CPU its check took up to what an
    /// admitted record pays for ([`Schemas::paid_check`]; the rest is charged now). On the
    /// request worker if small and cheap within what the request (`allowance`) has left of its
    /// inline work ([`Compiled::write_inline`]), else on the pool within the tenant's share and
    /// the CPU deadline. A refused check is charged to the tenant's unpaid work where it ran; a
    /// passed one is owed by its record until the record is admitted ([`super::ChecksOwed`]).
    #[allow(clippy::too_many_arguments)] // two call sites (key, value): one record's parts
    pub(super) async fn write(
        &self,
        tenant: &str,
        schema: &Arc<Compiled>,
        data: &[u8],
        side: Side,
        limit: usize,
        keep_json: bool,
        allowance: &mut Lookups,
    ) -> Result<(Option<Vec<u8>>, Duration), Failure> {
        let fail = |error| Failure { side, error };
        self.may_begin(tenant, allowance).map_err(fail)?;
        // What the record's budgets pay for; past it the check is unpaid work, charged now.
        let paid = self.paid_check(data.len());
        let mut inline = None;
        if data.len() <= INLINE_BYTES && allowance.inline_left() > 0 {
            let work = allowance.inline_left().min(INLINE_WORK);
            let started = Instant::now();
            let ran = schema.write_inline(data, limit, keep_json, work);
            // On the request worker, without a preemption in a few microseconds: its wall
            // time is its CPU.
            let spent = started.elapsed();
            match ran {
                Ok((result, taken)) => {
                    allowance.spend_inline(taken);
                    let owed = settle(
                        &self.unpaid_work,
                        &*self.clock,
                        tenant,
                        &result,
                        spent,
                        paid,
                    );
                    inline = Some((result, owed));
                }
                // Begun here and stopped at the request's share: its record pays for the
                // pool's run, not this one.
                Err(taken) => {
                    allowance.spend_inline(taken);
                    if taken > 0 {
                        self.unpaid_work.charge(&*self.clock, tenant, spent);
                    }
                }
            }
        }
        let (result, owed) = if let Some(ran) = inline {
            ran
        } else {
            let deadline = self.max_check_cpu;
            let (request, more) = allowance.staying();
            // One that cannot be stopped goes with the long jobs from the start if the cost
            // model prices it far past what its record pays for.
            let mut long = schema
                .unstoppable_cpu(data)
                .is_some_and(|most| most >= paid.saturating_add(FORESEEN_LONG));
            let ran = loop {
                let job = self.check_job(tenant, schema, data, (limit, keep_json, paid), allowance);
                let record = ForRecord {
                    request,
                    more,
                    paid,
                    long,
                };
                let ran = self
                    .pool
                    .run_for(tenant, record, job)
                    .await
                    .map_err(|e| fail(self.pool_error(e, "checking the record")))?;
                match ran {
                    // Once, with the long jobs: there it runs whole.
                    Err(Stopped::Overran) if !long => long = true,
                    ran => break ran,
                }
            };
            let (result, spent, owed) = match ran {
                Ok(ran) => ran,
                Err(Stopped::Inadmissible) => {
                    self.count_refusal("inadmissible");
                    return Err(fail(SchemaError::Inadmissible));
                }
                Err(Stopped::OutOfTime(wait)) => return Err(fail(self.unpaid_work_spent(wait))),
                Err(Stopped::Overran) => {
                    return Err(fail(
                        self.pool_error(PoolError::Lost, "checking the record"),
                    ))
                }
            };
            if spent > deadline {
                self.count_refusal("check_cpu");
                return Err(fail(SchemaError::TooCostly(format!(
                    "checking it took {} ms of CPU, more than {} ms ([schema_registry] max_check_cpu_ms)",
                    spent.as_millis(),
                    deadline.as_millis()
                ))));
            }
            (result, owed.hand_over())
        };
        let written = result.map_err(|m| {
            if m.too_costly {
                self.count_refusal("check_work");
                fail(SchemaError::TooCostly(m.message))
            } else {
                fail(SchemaError::Violation(m))
            }
        })?;
        allowance.owe(owed);
        Ok((written, owed))
    }

    /// A record's check as a job for the pool: asked whether its request could still be
    /// admitted and whether its tenant has time when its turn comes, run within what it may
    /// cost, and charged on the schema thread ([`Schemas::write`]).
    fn check_job(
        &self,
        tenant: &str,
        schema: &Arc<Compiled>,
        data: &[u8],
        (limit, keep_json, paid): (usize, bool, Duration),
        allowance: &Lookups,
    ) -> impl FnOnce(bool) -> CheckRun + Send + 'static {
        let (schema, data) = (schema.clone(), data.to_vec());
        let deadline = self.max_check_cpu;
        let admissible = allowance.admissible();
        let (unpaid_work, clock, who) = (
            self.unpaid_work.clone(),
            self.clock.clone(),
            tenant.to_string(),
        );
        move |with_long: bool| {
            if admissible.is_some_and(|still| !still()) {
                return Err(Stopped::Inadmissible);
            }
            // Asked again when its turn comes: the tenant's checks queued before its
            // refused ones spent its time must not all run.
            unpaid_work
                .may_check(&*clock, &who)
                .map_err(Stopped::OutOfTime)?;
            // It runs at most what its record pays for and its tenant can pay beyond
            // that: a check begun with a millisecond left ran its whole second, and four
            // tenants each within their bound held the threads in turns of a second
            // (review 21 of #37: a victim's records waited up to 9.9 s). Stopped there,
            // it is refused for a while, as a tenant out of time is.
            let payable = paid.saturating_add(unpaid_work.left(&*clock, &who));
            let stop = deadline.min(payable);
            // Run as a short job, it stops at LONG_JOB past what its record pays for, and
            // is queued again with the long ones: a thread is always left for short jobs.
            let short = (!with_long)
                .then(|| paid.saturating_add(LONG_JOB))
                .filter(|short| *short < stop * 2);
            let (cpu, wall) = (thread_cpu(), Instant::now());
            // A walk that outruns its cost model stops at twice its CPU limit in wall
            // time (wall >= CPU: a preempted check is not stopped early); a short job's at
            // its thread's CPU, so a check preempted or paused is not stopped for that
            // (review 27 of #37: stopped by the clock, a 50 ms check on a busy host was
            // queued again behind the long ones, and refused 429).
            let until = Until {
                wall: Some(wall + stop * 2),
                cpu: short.and_then(|short| cpu.map(|at| at + short)),
            };
            let result = schema.write_by(&data, limit, keep_json, until);
            let spent = cpu_since(cpu, wall);
            let stopped = matches!(&result, Err(m) if m.too_costly);
            if short.is_some_and(|short| stopped && spent >= short) {
                unpaid_work.charge(&*clock, &who, spent);
                return Err(Stopped::Overran);
            }
            if stop < deadline && result.is_err() && wall.elapsed() >= stop * 2 {
                unpaid_work.charge(&*clock, &who, spent);
                let wait = unpaid_work
                    .may_check(&*clock, &who)
                    .err()
                    .unwrap_or(Duration::from_millis(1));
                return Err(Stopped::OutOfTime(wait));
            }
            // Charged here, on the schema thread, whoever still waits for the answer: a
            // client that leaves drops the answer, not the charge (review 20 of #37: 25
            // checks of ~1 s each, their connections closed, charged nothing). What a
            // passed check's record owes comes back as a debt that charges itself if it
            // is dropped unread.
            let mut owed = ChecksOwed::new(unpaid_work.clone(), clock.clone(), &who);
            if spent > deadline {
                unpaid_work.charge(&*clock, &who, spent);
            } else {
                owed.add(settle(&unpaid_work, &*clock, &who, &result, spent, paid));
            }
            Ok((result, spent, owed))
        }
    }

    /// Whether a check of the request's (`allowance`) may begin: its tenant holds unpaid work,
    /// and the request's passed checks, owed until it is admitted and paid by its tenant if it
    /// is not, come to less than what the tenant may spend unpaid at once — else one request
    /// refused at its last record (10,000 records of 1 ms each) would be 10 s of a schema
    /// thread before its tenant paid anything (review 20 of #37).
    fn may_begin(&self, tenant: &str, allowance: &Lookups) -> Result<(), SchemaError> {
        let most = Duration::from_millis(self.unpaid_work.spec().burst);
        if allowance.owed() >= most {
            self.count_refusal("unpaid_work");
            return Err(SchemaError::TooCostly(format!(
                "the request's checks so far took {} ms of CPU, as much as a request may owe before it is admitted ([schema_registry] tenant_unpaid_work_ms_burst, {} ms): send fewer records per request",
                allowance.owed().as_millis(),
                most.as_millis()
            )));
        }
        self.unpaid_work
            .may_check(&*self.clock, tenant)
            .map_err(|wait| self.unpaid_work_spent(wait))
    }

    /// The CPU of a passing check of `len` bytes that an admitted record's budgets pay for
    /// (`paid_check_us`, `paid_check_us_per_kib`).
    fn paid_check(&self, len: usize) -> Duration {
        let kib = u64::try_from(len / 1024).unwrap_or(u64::MAX);
        let us = self
            .config
            .paid_check_us
            .saturating_add(self.config.paid_check_us_per_kib.saturating_mul(kib));
        Duration::from_micros(us)
    }

    /// What a pool refusal means for the client (a wait refused is counted).
    fn pool_error(&self, e: PoolError, what: &str) -> SchemaError {
        if e != PoolError::Lost {
            self.count_refusal("wait");
        }
        SchemaError::of_pool(e, what)
    }

    /// A raw schema compiled with id 0 (a draft until the registry gives its id), or the one
    /// compiled before.
    pub(super) async fn draft(
        &self,
        tenant: &str,
        format: Format,
        text: &Arc<str>,
        what: &str,
    ) -> Result<Arc<Compiled>, SchemaError> {
        let key = (format, digest(text));
        if let Some(d) = self.cache.lock().drafts.get(&key) {
            return Ok(d.clone());
        }
        let draft = Arc::new(self.compile_for(tenant, format, text, what).await?);
        let mut cache = self.cache.lock();
        if cache.drafts.insert(key, draft.clone()).is_none() {
            cache.drafts_order.push_back(key);
        }
        // Drafts count as a share of the cache's bytes, beside the schemas kept by id.
        let budget = self.config.cache_bytes / 4;
        let mut bytes: usize = cache.drafts.values().map(|d| d.footprint()).sum();
        while cache.drafts.len() > REMEMBERED || bytes > budget {
            let Some(old) = cache.drafts_order.pop_front() else {
                break;
            };
            if let Some(d) = cache.drafts.remove(&old) {
                bytes = bytes.saturating_sub(d.footprint());
            }
        }
        Ok(draft)
    }

    /// Compiles a schema on the pool within the tenant's share and the compile bounds;
    /// a schema that failed before is refused without compiling.
    pub(super) async fn compile_for(
        &self,
        tenant: &str,
        format: Format,
        text: &str,
        what: &str,
    ) -> Result<Compiled, SchemaError> {
        // Size and nesting first, here: a schema too large is refused without waiting for a
        // thread.
        within_bounds(format, text, self.bounds.max_text)
            .map_err(|e| SchemaError::Invalid(format!("{what} does not compile: {e}")))?;
        let key = (format, digest(text));
        if let Some(e) = self.cache.lock().failed.get(&key) {
            return Err(e.clone());
        }
        // No budget pays for a compile, whatever becomes of the request: the tenant does.
        self.unpaid_work
            .may_check(&*self.clock, tenant)
            .map_err(|wait| self.unpaid_work_spent(wait))?;
        let (bounds, owned) = (self.bounds, text.to_string());
        let (unpaid_work, clock, who) = (
            self.unpaid_work.clone(),
            self.clock.clone(),
            tenant.to_string(),
        );
        let result = self
            .pool
            .compile(tenant, move || {
                // Asked again when its turn comes (review 21 of #37: 40 compiles queued at
                // once all ran, 2.4 s against a 1 s burst).
                unpaid_work.may_check(&*clock, &who)?;
                let (cpu, wall) = (thread_cpu(), Instant::now());
                let result = compile(format, &owned, &bounds);
                // What the compile built and freed, back to the system: else each schema
                // thread's arena keeps its largest compile's transient heap.
                crate::heap::give_back();
                // Charged here, whoever still waits for it (see `write`).
                unpaid_work.charge(&*clock, &who, cpu_since(cpu, wall));
                Ok(result)
            })
            .await
            .map_err(|e| self.pool_error(e, "compiling the schema"))?
            .map_err(|wait| self.unpaid_work_spent(wait))?;
        let error = match result {
            Ok((codec, memory)) => {
                return Ok(Compiled {
                    id: 0,
                    format,
                    codec: Arc::new(codec),
                    memory,
                })
            }
            // Cut to a size that does not depend on the input before it is kept: the failed
            // entries are shared by every tenant, and a library's message may quote the schema
            // (apache-avro printed a 260 KB `logicalType` array as 1.4 MB; review 19 of #37:
            // 256 such entries held ~360 MB).
            Err(CompileError::Invalid(e)) => {
                SchemaError::Invalid(crate::quote::brief(format!("{what} does not compile: {e}")))
            }
            Err(CompileError::TooCostly(e)) => {
                self.count_refusal("schema_memory");
                SchemaError::TooCostly(crate::quote::brief(format!("{what}: {e}")))
            }
        };
        let mut cache = self.cache.lock();
        if cache.failed.insert(key, error.clone()).is_none() {
            cache.failed_order.push_back(key);
        }
        while cache.failed.len() > REMEMBERED {
            let Some(old) = cache.failed_order.pop_front() else {
                break;
            };
            cache.failed.remove(&old);
        }
        Err(error)
    }

    /// Counts a refusal by the bound that refused it (one of [`WORK_BOUNDS`]).
    pub(super) fn count_refusal(&self, bound: &'static str) {
        debug_assert!(WORK_BOUNDS.contains(&bound), "{bound}");
        *self.refusals.lock().entry(bound).or_default() += 1;
    }

    /// Refusals by bound, and the pool's jobs waiting and running, for the metrics.
    pub fn work_counts(&self) -> (Vec<(&'static str, u64)>, (usize, usize)) {
        // Every bound has its series from the first scrape, at 0 until it refuses.
        let counted = self.refusals.lock();
        let refusals = WORK_BOUNDS
            .iter()
            .map(|b| (*b, counted.get(b).copied().unwrap_or(0)))
            .collect();
        (refusals, self.pool.load())
    }

    /// The longest a job waits for the pool (the Retry-After of a `schema_busy`).
    pub fn wait(&self) -> Duration {
        self.pool.wait()
    }
}

/// A check's CPU charged to `tenant` at once, where it ran: a refused check's all of it, a
/// passed one's past `paid` (what its record's budgets pay for). What is left, a passed
/// check's, is owed by its record until it is admitted (returned).
fn settle(
    unpaid: &UnpaidWork,
    clock: &dyn Clock,
    tenant: &str,
    result: &Written,
    spent: Duration,
    paid: Duration,
) -> Duration {
    if result.is_err() {
        unpaid.charge(clock, tenant, spent);
        return Duration::ZERO;
    }
    if spent > paid {
        unpaid.charge(clock, tenant, spent.saturating_sub(paid));
    }
    spent.min(paid)
}

/// The thread's CPU since `cpu` was read (its wall time since `wall` where the platform
/// measures no thread CPU).
fn cpu_since(cpu: Option<std::time::Duration>, wall: Instant) -> std::time::Duration {
    match (thread_cpu(), cpu) {
        (Some(now), Some(then)) => now.saturating_sub(then),
        _ => wall.elapsed(),
    }
}

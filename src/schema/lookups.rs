//! What one request may make the schema step do outside its tenant's shares: a few registry
//! calls and a few milliseconds of checks on the request worker.

use std::sync::Arc;

use super::raw::RawKey;
use super::SchemaError;

/// The cost model's most work one record's check does on a request worker (a few hundred
/// microseconds); a request does at most [`INLINE_WORK_PER_REQUEST`] there.
pub(super) const INLINE_WORK: u64 = 200_000;

/// What one request may make the schema step do outside its tenant's shares: registry calls
/// (a request naming many schemas the gateway has not seen — a raw schema per record, unknown
/// ids — is refused past this, instead of turning one request into thousands of registry
/// calls), and check work on the request worker (past it, the request's records are checked
/// on the pool, within the tenant's share: a request of a thousand records each cheap enough
/// to check inline must not hold a request worker for all of them).
pub struct Lookups {
    left: u32,
    /// The cost model's work the request may still do on the request worker.
    inline_work: u64,
    /// The CPU of the request's passed checks, owed until it is admitted.
    owed: std::time::Duration,
    /// Whose lookups these are: each call is also one of the tenant's
    /// (`tenant_lookups_per_sec`).
    pub(super) tenant: Arc<str>,
    /// Raw schemas (scope and digest) whose lookup and registration this request already
    /// reserved: its other records naming them cost nothing more.
    reserved: Vec<RawKey>,
    /// Whether the request could still be admitted (takes nothing), asked when its check
    /// starts on a schema thread.
    admissible: Option<Admissible>,
    /// The request's id among all, and whether it has records to check after the one being
    /// checked: a schema thread that ran one of its checks waits a little for the next.
    request: u64,
    more: bool,
}

/// Whether a request could be admitted now — its budgets, shares and the buffer — taking
/// nothing. Asked when a check's job *starts* on a schema thread, not only when it queues: a
/// tenant's requests queue for its share of the threads, and one whose budget its earlier
/// requests spent meanwhile is refused there, before it parses its value (16 queued 918 KB
/// JSON Schema records, 14 of them refused by admission after their checks, took RSS to
/// 196 MiB).
pub type Admissible = Arc<dyn Fn() -> bool + Send + Sync>;

impl std::fmt::Debug for Lookups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lookups")
            .field("left", &self.left)
            .field("inline_work", &self.inline_work)
            .field("owed", &self.owed)
            .field("tenant", &self.tenant)
            .field("admissible", &self.admissible.is_some())
            .finish_non_exhaustive()
    }
}

/// Registry calls a request (or a stream's piece) may cause.
pub const LOOKUPS_PER_REQUEST: u32 = 16;
/// The cost model's work a request (or a stream's piece) may do on the request worker over all
/// its records: ten records at the most one may do there (a few milliseconds).
pub const INLINE_WORK_PER_REQUEST: u64 = 10 * INLINE_WORK;

/// A new request's id.
fn next_request() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Lookups {
    pub fn per_request(tenant: &str) -> Self {
        Self {
            left: LOOKUPS_PER_REQUEST,
            inline_work: INLINE_WORK_PER_REQUEST,
            owed: std::time::Duration::ZERO,
            tenant: tenant.into(),
            reserved: Vec::new(),
            admissible: None,
            request: next_request(),
            more: false,
        }
    }

    /// Whether the request has records to check after the one it checks now.
    pub fn more_after_this(&mut self, more: bool) {
        self.more = more;
    }

    /// The request, to the schema threads, and whether it has more records to check after
    /// this one.
    pub(super) fn staying(&self) -> (u64, bool) {
        (self.request, self.more)
    }

    /// The request's checks on the schema threads first ask `admissible`.
    pub fn with_admission(mut self, admissible: Admissible) -> Self {
        self.admissible = Some(admissible);
        self
    }

    pub(super) fn admissible(&self) -> Option<Admissible> {
        self.admissible.clone()
    }

    /// The cost model's work the request may still do on the request worker.
    pub(super) fn inline_left(&self) -> u64 {
        self.inline_work
    }

    /// `work` done on the request worker.
    pub(super) fn spend_inline(&mut self, work: u64) {
        self.inline_work = self.inline_work.saturating_sub(work);
    }

    /// What the request's passed checks owe so far (charged to its tenant if it is refused).
    pub(super) fn owed(&self) -> std::time::Duration {
        self.owed
    }

    /// A passed check's CPU, owed by the request until it is admitted.
    pub(super) fn owe(&mut self, cpu: std::time::Duration) {
        self.owed = self.owed.saturating_add(cpu);
    }

    /// The records checked so far were admitted or refused (a stream's piece): they owe
    /// nothing more here (what a refused one owed was charged where it was refused).
    pub fn settled(&mut self) {
        self.owed = std::time::Duration::ZERO;
    }

    /// No calls left.
    pub fn none() -> Self {
        Self {
            left: 0,
            inline_work: 0,
            owed: std::time::Duration::ZERO,
            tenant: Arc::from(""),
            reserved: Vec::new(),
            admissible: None,
            request: next_request(),
            more: false,
        }
    }

    /// A raw schema's lookup and registration, once per request.
    pub(super) fn reserve(&mut self, key: &RawKey) -> Result<(), SchemaError> {
        if self.reserved.contains(key) {
            return Ok(());
        }
        self.take()?;
        self.take()?;
        self.reserved.push(key.clone());
        Ok(())
    }

    pub(super) fn take(&mut self) -> Result<(), SchemaError> {
        match self.left.checked_sub(1) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(SchemaError::Invalid(format!(
                "the request names more schemas the gateway has not cached than one request may look up ({LOOKUPS_PER_REQUEST}); send them in smaller requests, or by id"
            ))),
        }
    }
}

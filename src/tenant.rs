//! Tenants as the gateway serves them: their live buckets, buffer usage and counters, and the
//! registry that finds a tenant by API key.
//!
//! Layer: domain. Imports configuration and the foundations (`budget`, `buffer`, `identity`,
//! `refusal`); knows nothing of admission order, Kafka, persistence or HTTP.

mod directory;
mod stats;

pub use directory::{Directory, DirectoryPlan, Tenants};
pub use stats::{Flow, TenantCounts, TenantStats, Totals, UsageCounts, TOTALS};

use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use parking_lot::{MappedMutexGuard, Mutex, MutexGuard};

use crate::budget::{BudgetSpec, TenantBuckets};
use crate::buffer::TenantUsage;
use crate::config::{ConfigProblem, TenantConfig};
use crate::identity::{TenantId, Topic, TopicPatterns};

/// The part of a tenant that admission reads and changes under the tenant's own lock.
#[derive(Debug)]
pub struct AdmissionState {
    pub buckets: TenantBuckets,
    /// Largest fraction of the buffer this tenant may hold.
    pub buffer_share: f64,
    /// Its share of the adaptive limit, while one is in force.
    pub adaptive: AdaptiveBucket,
    /// Its priority class under the adaptive limit.
    pub priority: crate::config::Priority,
    /// Its records toward each lag guard it has written to (few: one per guard).
    pub lag: Vec<crate::lag::LagBucket>,
    /// Its calendar quotas and what their windows have used.
    pub quotas: crate::quota::Quotas,
    /// Its records and bytes budgets only count what they would refuse (`budget_mode`).
    pub budget_shadow: bool,
    /// What its requests registering raw schemas have spoken for and not yet been admitted
    /// for ([`crate::admission::Reservation`]): every other admission of the tenant counts it
    /// as taken.
    pub reserved: crate::record::Charge,
}

/// A tenant's bucket under the adaptive limit: the plan it follows (by epoch) and its TATs.
#[derive(Debug, Clone, Default)]
pub struct AdaptiveBucket {
    pub epoch: u64,
    pub class: crate::config::Priority,
    /// `None`: no adaptive limit on this tenant now.
    pub spec: Option<BudgetSpec>,
    pub tats: crate::budget::Tats,
}

/// A tenant's settings, parsed and checked: applying them cannot fail.
#[derive(Debug, Clone)]
pub struct TenantSettings {
    spec: BudgetSpec,
    budget_shadow: bool,
    quotas: Arc<[crate::quota::QuotaSpec]>,
    topics: Arc<TopicPatterns>,
    buffer_share: f64,
    priority: crate::config::Priority,
    /// The configuration they were parsed from, when it is shared: a later plan that finds
    /// the same one takes the tenant as it is (see [`Directory::plan_next`]).
    source: Option<Arc<TenantConfig>>,
}

impl TenantSettings {
    pub fn parse(config: &TenantConfig) -> Result<Self, ConfigProblem> {
        let spec = config.spec()?;
        let topics = TopicPatterns::parse(&config.topics).map_err(|(i, e)| {
            ConfigProblem::new(format!("tenants[{}].topics[{i}]", config.id), e)
        })?;
        let at = format!("tenants[{}].quotas", config.id);
        Ok(Self {
            spec,
            budget_shadow: config.budget_mode.is_shadow(),
            quotas: crate::config::quota_specs(&at, &config.quotas)?.into(),
            topics: Arc::new(topics),
            buffer_share: config.buffer_share(),
            priority: config.priority.unwrap_or_default(),
            source: None,
        })
    }

    /// The same settings, remembered as parsed from `source`.
    pub fn from_source(self, source: Arc<TenantConfig>) -> Self {
        Self {
            source: Some(source),
            ..self
        }
    }
}

/// A tenant as the gateway serves it. Shared by the registry and in-flight requests; a change
/// of settings is applied in place, so bucket levels and buffer usage carry over.
///
/// What only traffic needs — the buckets and the counters — is made on the tenant's first
/// request: at 100,000 tenants most never send, and an idle tenant then costs its id, its
/// patterns and a few words instead of ~0.6 KiB of state nobody reads.
#[derive(Debug)]
pub struct Tenant {
    pub id: TenantId,
    /// Topic patterns; swapped whole on a change, read lock-free on every request.
    topics: ArcSwap<TopicPatterns>,
    /// Budgets and buffer share: the per-tenant lock of the admission decision.
    admission: Mutex<AdmissionSlot>,
    /// What this tenant holds in the downstream buffer now.
    pub usage: Arc<TenantUsage>,
    /// Request-body bytes this tenant holds in memory now (its share of the body budget).
    pub body_bytes: Arc<std::sync::atomic::AtomicU64>,
    /// Its requests held for their tokens now (`[wait] max_requests_per_tenant`).
    pub held: std::sync::atomic::AtomicUsize,
    /// Outcome counters since start, for the admin API and metrics; made on first use.
    stats: OnceLock<Arc<TenantStats>>,
    /// Made after every tenant with a lower serial (this process's count): tells a reader of
    /// the counters which tenants are new since it last looked.
    pub serial: u64,
}

/// The tenant's settings as admission needs them, and its admission state once it has one.
/// One lock for both, so a settings change and the state's creation cannot cross.
#[derive(Debug)]
struct AdmissionSlot {
    spec: BudgetSpec,
    budget_shadow: bool,
    quotas: Arc<[crate::quota::QuotaSpec]>,
    buffer_share: f64,
    priority: crate::config::Priority,
    /// The shared configuration the settings came from, if they did.
    source: Option<Arc<TenantConfig>>,
    state: Option<Box<AdmissionState>>,
}

impl AdmissionSlot {
    fn state(&mut self) -> &mut AdmissionState {
        let (spec, buffer_share, priority) = (self.spec, self.buffer_share, self.priority);
        let budget_shadow = self.budget_shadow;
        let specs = self.quotas.clone();
        self.state.get_or_insert_with(|| {
            Box::new(AdmissionState {
                quotas: crate::quota::Quotas {
                    specs,
                    ..Default::default()
                },
                buckets: TenantBuckets::new(spec),
                budget_shadow,
                buffer_share,
                adaptive: AdaptiveBucket::default(),
                lag: Vec::new(),
                priority,
                reserved: Default::default(),
            })
        })
    }
}

/// Serials of the tenants this process made.
static SERIALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Tenant {
    pub fn from_config(config: &TenantConfig) -> Result<Self, ConfigProblem> {
        Ok(Self::new(&config.id, &TenantSettings::parse(config)?))
    }

    pub fn new(id: &str, settings: &TenantSettings) -> Self {
        Self {
            id: TenantId::new(id),
            topics: ArcSwap::new(settings.topics.clone()),
            admission: Mutex::new(AdmissionSlot {
                spec: settings.spec,
                budget_shadow: settings.budget_shadow,
                quotas: settings.quotas.clone(),
                buffer_share: settings.buffer_share,
                priority: settings.priority,
                source: settings.source.clone(),
                state: None,
            }),
            usage: Arc::new(TenantUsage::default()),
            body_bytes: Arc::default(),
            held: std::sync::atomic::AtomicUsize::new(0),
            stats: OnceLock::new(),
            serial: SERIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Applies changed settings in place: topics and share are replaced, each bucket keeps its
    /// current level (clamped to the new burst) so an edit never refills a bucket.
    pub fn apply(&self, settings: &TenantSettings, now_ns: u64) {
        self.topics.store(settings.topics.clone());
        let mut slot = self.admission.lock();
        slot.spec = settings.spec;
        slot.budget_shadow = settings.budget_shadow;
        slot.quotas = settings.quotas.clone();
        slot.buffer_share = settings.buffer_share;
        slot.priority = settings.priority;
        slot.source = settings.source.clone();
        if let Some(state) = slot.state.as_deref_mut() {
            state.buckets.set_spec(settings.spec, now_ns);
            state.budget_shadow = settings.budget_shadow;
            // What each window has used stays: a change never hands out a fresh allowance.
            state.quotas.specs = settings.quotas.clone();
            state.buffer_share = settings.buffer_share;
            state.priority = settings.priority;
        }
    }

    /// Whether its settings are those parsed from this very configuration (the same `Arc`).
    pub fn built_from(&self, config: &Arc<TenantConfig>) -> bool {
        self.admission
            .lock()
            .source
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, config))
    }

    /// The largest fraction of the buffer (and of the body budget) this tenant may hold.
    pub fn buffer_share(&self) -> f64 {
        self.admission.lock().buffer_share
    }

    /// The tenant's configured budgets.
    pub fn spec(&self) -> BudgetSpec {
        self.admission.lock().spec
    }

    /// Its priority class under the adaptive limit.
    pub fn priority(&self) -> crate::config::Priority {
        self.admission.lock().priority
    }

    /// Nanoseconds until every bucket of this tenant is full again (0: they are).
    pub fn full_in_ns(&self, now_ns: u64) -> u64 {
        let Some(state) = self.admission_if_live() else {
            return 0; // never charged: full
        };
        state
            .buckets
            .view(now_ns)
            .iter()
            .filter_map(|(_, v)| v.as_ref())
            .map(|v| v.full_in_ns)
            .max()
            .unwrap_or(0)
    }

    /// The serial the next tenant made will have.
    pub fn next_serial() -> u64 {
        SERIALS.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether records of this tenant are in the buffer now.
    pub fn holds_buffer(&self) -> bool {
        use std::sync::atomic::Ordering::Acquire;
        self.usage.records.load(Acquire) > 0 || self.usage.bytes.load(Acquire) > 0
    }

    pub fn may_write(&self, topic: &Topic) -> bool {
        self.topics.load().allows(topic)
    }

    /// The tenant's admission lock, with its state (made full on first use).
    pub fn admission_state(&self) -> MappedMutexGuard<'_, AdmissionState> {
        MutexGuard::map(self.admission.lock(), AdmissionSlot::state)
    }

    /// The admission lock with its state, if the tenant has ever been charged: for readers
    /// that go over every tenant and must not give idle ones state.
    pub fn admission_if_live(&self) -> Option<MappedMutexGuard<'_, AdmissionState>> {
        MutexGuard::try_map(self.admission.lock(), |slot| slot.state.as_deref_mut()).ok()
    }

    /// The tenant's counters (made on first use).
    pub fn stats(&self) -> &Arc<TenantStats> {
        self.stats.get_or_init(Arc::default)
    }

    /// Every counter (zeros if it never counted anything), without making its counters.
    pub fn totals(&self) -> Totals {
        self.stats_if_any().map_or([0; TOTALS], |s| s.totals())
    }

    /// Its counters if anything was ever counted: for readers that go over every tenant.
    pub fn stats_if_any(&self) -> Option<&Arc<TenantStats>> {
        self.stats.get()
    }
}

#[cfg(test)]
mod tests;

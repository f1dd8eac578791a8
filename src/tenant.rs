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
        let specs = self.quotas.clone();
        self.state.get_or_insert_with(|| {
            Box::new(AdmissionState {
                quotas: crate::quota::Quotas {
                    specs,
                    ..Default::default()
                },
                buckets: TenantBuckets::new(spec),
                buffer_share,
                adaptive: AdaptiveBucket::default(),
                lag: Vec::new(),
                priority,
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
        slot.quotas = settings.quotas.clone();
        slot.buffer_share = settings.buffer_share;
        slot.priority = settings.priority;
        slot.source = settings.source.clone();
        if let Some(state) = slot.state.as_deref_mut() {
            state.buckets.set_spec(settings.spec, now_ns);
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
mod tests {
    use super::*;
    use crate::identity::ApiKeyHash;
    use crate::record::Charge;

    fn tenant_config(key: &str) -> TenantConfig {
        TenantConfig {
            id: "acme".into(),
            api_key_sha256: vec![ApiKeyHash::of_key(key).to_hex()],
            topics: vec!["events.acme.*".into()],
            ..TenantConfig::default()
        }
    }

    #[test]
    fn applying_a_new_budget_keeps_the_bucket_level() {
        let mut c = tenant_config("k");
        c.records_per_sec = Some(10);
        let tenant = Tenant::from_config(&c).expect("valid");
        let charge = tenant
            .admission_state()
            .buckets
            .check(0, Charge::new(8, 0))
            .expect("fits");
        tenant.admission_state().buckets.commit(charge);
        c.records_per_sec = Some(1000);
        tenant.apply(&TenantSettings::parse(&c).expect("valid"), 0);
        let records = tenant.admission_state().buckets.view(0).records;
        assert_eq!(records.map(|v| v.available), Some(2));
    }

    #[test]
    fn an_idle_tenant_has_no_state_until_charged_and_gets_its_latest_settings() {
        let mut c = tenant_config("k");
        c.records_per_sec = Some(10);
        let tenant = Tenant::from_config(&c).expect("valid");
        // Readers that go over every tenant leave an idle one without state.
        assert_eq!(tenant.full_in_ns(0), 0);
        assert_eq!(tenant.spec().records.map(|r| r.burst), Some(10));
        assert!(tenant.admission_if_live().is_none());
        assert!(tenant.stats_if_any().is_none());
        // A change before its first request is what the state is made from.
        c.records_per_sec = Some(1000);
        tenant.apply(&TenantSettings::parse(&c).expect("valid"), 0);
        let records = tenant.admission_state().buckets.view(0).records;
        assert_eq!(
            records.map(|v| (v.spec.burst, v.available)),
            Some((1000, 1000))
        );
        assert!(tenant.admission_if_live().is_some());
    }

    #[test]
    fn authenticates_by_key_digest_only() {
        let directory = Directory::from_configs(&[tenant_config("s3cret")]).expect("valid");
        assert_eq!(
            directory.authenticate("s3cret").map(|t| t.id.as_str()),
            Some("acme")
        );
        assert!(directory.authenticate("s3cret ").is_none());
        assert!(directory.authenticate("").is_none());
    }

    #[test]
    fn topic_patterns_bound_what_a_tenant_may_write() {
        let tenant = Tenant::from_config(&tenant_config("k")).expect("valid");
        let ok = Topic::parse("events.acme.clicks").expect("legal");
        let other = Topic::parse("events.other.clicks").expect("legal");
        assert!(tenant.may_write(&ok));
        assert!(!tenant.may_write(&other));
    }

    #[test]
    fn rejects_uppercase_or_short_digests() {
        let mut c = tenant_config("k");
        c.api_key_sha256 = vec!["ABC".into(), "A".repeat(64)];
        let problems = c.problems("tenants[0]");
        assert_eq!(problems.len(), 2);
        assert_eq!(problems[0].key, "tenants[0].api_key_sha256[0]");
    }

    #[test]
    fn a_deleted_tenant_recreated_before_its_buckets_refill_keeps_them() {
        let mut c = tenant_config("k");
        c.records_per_sec = Some(10);
        c.records_burst = Some(10);
        let first = Directory::from_configs(std::slice::from_ref(&c)).expect("valid");
        let acme = first.get("acme").expect("acme").clone();
        let spent = acme
            .admission_state()
            .buckets
            .check(0, Charge::new(10, 0))
            .expect("fits");
        acme.admission_state().buckets.commit(spent);
        let empty = Directory::plan::<TenantConfig>(&[])
            .expect("valid")
            .build(&first, 0);
        assert!(empty.get("acme").is_none(), "deleted");
        assert!(empty.authenticate("k").is_none(), "its key is gone");
        // Back half a second later: the same buckets, 5 records refilled, not a fresh 10.
        let back = Directory::plan(std::slice::from_ref(&c))
            .expect("valid")
            .build(&empty, 500_000_000);
        let again = back.get("acme").expect("acme");
        assert!(Arc::ptr_eq(again, &acme));
        let records = again.admission_state().buckets.view(500_000_000).records;
        assert_eq!(records.map(|v| v.available), Some(5));
        // Once its buckets would have refilled, a deleted tenant is forgotten.
        let empty = Directory::plan::<TenantConfig>(&[])
            .expect("valid")
            .build(&first, 0);
        let later = Directory::plan::<TenantConfig>(&[])
            .expect("valid")
            .build(&empty, 2_000_000_000);
        let fresh = Directory::plan(std::slice::from_ref(&c))
            .expect("valid")
            .build(&later, 2_000_000_000);
        assert!(!Arc::ptr_eq(fresh.get("acme").expect("acme"), &acme));
    }

    #[test]
    fn a_plan_that_is_never_built_changes_nothing() {
        let mut c = tenant_config("k");
        c.records_per_sec = Some(10);
        let directory = Directory::from_configs(std::slice::from_ref(&c)).expect("valid");
        c.records_per_sec = Some(1);
        c.records_burst = Some(1);
        let _plan = Directory::plan(std::slice::from_ref(&c)).expect("valid");
        let records = directory
            .get("acme")
            .expect("acme")
            .admission_state()
            .buckets
            .view(0)
            .records;
        assert_eq!(records.map(|v| v.spec.burst), Some(10));
    }

    #[test]
    fn a_deleted_tenants_counters_stay_in_the_registrys_retired_totals_until_it_returns() {
        let sum = |r: &Directory| -> u64 {
            r.tenants().map(|t| t.totals()[2]).sum::<u64>() + r.retired()[2]
        };
        let mut c = tenant_config("k");
        c.records_per_sec = Some(10);
        c.records_burst = Some(10);
        let first = Directory::from_configs(std::slice::from_ref(&c)).expect("valid");
        let acme = first.get("acme").expect("acme").clone();
        // Spent buckets: a deleted tenant is remembered until they would have refilled.
        let spent = acme
            .admission_state()
            .buckets
            .check(0, Charge::new(10, 0))
            .expect("fits");
        acme.admission_state().buckets.commit(spent);
        acme.stats().admitted(7, 70);
        assert_eq!(sum(&first), 7);
        let empty = Directory::plan::<TenantConfig>(&[])
            .expect("valid")
            .build(&first, 0);
        assert_eq!(empty.retired()[2], 7, "deleted: its records stay counted");
        assert_eq!(sum(&empty), 7);
        // Back while remembered: the same counters, counted once, as a live tenant's.
        let back = Directory::plan(std::slice::from_ref(&c))
            .expect("valid")
            .build(&empty, 0);
        assert!(Arc::ptr_eq(back.get("acme").expect("acme"), &acme));
        assert_eq!(back.retired()[2], 0);
        assert_eq!(sum(&back), 7);
        // Deleted and forgotten, then made afresh: the old counts stay retired.
        let gone = Directory::plan::<TenantConfig>(&[])
            .expect("valid")
            .build(&back, 0);
        let forgotten = Directory::plan::<TenantConfig>(&[])
            .expect("valid")
            .build(&gone, u64::MAX / 2);
        let fresh = Directory::plan(std::slice::from_ref(&c))
            .expect("valid")
            .build(&forgotten, u64::MAX / 2);
        fresh.get("acme").expect("acme").stats().admitted(1, 10);
        assert_eq!(fresh.retired()[2], 7);
        assert_eq!(sum(&fresh), 8);
    }

    #[test]
    fn a_next_plan_takes_unchanged_tenants_as_they_are_and_checks_the_changed_ones() {
        let mut a = tenant_config("ka");
        a.id = "a".into();
        a.records_per_sec = Some(10);
        let mut b = tenant_config("kb");
        b.id = "b".into();
        let (a, b) = (Arc::new(a), Arc::new(b));
        let first = Directory::plan_next(&Directory::default(), &[a.clone(), b.clone()])
            .expect("valid")
            .build(&Directory::default(), 0);
        let live_a = first.get("a").expect("a").clone();
        assert!(live_a.built_from(&a));
        // b changes (a new Arc): re-parsed and applied; a is the same tenant, untouched.
        let mut b2 = (*b).clone();
        b2.records_per_sec = Some(3);
        let b2 = Arc::new(b2);
        let next = first
            .plan_next(&[a.clone(), b2.clone()])
            .expect("valid")
            .build(&first, 0);
        assert!(Arc::ptr_eq(next.get("a").expect("a"), &live_a));
        assert_eq!(
            next.get("b").expect("b").spec().records.map(|r| r.per_sec),
            Some(3)
        );
        assert!(next.get("b").expect("b").built_from(&b2));
        assert!(next.authenticate("ka").is_some() && next.authenticate("kb").is_some());
        // A changed tenant is checked: a bad topic pattern is refused, naming it.
        let mut bad = (*b2).clone();
        bad.topics = vec!["events.[".into()]; // an unclosed glob class
        let err = next
            .plan_next(&[a, Arc::new(bad)])
            .expect_err("a bad pattern");
        assert!(err.key.starts_with("tenants[b].topics"), "{err:?}");
    }
}

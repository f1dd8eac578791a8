//! The registry of tenants, read lock-free by every request and replaced whole on a change.
//!
//! A change is two steps so that nothing live moves until the change is sure: [`Directory::plan`]
//! parses and checks every tenant's settings without touching the running tenants, and
//! [`DirectoryPlan::build`] (which cannot fail) applies them and builds the next registry.
//!
//! A tenant that is deleted is remembered until its buckets would have refilled and its
//! records left the buffer: re-created under the same id meanwhile, it carries on with the
//! same buckets and counters, so deleting and re-creating a tenant never buys a fresh burst.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::stats::{add_totals, sub_totals, Totals};
use super::{Tenant, TenantSettings};
use crate::config::{ConfigProblem, TenantConfig};
use crate::identity::{ApiKeyHash, TenantId};

/// An immutable snapshot of who is who; replaced whole when tenants or keys change.
#[derive(Debug)]
pub struct Directory {
    by_key: HashMap<ApiKeyHash, Arc<Tenant>>,
    /// Tenants by the JWTs they accept: issuer, then the value of its tenant claim (two levels,
    /// so a lookup borrows the token's strings instead of building a key).
    by_jwt: HashMap<Box<str>, HashMap<Box<str>, Arc<Tenant>>>,
    /// Tenants by the client-certificate names they accept.
    by_cert: HashMap<Box<str>, Arc<Tenant>>,
    by_id: BTreeMap<TenantId, Arc<Tenant>>,
    /// Deleted tenants whose state still matters, and until when (clock nanoseconds).
    departed: HashMap<TenantId, (Arc<Tenant>, u64)>,
    /// The counters of every tenant this process served that is not in `by_id` now (deleted,
    /// remembered or forgotten), as they were when it left: a sum over tenants plus this
    /// (the metrics' `_other`) never goes down when a tenant is deleted.
    retired: Totals,
}

impl Default for Directory {
    fn default() -> Self {
        Self {
            by_key: HashMap::new(),
            by_jwt: HashMap::new(),
            by_cert: HashMap::new(),
            by_id: BTreeMap::new(),
            departed: HashMap::new(),
            retired: [0; super::TOTALS],
        }
    }
}

/// Checked tenant settings, ready to become the live registry.
#[derive(Debug)]
pub struct DirectoryPlan(Vec<Planned>);

/// One tenant of a plan.
#[derive(Debug)]
enum Planned {
    /// New or changed settings (id, settings, credentials).
    Parsed(String, TenantSettings, Credentials),
    /// A live tenant whose configuration did not change, and its credentials.
    Same(Arc<Tenant>, Credentials),
}

/// What a tenant accepts: key digests, JWT claims, certificate names.
#[derive(Debug)]
struct Credentials {
    keys: Vec<ApiKeyHash>,
    jwt: Vec<crate::config::JwtClaim>,
    certs: Vec<String>,
}

/// A tenant's credentials, its key digests checked.
fn credentials(config: &TenantConfig) -> Result<Credentials, ConfigProblem> {
    let mut keys = Vec::with_capacity(config.api_key_sha256.len());
    for (i, h) in config.api_key_sha256.iter().enumerate() {
        keys.push(ApiKeyHash::from_hex(h).ok_or_else(|| {
            ConfigProblem::new(
                format!("tenants[{}].api_key_sha256[{i}]", config.id),
                "must be 64 lowercase hex digits",
            )
        })?);
    }
    Ok(Credentials {
        keys,
        jwt: config.jwt_claims.clone(),
        certs: config.cert_names.clone(),
    })
}

impl Directory {
    /// Builds a registry from configuration.
    pub fn from_configs<C: Borrow<TenantConfig>>(configs: &[C]) -> Result<Self, ConfigProblem> {
        Ok(Self::plan(configs)?.build(&Self::default(), 0))
    }

    /// Parses and checks `configs`; changes nothing.
    pub fn plan<C: Borrow<TenantConfig>>(configs: &[C]) -> Result<DirectoryPlan, ConfigProblem> {
        let mut planned = Vec::with_capacity(configs.len());
        for config in configs {
            let config = config.borrow();
            let settings = TenantSettings::parse(config)?;
            planned.push(Planned::Parsed(
                config.id.clone(),
                settings,
                credentials(config)?,
            ));
        }
        Ok(DirectoryPlan(planned))
    }

    /// [`Directory::plan`] for the next state of this registry: a tenant built from the very
    /// same configuration (the same `Arc`, as a registry change shares every tenant it does
    /// not touch) is taken as it is, only the others are parsed and checked. At 100,000
    /// tenants one change parses one tenant, not all of them.
    pub fn plan_next(&self, configs: &[Arc<TenantConfig>]) -> Result<DirectoryPlan, ConfigProblem> {
        let mut planned = Vec::with_capacity(configs.len());
        for config in configs {
            let creds = credentials(config)?;
            match self.by_id.get(&TenantId::new(&config.id)) {
                Some(tenant) if tenant.built_from(config) => {
                    planned.push(Planned::Same(tenant.clone(), creds));
                }
                _ => {
                    let settings = TenantSettings::parse(config)?.from_source(config.clone());
                    planned.push(Planned::Parsed(config.id.clone(), settings, creds));
                }
            }
        }
        Ok(DirectoryPlan(planned))
    }

    pub fn authenticate(&self, key: &str) -> Option<&Arc<Tenant>> {
        self.by_digest(&ApiKeyHash::of_key(key))
    }

    /// The tenant a key digest belongs to.
    pub fn by_digest(&self, digest: &ApiKeyHash) -> Option<&Arc<Tenant>> {
        self.by_key.get(digest)
    }

    /// The tenant that accepts JWTs of `issuer` whose tenant claim is `value`.
    pub fn by_jwt(&self, issuer: &str, value: &str) -> Option<&Arc<Tenant>> {
        self.by_jwt.get(issuer)?.get(value)
    }

    /// The tenant that accepts client certificates named `name`.
    pub fn by_cert(&self, name: &str) -> Option<&Arc<Tenant>> {
        self.by_cert.get(name)
    }

    pub fn get(&self, id: &str) -> Option<&Arc<Tenant>> {
        self.by_id.get(&TenantId::new(id))
    }

    pub fn tenants(&self) -> impl Iterator<Item = &Arc<Tenant>> {
        self.by_id.values()
    }

    /// The tenants from the first id at or after `from` on, in id order.
    pub fn tenants_from(&self, from: &str) -> impl Iterator<Item = &Arc<Tenant>> {
        self.by_id.range(TenantId::new(from)..).map(|(_, t)| t)
    }

    /// The counters of the tenants that left (see the field).
    pub fn retired(&self) -> &Totals {
        &self.retired
    }

    /// How many tenants there are.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

impl DirectoryPlan {
    /// The next registry: tenants `previous` already had keep their live state (bucket levels,
    /// buffer usage, counters) and get the new settings; new tenants start full.
    pub fn build(self, previous: &Directory, now_ns: u64) -> Directory {
        let mut registry = Directory::default();
        for planned in self.0 {
            let (tenant, creds) = match planned {
                Planned::Same(tenant, creds) => (tenant, creds),
                Planned::Parsed(id, settings, creds) => {
                    let returning = previous
                        .departed
                        .get(&TenantId::new(&id))
                        .map(|(tenant, _)| tenant);
                    let tenant = match previous.get(&id).or(returning) {
                        Some(existing) => {
                            existing.apply(&settings, now_ns);
                            existing.clone()
                        }
                        None => Arc::new(Tenant::new(&id, &settings)),
                    };
                    (tenant, creds)
                }
            };
            let Credentials { keys, jwt, certs } = creds;
            for key in keys {
                registry.by_key.insert(key, tenant.clone());
            }
            for claim in jwt {
                registry
                    .by_jwt
                    .entry(claim.issuer.into_boxed_str())
                    .or_default()
                    .insert(claim.value.into_boxed_str(), tenant.clone());
            }
            for name in certs {
                registry
                    .by_cert
                    .insert(name.into_boxed_str(), tenant.clone());
            }
            registry.by_id.insert(tenant.id.clone(), tenant);
        }
        let mut retired = previous.retired;
        for tenant in previous.by_id.values() {
            if !registry.by_id.contains_key(&tenant.id) {
                add_totals(&mut retired, &tenant.totals());
            }
        }
        for (tenant, _) in previous.departed.values() {
            if registry
                .by_id
                .get(&tenant.id)
                .is_some_and(|back| Arc::ptr_eq(back, tenant))
            {
                // Back with its counters: they are counted as a live tenant's again.
                sub_totals(&mut retired, &tenant.totals());
            }
        }
        registry.retired = retired;
        let gone = previous
            .by_id
            .values()
            .map(|t| (t, now_ns.saturating_add(t.full_in_ns(now_ns))))
            .chain(previous.departed.values().map(|(t, until)| (t, *until)));
        for (tenant, until) in gone {
            let remembered = until > now_ns || tenant.holds_buffer();
            if remembered && !registry.by_id.contains_key(&tenant.id) {
                registry
                    .departed
                    .insert(tenant.id.clone(), (tenant.clone(), until));
            }
        }
        registry
    }
}

/// The live registry: read lock-free by every request, swapped by registry changes.
#[derive(Debug)]
pub struct Tenants {
    live: ArcSwap<Directory>,
    /// Bumped by every swap: a holder of a long-lived credential (an open stream) sees in one
    /// load whether anything changed since it last checked.
    generation: AtomicU64,
}

impl Tenants {
    pub fn new(registry: Directory) -> Self {
        Self {
            live: ArcSwap::from_pointee(registry),
            generation: AtomicU64::new(0),
        }
    }

    pub fn load(&self) -> arc_swap::Guard<Arc<Directory>> {
        self.live.load()
    }

    pub fn replace(&self, registry: Directory) {
        self.live.store(Arc::new(registry));
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// How many times the registry has been swapped.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

//! The registry of tenants, read lock-free by every request and replaced whole on a change.
//!
//! A change is two steps so that nothing live moves until the change is sure: [`Registry::plan`]
//! parses and checks every tenant's settings without touching the running tenants, and
//! [`RegistryPlan::build`] (which cannot fail) applies them and builds the next registry.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{Tenant, TenantSettings};
use crate::config::{ConfigProblem, TenantConfig};
use crate::identity::{ApiKeyHash, TenantId};

/// An immutable snapshot of who is who; replaced whole when tenants or keys change.
#[derive(Debug, Default)]
pub struct Registry {
    by_key: HashMap<ApiKeyHash, Arc<Tenant>>,
    by_id: BTreeMap<TenantId, Arc<Tenant>>,
}

/// Checked tenant settings, ready to become the live registry.
#[derive(Debug)]
pub struct RegistryPlan(Vec<(String, TenantSettings, Vec<ApiKeyHash>)>);

impl Registry {
    /// Builds a registry from configuration.
    pub fn from_configs(configs: &[TenantConfig]) -> Result<Self, ConfigProblem> {
        Ok(Self::plan(configs)?.build(&Self::default(), 0))
    }

    /// Parses and checks `configs`; changes nothing.
    pub fn plan(configs: &[TenantConfig]) -> Result<RegistryPlan, ConfigProblem> {
        let mut planned = Vec::with_capacity(configs.len());
        for config in configs {
            let settings = TenantSettings::parse(config)?;
            let mut keys = Vec::with_capacity(config.api_key_sha256.len());
            for (i, h) in config.api_key_sha256.iter().enumerate() {
                keys.push(ApiKeyHash::from_hex(h).ok_or_else(|| {
                    ConfigProblem::new(
                        format!("tenants[{}].api_key_sha256[{i}]", config.id),
                        "must be 64 lowercase hex digits",
                    )
                })?);
            }
            planned.push((config.id.clone(), settings, keys));
        }
        Ok(RegistryPlan(planned))
    }

    pub fn authenticate(&self, key: &str) -> Option<&Arc<Tenant>> {
        self.by_key.get(&ApiKeyHash::of_key(key))
    }

    pub fn get(&self, id: &str) -> Option<&Arc<Tenant>> {
        self.by_id.get(&TenantId::new(id))
    }

    pub fn tenants(&self) -> impl Iterator<Item = &Arc<Tenant>> {
        self.by_id.values()
    }
}

impl RegistryPlan {
    /// The next registry: tenants `previous` already had keep their live state (bucket levels,
    /// buffer usage, counters) and get the new settings; new tenants start full.
    pub fn build(self, previous: &Registry, now_ns: u64) -> Registry {
        let mut registry = Registry::default();
        for (id, settings, keys) in self.0 {
            let tenant = match previous.get(&id) {
                Some(existing) => {
                    existing.apply(&settings, now_ns);
                    existing.clone()
                }
                None => Arc::new(Tenant::new(&id, &settings)),
            };
            for key in keys {
                registry.by_key.insert(key, tenant.clone());
            }
            registry.by_id.insert(tenant.id.clone(), tenant);
        }
        registry
    }
}

/// The live registry: read lock-free by every request, swapped by registry changes.
#[derive(Debug)]
pub struct Tenants(ArcSwap<Registry>);

impl Tenants {
    pub fn new(registry: Registry) -> Self {
        Self(ArcSwap::from_pointee(registry))
    }

    pub fn load(&self) -> arc_swap::Guard<Arc<Registry>> {
        self.0.load()
    }

    pub fn replace(&self, registry: Registry) {
        self.0.store(Arc::new(registry));
    }
}

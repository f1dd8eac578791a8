//! The registry of tenants, read lock-free by every request and replaced whole on a change.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{ApiKeyHash, Tenant, TenantId};
use crate::config::{ConfigProblem, TenantConfig};

/// An immutable snapshot of who is who; replaced whole when tenants or keys change.
#[derive(Debug, Default)]
pub struct Registry {
    by_key: HashMap<ApiKeyHash, Arc<Tenant>>,
    by_id: BTreeMap<TenantId, Arc<Tenant>>,
}

impl Registry {
    /// Builds a registry from configuration; the configuration was validated before.
    pub fn from_configs(configs: &[TenantConfig]) -> Result<Self, ConfigProblem> {
        Self::rebuild(configs, &Self::default(), 0)
    }

    /// A registry for `configs` that keeps the live state (bucket levels, buffer usage,
    /// counters) of every tenant `previous` already had.
    pub fn rebuild(
        configs: &[TenantConfig],
        previous: &Registry,
        now_ns: u64,
    ) -> Result<Self, ConfigProblem> {
        let mut registry = Self::default();
        for config in configs {
            let tenant = match previous.get(&config.id) {
                Some(existing) => {
                    existing.apply(config, now_ns)?;
                    existing.clone()
                }
                None => Arc::new(Tenant::from_config(config)?),
            };
            registry.insert(config, tenant)?;
        }
        Ok(registry)
    }

    fn insert(&mut self, config: &TenantConfig, tenant: Arc<Tenant>) -> Result<(), ConfigProblem> {
        for (i, h) in config.api_key_sha256.iter().enumerate() {
            let hash = ApiKeyHash::from_hex(h).ok_or_else(|| {
                ConfigProblem::new(
                    format!("tenants[{}].api_key_sha256[{i}]", config.id),
                    "must be 64 lowercase hex digits",
                )
            })?;
            self.by_key.insert(hash, tenant.clone());
        }
        self.by_id.insert(tenant.id.clone(), tenant);
        Ok(())
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

/// The live registry: read lock-free by every request, swapped by admin changes.
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

//! Each key's version — how many changes made it — and what a change expects of it: the
//! optimistic concurrency an `If-Match` asks for, compared by the store, not by its callers.

use std::sync::Arc;

use super::log::EntryKey;
use super::state::RegistryState;
use super::ChangeError;
use crate::config::TenantConfig;

/// What a change expects: its key still at the version the client read (an `If-Match`).
/// Compared by the store under the lock its change holds, so no change of this replica comes
/// between the comparison and the change; across replicas the topic's order decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub key: EntryKey,
    pub version: u64,
}

impl Expected {
    /// The live tenant `id` at `version`.
    pub fn tenant(id: &str, version: u64) -> Self {
        Self {
            key: EntryKey::tenant(id),
            version,
        }
    }

    pub(super) fn check(&self, state: &RegistryState) -> Result<(), ChangeError> {
        let current = state.version(&self.key);
        if current == self.version {
            Ok(())
        } else {
            Err(ChangeError::Conflict {
                key: self.key.clone(),
                current,
            })
        }
    }
}

/// A tenant's configuration (the registry's own, shared) with its version, what an `If-Match`
/// names.
#[derive(Debug, Clone)]
pub struct VersionedTenant {
    pub config: Arc<TenantConfig>,
    pub version: u64,
}

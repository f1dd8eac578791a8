//! Audit events: one per registry change, with who made it, what it was, and the parts of the
//! state before and after (keys appear as key ids only — the first 16 hex digits of their
//! unsalted digest: they name a key and keep the full digest out of logs and lists, but like
//! the digest they let a reader test a guessed key, so only long random keys are safe to show
//! them for; tokens never appear).

use super::log::EntryKey;
use super::state::RegistryState;
use crate::config::TenantConfig;
use crate::identity::ApiKeyHash;

/// A tenant as audit lists and logs show it: its key digests replaced by key ids.
pub fn tenant_view(tenant: &TenantConfig) -> serde_json::Value {
    let mut view = serde_json::json!(tenant);
    if let Some(map) = view.as_object_mut() {
        let ids: Vec<String> = tenant
            .api_key_sha256
            .iter()
            .map(|hex| {
                ApiKeyHash::from_hex(hex).map_or_else(|| "invalid".into(), ApiKeyHash::key_id)
            })
            .collect();
        map.remove("api_key_sha256");
        map.insert("key_ids".into(), serde_json::json!(ids));
    }
    view
}

/// Who made a change: an admin token's id, or `sighup` for a reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor(String);

impl Actor {
    pub fn new(id: &str) -> Self {
        Self(id.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Emits the audit event for a change from `before` to `after`.
pub fn record(actor: &Actor, action: &str, before: &RegistryState, after: &RegistryState) {
    // Debug formatting: names from the registry topic are escaped, never raw control bytes.
    tracing::info!(
        target: "floodgate::audit",
        actor = ?actor.0,
        action = ?action,
        before = %diff_json(before, after, true),
        after = %diff_json(before, after, false),
        "registry change"
    );
}

/// Emits the audit event for one entry of the shared registry that applied: `key` from
/// `before` to `after` (as [`super::shared::value_of`] shows them).
pub fn record_entry(
    actor: &Actor,
    action: &str,
    key: &str,
    before: &serde_json::Value,
    after: &serde_json::Value,
) {
    tracing::info!(
        target: "floodgate::audit",
        actor = ?actor.0,
        action = ?action,
        before = %serde_json::json!({ key: before }),
        after = %serde_json::json!({ key: after }),
        "registry change"
    );
}

/// The parts of the state that differ, as JSON, from one side.
fn diff_json(before: &RegistryState, after: &RegistryState, old: bool) -> String {
    let mut out = serde_json::Map::new();
    let side = if old { before } else { after };
    if before.global != after.global {
        out.insert("global".into(), serde_json::json!(side.global));
    }
    let ids: std::collections::BTreeSet<&String> =
        before.tenants.keys().chain(after.tenants.keys()).collect();
    for id in ids {
        if before.tenants.get(id) != after.tenants.get(id) {
            out.insert(
                EntryKey::tenant(id).to_string(),
                side.tenants
                    .get(id)
                    .map_or(serde_json::Value::Null, |t| tenant_view(t)),
            );
        }
    }
    serde_json::Value::Object(out).to_string()
}

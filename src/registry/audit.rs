//! Audit events: one per registry change, with who made it, what it was, and the parts of the
//! state before and after (keys appear as digests only; tokens never appear).

use super::state::RegistryState;

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
    tracing::info!(
        target: "floodgate::audit",
        actor = %actor.0,
        action,
        before = %diff_json(before, after, true),
        after = %diff_json(before, after, false),
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
                format!("tenant:{id}"),
                serde_json::json!(side.tenants.get(id)),
            );
        }
    }
    serde_json::Value::Object(out).to_string()
}

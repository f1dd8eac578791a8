use std::collections::BTreeSet;

use super::*;
use crate::config::{JwtClaim, Priority};

/// A field added to `TenantConfig` is one an operator sets through this API too (or is
/// named here as one it does not): the body, the patch's list and openapi.json follow.
#[test]
fn the_body_is_the_config_without_its_id_and_keys() {
    let schema = schemars::schema_for!(TenantConfig);
    let config: BTreeSet<String> = schema.as_value()["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .filter(|k| !["id", "api_key_sha256"].contains(&k.as_str()))
        .cloned()
        .collect();
    let every_field_set = TenantConfig {
        id: "a".into(),
        topics: vec!["t".into()],
        records_per_sec: Some(1),
        records_burst: Some(1),
        bytes_per_sec: Some(1),
        bytes_burst: Some(1),
        max_buffer_share: Some(0.5),
        priority: Some(Priority::Batch),
        jwt_claims: vec![JwtClaim::default()],
        cert_names: vec!["c".into()],
        budget_mode: crate::config::LimitMode::Shadow,
        quotas: vec![crate::config::QuotaConfig {
            window: crate::config::WindowName::Day,
            records: Some(1),
            bytes: None,
            mode: crate::config::LimitMode::Shadow,
        }],
        ..TenantConfig::default()
    };
    let body = serde_json::to_value(TenantBody::of(&every_field_set)).expect("JSON");
    let sent: BTreeSet<String> = body
        .as_object()
        .expect("object")
        .keys()
        .filter(|k| *k != "id")
        .cloned()
        .collect();
    assert_eq!(sent, config);
    let patchable: BTreeSet<String> = SETTINGS.iter().map(|f| f.to_string()).collect();
    assert_eq!(patchable, config);
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json"))
        .expect("openapi.json");
    let spec: Value = serde_json::from_str(&text).expect("JSON");
    for name in ["TenantSettings", "TenantPatch"] {
        let documented: BTreeSet<String> = spec["components"]["schemas"][name]["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .cloned()
            .collect();
        assert_eq!(documented, config, "openapi.json's {name}");
    }
}

use std::sync::Arc;

use super::*;
use crate::budget::ManualClock;
use crate::config::TenantConfig;

fn store() -> RegistryStore {
    let acme = TenantConfig {
        id: "acme".into(),
        topics: vec!["t.*".into()],
        ..TenantConfig::default()
    };
    let file = FilePart {
        tenants: [("acme".to_string(), Arc::new(acme))].into(),
        ..FilePart::default()
    };
    RegistryStore::open(file, Box::new(InMemory), Arc::new(ManualClock::new())).expect("opens")
}

fn rate(r: u64) -> impl FnOnce(&mut RegistryState) -> Result<(), ChangeError> {
    move |state| {
        let acme = state.tenants.get_mut("acme").expect("acme");
        Arc::make_mut(acme).records_per_sec = Some(r);
        Ok(())
    }
}

async fn rate_and_version(store: &RegistryStore) -> (Option<u64>, u64) {
    store
        .read(|s| {
            let version = s.version(&EntryKey::tenant("acme"));
            (s.tenants["acme"].records_per_sec, version)
        })
        .await
}

/// An `If-Match` is the store's to compare: a change from an older version is a typed
/// conflict naming the key and its version now, and its edit never runs.
#[tokio::test]
async fn a_change_expecting_another_version_is_a_conflict_and_changes_nothing() {
    let store = store();
    let actor = Actor::new("test");
    let at = |v| Some(Expected::tenant("acme", v));
    store
        .change_if(&actor, "t", at(0), rate(10))
        .await
        .expect("at 0");
    assert_eq!(rate_and_version(&store).await, (Some(10), 1));
    assert_eq!(
        store.change_if(&actor, "t", at(0), rate(20)).await,
        Err(ChangeError::Conflict {
            key: EntryKey::tenant("acme"),
            current: 1
        })
    );
    let never = |_: &mut RegistryState| -> Result<(), ChangeError> { panic!("edit ran") };
    assert!(store.change_if(&actor, "t", at(7), never).await.is_err());
    assert_eq!(rate_and_version(&store).await, (Some(10), 1));
    store
        .change_if(&actor, "t", at(1), rate(30))
        .await
        .expect("at 1");
    store
        .change(&actor, "t", rate(40))
        .await
        .expect("unconditional");
    assert_eq!(rate_and_version(&store).await, (Some(40), 3));
}

/// An admin read of one tenant takes that tenant's config (shared, not copied) and version,
/// not a copy of every tenant.
#[tokio::test]
async fn one_tenant_is_read_with_its_version_and_nothing_else_is_copied() {
    let store = store();
    store
        .change(&Actor::new("test"), "t", rate(5))
        .await
        .expect("changes");
    let acme = store.tenant("acme").await.expect("acme");
    assert_eq!((acme.config.records_per_sec, acme.version), (Some(5), 1));
    let held = store.read(|s| s.tenants["acme"].clone()).await;
    assert!(
        Arc::ptr_eq(&acme.config, &held),
        "the registry's own config"
    );
    assert!(store.tenant("nobody").await.is_none());
}

//! `/admin/tenants/{id}/keys`: a tenant's API keys, issued (shown in the clear once) and
//! revoked by key id.

use std::sync::Arc;

use axum::extract::State;

use crate::http::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::json;

use super::api::{change, key_id, AppRef};
use super::tenants::not_found;
use crate::identity::ApiKeyHash;
use crate::outcome::AdminError;
use crate::registry::{Actor, ChangeError};

/// Issues a new random key: returned in the clear this once, stored only as its SHA-256.
pub async fn issue(
    State(app): AppRef,
    Extension(actor): Extension<Actor>,
    Path(id): Path<String>,
) -> Result<Response, AdminError> {
    let key = crate::identity::random_key("fg_").map_err(|e| {
        tracing::error!(error = %e, "no randomness for a new API key");
        AdminError::StateNotSaved
    })?;
    let digest = ApiKeyHash::of_key(&key).to_hex();
    let kid = key_id(&digest);
    change(&app, &actor, "tenant.key.issue", |state| {
        let tenant = state.tenants.get_mut(&id).ok_or_else(|| not_found(&id))?;
        Arc::make_mut(tenant).api_key_sha256.push(digest);
        Ok(())
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"tenant": id, "key_id": kid, "api_key": key})),
    )
        .into_response())
}

pub async fn revoke(
    State(app): AppRef,
    Extension(actor): Extension<Actor>,
    Path((id, kid)): Path<(String, String)>,
) -> Result<Response, AdminError> {
    change(&app, &actor, "tenant.key.revoke", |state| {
        let tenant = Arc::make_mut(state.tenants.get_mut(&id).ok_or_else(|| not_found(&id))?);
        let before = tenant.api_key_sha256.len();
        tenant.api_key_sha256.retain(|h| key_id(h) != kid);
        if tenant.api_key_sha256.len() == before {
            return Err(ChangeError::KeyNotFound(kid.clone()).into());
        }
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

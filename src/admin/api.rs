//! What the admin API's handlers share: JSON bodies and query strings in, registry changes
//! out. Every change goes through the [`crate::registry::RegistryStore`], which validates,
//! persists and audits it; the handlers only translate between HTTP and registry changes
//! (tenants in `tenants`, their keys in `keys`, the global budget and audit in `global`).

use std::sync::Arc;

use axum::extract::State;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::app::AppState;
use crate::outcome::{AdminError, ApiError};
use crate::registry::{Actor, Expected, RegistryState};

/// Parses a JSON body: bad JSON is a 400, a value of the wrong type is a 422 naming its field.
/// Bodies are JSON objects: anything else (an array serde would read as a struct's fields in
/// order, a bare number) is a 400.
pub(super) fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, AdminError> {
    let json: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::Malformed(e.to_string()))?;
    if !json.is_object() {
        return Err(ApiError::Malformed("the body must be a JSON object".into()).into());
    }
    let value = serde_path_to_error::deserialize(json).map_err(|e| {
        let mut field = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_data() {
            let detail = strip_position(&inner.to_string());
            // A missing field is reported at the parent: name the field itself.
            if let Some(name) = detail
                .strip_prefix("missing field `")
                .and_then(|rest| rest.split('`').next())
            {
                field = if field == "." {
                    name.to_string()
                } else {
                    format!("{field}.{name}")
                };
            }
            AdminError::InvalidField { field, detail }
        } else {
            ApiError::Malformed(inner.to_string()).into()
        }
    })?;
    Ok(value)
}

fn strip_position(message: &str) -> String {
    message
        .rsplit_once(" at line ")
        .map_or(message, |(m, _)| m)
        .to_string()
}

/// A key's id: the first 16 hex digits of its unsalted SHA-256 digest.
pub use crate::identity::key_id;

pub(super) type AppRef = State<Arc<AppState>>;

/// The query parameters of a route, decoded; a malformed query or a parameter the route does
/// not take is a 422 naming it.
pub(super) fn params(
    query: Option<&str>,
    allowed: &[&str],
) -> Result<Vec<(String, String)>, AdminError> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query.unwrap_or("")).map_err(|e| AdminError::InvalidField {
            field: "query".into(),
            detail: format!("is not a valid query string: {e}"),
        })?;
    if let Some((name, _)) = pairs.iter().find(|(n, _)| !allowed.contains(&n.as_str())) {
        return Err(AdminError::InvalidField {
            field: name.clone(),
            detail: format!(
                "is not a parameter of this route (only {})",
                allowed.join(", ")
            ),
        });
    }
    Ok(pairs)
}

pub(super) async fn change<T>(
    app: &AppState,
    actor: &Actor,
    action: &str,
    edit: impl FnOnce(&mut RegistryState) -> Result<T, AdminError>,
) -> Result<T, AdminError> {
    app.registry.change(actor, action, edit).await
}

/// A change made only while `expected` holds (an `If-Match`): the store compares it.
pub(super) async fn change_if<T>(
    app: &AppState,
    actor: &Actor,
    action: &str,
    expected: Option<Expected>,
    edit: impl FnOnce(&mut RegistryState) -> Result<T, AdminError>,
) -> Result<T, AdminError> {
    app.registry.change_if(actor, action, expected, edit).await
}

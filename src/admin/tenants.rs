//! `/admin/tenants`: tenants' settings and live state, read a page at a time and changed one
//! at a time, with `ETag` / `If-Match` versions so two operators cannot overwrite each other.

use std::sync::Arc;

use axum::extract::State;

use crate::http::extract::{Body, Path};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::api::{change_if, key_id, params, parse, AppRef};
use crate::app::AppState;
use crate::config::{whole_number, TenantConfig};
use crate::outcome::{AdminError, ApiError};
use crate::refusal::Reason;
use crate::registry::{Actor, ChangeError, EntryKey, Expected};

/// A tenant's configuration and live state.
#[derive(Serialize)]
struct TenantView {
    /// The tenant's version: send it back as `If-Match` to change it only if nobody else has.
    version: u64,
    #[serde(flatten)]
    config: TenantBody,
    keys: Vec<KeyView>,
    live: Value,
    /// Valid but costly settings, said with what they cost clients (a burst below its rate).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<Warning>,
}

#[derive(Serialize)]
struct Warning {
    field: &'static str,
    detail: String,
}

#[derive(Serialize)]
struct KeyView {
    key_id: String,
}

/// The parts of a tenant an operator sets (keys are managed through their own endpoints):
/// `TenantConfig` without its keys, its id shown but never taken from a body. Its own struct,
/// not the config itself: serde's answer to an unknown field lists the fields the body takes
/// (the config's would add `id` and `api_key_sha256`), and that answer is the API's. The test
/// below keeps the two the same fields, with `SETTINGS` and openapi.json's schemas.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantBody {
    #[serde(default, skip_deserializing)]
    id: String,
    topics: Vec<String>,
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    records_per_sec: Option<u64>,
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    records_burst: Option<u64>,
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    bytes_per_sec: Option<u64>,
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    bytes_burst: Option<u64>,
    /// Calendar quotas; a change keeps what each window has used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    quotas: Vec<crate::config::QuotaConfig>,
    /// `shadow`: the records and bytes budgets only count what they would refuse.
    #[serde(default, skip_serializing_if = "crate::config::LimitMode::is_enforce")]
    budget_mode: crate::config::LimitMode,
    #[serde(default)]
    max_buffer_share: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    priority: Option<crate::config::Priority>,
    /// JWTs this tenant accepts (issuer and tenant-claim value): registry state like keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    jwt_claims: Vec<crate::config::JwtClaim>,
    /// Client-certificate names this tenant accepts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    cert_names: Vec<String>,
}

impl TenantBody {
    fn of(c: &TenantConfig) -> Self {
        Self {
            id: c.id.clone(),
            topics: c.topics.clone(),
            records_per_sec: c.records_per_sec,
            records_burst: c.records_burst,
            bytes_per_sec: c.bytes_per_sec,
            bytes_burst: c.bytes_burst,
            quotas: c.quotas.clone(),
            budget_mode: c.budget_mode,
            max_buffer_share: c.max_buffer_share,
            priority: c.priority,
            jwt_claims: c.jwt_claims.clone(),
            cert_names: c.cert_names.clone(),
        }
    }

    fn into_config(self, id: &str, keys: Vec<String>) -> TenantConfig {
        TenantConfig {
            id: id.to_string(),
            api_key_sha256: keys,
            topics: self.topics,
            records_per_sec: self.records_per_sec,
            records_burst: self.records_burst,
            bytes_per_sec: self.bytes_per_sec,
            bytes_burst: self.bytes_burst,
            quotas: self.quotas,
            budget_mode: self.budget_mode,
            max_buffer_share: self.max_buffer_share,
            priority: self.priority,
            jwt_claims: self.jwt_claims,
            cert_names: self.cert_names,
        }
    }
}

pub(super) fn not_found(id: &str) -> AdminError {
    ChangeError::TenantNotFound(id.to_string()).into()
}

fn view(app: &AppState, config: &TenantConfig, version: u64) -> TenantView {
    use std::sync::atomic::Ordering::Relaxed;
    let directory = app.ingest.tenants.load();
    let live = directory.get(&config.id).map_or(Value::Null, |t| {
        let limits = app.ingest.view(t);
        let idle = crate::tenant::TenantStats::default();
        let stats = t.stats_if_any().map_or(&idle, |s| &**s);
        let rejected: serde_json::Map<String, Value> = Reason::ALL
            .iter()
            .map(|r| (r.as_str().to_string(), json!(stats.rejected_count(*r))))
            .collect();
        json!({
            "tokens": {
                "records": limits.tenant.records.map(|v| v.available),
                "bytes": limits.tenant.bytes.map(|v| v.available),
            },
            "buffer": {
                "bytes": t.usage.bytes.load(Relaxed),
                "records": t.usage.records.load(Relaxed),
            },
            "admitted": {
                "requests": stats.admitted_requests.load(Relaxed),
                "records": stats.admitted_records.load(Relaxed),
                "bytes": stats.admitted_bytes.load(Relaxed),
            },
            "failed_records": stats.failed_records.load(Relaxed),
            "rejected": rejected,
        })
    });
    TenantView {
        version,
        config: TenantBody::of(config),
        keys: config
            .api_key_sha256
            .iter()
            .map(|h| KeyView { key_id: key_id(h) })
            .collect(),
        live,
        warnings: warnings(app, config),
    }
}

/// What the tenant's settings cost its clients, as `check-config` warns it.
fn warnings(app: &AppState, config: &TenantConfig) -> Vec<Warning> {
    let max_wait = app.ingest.admission.waits.max_wait;
    let wait = crate::config::WaitConfig {
        max_ms: u64::try_from(max_wait.as_millis()).unwrap_or(u64::MAX),
        ..crate::config::WaitConfig::default()
    };
    crate::config::burst_costs(config, &wait)
        .into_iter()
        .map(|(field, detail)| Warning { field, detail })
        .collect()
}

/// A page of tenants: at most this many by default, and at most this many when asked.
const PAGE_DEFAULT: usize = 100;
const PAGE_MAX: usize = 1000;

/// `GET /admin/tenants?limit=&after=&prefix=`: tenants in id order, a page at a time. `after`
/// is the cursor (the last id of the previous page, exclusive), so every tenant that exists
/// while a client pages through is listed exactly once, whatever is added or deleted
/// meanwhile; `next` is the cursor of the following page, `null` on the last.
pub async fn list(
    State(app): AppRef,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Result<Response, AdminError> {
    let (mut limit, mut after, mut prefix) = (PAGE_DEFAULT, None::<String>, String::new());
    for (name, value) in params(query.as_deref(), &["limit", "after", "prefix"])? {
        match name.as_str() {
            "limit" => {
                limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=PAGE_MAX).contains(n))
                    .ok_or_else(|| AdminError::InvalidField {
                        field: "limit".into(),
                        detail: format!("must be from 1 to {PAGE_MAX}, not {value:?}"),
                    })?;
            }
            "after" => after = Some(value),
            _ => prefix = value,
        }
    }
    let (page, more) = app
        .registry
        .read(|state| {
            use std::ops::Bound::{Excluded, Included, Unbounded};
            let start = match &after {
                Some(a) if a.as_str() >= prefix.as_str() => Excluded(a.clone()),
                _ => Included(prefix.clone()),
            };
            let mut page: Vec<(Arc<TenantConfig>, u64)> = Vec::with_capacity(limit);
            let mut more = false;
            for (id, config) in state.tenants.range::<String, _>((start, Unbounded)) {
                if !id.starts_with(&prefix) {
                    break;
                }
                if page.len() == limit {
                    more = true;
                    break;
                }
                page.push((config.clone(), state.version(&EntryKey::tenant(id))));
            }
            (page, more)
        })
        .await;
    let next = more
        .then(|| page.last().map(|(c, _)| c.id.clone()))
        .flatten();
    let views: Vec<TenantView> = page.iter().map(|(c, v)| view(&app, c, *v)).collect();
    Ok(Json(json!({ "tenants": views, "next": next })).into_response())
}

pub async fn get(State(app): AppRef, Path(id): Path<String>) -> Result<Response, AdminError> {
    tenant_response(&app, &id, StatusCode::OK).await
}

fn with_etag(mut response: Response, version: u64) -> Response {
    if let Ok(v) = axum::http::HeaderValue::from_str(&format!("\"{version}\"")) {
        response.headers_mut().insert(axum::http::header::ETAG, v);
    }
    response
}

/// The tenant version an `If-Match` header asks for (`"3"`, `W/"3"` or `3`; `*` asks for
/// none), for the store to compare.
fn if_match(headers: &axum::http::HeaderMap, id: &str) -> Result<Option<Expected>, AdminError> {
    let Some(value) = headers.get(axum::http::header::IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim();
    if text == "*" {
        return Ok(None);
    }
    let bare = text.trim_start_matches("W/").trim_matches('"');
    bare.parse::<u64>()
        .map(|version| Some(Expected::tenant(id, version)))
        .map_err(|_| AdminError::InvalidField {
            field: "If-Match".into(),
            detail: format!("must be a tenant version such as \"3\" (from ETag), not {text:?}"),
        })
}

async fn tenant_response(
    app: &AppState,
    id: &str,
    status: StatusCode,
) -> Result<Response, AdminError> {
    let tenant = app.registry.tenant(id).await.ok_or_else(|| not_found(id))?;
    Ok(with_etag(
        (status, Json(view(app, &tenant.config, tenant.version))).into_response(),
        tenant.version,
    ))
}

/// Create or replace a tenant's settings; its keys are kept.
pub async fn put(
    State(app): AppRef,
    Extension(actor): Extension<Actor>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Result<Response, AdminError> {
    let expected = if_match(&headers, &id)?;
    let settings: TenantBody = parse(&body)?;
    quotas_counted_here(&app, &settings)?;
    let created = change_if(&app, &actor, "tenant.put", expected, |state| {
        let keys = state
            .tenants
            .get(&id)
            .map(|t| t.api_key_sha256.clone())
            .unwrap_or_default();
        let created = !state.tenants.contains_key(&id);
        state
            .tenants
            .insert(id.clone(), Arc::new(settings.into_config(&id, keys)));
        Ok(created)
    })
    .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    tenant_response(&app, &id, status).await
}

/// Change some fields: a JSON merge patch (RFC 7396) of the tenant's settings; `null` unsets.
pub async fn patch(
    State(app): AppRef,
    Extension(actor): Extension<Actor>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Result<Response, AdminError> {
    let expected = if_match(&headers, &id)?;
    let patch: serde_json::Map<String, Value> = parse(&body)?;
    let patch = checked_patch(patch)?;
    change_if(&app, &actor, "tenant.patch", expected, |state| {
        let current = state.tenants.get(&id).ok_or_else(|| not_found(&id))?;
        let mut merged = serde_json::to_value(TenantBody::of(current))
            .map_err(|e| ApiError::Malformed(e.to_string()))?;
        if let Value::Object(fields) = &mut merged {
            fields.remove("id");
            for (name, value) in patch {
                if value.is_null() {
                    fields.remove(&name);
                } else {
                    fields.insert(name, value);
                }
            }
        }
        let settings: TenantBody = parse(merged.to_string().as_bytes())?;
        quotas_counted_here(&app, &settings)?;
        let keys = current.api_key_sha256.clone();
        state
            .tenants
            .insert(id.clone(), Arc::new(settings.into_config(&id, keys)));
        Ok(())
    })
    .await?;
    tenant_response(&app, &id, StatusCode::OK).await
}

/// Quotas only where one replica counts them (`config::COUNTED_APART`).
fn quotas_counted_here(app: &AppState, settings: &TenantBody) -> Result<(), AdminError> {
    if app.quotas.counts_apart && !settings.quotas.is_empty() {
        return Err(AdminError::InvalidField {
            field: "quotas".into(),
            detail: crate::config::COUNTED_APART.into(),
        });
    }
    Ok(())
}

/// The fields of [`TenantBody`], what a patch may name.
const SETTINGS: [&str; 11] = [
    "topics",
    "records_per_sec",
    "records_burst",
    "bytes_per_sec",
    "bytes_burst",
    "quotas",
    "budget_mode",
    "max_buffer_share",
    "priority",
    "jwt_claims",
    "cert_names",
];

/// A patch that always leaves a valid tenant when its values are valid: topics cannot be
/// unset, a burst is changed together with its rate, and unsetting a rate unsets its burst.
fn checked_patch(
    mut patch: serde_json::Map<String, Value>,
) -> Result<serde_json::Map<String, Value>, AdminError> {
    if let Some(unknown) = patch.keys().find(|k| !SETTINGS.contains(&k.as_str())) {
        return Err(AdminError::InvalidField {
            field: unknown.clone(),
            detail: format!("unknown field; a tenant has {}", SETTINGS.join(", ")),
        });
    }
    if patch.get("topics").is_some_and(Value::is_null) {
        return Err(AdminError::InvalidField {
            field: "topics".into(),
            detail: "cannot be unset: a tenant writes to at least one topic pattern".into(),
        });
    }
    for unit in ["records", "bytes"] {
        let (rate, burst) = (format!("{unit}_per_sec"), format!("{unit}_burst"));
        if patch.get(&burst).is_some_and(|b| !b.is_null()) && !patch.contains_key(&rate) {
            return Err(AdminError::InvalidField {
                field: burst,
                detail: format!("is changed together with {rate} (send both)"),
            });
        }
        if patch.get(&rate).is_some_and(Value::is_null) {
            // Unsetting a rate unsets its burst; a burst sent beside it must still be a burst.
            let max = crate::budget::MAX_BURST as f64;
            let valid = |v: &Value| {
                v.is_null()
                    || v.as_f64()
                        .is_some_and(|x| x.fract() == 0.0 && (1.0..=max).contains(&x))
            };
            if let Some(bad) = patch.get(&burst).filter(|v| !valid(v)) {
                return Err(AdminError::InvalidField {
                    field: burst,
                    detail: format!(
                        "{bad} is not a whole number from 1 to {}",
                        crate::budget::MAX_BURST
                    ),
                });
            }
            patch.insert(burst, Value::Null);
        }
    }
    Ok(patch)
}

pub async fn delete(
    State(app): AppRef,
    Extension(actor): Extension<Actor>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
) -> Result<Response, AdminError> {
    let expected = if_match(&headers, &id)?;
    change_if(&app, &actor, "tenant.delete", expected, |state| {
        state
            .tenants
            .remove(&id)
            .map(|_| ())
            .ok_or_else(|| not_found(&id))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests;

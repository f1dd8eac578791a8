//! Admin API handlers: tenants, their keys, the global budget. JSON in and out; every change
//! goes through the [`crate::registry::RegistryStore`], which validates, persists and audits
//! it. This module only translates between HTTP and registry changes.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::app::AppState;
use crate::config::{whole_number, GlobalBudgetConfig, TenantConfig};
use crate::identity::ApiKeyHash;
use crate::outcome::ApiError;
use crate::refusal::Reason;
use crate::registry::{Actor, ChangeError, RegistryState};

/// Parses a JSON body: bad JSON is a 400, a value of the wrong type is a 422 naming its field.
/// Bodies are JSON objects: anything else (an array serde would read as a struct's fields in
/// order, a bare number) is a 400.
pub(super) fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let json: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::Malformed(e.to_string()))?;
    if !json.is_object() {
        return Err(ApiError::Malformed("the body must be a JSON object".into()));
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
            ApiError::InvalidField { field, detail }
        } else {
            ApiError::Malformed(inner.to_string())
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

/// A key's id: the first 16 hex digits of its unsalted SHA-256 digest (see
/// `ApiKeyHash::key_id`: it names a key; it does not stop a guessed key being tested).
pub fn key_id(digest_hex: &str) -> String {
    digest_hex.chars().take(16).collect()
}

/// A tenant's configuration and live state.
#[derive(Serialize)]
struct TenantView {
    /// The tenant's version: send it back as `If-Match` to change it only if nobody else has.
    version: u64,
    #[serde(flatten)]
    config: TenantBody,
    keys: Vec<KeyView>,
    live: Value,
}

#[derive(Serialize)]
struct KeyView {
    key_id: String,
}

/// The parts of a tenant an operator sets (keys are managed through their own endpoints).
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
            max_buffer_share: self.max_buffer_share,
            priority: self.priority,
            jwt_claims: self.jwt_claims,
            cert_names: self.cert_names,
        }
    }
}

fn not_found(id: &str) -> ApiError {
    ChangeError::TenantNotFound(id.to_string()).into()
}

fn view(app: &AppState, config: &TenantConfig, version: u64) -> TenantView {
    use std::sync::atomic::Ordering::Relaxed;
    let registry = app.ingest.tenants.load();
    let live = registry.get(&config.id).map_or(Value::Null, |t| {
        let limits = app.ingest.view(t);
        let idle = crate::tenant::TenantStats::default();
        let stats = t.stats_if_any().map_or(&idle, |s| &**s);
        let rejected: serde_json::Map<String, Value> = Reason::ALL
            .iter()
            .map(|r| (r.as_str().to_string(), json!(stats.rejected_count(*r))))
            .collect();
        json!({
            "tokens": {
                "records": limits.tenant_records.map(|v| v.available),
                "bytes": limits.tenant_bytes.map(|v| v.available),
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
    }
}

pub(super) type AppRef = State<Arc<AppState>>;

/// The query parameters of a route, decoded; a malformed query or a parameter the route does
/// not take is a 422 naming it.
pub(super) fn params(
    query: Option<&str>,
    allowed: &[&str],
) -> Result<Vec<(String, String)>, ApiError> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query.unwrap_or("")).map_err(|e| ApiError::InvalidField {
            field: "query".into(),
            detail: format!("is not a valid query string: {e}"),
        })?;
    if let Some((name, _)) = pairs.iter().find(|(n, _)| !allowed.contains(&n.as_str())) {
        return Err(ApiError::InvalidField {
            field: name.clone(),
            detail: format!(
                "is not a parameter of this route (only {})",
                allowed.join(", ")
            ),
        });
    }
    Ok(pairs)
}

/// A page of tenants: at most this many by default, and at most this many when asked.
const PAGE_DEFAULT: usize = 100;
const PAGE_MAX: usize = 1000;

/// `GET /admin/tenants?limit=&after=&prefix=`: tenants in id order, a page at a time. `after`
/// is the cursor (the last id of the previous page, exclusive), so every tenant that exists
/// while a client pages through is listed exactly once, whatever is added or deleted
/// meanwhile; `next` is the cursor of the following page, `null` on the last.
pub async fn list_tenants(
    State(app): AppRef,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Result<Response, ApiError> {
    let (mut limit, mut after, mut prefix) = (PAGE_DEFAULT, None::<String>, String::new());
    for (name, value) in params(query.as_deref(), &["limit", "after", "prefix"])? {
        match name.as_str() {
            "limit" => {
                limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=PAGE_MAX).contains(n))
                    .ok_or_else(|| ApiError::InvalidField {
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
            let mut page: Vec<(TenantConfig, u64)> = Vec::with_capacity(limit);
            let mut more = false;
            for (id, config) in state.tenants.range::<String, _>((start, Unbounded)) {
                if !id.starts_with(&prefix) {
                    break;
                }
                if page.len() == limit {
                    more = true;
                    break;
                }
                page.push(((**config).clone(), tenant_version(state, id)));
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

pub async fn get_tenant(State(app): AppRef, Path(id): Path<String>) -> Result<Response, ApiError> {
    let found = app
        .registry
        .read(|state| {
            let config = state.tenants.get(&id)?.clone();
            Some((config, tenant_version(state, &id)))
        })
        .await;
    let (config, version) = found.ok_or_else(|| not_found(&id))?;
    Ok(with_etag(
        Json(view(&app, &config, version)).into_response(),
        version,
    ))
}

/// A tenant's version in the registry (0: never changed since this registry started).
fn tenant_version(state: &RegistryState, id: &str) -> u64 {
    state
        .versions
        .get(&format!("tenant:{id}"))
        .copied()
        .unwrap_or(0)
}

fn with_etag(mut response: Response, version: u64) -> Response {
    if let Ok(v) = axum::http::HeaderValue::from_str(&format!("\"{version}\"")) {
        response.headers_mut().insert(axum::http::header::ETAG, v);
    }
    response
}

/// The version an `If-Match` header asks for (`"3"`, `W/"3"` or `3`; `*` asks for none).
fn if_match(headers: &axum::http::HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get(axum::http::header::IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim();
    if text == "*" {
        return Ok(None);
    }
    let bare = text.trim_start_matches("W/").trim_matches('"');
    bare.parse::<u64>()
        .map(Some)
        .map_err(|_| ApiError::InvalidField {
            field: "If-Match".into(),
            detail: format!("must be a tenant version such as \"3\" (from ETag), not {text:?}"),
        })
}

/// Refuses the change when the tenant is no longer at the version the client read.
fn expect_version(state: &RegistryState, id: &str, expected: Option<u64>) -> Result<(), ApiError> {
    match expected {
        Some(v) if tenant_version(state, id) != v => Err(ChangeError::Conflict {
            key: format!("tenant:{id}"),
            current: tenant_version(state, id),
        }
        .into()),
        _ => Ok(()),
    }
}

/// `GET /admin/audit?since=OFFSET`: the shared registry's recent changes (applied or refused),
/// from any replica, in topic order. A local registry's audit events are in the log only.
pub async fn audit(
    State(app): AppRef,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Result<Response, ApiError> {
    let mut since = 0i64;
    for pair in query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("since", v)) => {
                since = v.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                    ApiError::InvalidField {
                        field: "since".into(),
                        detail: format!("must be an offset (a whole number from 0), not {v:?}"),
                    }
                })?;
            }
            _ => {
                return Err(ApiError::InvalidField {
                    field: pair.split('=').next().unwrap_or(pair).to_string(),
                    detail: "is not a parameter of this route (only since)".into(),
                })
            }
        }
    }
    match app.registry.audit_since(since) {
        Some(entries) => Ok(Json(json!({ "shared": true, "entries": entries })).into_response()),
        None => Ok(Json(json!({ "shared": false, "entries": [] })).into_response()),
    }
}

async fn change<T>(
    app: &AppState,
    actor: &Actor,
    action: &str,
    edit: impl FnOnce(&mut RegistryState) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    app.registry.change(actor, action, edit).await
}

async fn tenant_response(
    app: &AppState,
    id: &str,
    status: StatusCode,
) -> Result<Response, ApiError> {
    let state = app.registry.snapshot().await;
    let config = state.tenants.get(id).ok_or_else(|| not_found(id))?;
    let version = tenant_version(&state, id);
    Ok(with_etag(
        (status, Json(view(app, config, version))).into_response(),
        version,
    ))
}

/// Create or replace a tenant's settings; its keys are kept.
pub async fn put_tenant(
    State(app): AppRef,
    Extension(actor): Extension<Actor>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let expected = if_match(&headers)?;
    let settings: TenantBody = parse(&body)?;
    let created = change(&app, &actor, "tenant.put", |state| {
        expect_version(state, &id, expected)?;
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
pub async fn patch_tenant(
    State(app): AppRef,
    Extension(actor): Extension<Actor>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let expected = if_match(&headers)?;
    let patch: serde_json::Map<String, Value> = parse(&body)?;
    let patch = checked_patch(patch)?;
    change(&app, &actor, "tenant.patch", |state| {
        expect_version(state, &id, expected)?;
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
        let keys = current.api_key_sha256.clone();
        state
            .tenants
            .insert(id.clone(), Arc::new(settings.into_config(&id, keys)));
        Ok(())
    })
    .await?;
    tenant_response(&app, &id, StatusCode::OK).await
}

/// A patch that always leaves a valid tenant when its values are valid: topics cannot be
/// unset, a burst is changed together with its rate, and unsetting a rate unsets its burst.
fn checked_patch(
    mut patch: serde_json::Map<String, Value>,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    const FIELDS: [&str; 9] = [
        "topics",
        "records_per_sec",
        "records_burst",
        "bytes_per_sec",
        "bytes_burst",
        "max_buffer_share",
        "priority",
        "jwt_claims",
        "cert_names",
    ];
    if let Some(unknown) = patch.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(ApiError::InvalidField {
            field: unknown.clone(),
            detail: format!("unknown field; a tenant has {}", FIELDS.join(", ")),
        });
    }
    if patch.get("topics").is_some_and(Value::is_null) {
        return Err(ApiError::InvalidField {
            field: "topics".into(),
            detail: "cannot be unset: a tenant writes to at least one topic pattern".into(),
        });
    }
    for unit in ["records", "bytes"] {
        let (rate, burst) = (format!("{unit}_per_sec"), format!("{unit}_burst"));
        if patch.get(&burst).is_some_and(|b| !b.is_null()) && !patch.contains_key(&rate) {
            return Err(ApiError::InvalidField {
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
                return Err(ApiError::InvalidField {
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

pub async fn delete_tenant(
    State(app): AppRef,
    Extension(actor): Extension<Actor>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let expected = if_match(&headers)?;
    change(&app, &actor, "tenant.delete", |state| {
        expect_version(state, &id, expected)?;
        state
            .tenants
            .remove(&id)
            .map(|_| ())
            .ok_or_else(|| not_found(&id))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Issues a new random key: returned in the clear this once, stored only as its SHA-256.
pub async fn issue_key(
    State(app): AppRef,
    Extension(actor): Extension<Actor>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let key = crate::dev::random_key("fg_").map_err(|e| {
        tracing::error!(error = %e, "no randomness for a new API key");
        ApiError::StateNotSaved
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

pub async fn revoke_key(
    State(app): AppRef,
    Extension(actor): Extension<Actor>,
    Path((id, kid)): Path<(String, String)>,
) -> Result<Response, ApiError> {
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

fn global_view(app: &AppState, config: &GlobalBudgetConfig) -> Value {
    let admission = &app.ingest.admission;
    let (records, bytes) = admission.global.view(admission.now_ns());
    json!({
        "records_per_sec": config.records_per_sec,
        "records_burst": config.records_burst,
        "bytes_per_sec": config.bytes_per_sec,
        "bytes_burst": config.bytes_burst,
        "hide_from_tenants": config.hide_from_tenants,
        "live": {"tokens": {
            "records": records.map(|v| v.available),
            "bytes": bytes.map(|v| v.available),
        }},
    })
}

pub async fn get_global(State(app): AppRef) -> Response {
    let state = app.registry.snapshot().await;
    Json(global_view(&app, &state.global)).into_response()
}

pub async fn put_global(
    State(app): AppRef,
    Extension(actor): Extension<Actor>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let global: GlobalBudgetConfig = parse(&body)?;
    let saved = change(&app, &actor, "global.put", |state| {
        state.global = global;
        Ok(state.global.clone())
    })
    .await?;
    Ok(Json(global_view(&app, &saved)).into_response())
}

//! `/admin/global` (the global budget, with its live tokens) and `/admin/audit` (the shared
//! registry's recent changes).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::api::{change, parse, AppRef};
use crate::app::AppState;
use crate::config::GlobalBudgetConfig;
use crate::http::extract::Body;
use crate::outcome::AdminError;
use crate::registry::Actor;
use crate::status::QuotaStatus;

fn global_view(app: &AppState, config: &GlobalBudgetConfig) -> Value {
    let admission = &app.ingest.admission;
    let live = admission.global.view(admission.now_ns());
    json!({
        "records_per_sec": config.records_per_sec,
        "records_burst": config.records_burst,
        "bytes_per_sec": config.bytes_per_sec,
        "bytes_burst": config.bytes_burst,
        "hide_from_tenants": config.hide_from_tenants,
        "mode": config.mode,
        "quotas": config.quotas,
        "live": {
            "tokens": {
                "records": live.records.map(|v| v.available),
                "bytes": live.bytes.map(|v| v.available),
            },
            // As the status page shows a quota.
            "quotas": admission.global_quotas().into_iter()
                .map(|(d, q)| QuotaStatus::of(d, q))
                .collect::<Vec<_>>(),
        },
    })
}

pub async fn get(State(app): AppRef) -> Response {
    Json(global_view(&app, &app.registry.global_config().await)).into_response()
}

pub async fn put(
    State(app): AppRef,
    Extension(actor): Extension<Actor>,
    body: Body,
) -> Result<Response, AdminError> {
    let global: GlobalBudgetConfig = parse(&body)?;
    if app.quotas.counts_apart && !global.quotas.is_empty() {
        return Err(AdminError::InvalidField {
            field: "quotas".into(),
            detail: crate::config::COUNTED_APART.into(),
        });
    }
    let saved = change(&app, &actor, "global.put", |state| {
        state.global = global;
        Ok(state.global.clone())
    })
    .await?;
    Ok(Json(global_view(&app, &saved)).into_response())
}

/// `GET /admin/audit?since=OFFSET`: the shared registry's recent changes (applied or refused),
/// from any replica, in topic order. A local registry's audit events are in the log only.
pub async fn audit(
    State(app): AppRef,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Result<Response, AdminError> {
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
                    AdminError::InvalidField {
                        field: "since".into(),
                        detail: format!("must be an offset (a whole number from 0), not {v:?}"),
                    }
                })?;
            }
            _ => {
                return Err(AdminError::InvalidField {
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

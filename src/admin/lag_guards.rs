//! `/admin/lag-guards`: the lag guards, shown with where they stand and changed live.
//!
//! Changes act at once on this replica and are not persisted: the configuration file's
//! `[[lag_guards]]` apply again at the next start (as with `/admin/adaptive`). In a cluster,
//! each replica is told separately.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::api::{parse, AppRef};
use crate::app::AppState;
use crate::config::LagGuardConfig;
use crate::http::extract::{Body, Path};
use crate::lag_agent::GuardStatus;
use crate::outcome::{AdminError, ApiError};
use crate::registry::Actor;

pub(super) fn view(s: &GuardStatus) -> Value {
    // JSON has no infinity: a lag that is not shrinking has no recovery time (null).
    let recovery = s.recovery_s.is_finite().then_some(s.recovery_s);
    json!({
        "guard": s.config,
        "phase": s.phase.as_str(),
        "lag_records": s.lag,
        "lag_by_topic": s.by_topic.iter().map(|(t, l)| json!({"topic": t, "lag_records": l})).collect::<Vec<_>>(),
        // Rates are per partition, over the ones read twice in the window.
        "partitions_measured": s.partitions.0,
        "partitions_unread": s.partitions.1,
        "consumer_rate": s.consumer_rate,
        "producer_rate": s.producer_rate,
        "recovery_s": recovery,
        "offered_rate": s.offered_rate,
        "cap_records_per_sec": s.cap,
        "cap_basis": s.cap_basis.map(|b| b.as_str()),
        "release_blocked_by": s.release_blocked_by.map(|b| b.as_str()),
        "reason": s.reason,
        "last_error": s.last_error,
        "activations": s.activations,
        "fail_opens": s.fail_opens,
    })
}

fn find(app: &AppState, name: &str) -> Result<GuardStatus, AdminError> {
    app.lag
        .statuses()
        .into_iter()
        .find(|s| s.config.name == name)
        .ok_or_else(|| AdminError::GuardNotFound(name.to_string()))
}

/// `GET /admin/lag-guards`
pub async fn list(axum::extract::State(app): AppRef) -> Response {
    let guards: Vec<Value> = app.lag.statuses().iter().map(view).collect();
    Json(json!({ "guards": guards })).into_response()
}

/// `GET /admin/lag-guards/{name}`
pub async fn get_one(
    axum::extract::State(app): AppRef,
    Path(name): Path<String>,
) -> Result<Response, AdminError> {
    Ok(Json(view(&find(&app, &name)?)).into_response())
}

/// `PUT /admin/lag-guards/{name}`: creates or replaces the guard (a guard keeping its topics
/// and group keeps its readings and cap).
pub async fn put(
    axum::extract::State(app): AppRef,
    Extension(actor): Extension<Actor>,
    Path(name): Path<String>,
    body: Body,
) -> Result<Response, AdminError> {
    let mut value: Value =
        serde_json::from_slice(&body).map_err(|e| ApiError::Malformed(e.to_string()))?;
    if let Some(obj) = value.as_object_mut() {
        match obj.get("name") {
            None => {
                obj.insert("name".into(), Value::String(name.clone()));
            }
            Some(n) if n.as_str() == Some(name.as_str()) => {}
            Some(_) => {
                return Err(AdminError::InvalidField {
                    field: "name".into(),
                    detail: "must be the name in the path (or left out)".into(),
                })
            }
        }
    }
    let body = serde_json::to_vec(&value).map_err(|e| ApiError::Malformed(e.to_string()))?;
    let guard: LagGuardConfig = parse(&body)?;
    if let Some(p) = guard.problems("lag_guard").into_iter().next() {
        return Err(AdminError::InvalidField {
            field: p.key.trim_start_matches("lag_guard.").to_string(),
            detail: p.message,
        });
    }
    let mut guards = app.lag.guards();
    let count = guards.len();
    let existed = match guards.iter_mut().find(|g| g.name == name) {
        Some(g) => {
            *g = guard.clone();
            true
        }
        None if count >= crate::config::MAX_LAG_GUARDS => {
            return Err(AdminError::InvalidField {
                field: "name".into(),
                detail: format!(
                    "at most {} lag guards; remove one first",
                    crate::config::MAX_LAG_GUARDS
                ),
            })
        }
        None => {
            guards.push(guard.clone());
            false
        }
    };
    app.lag
        .set_guards(guards)
        .map_err(|detail| AdminError::InvalidField {
            field: "topics".into(),
            detail,
        })?;
    tracing::info!(target: "floodgate::audit", actor = actor.as_str(), action = "lag_guard.put",
        guard = name.as_str(), after = %serde_json::to_string(&guard).unwrap_or_default(),
        "lag guard set");
    let status = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(view(&find(&app, &name)?))).into_response())
}

/// `DELETE /admin/lag-guards/{name}`: the cap lifts at once.
pub async fn delete(
    axum::extract::State(app): AppRef,
    Extension(actor): Extension<Actor>,
    Path(name): Path<String>,
) -> Result<Response, AdminError> {
    let mut guards = app.lag.guards();
    let before = guards.len();
    guards.retain(|g| g.name != name);
    if guards.len() == before {
        return Err(AdminError::GuardNotFound(name));
    }
    app.lag
        .set_guards(guards)
        .map_err(|detail| AdminError::InvalidField {
            field: "topics".into(),
            detail,
        })?;
    tracing::info!(target: "floodgate::audit", actor = actor.as_str(), action = "lag_guard.delete",
        guard = name.as_str(), "lag guard removed");
    Ok(StatusCode::NO_CONTENT.into_response())
}

//! The admin listener: health and readiness now; the admin API and metrics live here too.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};

use crate::app::AppState;
use crate::error::ApiError;

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { (StatusCode::OK, "ok") }))
        .route("/readyz", get(readyz))
        .fallback(|| async { ApiError::NotFound })
        .with_state(state)
}

async fn readyz(State(app): State<Arc<AppState>>) -> impl IntoResponse {
    if app.is_draining() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"ready": false, "reason": "shutting_down"})),
        );
    }
    (StatusCode::OK, Json(serde_json::json!({"ready": true})))
}

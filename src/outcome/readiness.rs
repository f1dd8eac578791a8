//! `/readyz`'s answer: ready, or why not.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// `/readyz`: whether this instance should receive traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    NotReady {
        /// A stable code: `shutting_down`, `buffer_high_water`, `kafka_unreachable`, ...
        reason: &'static str,
        detail: String,
    },
}

impl IntoResponse for Readiness {
    fn into_response(self) -> Response {
        match self {
            Self::Ready => (StatusCode::OK, Json(json!({"ready": true}))).into_response(),
            Self::NotReady { reason, detail } => (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"ready": false, "reason": reason, "detail": detail})),
            )
                .into_response(),
        }
    }
}

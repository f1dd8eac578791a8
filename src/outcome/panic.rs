//! The answer when a request handler panics: JSON, like every other error.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// The answer when a handler panicked (tower-http's CatchPanicLayer calls this): a JSON 500 that
/// says nothing of the panic, which goes to the log instead.
pub fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(panic = %message, "a request handler panicked");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        Json(json!({"error": "internal", "detail": "internal error; it has been logged"})),
    )
        .into_response()
}

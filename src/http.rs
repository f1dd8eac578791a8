//! The produce listener's routes.

mod produce;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

use crate::app::AppState;
use crate::error::ApiError;

/// The produce listener's routes and methods (documented in `openapi.json`; a test checks it).
pub const ROUTES: &[(&str, &[&str])] = &[(PRODUCE, &["post"])];
const PRODUCE: &str = "/v1/topics/{topic}/records";

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(PRODUCE, post(produce::produce))
        .fallback(|| async { ApiError::NotFound })
        // Outermost: once shutdown starts, no new work is taken on open connections.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            refuse_when_draining,
        ))
        .with_state(state)
}

async fn refuse_when_draining(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    if state.is_draining() {
        return ApiError::ShuttingDown.into_response();
    }
    next.run(request).await
}

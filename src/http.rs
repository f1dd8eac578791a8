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
use crate::metrics::HttpLabels;

/// The produce listener's routes and methods (documented in `openapi.json`; a test checks it).
pub const ROUTES: &[(&str, &[&str])] = &[(PRODUCE, &["post"])];
const PRODUCE: &str = "/v1/topics/{topic}/records";

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(PRODUCE, post(produce::produce))
        .fallback(|| async { ApiError::NotFound })
        // Inner: once shutdown starts, no new work is taken on open connections.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            refuse_when_draining,
        ))
        // Outer: every answer is timed, refusals included.
        .layer(middleware::from_fn_with_state(state.clone(), time_requests))
        .with_state(state)
}

async fn time_requests(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let started = std::time::Instant::now();
    let route = if request.uri().path().starts_with("/v1/topics/") {
        "produce"
    } else {
        "other"
    };
    let response = next.run(request).await;
    state
        .metrics
        .http_seconds
        .get_or_create(&HttpLabels {
            route,
            status: response.status().as_u16(),
        })
        .observe(started.elapsed().as_secs_f64());
    response
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

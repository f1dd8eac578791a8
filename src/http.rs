//! The produce listener: its routes (one adapter per wire format on the shared ingest pipeline)
//! and its one edge middleware.
//!
//! Layer: HTTP edge. Imports the app state, the pipeline and the outcome room.

mod v1;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

use crate::app::AppState;
use crate::metrics::HttpLabels;
use crate::outcome::ApiError;

/// The produce listener's routes and methods (documented in `openapi.json`; a test checks it).
pub const ROUTES: &[(&str, &[&str])] = &[(v1::PRODUCE, &["post"])];

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(v1::PRODUCE, post(v1::produce))
        .fallback(|| async { ApiError::NotFound })
        .layer(
            tower::ServiceBuilder::new()
                // Outermost: even a panicking handler is timed and answered in JSON.
                .layer(middleware::from_fn_with_state(state.clone(), edge))
                .layer(tower_http::catch_panic::CatchPanicLayer::custom(
                    crate::outcome::panic_response,
                )),
        )
        .with_state(state)
}

/// The one middleware of the produce listener (one, because each costs an allocation per
/// request): once shutdown starts no new work is taken on open connections, and every answer
/// is timed, refusals included.
async fn edge(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let route = if request.uri().path().starts_with("/v1/topics/") {
        "produce"
    } else {
        "other"
    };
    let response = if state.is_draining() {
        ApiError::ShuttingDown.into_response()
    } else {
        next.run(request).await
    };
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

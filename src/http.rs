//! The produce listener: its routes (one adapter per wire format on the shared ingest pipeline)
//! and its one edge middleware.
//!
//! Layer: HTTP edges. Imports the app state, the pipeline and the outcome room.

mod confluent_v2;
mod confluent_v3;
pub mod ratelimit;
mod v1;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::app::AppState;
use crate::metrics::HttpLabels;
use crate::outcome::ApiError;

/// The produce listener's routes and methods (documented in `openapi.json`; a test checks it).
pub const ROUTES: &[(&str, &[&str])] = &[
    (v1::PRODUCE, &["post"]),
    (confluent_v2::TOPIC, &["post"]),
    (confluent_v2::PARTITION, &["post"]),
    (confluent_v3::CLUSTERS[0], &["get"]),
    (confluent_v3::CLUSTERS[1], &["get"]),
    (confluent_v3::CLUSTER[0], &["get"]),
    (confluent_v3::CLUSTER[1], &["get"]),
    (confluent_v3::RECORDS[0], &["post"]),
    (confluent_v3::RECORDS[1], &["post"]),
    (confluent_v3::BATCH[0], &["post"]),
    (confluent_v3::BATCH[1], &["post"]),
];

pub fn router(state: Arc<AppState>) -> Router {
    let mut router = Router::new()
        .route(v1::PRODUCE, post(v1::produce))
        .route(confluent_v2::TOPIC, post(confluent_v2::produce))
        .route(
            confluent_v2::PARTITION,
            post(confluent_v2::produce_partition),
        );
    for i in 0..2 {
        router = router
            .route(confluent_v3::CLUSTERS[i], get(confluent_v3::list_clusters))
            .route(confluent_v3::CLUSTER[i], get(confluent_v3::get_cluster))
            .route(
                confluent_v3::RECORDS[i],
                post(confluent_v3::produce_records),
            )
            .route(confluent_v3::BATCH[i], post(confluent_v3::produce_batch));
    }
    router
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
    let path = request.uri().path();
    let route = if path.starts_with("/v1/topics/") {
        "produce"
    } else if path.starts_with("/topics/") {
        "produce_v2"
    } else if path.starts_with("/v3/") || path.starts_with("/kafka/v3/") {
        "v3"
    } else {
        "other"
    };
    let response = if state.is_draining() {
        ApiError::ShuttingDown.into_response()
    } else if !state.registry.is_loaded() {
        // Tenants are not known yet: not a 401 for a key that may well be valid.
        ApiError::KafkaUnavailable(
            "the tenant registry is still being read from Kafka; retry shortly".into(),
        )
        .into_response()
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

/// Routing, authentication and error shapes, through the router alone (no sockets).
#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt as _;

    async fn call(
        request: Request<Body>,
    ) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
        let router = super::router(crate::app::state_for_tests());
        let response = router.oneshot(request).await.unwrap_or_else(|e| match e {});
        let status = response.status();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        (
            status,
            headers,
            serde_json::from_slice(&body).unwrap_or_default(),
        )
    }

    fn post(path: &str, key: Option<&str>, content_type: &str) -> Request<Body> {
        let mut r = Request::post(path).header("content-type", content_type);
        if let Some(key) = key {
            r = r.header("authorization", format!("Bearer {key}"));
        }
        r.body(Body::from(r#"{"records":[{"value":1}]}"#))
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn unknown_routes_are_json_404s() {
        let (s, _, body) = call(post("/v2/elsewhere", None, "application/json")).await;
        assert_eq!(
            (s, body["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_found"))
        );
    }

    #[tokio::test]
    async fn a_missing_or_unknown_key_is_401_with_a_challenge() {
        for key in [None, Some("nope")] {
            let (s, h, body) =
                call(post("/v1/topics/test.a/records", key, "application/json")).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{key:?}");
            assert_eq!(body["error"], "unauthorized");
            assert_eq!(h["www-authenticate"], "Bearer");
            assert!(
                h.get("ratelimit").is_none(),
                "no bucket state for strangers"
            );
        }
    }

    #[tokio::test]
    async fn the_topic_is_checked_before_the_content_type() {
        let (s, _, body) = call(post(
            "/v1/topics/other.a/records",
            Some("acme-key"),
            "text/plain",
        ))
        .await;
        assert_eq!(
            (s, body["error"].as_str()),
            (StatusCode::FORBIDDEN, Some("forbidden_topic"))
        );
        let (s, _, body) = call(post(
            "/v1/topics/test.a/records",
            Some("acme-key"),
            "text/plain",
        ))
        .await;
        assert_eq!(
            (s, body["error"].as_str()),
            (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Some("unsupported_media_type")
            )
        );
        let (s, _, body) = call(post(
            "/v1/topics/test.a/records?sync=no",
            Some("acme-key"),
            "application/json",
        ))
        .await;
        assert_eq!(
            (s, body["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("malformed_body"))
        );
    }
}

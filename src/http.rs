//! The produce listener: its routes and its one edge middleware. Each wire format is one folder
//! here — its record parser, its adapters on the shared ingest pipeline and its answers —
//! ([`v1`], [`confluent`]), registered in this file's route table and router; what the
//! formats share (the decoder, the pipeline, the outcomes) lives in lower layers and knows none
//! of them.
//!
//! Layer: HTTP edges. Imports the app state, the pipeline, the outcome room and the decoder.

pub mod confluent;
pub mod extract;
pub mod v1;

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
    (confluent::v2::TOPIC, &["post"]),
    (confluent::v2::PARTITION, &["post"]),
    (confluent::v3::CLUSTERS[0], &["get"]),
    (confluent::v3::CLUSTERS[1], &["get"]),
    (confluent::v3::CLUSTER[0], &["get"]),
    (confluent::v3::CLUSTER[1], &["get"]),
    (confluent::v3::RECORDS[0], &["post"]),
    (confluent::v3::RECORDS[1], &["post"]),
    (confluent::v3::BATCH[0], &["post"]),
    (confluent::v3::BATCH[1], &["post"]),
];

pub fn router(state: Arc<AppState>) -> Router {
    let mut router = Router::new()
        .route(v1::PRODUCE, post(v1::produce))
        .route(confluent::v2::TOPIC, post(confluent::v2::produce))
        .route(
            confluent::v2::PARTITION,
            post(confluent::v2::produce_partition),
        );
    for i in 0..2 {
        router = router
            .route(
                confluent::v3::CLUSTERS[i],
                get(confluent::v3::list_clusters),
            )
            .route(confluent::v3::CLUSTER[i], get(confluent::v3::get_cluster))
            .route(
                confluent::v3::RECORDS[i],
                post(confluent::v3::produce_records),
            )
            .route(confluent::v3::BATCH[i], post(confluent::v3::produce_batch));
    }
    router
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
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

/// The media type of Confluent's envelope for a path under Confluent's prefixes: its clients
/// read `error_code` and `message` there, even from a path or method floodgate does not serve.
fn confluent_media(path: &str) -> Option<&'static str> {
    if path == "/topics" || path.starts_with("/topics/") {
        Some(confluent::answers::V2_MEDIA_TYPE)
    } else if ["/v3", "/kafka/v3"]
        .iter()
        .any(|p| path == *p || path.strip_prefix(p).is_some_and(|r| r.starts_with('/')))
    {
        Some(confluent::answers::V3_MEDIA_TYPE)
    } else {
        None
    }
}

/// Every error is JSON, an unknown path's too: floodgate's shape, or Confluent's under its
/// prefixes.
async fn not_found(uri: axum::http::Uri) -> Response {
    answer_outside_routes(uri.path(), &ApiError::NotFound)
}

/// A path served with other methods: 405 in JSON; the router adds `Allow`.
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    answer_outside_routes(uri.path(), &ApiError::MethodNotAllowed(method.to_string()))
}

fn answer_outside_routes(path: &str, e: &ApiError) -> Response {
    match confluent_media(path) {
        Some(media) => confluent::answers::error_response(e, media),
        None => e.clone().into_response(),
    }
}

/// The one middleware of the produce listener (one, because each costs an allocation per
/// request): once shutdown starts no new work is taken on open connections, and every answer
/// is timed, refusals included. (The RateLimit fields are the pipeline's: it writes them on
/// every answer to a tenant, `outcome::ratelimit`.)
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

    /// Every error is JSON: a method a produce path does not serve is 405 with `Allow`, in
    /// Confluent's envelope under its prefixes (as kafka-rest answers: the status as the code),
    /// and so is an unknown path there.
    #[tokio::test]
    async fn wrong_methods_and_unknown_paths_are_json_errors_with_allow() {
        for (method, path, allow, confluent) in [
            ("GET", "/v1/topics/test.a/records", "POST", None),
            (
                "PUT",
                "/topics/test.a",
                "POST",
                Some("application/vnd.kafka.v2+json"),
            ),
            (
                "GET",
                "/topics/test.a/partitions/0",
                "POST",
                Some("application/vnd.kafka.v2+json"),
            ),
            (
                "GET",
                "/v3/clusters/c/topics/t/records",
                "POST",
                Some("application/json"),
            ),
            (
                "DELETE",
                "/kafka/v3/clusters",
                "GET,HEAD",
                Some("application/json"),
            ),
        ] {
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header("authorization", "Bearer acme-key")
                .body(Body::empty())
                .unwrap_or_default();
            let (s, h, body) = call(request).await;
            assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            let mut allowed: Vec<_> = h["allow"]
                .to_str()
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .collect();
            allowed.sort_unstable();
            assert_eq!(allowed.join(","), allow, "{method} {path}");
            match confluent {
                None => assert_eq!(body["error"], "method_not_allowed", "{body}"),
                Some(media) => {
                    assert_eq!(h["content-type"], media, "{method} {path}");
                    assert_eq!(body["error_code"], 405, "{body}");
                    assert!(body["message"].as_str().is_some_and(|m| m.contains(method)));
                }
            }
        }
        for (path, code) in [("/topics", 404), ("/v3/elsewhere", 404), ("/kafka/v3", 404)] {
            let request = Request::get(path).body(Body::empty()).unwrap_or_default();
            let (s, _, body) = call(request).await;
            assert_eq!(
                (s, body["error_code"].as_u64()),
                (StatusCode::NOT_FOUND, Some(code))
            );
        }
    }

    /// A path segment whose percent-encoding is not UTF-8 is a JSON 400 naming the parameter,
    /// in Confluent's envelope under its prefixes, never axum's plain text.
    #[tokio::test]
    async fn an_unreadable_path_segment_is_a_json_400_naming_it() {
        for (method, path, media, parameter) in [
            ("POST", "/topics/%FF", V2, "topic"),
            ("POST", "/topics/test.a/partitions/%FF", V2, "partition"),
            ("POST", "/v3/clusters/c/topics/%FF/records", V3, "topic"),
            (
                "POST",
                "/kafka/v3/clusters/%FF/topics/t/records:batch",
                V3,
                "cluster_id",
            ),
            ("GET", "/v3/clusters/%FF", V3, "cluster_id"),
        ] {
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header("authorization", "Bearer acme-key")
                .header("content-type", "application/json")
                .body(Body::empty())
                .unwrap_or_default();
            let (s, h, body) = call(request).await;
            assert_eq!(s, StatusCode::BAD_REQUEST, "{method} {path}");
            assert_eq!(h["content-type"], media, "{method} {path}");
            assert_eq!(body["error_code"], 40001, "{body}");
            let message = body["message"].as_str().unwrap_or_default();
            assert!(message.contains(&format!("`{parameter}`")), "{message}");
        }
    }

    const V2: &str = "application/vnd.kafka.v2+json";
    const V3: &str = "application/json";

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

    /// Every produce route's answer to an authenticated client carries its buckets as the
    /// RateLimit fields, refusals included: written once, at the edge, for every wire format.
    #[tokio::test]
    async fn every_produce_route_answers_its_tenant_with_the_ratelimit_fields() {
        for path in [
            "/v1/topics/test.a/records",
            "/topics/test.a",
            "/topics/test.a/partitions/0",
            "/v3/clusters/c/topics/test.a/records",
            "/kafka/v3/clusters/c/topics/test.a/records:batch",
        ] {
            // A content type no format takes: refused after authentication, before the body.
            let (s, h, _) = call(post(path, Some("acme-key"), "text/plain")).await;
            assert!(s.is_client_error(), "{path}: {s}");
            assert_eq!(
                h.get("ratelimit-policy").and_then(|v| v.to_str().ok()),
                Some("\"tenant-records\";q=1000;w=1;qu=\"records\""),
                "{path}"
            );
            assert!(h.get("ratelimit").is_some(), "{path}");
        }
        // Answers that produce nothing go through the pipeline's authenticated entry too: the
        // cluster reads, and a produce path refused before its topic is known.
        for (path, status) in [
            ("/v3/clusters", StatusCode::OK),
            ("/kafka/v3/clusters/elsewhere", StatusCode::NOT_FOUND),
            ("/v1/topics/%FF/records", StatusCode::BAD_REQUEST),
        ] {
            let method = if path.starts_with("/v1/") {
                "POST"
            } else {
                "GET"
            };
            let request = |key: Option<&str>| {
                let mut r = Request::builder().method(method).uri(path);
                if let Some(key) = key {
                    r = r.header("authorization", format!("Bearer {key}"));
                }
                r.body(Body::empty()).unwrap_or_default()
            };
            let (s, h, _) = call(request(Some("acme-key"))).await;
            assert_eq!(s, status, "{path}");
            assert!(h.get("ratelimit-policy").is_some(), "{path}");
            let (s, h, _) = call(request(None)).await;
            assert_eq!(
                s,
                StatusCode::UNAUTHORIZED,
                "{path}: a stranger learns nothing"
            );
            assert!(h.get("ratelimit").is_none(), "{path}");
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

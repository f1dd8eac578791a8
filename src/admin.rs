//! The admin listener: health, readiness, metrics, and the admin API (tenants, keys, global
//! budget). It is a separate listener so the admin API is never reachable from the produce
//! port.
//!
//! Layer: HTTP edges. HTTP only: routes, authentication and request/response shapes. Changes go
//! through the registry store; statuses come from the outcome room.

mod adaptive;
pub mod api;
mod global;
mod keys;
mod lag_guards;
mod tenants;
mod ui;
mod usage;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use axum::Router;

use crate::app::AppState;
use crate::kafka::Reachability;
use crate::outcome::{AdminError, ApiError, Readiness};
use crate::registry::Actor;

/// Writes the admin listener's route table once: [`ROUTES`] (every path with its methods, as
/// `openapi.json` spells them: a test checks each is documented) and the handlers the router
/// is built from, so a route cannot be listed without a handler or served without a listing.
macro_rules! routes {
    ($($path:literal => { $($method:ident: $handler:expr),+ $(,)? }),+ $(,)?) => {
        /// Every route of the admin listener with its methods.
        pub const ROUTES: &[(&str, &[&str])] = &[$(($path, &[$(stringify!($method)),+])),+];

        /// The same routes' handlers, by path.
        fn handlers() -> Vec<(&'static str, MethodRouter<Arc<AppState>>)> {
            vec![$(($path, MethodRouter::new()$(.$method($handler))+)),+]
        }
    };
}

routes! {
    "/healthz" => { get: || async { (StatusCode::OK, "ok") } },
    "/readyz" => { get: readyz },
    "/metrics" => { get: metrics },
    "/admin/tenants" => { get: tenants::list },
    "/admin/tenants/{id}" => {
        get: tenants::get,
        put: tenants::put,
        patch: tenants::patch,
        delete: tenants::delete,
    },
    "/admin/tenants/{id}/keys" => { post: keys::issue },
    "/admin/tenants/{id}/keys/{key_id}" => { delete: keys::revoke },
    "/admin/global" => { get: global::get, put: global::put },
    "/admin/audit" => { get: global::audit },
    "/admin/usage" => { get: usage::get },
    "/admin/status" => { get: status },
    "/admin/adaptive" => { get: adaptive::get, put: adaptive::put },
    "/admin/lag-guards" => { get: lag_guards::list },
    "/admin/lag-guards/{name}" => {
        get: lag_guards::get_one,
        put: lag_guards::put,
        delete: lag_guards::delete,
    },
    "/ui" => { get: ui::page },
    "/ui/app.js" => { get: ui::script },
    "/ui/app.css" => { get: ui::style },
    "/ui/favicon.svg" => { get: ui::icon },
}

pub fn router(state: Arc<AppState>) -> Router {
    let mut open = Router::new();
    let mut admin = Router::new();
    for (path, handler) in handlers() {
        if path.starts_with("/admin/") {
            admin = admin.route(path, handler);
        } else {
            open = open.route(path, handler);
        }
    }
    // Every error is JSON: a path served with other methods is 405 (the router adds `Allow`),
    // set on each router before the admin one is wrapped in its token check.
    let not_allowed =
        |method: axum::http::Method| async move { ApiError::MethodNotAllowed(method.to_string()) };
    let admin = admin
        .method_not_allowed_fallback(not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), require_admin));
    open.method_not_allowed_fallback(not_allowed)
        .merge(admin)
        .fallback(|| async { ApiError::NotFound })
        .layer(middleware::from_fn(a_client))
        // The bound `http::extract::Body` names in its 413.
        .layer(axum::extract::DefaultBodyLimit::max(
            crate::http::extract::MAX_ADMIN_BODY_BYTES,
        ))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            crate::outcome::panic_response,
        ))
        .with_state(state)
}

/// Connections on the admin listener count against their address until they send a whole
/// request: then they are a client's (a probe's, a scraper's, an operator's), not a silent
/// one's, and a full listener takes room from silent ones first. Counted against their address
/// for life, one keep-alive connection made a host "the address holding the most" against a
/// flood of one silent connection from each of 300 addresses, and its probes were closed at
/// accept (review 39 of #37). They are counted by source address, as a tenant's are counted by
/// tenant: a full listener closes an idle one of the source holding the most. Counted all
/// together, 300 connections from one address that each sent one `/healthz` made "the admin
/// clients" the group over its share, and its oldest idle connection, an operator's
/// keep-alive scraper, was closed at every newcomer (review 40 of #37: 4 of 8 scrapes broken).
///
/// A connection a valid admin token came on is the operator's ([`require_admin`] marks it):
/// never closed to make room, whatever its address holds.
async fn a_client(request: Request, next: Next) -> Response {
    let peer = request.extensions().get::<crate::server::Peer>();
    if let Some(trust) = peer.and_then(|p| p.trust.as_ref()) {
        if !trust.is_verified() {
            // Never over an allowance (`run`): the name is only what they are counted by.
            trust.anonymous_client(&format!("admin clients from {}", trust.source()));
        }
    }
    next.run(request).await
}

/// The token of an `Authorization: Bearer` field.
fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
}

/// Admin calls need a valid admin token; the token's id becomes the audit log's actor.
async fn require_admin(
    State(app): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    if app.admin.tokens.is_empty() {
        return AdminError::Unauthorized(format!(
            "the admin API is disabled: no token in the environment variable {}",
            app.admin.token_env
        ))
        .into_response();
    }
    let presented = bearer(request.headers());
    // A valid token is never refused for its address's failures; failing requests are
    // counted per client address on this listener's own guard.
    let Some(id) = presented.and_then(|t| app.admin.tokens.check(t)) else {
        let client = request
            .extensions()
            .get::<crate::server::Peer>()
            .map(|p| app.ingest.proxies.client(p.addr.ip(), request.headers()));
        if let Some(wait) = client.and_then(|ip| app.admin.failures.fail(ip)) {
            return ApiError::AuthFailures(wait).into_response();
        }
        return AdminError::Unauthorized("missing or wrong admin token".into()).into_response();
    };
    // The connection is the operator's: counted in no group, never closed to make room
    // (`ConnectionTrust::operator`).
    let peer = request.extensions().get::<crate::server::Peer>();
    if let Some(trust) = peer.and_then(|p| p.trust.as_ref()) {
        trust.operator();
    }
    let actor = Actor::new(id);
    request.extensions_mut().insert(actor);
    next.run(request).await
}

/// OpenMetrics when the scraper asks for it (Prometheus does), the classic text format
/// otherwise. With `[metrics] token_env`, only for a scraper presenting that token.
async fn metrics(State(app): State<Arc<AppState>>, headers: axum::http::HeaderMap) -> Response {
    if let Some(token) = &app.metrics_token {
        let presented = bearer(&headers);
        let matches = presented.is_some_and(|p| {
            use sha2::Digest as _;
            // Compared as digests: no timing difference tells how much of it was right.
            sha2::Sha256::digest(p.as_bytes()) == sha2::Sha256::digest(token.as_bytes())
        });
        if !matches {
            return AdminError::Unauthorized(
                "/metrics needs the scrape token ([metrics] token_env): Authorization: Bearer <token>"
                    .into(),
            )
            .into_response();
        }
    }
    let wants_openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    if wants_openmetrics {
        (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            app.metrics.render(),
        )
            .into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            app.metrics.render_classic(),
        )
            .into_response()
    }
}

/// Ready = not draining, buffer below its high-water mark, and the last topic-metadata refresh
/// answered (a latch the catalog keeps: a probe costs no Kafka request and no thread).
/// `GET /admin/status?limit=&sort=refused|admitted|id&q=PREFIX`: the status page's snapshot
/// (see `status`): the tenants asked for, with the totals and the tenant count.
async fn status(
    State(app): State<Arc<AppState>>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Result<Response, AdminError> {
    use crate::status::{Query, Sort, LIMIT_MAX};
    let mut q = Query::default();
    for (name, value) in api::params(query.as_deref(), &["limit", "sort", "q"])? {
        match name.as_str() {
            "limit" => {
                q.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=LIMIT_MAX).contains(n))
                    .ok_or_else(|| AdminError::InvalidField {
                        field: "limit".into(),
                        detail: format!("must be from 1 to {LIMIT_MAX}, not {value:?}"),
                    })?;
            }
            "sort" => {
                q.sort = Sort::parse(&value).ok_or_else(|| AdminError::InvalidField {
                    field: "sort".into(),
                    detail: format!("must be refused, admitted or id, not {value:?}"),
                })?;
            }
            _ => q.prefix = value,
        }
    }
    let mut snapshot = app.status.snapshot(&q);
    snapshot.lag_guards = app.lag.statuses().iter().map(lag_guards::view).collect();
    snapshot.adaptive = Some(adaptive::view(&app));
    Ok(axum::Json(snapshot).into_response())
}

async fn readyz(State(app): State<Arc<AppState>>) -> Readiness {
    if app.is_draining() {
        return Readiness::NotReady {
            reason: "shutting_down",
            detail: "floodgate is draining".into(),
        };
    }
    if app.registry.is_unverified() {
        return Readiness::NotReady {
            reason: "registry_unverified",
            detail: "no record of the registry topic verifies with this replica's secrets ([cluster] registry_secret_env)".into(),
        };
    }
    if !app.registry.is_loaded() {
        return Readiness::NotReady {
            reason: "registry_loading",
            detail: "the tenant registry is still being read from the registry topic".into(),
        };
    }
    // Quotas reach a replica without Redis through a shared registry written by one with it
    // (check-config and the admin API refuse them here): counted alone, they would be admitted
    // once per such replica (review 41-r4: 100 of a global quota of 50). It takes no traffic.
    if app.quotas.counts_apart && app.registry.has_quotas() {
        return Readiness::NotReady {
            reason: "quotas_counted_apart",
            detail: crate::config::COUNTED_APART.into(),
        };
    }
    let buffer = &app.ingest.admission.buffer;
    let (bytes, records) = buffer.held();
    let fill = (bytes as f64 / buffer.max_bytes() as f64)
        .max(records as f64 / buffer.max_records() as f64);
    if fill >= app.ready_high_water {
        return Readiness::NotReady {
            reason: "buffer_high_water",
            detail: format!("the buffer is {:.0}% full", fill * 100.0),
        };
    }
    match app.ingest.catalog.reachability() {
        Reachability::Reachable => Readiness::Ready,
        Reachability::Unknown => Readiness::NotReady {
            reason: "kafka_unreachable",
            detail: "Kafka's metadata has not been fetched yet".into(),
        },
        Reachability::Unreachable(e) => Readiness::NotReady {
            reason: "kafka_unreachable",
            detail: e,
        },
    }
}

/// Routing and authentication of the admin listener, through the router alone (no sockets).
#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt as _;

    async fn call(path: &str, token: Option<&str>) -> (StatusCode, serde_json::Value) {
        let router = super::router(crate::app::state_for_tests());
        let mut request = Request::get(path);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request.body(Body::empty()).unwrap_or_default();
        let response = router.oneshot(request).await.unwrap_or_else(|e| match e {});
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        (status, serde_json::from_slice(&body).unwrap_or_default())
    }

    #[tokio::test]
    async fn admin_routes_need_the_token_and_health_does_not() {
        assert_eq!(call("/healthz", None).await.0, StatusCode::OK);
        for token in [None, Some("acme-key"), Some("router-test-token-x")] {
            let (s, body) = call("/admin/tenants", token).await;
            assert_eq!(
                (s, body["error"].as_str()),
                (StatusCode::UNAUTHORIZED, Some("unauthorized"))
            );
        }
        let (s, body) = call("/admin/tenants", Some("router-test-token")).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(body["tenants"][0]["id"], "acme");
    }

    /// Every error is JSON, on this listener too: a method a path does not serve is 405 with
    /// `Allow` (after the token check, under /admin), an unknown path 404.
    #[tokio::test]
    async fn wrong_methods_and_unknown_paths_are_json_errors() {
        for (method, path, allow) in [
            ("POST", "/healthz", "GET,HEAD"),
            ("DELETE", "/metrics", "GET,HEAD"),
            ("POST", "/admin/tenants/acme", "GET,HEAD,PUT,PATCH,DELETE"),
            ("PATCH", "/admin/global", "GET,HEAD,PUT"),
        ] {
            let router = super::router(crate::app::state_for_tests());
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header("authorization", "Bearer router-test-token")
                .body(Body::empty())
                .unwrap_or_default();
            let response = router.oneshot(request).await.unwrap_or_else(|e| match e {});
            assert_eq!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
            let allowed = response.headers()["allow"].to_str().unwrap_or_default();
            let mut allowed: Vec<_> = allowed.split(',').map(str::trim).collect();
            allowed.sort_unstable();
            let mut expected: Vec<_> = allow.split(',').collect();
            expected.sort_unstable();
            assert_eq!(allowed, expected, "{method} {path}");
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap_or_default();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            assert_eq!(body["error"], "method_not_allowed", "{method} {path}");
            assert!(body["detail"].as_str().is_some_and(|d| d.contains(method)));
        }
        let (s, body) = call("/nowhere", None).await;
        assert_eq!(
            (s, body["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_found"))
        );
    }

    /// A path segment that is not UTF-8 is a JSON 400 naming the parameter, and a body over
    /// the admin API's limit a JSON 413: never axum's plain text.
    #[tokio::test]
    async fn unreadable_paths_and_oversized_bodies_are_json_errors() {
        for (method, path, body, status, code) in [
            ("GET", "/admin/tenants/%FF", 0, 400, "invalid_path"),
            ("POST", "/admin/tenants/%FF/keys", 0, 400, "invalid_path"),
            ("GET", "/admin/lag-guards/%FF", 0, 400, "invalid_path"),
            ("PUT", "/admin/tenants/big", 3 << 20, 413, "body_too_large"),
        ] {
            let router = super::router(crate::app::state_for_tests());
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header("authorization", "Bearer router-test-token")
                .header("content-type", "application/json")
                .body(Body::from(vec![b' '; body]))
                .unwrap_or_default();
            let response = router.oneshot(request).await.unwrap_or_else(|e| match e {});
            assert_eq!(response.status().as_u16(), status, "{method} {path}");
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap_or_default();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            assert_eq!(body["error"], code, "{method} {path}: {body}");
        }
    }

    #[tokio::test]
    async fn readiness_waits_for_the_first_metadata_refresh() {
        let (s, body) = call("/readyz", None).await;
        assert_eq!(
            (s, body["reason"].as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, Some("kafka_unreachable"))
        );
    }
}

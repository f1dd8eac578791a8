//! The status page: one HTML page, its stylesheet and script, served from the binary (no CDN,
//! no build step), under a Content-Security-Policy that allows nothing but this listener. The
//! page holds no secret: it asks for the admin token and sends it to `/admin/status`.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

const PAGE: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");
const ICON: &str = include_str!("ui/favicon.svg");

/// Only this origin's script, style and data; no inline code, no frames, no forms elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

pub async fn page() -> Response {
    asset(PAGE, "text/html; charset=utf-8")
}

pub async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

pub async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}

pub async fn icon() -> Response {
    asset(ICON, "image/svg+xml")
}

use super::*;

#[tokio::test]
async fn a_panicking_handler_is_answered_with_json_500() {
    use tower::ServiceExt as _;
    let router = axum::Router::new()
        .route(
            "/boom",
            axum::routing::get(|| async {
                let empty: Vec<u8> = Vec::new();
                // Index out of bounds on purpose.
                let byte = empty[usize::from(empty.is_empty())];
                byte.to_string()
            }),
        )
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            panic_response,
        ));
    let request = axum::http::Request::get("/boom")
        .body(axum::body::Body::empty())
        .unwrap_or_default();
    let response = router.oneshot(request).await.unwrap_or_else(|e| match e {});
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = axum::body::to_bytes(response.into_body(), 1024)
        .await
        .unwrap_or_default();
    assert_eq!(
        &body[..],
        br#"{"detail":"internal error; it has been logged","error":"internal"}"#
    );
}

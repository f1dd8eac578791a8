//! The HTTP limit: the produce route served by a handler that reads the body and does nothing,
//! on the same stack (axum on hyper, tokio), so floodgate's overhead over plain HTTP shows.

use axum::body::Bytes;
use axum::routing::post;
use axum::{Json, Router};

pub async fn run(listen: std::net::SocketAddr) -> Result<(), String> {
    let app = Router::new().route(
        "/v1/topics/{topic}/records",
        post(|body: Bytes| async move { Json(serde_json::json!({"accepted": body.len().min(1)})) }),
    );
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("bind {listen}: {e}"))?;
    eprintln!("null server on {listen}");
    axum::serve(listener, app).await.map_err(|e| e.to_string())
}

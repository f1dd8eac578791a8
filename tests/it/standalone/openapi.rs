//! openapi.json documents every route both listeners serve, with its methods.

use floodgate::{admin, http};

#[test]
fn every_route_in_the_routers_is_documented() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json"))
        .expect("openapi.json exists");
    let spec: serde_json::Value = serde_json::from_str(&text).expect("openapi.json is JSON");
    assert_eq!(spec["openapi"], "3.1.0");
    let mut missing = Vec::new();
    for (path, methods) in admin::ROUTES.iter().chain(http::ROUTES) {
        for method in *methods {
            if spec["paths"][path][method].is_null() {
                missing.push(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    assert!(missing.is_empty(), "undocumented routes: {missing:?}");
}

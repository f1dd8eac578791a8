//! The admin API's outcomes: its own errors ([`AdminError`]), in the same
//! `{"error": CODE, "detail": "..."}` shape as the produce API's `/v1` errors (never in
//! Confluent's: no admin route speaks it). An outcome both APIs have (a malformed body, no
//! such route, too many failed authentications, Kafka unreachable) is the produce API's
//! [`ApiError`], answered as it answers it.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::ApiError;
use crate::config::ConfigProblem;
use crate::registry::ChangeError;

#[derive(Debug, Clone, PartialEq)]
pub enum AdminError {
    /// No or wrong admin token (or no token configured), or `/metrics` without its scrape
    /// token: the detail says which.
    Unauthorized(String),
    TenantNotFound(String),
    KeyNotFound(String),
    /// No lag guard of this name.
    GuardNotFound(String),
    /// A value that cannot be used, naming the field.
    InvalidField {
        field: String,
        detail: String,
    },
    /// The change was valid but could not be persisted, so it was not applied.
    StateNotSaved,
    /// Shared registry: another change of the same key came first.
    Conflict {
        key: String,
        current_version: u64,
    },
    /// An outcome the produce API has too, answered the same way.
    Common(ApiError),
}

impl AdminError {
    /// A 422 for a configuration problem, named by field (`records_per_sec`), not by its
    /// place in a config file (`tenants[acme].records_per_sec`).
    pub fn invalid_field(problem: &ConfigProblem) -> Self {
        // The field as the body names it: `tenants[ID].quotas[0].records` is `quotas[0].records`
        // of a tenant's body, `global.quotas[0].records` the same of the global one (review
        // 41-r4: split at its first `].`, it was named `records`).
        let key = problem.key.as_str();
        let field = match key.strip_prefix("global.") {
            Some(field) => field,
            None if key.starts_with("tenants[") => key.split_once("].").map_or(key, |(_, f)| f),
            None => key,
        };
        Self::InvalidField {
            field: field.to_string(),
            detail: problem.message.clone(),
        }
    }

    /// The stable code clients match on.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthorized(_) => "unauthorized",
            Self::TenantNotFound(_) => "tenant_not_found",
            Self::KeyNotFound(_) => "key_not_found",
            Self::GuardNotFound(_) => "lag_guard_not_found",
            Self::InvalidField { .. } => "invalid_field",
            Self::StateNotSaved => "state_not_saved",
            Self::Conflict { .. } => "conflict",
            Self::Common(e) => e.code(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::TenantNotFound(_) | Self::KeyNotFound(_) | Self::GuardNotFound(_) => {
                StatusCode::NOT_FOUND
            }
            Self::InvalidField { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::StateNotSaved => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Conflict { .. } => StatusCode::CONFLICT,
            Self::Common(e) => e.status(),
        }
    }

    pub fn detail(&self) -> String {
        match self {
            Self::Unauthorized(d) => d.clone(),
            Self::TenantNotFound(id) => format!("no tenant {id:?}"),
            Self::KeyNotFound(id) => format!("no key {id:?} for this tenant"),
            Self::GuardNotFound(name) => format!("no lag guard {name:?}"),
            Self::InvalidField { field, detail } => format!("{field}: {detail}"),
            Self::StateNotSaved => {
                "the change could not be saved to the state file, so it was not applied".into()
            }
            Self::Conflict {
                key,
                current_version,
            } => format!(
                "{key} was changed by another change first (now version {current_version}); \
                 nothing was applied: read it again and retry"
            ),
            Self::Common(e) => e.detail(),
        }
    }
}

impl From<ApiError> for AdminError {
    fn from(e: ApiError) -> Self {
        Self::Common(e)
    }
}

impl From<ChangeError> for AdminError {
    fn from(e: ChangeError) -> Self {
        match e {
            ChangeError::Invalid(p) => Self::invalid_field(&p),
            ChangeError::TenantNotFound(id) => Self::TenantNotFound(id),
            ChangeError::KeyNotFound(id) => Self::KeyNotFound(id),
            ChangeError::NotSaved(_) => Self::StateNotSaved,
            ChangeError::Conflict { key, current } => Self::Conflict {
                key: key.to_string(),
                current_version: current,
            },
            ChangeError::Unavailable(d) => Self::Common(ApiError::KafkaUnavailable(format!(
                "the change was not applied: {d}; retry when Kafka is reachable"
            ))),
        }
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        if let Self::Common(e) = self {
            return e.into_response();
        }
        let status = self.status();
        let body = match &self {
            Self::InvalidField { field, .. } => {
                json!({"error": self.code(), "field": field, "detail": self.detail()})
            }
            Self::Conflict {
                current_version, ..
            } => json!({"error": self.code(), "current_version": current_version,
                "detail": self.detail()}),
            _ => json!({"error": self.code(), "detail": self.detail()}),
        };
        let mut response = (status, Json(body)).into_response();
        if let Self::Unauthorized(_) = self {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(e: AdminError) -> (StatusCode, Option<String>, serde_json::Value) {
        let response = e.into_response();
        let status = response.status();
        let challenge = response
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap_or_default();
        (
            status,
            challenge,
            serde_json::from_slice(&body).unwrap_or_default(),
        )
    }

    #[test]
    fn a_problem_is_named_as_the_body_names_its_field() {
        let named = |key: &str| match AdminError::invalid_field(&ConfigProblem::new(key, "bad")) {
            AdminError::InvalidField { field, .. } => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(named("tenants[a].quotas[0].records"), "quotas[0].records");
        assert_eq!(named("global.quotas[1].window"), "quotas[1].window");
        assert_eq!(named("global.records_burst"), "records_burst");
        assert_eq!(named("limit"), "limit");
    }

    /// The shapes the admin API answered with while its errors were the produce API's
    /// (tests/it/mock/admin.rs and openapi.json rely on them).
    #[tokio::test]
    async fn admin_errors_keep_their_statuses_bodies_and_headers() {
        let (s, challenge, body) = answer(AdminError::Unauthorized("no token".into())).await;
        assert_eq!(
            (s, challenge.as_deref()),
            (StatusCode::UNAUTHORIZED, Some("Bearer"))
        );
        assert_eq!(body, json!({"error": "unauthorized", "detail": "no token"}));
        let (s, _, body) = answer(AdminError::InvalidField {
            field: "limit".into(),
            detail: "must be from 1".into(),
        })
        .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            body,
            json!({"error": "invalid_field", "field": "limit", "detail": "limit: must be from 1"})
        );
        let (s, challenge, body) = answer(AdminError::Conflict {
            key: "tenant:acme".into(),
            current_version: 3,
        })
        .await;
        assert_eq!((s, challenge), (StatusCode::CONFLICT, None));
        assert_eq!(body["error"], "conflict");
        assert_eq!(body["current_version"], 3);
        for (e, status, code) in [
            (
                AdminError::TenantNotFound("a".into()),
                StatusCode::NOT_FOUND,
                "tenant_not_found",
            ),
            (
                AdminError::KeyNotFound("k".into()),
                StatusCode::NOT_FOUND,
                "key_not_found",
            ),
            (
                AdminError::GuardNotFound("g".into()),
                StatusCode::NOT_FOUND,
                "lag_guard_not_found",
            ),
            (
                AdminError::StateNotSaved,
                StatusCode::INTERNAL_SERVER_ERROR,
                "state_not_saved",
            ),
            (
                ChangeError::Unavailable("x".into()).into(),
                StatusCode::SERVICE_UNAVAILABLE,
                "kafka_unavailable",
            ),
            (
                ApiError::NotFound.into(),
                StatusCode::NOT_FOUND,
                "not_found",
            ),
        ] {
            let detail = e.detail();
            let (s, _, body) = answer(e).await;
            assert_eq!((s, body["error"].as_str()), (status, Some(code)));
            assert_eq!(body, json!({"error": code, "detail": detail}));
        }
    }
}

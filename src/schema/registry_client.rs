//! The Schema Registry's REST API, as Confluent defines it: the four calls the gateway makes.
//! Every call is bounded by the configured timeout (connect included) and every answer by
//! [`MAX_ANSWER_BYTES`]; redirects are not followed (the registry is configured exactly).

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use super::Format;

/// Largest answer read from the registry (a schema and its envelope).
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// A schema as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub id: u32,
    pub format: Format,
    pub schema: String,
}

/// Why a call did not give an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The registry answered that the schema, subject or version does not exist.
    NotFound(String),
    /// The registry refused the request (an invalid schema, say): its message.
    Refused(String),
    /// No answer in time, no connection, a 5xx, or an answer that is not the API's.
    Unavailable(String),
    /// Not asked: the caller's tenant held its whole share of the call slots for the whole
    /// wait (its own calls are the load; 429 `schema_busy`).
    OwnShareTaken(String),
}

pub struct SchemaRegistryClient {
    http: reqwest::Client,
    base: reqwest::Url,
    auth: Option<(String, String)>,
}

/// The registry's address without its credentials: a log line or panic message never shows
/// the password.
impl std::fmt::Debug for SchemaRegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut base = self.base.clone();
        let _ = base.set_password(None);
        let _ = base.set_username("");
        f.debug_struct("SchemaRegistryClient")
            .field("base", &base.as_str())
            .field("auth", &self.auth.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[derive(Deserialize)]
struct SchemaAnswer {
    #[serde(default)]
    id: Option<u32>,
    schema: String,
    #[serde(default, rename = "schemaType")]
    schema_type: Option<String>,
}

#[derive(Deserialize)]
struct IdAnswer {
    id: u32,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    #[serde(default)]
    error_code: Option<i64>,
    #[serde(default)]
    message: Option<String>,
}

fn format_of(schema_type: Option<&str>) -> Result<Format, CallError> {
    match schema_type.unwrap_or("AVRO") {
        "AVRO" => Ok(Format::Avro),
        "JSON" => Ok(Format::Json),
        "PROTOBUF" => Ok(Format::Protobuf),
        other => Err(CallError::Refused(format!(
            "the registry holds a schema of type {other:?}, which floodgate does not serve"
        ))),
    }
}

impl SchemaRegistryClient {
    pub fn new(
        url: &str,
        timeout: Duration,
        auth: Option<(String, String)>,
    ) -> Result<Self, String> {
        let mut base = reqwest::Url::parse(url).map_err(|e| format!("{url:?}: {e}"))?;
        if base.cannot_be_a_base() {
            return Err(format!("{url:?} cannot be a base URL"));
        }
        // Paths are pushed as segments onto the base's path.
        if let Ok(mut segments) = base.path_segments_mut() {
            segments.pop_if_empty();
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        Ok(Self { http, base, auth })
    }

    fn url(&self, segments: &[&str]) -> reqwest::Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.extend(segments);
        }
        url
    }

    async fn call(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<(reqwest::StatusCode, Vec<u8>), CallError> {
        let request = request.header(
            "accept",
            "application/vnd.schemaregistry.v1+json, application/json",
        );
        let request = match &self.auth {
            Some((user, password)) => request.basic_auth(user, Some(password)),
            None => request,
        };
        let mut response = request
            .send()
            .await
            .map_err(|e| CallError::Unavailable(unavailable(&e)))?;
        let status = response.status();
        if response
            .content_length()
            .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
        {
            return Err(CallError::Unavailable(format!(
                "the registry's answer is larger than {MAX_ANSWER_BYTES} bytes"
            )));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| CallError::Unavailable(unavailable(&e)))?
        {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(CallError::Unavailable(format!(
                    "the registry's answer is larger than {MAX_ANSWER_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        if status.is_server_error() {
            return Err(CallError::Unavailable(format!(
                "the Schema Registry answered {}",
                status.as_u16()
            )));
        }
        if status.is_client_error() {
            let e: Option<ErrorAnswer> = serde_json::from_slice(&body).ok();
            let message = e
                .as_ref()
                .and_then(|e| e.message.clone())
                .unwrap_or_else(|| format!("status {}", status.as_u16()));
            let code = e.and_then(|e| e.error_code).unwrap_or(0);
            // 40401 subject, 40402 version, 40403 schema not found; a 404 without a code too.
            return Err(
                if status == reqwest::StatusCode::NOT_FOUND || (40400..40500).contains(&code) {
                    CallError::NotFound(message)
                } else if status == reqwest::StatusCode::UNAUTHORIZED
                    || status == reqwest::StatusCode::FORBIDDEN
                {
                    CallError::Unavailable(format!(
                        "the Schema Registry refused floodgate's credentials: {message}"
                    ))
                } else {
                    CallError::Refused(message)
                },
            );
        }
        Ok((status, body))
    }

    /// `GET /schemas/ids/{id}`.
    pub async fn by_id(&self, id: u32) -> Result<Registered, CallError> {
        let (_, body) = self
            .call(
                self.http
                    .get(self.url(&["schemas", "ids", &id.to_string()])),
            )
            .await?;
        let answer: SchemaAnswer = parse(&body)?;
        Ok(Registered {
            id,
            format: format_of(answer.schema_type.as_deref())?,
            schema: answer.schema,
        })
    }

    /// `GET /subjects/{subject}/versions/{version|latest}`.
    pub async fn version(
        &self,
        subject: &str,
        version: Option<i32>,
    ) -> Result<Registered, CallError> {
        let v = version.map_or_else(|| "latest".to_string(), |v| v.to_string());
        let (_, body) = self
            .call(
                self.http
                    .get(self.url(&["subjects", subject, "versions", &v])),
            )
            .await?;
        let answer: SchemaAnswer = parse(&body)?;
        let id = answer
            .id
            .ok_or_else(|| CallError::Unavailable("the registry's answer has no id".into()))?;
        Ok(Registered {
            id,
            format: format_of(answer.schema_type.as_deref())?,
            schema: answer.schema,
        })
    }

    /// `POST /subjects/{subject}`: the id of this schema under the subject, if registered.
    pub async fn lookup(
        &self,
        subject: &str,
        format: Format,
        schema: &str,
    ) -> Result<Option<u32>, CallError> {
        match self
            .call(
                self.http
                    .post(self.url(&["subjects", subject]))
                    .header("content-type", "application/vnd.schemaregistry.v1+json")
                    .body(body(format, schema).to_string()),
            )
            .await
        {
            Ok((_, answer)) => Ok(Some(parse::<IdAnswer>(&answer)?.id)),
            Err(CallError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether registering the schema under the subject would be refused as incompatible:
    /// `Err` with the registry's reasons. Asked as registering asks it —
    /// `POST /compatibility/subjects/{subject}/versions`, against the versions the subject's
    /// level names (all of them under a `*_TRANSITIVE` level; review 41-r12 of #37: asked of
    /// the latest only, a schema compatible with it but not with an older version passed) —
    /// and, from a registry without that route (before Confluent 5.5), of `versions/latest`.
    /// A subject without versions takes anything, and so does a registry with neither route:
    /// registering is then what tells.
    pub async fn compatible(
        &self,
        subject: &str,
        format: Format,
        schema: &str,
    ) -> Result<Result<(), String>, CallError> {
        for path in [
            &["compatibility", "subjects", subject, "versions"][..],
            &["compatibility", "subjects", subject, "versions", "latest"][..],
        ] {
            let request = self
                .http
                .post(self.url(path))
                .query(&[("verbose", "true")])
                .header("content-type", "application/vnd.schemaregistry.v1+json")
                .body(body(format, schema).to_string());
            match self.call(request).await {
                Ok((_, answer)) => {
                    let answer: CompatibilityAnswer = parse(&answer)?;
                    return Ok(if answer.is_compatible {
                        Ok(())
                    } else {
                        Err(answer.messages.join("; "))
                    });
                }
                // No such subject (either route), or no such route: the next, then nothing.
                Err(CallError::NotFound(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(Ok(()))
    }

    /// `POST /subjects/{subject}/versions`: registers the schema (or finds it) and says its id.
    pub async fn register(
        &self,
        subject: &str,
        format: Format,
        schema: &str,
    ) -> Result<u32, CallError> {
        let (_, answer) = self
            .call(
                self.http
                    .post(self.url(&["subjects", subject, "versions"]))
                    .header("content-type", "application/vnd.schemaregistry.v1+json")
                    .body(body(format, schema).to_string()),
            )
            .await?;
        Ok(parse::<IdAnswer>(&answer)?.id)
    }
}

/// The registry's answer to a compatibility question.
#[derive(Deserialize)]
struct CompatibilityAnswer {
    is_compatible: bool,
    #[serde(default)]
    messages: Vec<String>,
}

fn body(format: Format, schema: &str) -> serde_json::Value {
    match format {
        Format::Avro => json!({ "schema": schema }),
        Format::Json => json!({ "schema": schema, "schemaType": "JSON" }),
        Format::Protobuf => json!({ "schema": schema, "schemaType": "PROTOBUF" }),
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, CallError> {
    serde_json::from_slice(body)
        .map_err(|e| CallError::Unavailable(format!("the registry's answer is not the API's: {e}")))
}

fn unavailable(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "the Schema Registry did not answer in time".into()
    } else if e.is_connect() {
        "the Schema Registry cannot be reached".into()
    } else {
        format!("the Schema Registry call failed: {e}")
    }
}

//! A small Confluent Schema Registry for tests: in memory, on a loopback port, in the test's
//! tokio runtime. No real registry installs on these machines (Confluent's needs Java and Maven
//! Central, Karapace is not on PyPI), so the tests run this one. It implements the calls the
//! gateway makes and the ones Confluent's Python serdes make (scripts/schema-readback.py), in
//! Confluent's shapes and error codes:
//!
//! - `GET /schemas/ids/{id}` (`?subject=`, `?format=serialized`), `/schemas/ids/{id}/schema`,
//!   `/schemas/ids/{id}/versions`, `/schemas/ids/{id}/subjects`, `GET /schemas/types`
//! - `POST /subjects/{subject}` (lookup), `POST /subjects/{subject}/versions` (register)
//! - `GET /subjects`, `GET /subjects/{subject}/versions`,
//!   `GET /subjects/{subject}/versions/{version|latest}` (and `/schema` under it)
//! - `GET /config`, `GET /config/{subject}` (BACKWARD)
//! - `GET /associations/resources/{namespace}/{name}` (none: the serdes then use
//!   TopicNameStrategy)
//!
//! Anything else is answered 404 and logged (stderr and [`SchemaRegistry::unknown_calls`]).
//!
//! Schemas are compared as text after trimming. Confluent's registry canonicalises a schema
//! before comparing (Avro's parsing canonical form, JSON re-serialised, Protobuf re-printed), so
//! two spellings of one schema get one id there and two here; tests post the same text each
//! time, which is enough. A schema is identified by its type and text: the same schema under
//! another subject gets the same id, as in Confluent's registry.
//!
//! For Protobuf, Confluent's Python deserializer asks for `format=serialized` and expects the
//! base64 of the compiled `FileDescriptorProto`; this registry compiles the stored .proto text
//! with protox (a pure-Rust .proto compiler) for that answer, as Confluent's does with its own.
//!
//! Faults: [`set_delay`](SchemaRegistry::set_delay) (every answer waits),
//! [`set_down`](SchemaRegistry::set_down) (every answer is 500 / 50001),
//! [`set_dropping`](SchemaRegistry::set_dropping) (new connections are closed at once, open
//! ones answered 500 with `Connection: close`), [`stop`](SchemaRegistry::stop) (the port is
//! closed). Calls are counted per kind ([`Call`]).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine as _;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// A schema's type, as the registry names it (`schemaType`; absent means AVRO).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaType {
    Avro,
    Json,
    Protobuf,
}

impl SchemaType {
    pub fn name(self) -> &'static str {
        match self {
            Self::Avro => "AVRO",
            Self::Json => "JSON",
            Self::Protobuf => "PROTOBUF",
        }
    }

    fn parse(name: Option<&str>) -> Option<Self> {
        match name.unwrap_or("AVRO") {
            "AVRO" => Some(Self::Avro),
            "JSON" => Some(Self::Json),
            "PROTOBUF" => Some(Self::Protobuf),
            _ => None,
        }
    }
}

/// The kinds of calls counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    /// `GET /schemas/ids/{id}` and what lies under it.
    SchemaById,
    /// `POST /subjects/{subject}`.
    Lookup,
    /// `POST /subjects/{subject}/versions`.
    Register,
    /// `GET /subjects/{subject}/versions/{version}` (and the versions list).
    SubjectVersion,
    /// `POST /compatibility/subjects/{subject}/versions/latest`.
    Compatibility,
    /// Everything else, known or not.
    Other,
}

impl Call {
    fn of(method: &Method, path: &str) -> Self {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        match (method, parts.as_slice()) {
            (&Method::GET, ["schemas", "ids", ..]) => Self::SchemaById,
            (&Method::POST, ["subjects", _]) => Self::Lookup,
            (&Method::POST, ["subjects", _, "versions"]) => Self::Register,
            (&Method::POST, ["compatibility", ..]) => Self::Compatibility,
            (&Method::GET, ["subjects", _, "versions", ..]) => Self::SubjectVersion,
            _ => Self::Other,
        }
    }
}

#[derive(Debug, Clone)]
struct Stored {
    kind: SchemaType,
    text: String,
}

#[derive(Default)]
struct Data {
    /// Schema id N is at index N - 1.
    schemas: Vec<Stored>,
    /// Each subject's schema ids, version 1 first.
    subjects: BTreeMap<String, Vec<u32>>,
}

impl Data {
    fn id_of(&self, kind: SchemaType, text: &str) -> Option<u32> {
        self.schemas
            .iter()
            .position(|s| s.kind == kind && s.text == text)
            .map(|i| i as u32 + 1)
    }

    /// Registers (or finds) `text` under `subject`; the schema id.
    fn register(&mut self, subject: &str, kind: SchemaType, text: &str) -> u32 {
        let text = text.trim();
        let id = match self.id_of(kind, text) {
            Some(id) => id,
            None => {
                self.schemas.push(Stored {
                    kind,
                    text: text.to_string(),
                });
                self.schemas.len() as u32
            }
        };
        let versions = self.subjects.entry(subject.to_string()).or_default();
        if !versions.contains(&id) {
            versions.push(id);
        }
        id
    }

    /// Why `text` may not follow `subject`'s latest version, under the one rule of Confluent's
    /// default BACKWARD compatibility this registry keeps when asked to: a JSON Schema must not
    /// change the `type` of a property the latest declares.
    /// `every`: against every version (a `*_TRANSITIVE` level), else the latest.
    fn incompatible(
        &self,
        subject: &str,
        kind: SchemaType,
        text: &str,
        every: bool,
    ) -> Option<String> {
        let ids = self.subjects.get(subject)?;
        let against = if every {
            &ids[..]
        } else {
            &ids[ids.len() - 1..]
        };
        let props = |t: &str| -> serde_json::Map<String, Value> {
            serde_json::from_str::<Value>(t)
                .ok()
                .and_then(|v| v.get("properties").and_then(Value::as_object).cloned())
                .unwrap_or_default()
        };
        let new = props(text);
        against.iter().find_map(|id| {
            let old = self.get(*id)?;
            if kind != SchemaType::Json || old.kind != SchemaType::Json {
                return None;
            }
            props(&old.text).iter().find_map(|(name, was)| {
                let now = new.get(name)?;
                (was.get("type") != now.get("type")).then(|| format!("the type of {name} changed"))
            })
        })
    }

    fn get(&self, id: u32) -> Option<&Stored> {
        (id as usize)
            .checked_sub(1)
            .and_then(|i| self.schemas.get(i))
    }
}

#[derive(Default)]
struct Shared {
    data: Mutex<Data>,
    delay: Mutex<Duration>,
    down: AtomicBool,
    dropping: AtomicBool,
    calls: Mutex<HashMap<Call, u64>>,
    total: AtomicU64,
    /// Keep BACKWARD compatibility's property-type rule ([`Data::incompatible`]).
    compatibility: AtomicBool,
    /// ... against every version, as `BACKWARD_TRANSITIVE` does.
    transitive: AtomicBool,
    unknown: Mutex<Vec<String>>,
}

pub struct SchemaRegistry {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl SchemaRegistry {
    /// Starts one on a free loopback port, in the current tokio runtime.
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = Router::new()
            .route("/schemas/ids/{id}", get(schema_by_id))
            .route("/schemas/ids/{id}/schema", get(raw_schema_by_id))
            .route("/schemas/ids/{id}/versions", get(versions_of_id))
            .route("/schemas/ids/{id}/subjects", get(subjects_of_id))
            .route(
                "/schemas/types",
                get(|| async { ok(json!(["JSON", "PROTOBUF", "AVRO"])) }),
            )
            .route("/subjects", get(subjects))
            .route("/subjects/{subject}", post(lookup))
            .route(
                "/subjects/{subject}/versions",
                post(register).get(subject_versions),
            )
            .route("/subjects/{subject}/versions/{version}", get(version))
            .route(
                "/compatibility/subjects/{subject}/versions/{version}",
                post(compatibility_of_version),
            )
            .route(
                "/compatibility/subjects/{subject}/versions",
                post(compatibility),
            )
            .route(
                "/subjects/{subject}/versions/{version}/schema",
                get(version_schema),
            )
            // Confluent's newer serdes ask for the subjects associated with a topic first and,
            // finding none, use TopicNameStrategy: none here.
            .route(
                "/associations/resources/{namespace}/{name}",
                get(|| async { ok(json!([])) }),
            )
            .route("/config", get(config))
            .route("/config/{subject}", get(config))
            .fallback(unknown)
            .layer(middleware::from_fn_with_state(shared.clone(), faults))
            .with_state(shared.clone());
        let listener = Dropping {
            inner: listener,
            shared: shared.clone(),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Self {
            addr,
            shared,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Registers a schema directly (no HTTP call, not counted); its id.
    pub fn register(&self, subject: &str, kind: SchemaType, text: &str) -> u32 {
        self.shared
            .data
            .lock()
            .expect("data")
            .register(subject, kind, text)
    }

    /// The schema with this id: type and text.
    pub fn schema(&self, id: u32) -> Option<(SchemaType, String)> {
        let data = self.shared.data.lock().expect("data");
        data.get(id).map(|s| (s.kind, s.text.clone()))
    }

    /// The schema ids of a subject's versions, version 1 first (empty for an unknown subject).
    pub fn versions(&self, subject: &str) -> Vec<u32> {
        let data = self.shared.data.lock().expect("data");
        data.subjects.get(subject).cloned().unwrap_or_default()
    }

    /// Every answer waits this long first.
    pub fn set_delay(&self, delay: Duration) {
        *self.shared.delay.lock().expect("delay") = delay;
    }

    /// Refuses (409) a JSON Schema that changes the type of a property its subject's latest
    /// version declares, as Confluent's default compatibility does; off by default.
    pub fn set_compatibility(&self, on: bool) {
        self.shared.compatibility.store(on, Ordering::SeqCst);
    }

    /// With [`SchemaRegistry::set_compatibility`]: registering checks every version
    /// (`BACKWARD_TRANSITIVE`), and so does `POST /compatibility/subjects/{s}/versions`;
    /// `.../versions/latest` still asks of the latest only.
    pub fn set_transitive(&self, on: bool) {
        self.shared.transitive.store(on, Ordering::SeqCst);
    }

    /// Every answer is 500 (error_code 50001) while down.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
    }

    /// New connections are closed at once while set; requests on connections already open are
    /// answered 500 with `Connection: close`.
    pub fn set_dropping(&self, dropping: bool) {
        self.shared.dropping.store(dropping, Ordering::SeqCst);
    }

    /// Calls of this kind received so far (whatever they were answered).
    pub fn calls(&self, kind: Call) -> u64 {
        *self
            .shared
            .calls
            .lock()
            .expect("calls")
            .get(&kind)
            .unwrap_or(&0)
    }

    pub fn total_calls(&self) -> u64 {
        self.shared.total.load(Ordering::SeqCst)
    }

    /// Method and URI of every call no route served.
    pub fn unknown_calls(&self) -> Vec<String> {
        self.shared.unknown.lock().expect("unknown").clone()
    }

    /// Closes the port (the gateway then sees connection refused) and ends open connections.
    pub async fn stop(&mut self) {
        self.shared.dropping.store(true, Ordering::SeqCst);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(3), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for SchemaRegistry {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The listener: while dropping, accepted connections are closed at once.
struct Dropping {
    inner: TcpListener,
    shared: Arc<Shared>,
}

impl axum::serve::Listener for Dropping {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    if self.shared.dropping.load(Ordering::SeqCst) {
                        drop(stream);
                        continue;
                    }
                    return (stream, addr);
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// Counts the call, then applies the delay and the faults.
async fn faults(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let kind = Call::of(request.method(), request.uri().path());
    *shared.calls.lock().expect("calls").entry(kind).or_default() += 1;
    shared.total.fetch_add(1, Ordering::SeqCst);
    let delay = *shared.delay.lock().expect("delay");
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if shared.dropping.load(Ordering::SeqCst) {
        let mut r = error(
            StatusCode::INTERNAL_SERVER_ERROR,
            50001,
            "Registry going away",
        );
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    if shared.down.load(Ordering::SeqCst) {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            50001,
            "Error in the backend data store",
        );
    }
    next.run(request).await
}

fn reply(status: StatusCode, body: Value) -> Response {
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    r
}

fn ok(body: Value) -> Response {
    reply(StatusCode::OK, body)
}

fn error(status: StatusCode, code: u32, message: &str) -> Response {
    reply(status, json!({"error_code": code, "message": message}))
}

fn subject_not_found(subject: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        40401,
        &format!("Subject '{subject}' not found."),
    )
}

fn schema_not_found() -> Response {
    error(StatusCode::NOT_FOUND, 40403, "Schema not found")
}

/// The schema's text as asked: `format=serialized` turns a Protobuf schema into the base64 of
/// its compiled `FileDescriptorProto` (what Confluent's Python deserializer reads).
fn text_in_format(stored: &Stored, format: Option<&String>) -> Result<String, String> {
    match (stored.kind, format.map(String::as_str)) {
        (SchemaType::Protobuf, Some("serialized")) if serialized_proto(&stored.text) => {
            Ok(stored.text.clone())
        }
        (SchemaType::Protobuf, Some("serialized")) => {
            let bytes = compile_proto(&stored.text)?;
            Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        _ => Ok(stored.text.clone()),
    }
}

/// Adds `schemaType` unless the schema is Avro (Confluent omits it then).
fn with_type(mut body: Value, kind: SchemaType) -> Value {
    if kind != SchemaType::Avro {
        body["schemaType"] = json!(kind.name());
    }
    body
}

async fn schema_by_id(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let stored = {
        let data = shared.data.lock().expect("data");
        id.parse().ok().and_then(|id| data.get(id).cloned())
    };
    let Some(stored) = stored else {
        return schema_not_found();
    };
    match text_in_format(&stored, query.get("format")) {
        Ok(text) => ok(with_type(json!({"schema": text}), stored.kind)),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, 50001, &e),
    }
}

async fn raw_schema_by_id(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let data = shared.data.lock().expect("data");
    match id.parse().ok().and_then(|id| data.get(id)) {
        Some(stored) => {
            let mut r = (StatusCode::OK, stored.text.clone()).into_response();
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
            r
        }
        None => schema_not_found(),
    }
}

fn usages(data: &Data, id: u32) -> Vec<(String, usize)> {
    data.subjects
        .iter()
        .filter_map(|(subject, ids)| {
            ids.iter()
                .position(|i| *i == id)
                .map(|at| (subject.clone(), at + 1))
        })
        .collect()
}

async fn versions_of_id(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let data = shared.data.lock().expect("data");
    let Some(id) = id.parse().ok().filter(|id| data.get(*id).is_some()) else {
        return schema_not_found();
    };
    let list: Vec<Value> = usages(&data, id)
        .into_iter()
        .map(|(subject, version)| json!({"subject": subject, "version": version}))
        .collect();
    ok(json!(list))
}

async fn subjects_of_id(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let data = shared.data.lock().expect("data");
    let Some(id) = id.parse().ok().filter(|id| data.get(*id).is_some()) else {
        return schema_not_found();
    };
    let list: Vec<String> = usages(&data, id).into_iter().map(|(s, _)| s).collect();
    ok(json!(list))
}

async fn subjects(State(shared): State<Arc<Shared>>) -> Response {
    let data = shared.data.lock().expect("data");
    ok(json!(data.subjects.keys().collect::<Vec<_>>()))
}

/// The body of a lookup or a registration: schema text and type.
fn posted_schema(body: &Bytes) -> Result<(SchemaType, String), Box<Response>> {
    let bad = |m: &str| Box::new(error(StatusCode::UNPROCESSABLE_ENTITY, 42201, m));
    let value: Value =
        serde_json::from_slice(body).map_err(|e| bad(&format!("Invalid schema body: {e}")))?;
    let text = value["schema"]
        .as_str()
        .ok_or_else(|| bad("Invalid schema: no \"schema\" string"))?;
    let kind = SchemaType::parse(value["schemaType"].as_str())
        .ok_or_else(|| bad("Invalid schema: unknown schemaType"))?;
    if value["references"]
        .as_array()
        .is_some_and(|r| !r.is_empty())
    {
        return Err(bad("Invalid schema: references are not supported here"));
    }
    Ok((kind, text.trim().to_string()))
}

/// The body of a lookup or a registration, as an extractor: schema type and text. A body that
/// is not one is answered 422 before the handler runs.
struct Posted(SchemaType, String);

impl<S: Send + Sync> axum::extract::FromRequest<S> for Posted {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        let body = Bytes::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let (kind, text) = posted_schema(&body).map_err(|r| *r)?;
        Ok(Self(kind, text))
    }
}

fn version_body(subject: &str, version: usize, id: u32, stored: &Stored, text: String) -> Value {
    with_type(
        json!({"subject": subject, "version": version, "id": id, "schema": text}),
        stored.kind,
    )
}

async fn lookup(
    State(shared): State<Arc<Shared>>,
    Path(subject): Path<String>,
    Posted(kind, text): Posted,
) -> Response {
    let data = shared.data.lock().expect("data");
    let Some(ids) = data.subjects.get(&subject) else {
        return subject_not_found(&subject);
    };
    let found = ids.iter().enumerate().find(|(_, id)| {
        data.get(**id)
            .is_some_and(|s| s.kind == kind && s.text == text)
    });
    match found {
        Some((at, id)) => {
            let stored = data.get(*id).expect("stored");
            ok(version_body(
                &subject,
                at + 1,
                *id,
                stored,
                stored.text.clone(),
            ))
        }
        None => schema_not_found(),
    }
}

async fn register(
    State(shared): State<Arc<Shared>>,
    Path(subject): Path<String>,
    Posted(kind, text): Posted,
) -> Response {
    if let Err(e) = check(kind, &text) {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            42201,
            &format!("Invalid schema {text}: {e}"),
        );
    }
    let mut data = shared.data.lock().expect("data");
    if shared.compatibility.load(Ordering::SeqCst) {
        let every = shared.transitive.load(Ordering::SeqCst);
        if let Some(why) = data.incompatible(&subject, kind, &text, every) {
            let message =
                format!("Schema being registered is incompatible with an earlier schema: {why}");
            return error(StatusCode::CONFLICT, 409, &message);
        }
    }
    let id = data.register(&subject, kind, &text);
    ok(json!({"id": id}))
}

/// `POST /compatibility/subjects/{subject}/versions/latest`: against the latest only.
async fn compatibility_of_version(
    State(shared): State<Arc<Shared>>,
    Path((subject, _version)): Path<(String, String)>,
    Posted(kind, text): Posted,
) -> Response {
    compatible_answer(&shared, &subject, kind, &text, false)
}

/// `POST /compatibility/subjects/{subject}/versions`: the check registering makes.
async fn compatibility(
    State(shared): State<Arc<Shared>>,
    Path(subject): Path<String>,
    Posted(kind, text): Posted,
) -> Response {
    let every = shared.transitive.load(Ordering::SeqCst);
    compatible_answer(&shared, &subject, kind, &text, every)
}

/// `is_compatible` (with the reason), or 40401 for a subject with no version.
fn compatible_answer(
    shared: &Shared,
    subject: &str,
    kind: SchemaType,
    text: &str,
    every: bool,
) -> Response {
    let data = shared.data.lock().expect("data");
    if !data.subjects.contains_key(subject) {
        return subject_not_found(subject);
    }
    let why = data
        .incompatible(subject, kind, text, every)
        .filter(|_| shared.compatibility.load(Ordering::SeqCst));
    ok(json!({"is_compatible": why.is_none(), "messages": why.into_iter().collect::<Vec<_>>()}))
}

async fn subject_versions(
    State(shared): State<Arc<Shared>>,
    Path(subject): Path<String>,
) -> Response {
    let data = shared.data.lock().expect("data");
    match data.subjects.get(&subject) {
        Some(ids) => ok(json!((1..=ids.len()).collect::<Vec<_>>())),
        None => subject_not_found(&subject),
    }
}

/// The subject's version (`latest` or -1 for the newest): position, id, schema.
fn find_version(
    data: &Data,
    subject: &str,
    version: &str,
) -> Result<(usize, u32, Stored), Box<Response>> {
    let ids = data
        .subjects
        .get(subject)
        .ok_or_else(|| Box::new(subject_not_found(subject)))?;
    let not_found = || {
        Box::new(error(
            StatusCode::NOT_FOUND,
            40402,
            &format!("Version {version} not found."),
        ))
    };
    let at = match version {
        "latest" | "-1" => ids.len(),
        v => v.parse::<usize>().map_err(|_| {
            Box::new(error(
                StatusCode::UNPROCESSABLE_ENTITY,
                42202,
                &format!("The specified version '{v}' is not a valid version id."),
            ))
        })?,
    };
    if at == 0 || at > ids.len() {
        return Err(not_found());
    }
    let id = ids[at - 1];
    let stored = data.get(id).cloned().ok_or_else(not_found)?;
    Ok((at, id, stored))
}

async fn version(
    State(shared): State<Arc<Shared>>,
    Path((subject, version)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let found = {
        let data = shared.data.lock().expect("data");
        find_version(&data, &subject, &version)
    };
    match found {
        Ok((at, id, stored)) => match text_in_format(&stored, query.get("format")) {
            Ok(text) => ok(version_body(&subject, at, id, &stored, text)),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, 50001, &e),
        },
        Err(r) => *r,
    }
}

async fn version_schema(
    State(shared): State<Arc<Shared>>,
    Path((subject, version)): Path<(String, String)>,
) -> Response {
    let data = shared.data.lock().expect("data");
    match find_version(&data, &subject, &version) {
        Ok((_, _, stored)) => (StatusCode::OK, stored.text).into_response(),
        Err(r) => *r,
    }
}

async fn config() -> Response {
    ok(json!({"compatibilityLevel": "BACKWARD"}))
}

async fn unknown(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: axum::http::Uri,
) -> Response {
    let call = format!("{method} {uri}");
    eprintln!("test schema registry: no route for {call}");
    shared.unknown.lock().expect("unknown").push(call);
    error(StatusCode::NOT_FOUND, 404, "HTTP 404 Not Found")
}

/// Refuses what Confluent's registry would refuse as a schema of this type (roughly: Avro and
/// JSON Schema must be JSON, Protobuf must compile).
fn check(kind: SchemaType, text: &str) -> Result<(), String> {
    match kind {
        SchemaType::Avro | SchemaType::Json => serde_json::from_str::<Value>(text)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        SchemaType::Protobuf if serialized_proto(text) => Ok(()),
        SchemaType::Protobuf => compile_proto(text).map(|_| ()),
    }
}

/// A Protobuf schema registered in Confluent's `serialized` form (base64 of a
/// `FileDescriptorProto`, what Confluent's Python serializer registers). Confluent's registry
/// stores it as .proto text; this one keeps it as it came and answers it as it came.
fn serialized_proto(text: &str) -> bool {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()
        .is_some_and(|bytes| protox::file::File::decode_file_descriptor_proto(&bytes[..]).is_ok())
}

/// Compiles .proto text (imports of Google's well-known types resolve); the encoded
/// `FileDescriptorProto` of the file itself.
pub fn compile_proto(text: &str) -> Result<Vec<u8>, String> {
    struct One(String);
    impl protox::file::FileResolver for One {
        fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
            if name == "schema.proto" {
                protox::file::File::from_source(name, &self.0)
            } else {
                Err(protox::Error::file_not_found(name))
            }
        }
    }
    let mut resolver = protox::file::ChainFileResolver::new();
    resolver.add(One(text.to_string()));
    resolver.add(protox::file::GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(false).include_source_info(false);
    compiler
        .open_file("schema.proto")
        .map_err(|e| e.to_string())?;
    let set = compiler.encode_file_descriptor_set();
    first_file(&set).ok_or_else(|| "no file in the compiled set".to_string())
}

/// Field 1 (`repeated FileDescriptorProto file`) of an encoded `FileDescriptorSet`: the first.
fn first_file(set: &[u8]) -> Option<Vec<u8>> {
    fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *bytes.get(*at)?;
            *at += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    let mut at = 0;
    while at < set.len() {
        let tag = varint(set, &mut at)?;
        if tag & 7 != 2 {
            return None;
        }
        let len = varint(set, &mut at)? as usize;
        let field = set.get(at..at + len)?;
        at += len;
        if tag >> 3 == 1 {
            return Some(field.to_vec());
        }
    }
    None
}

//! The schema step of the pipeline: after a body is decoded and before anything is admitted,
//! every record's key and value are written in the schema they want (or the topic's contract
//! asks for), or the request is refused naming the record and the field — so nothing of a
//! refused request is charged or written. A format that reports records one by one (Confluent's
//! `records:batch`) takes a failed record into its answer instead
//! ([`crate::body::ParseRecord::fail_record`]), and the rest go on.
//!
//! A raw schema the registry does not hold is registered here, and only here: after every
//! record of the request was checked against its schema (a stream's record: that record), and
//! after every other check that can refuse the request without the registry — the topic
//! exists, and the tenant's budgets, the global budget, the adaptive and lag shares and the
//! buffer would admit the request now. What the request needs of its tenant's own budgets and
//! buffer share is then reserved until its admission ([`crate::admission::Reservation`]): no
//! other request of the tenant can take it meanwhile, and a failed registration gives it back
//! untaken. Registering after admission instead would hold spent tokens across a registry call
//! whose failure could not give them back (leased tokens in cluster mode are not returned).
//! Another tenant taking the global budget or the buffer in the moment of a registration is the
//! one way a registration can outlive its request, and it is charged to the tenant's
//! registrations all the same.

use std::borrow::Cow;
use std::sync::Arc;

use crate::admission::{LeaseNeed, Reservation};
use crate::body::RecordArena;
use crate::identity::Topic;
use crate::inflight_bodies::BodyHold;
use crate::outcome::ApiError;
use crate::record::{Charge, Record};
use crate::refusal::Denial;
use crate::schema::{ChecksOwed, Converted, Failure, Lookups, Pending, SchemaError, Side, Wanted};
use crate::tenant::Tenant;

use super::{BodyFormat, Ingest};

/// The new arena is held in steps of at least this much.
const STEP: u64 = 64 * 1024;

/// What a wire format knows of its records' schemas: the adapter's parser implements it.
pub trait RecordSchemas: Send + Sync {
    /// What each of the decoded `records`' key and value want, in record order (taken: a
    /// second call gives the records decoded since), or why the request cannot say (a v2 body
    /// with keys and no key schema).
    fn take_wanted(&self, records: &[Record<'_>]) -> Result<Vec<Wanted>, ApiError>;

    /// What decoded record `index` wants, left in place (a stream's single record is checked
    /// before the stream is answered).
    fn wanted_at(&self, index: usize) -> Option<Wanted> {
        let _ = index;
        None
    }

    /// The schema ids the request's keys and values were written with (v2's answer names
    /// them); called once, after every record converted.
    fn used_ids(&self, key: Option<u32>, value: Option<u32>) {
        let _ = (key, value);
    }
}

/// The client's error for record `index`'s failure.
pub fn failure_error(index: usize, failure: &Failure) -> ApiError {
    let detail = format!("record {index}: {}", failure.detail());
    match &failure.error {
        SchemaError::Violation(_) => ApiError::SchemaViolation(detail),
        SchemaError::NotFound(_) | SchemaError::NoRegistry => ApiError::SchemaNotFound(detail),
        SchemaError::Invalid(_) => ApiError::SchemaInvalid(detail),
        SchemaError::Refused(_) => ApiError::SchemaRefused(detail),
        SchemaError::Unavailable(_) => ApiError::SchemaRegistryUnavailable(detail),
        SchemaError::TooCostly(_) => ApiError::SchemaTooCostly(detail),
        SchemaError::Busy(wait, _) => ApiError::SchemaBusy(*wait, detail),
        SchemaError::Crowded(wait, _) => ApiError::SchemaCrowded(*wait, detail),
        // Answered with admission's own refusal where the request is known
        // ([`Ingest::convert_record`]); anywhere else, retry in a second.
        SchemaError::Inadmissible => {
            ApiError::SchemaBusy(std::time::Duration::from_secs(1), detail)
        }
    }
}

impl Ingest {
    /// The records in their schemas' wire format (a new arena, held against the body budget
    /// while both exist), with what their checks cost (owed until they are admitted) and what
    /// the request reserved before registering raw schemas, or the request's refusal. Records
    /// that want no schema on a topic without a contract pass untouched, and a request with
    /// none costs nothing here.
    pub async fn apply_schemas(
        &self,
        tenant: &Arc<Tenant>,
        topic: &Topic,
        arena: RecordArena,
        hold: &mut BodyHold,
        format: &BodyFormat<'_>,
    ) -> Result<Applied, ApiError> {
        // Asked only when a format says what its records want: `/v1` records on a topic
        // without a contract pass without it.
        let wanted = match format.schemas {
            Some(n) => n.take_wanted(&arena.records())?,
            None => Vec::new(),
        };
        // Every way out before admission charges what the request's passed checks cost.
        let owed = self.schemas.owed(tenant.id.as_str());
        if !self.schemas.applies(topic, &wanted) {
            // Nothing to convert: no gate, no allocation, on the path most requests take.
            return Ok(Applied::untouched(arena, owed));
        }
        // Boxed: the conversion's state is the pipeline's largest (3 KB), and inline it would
        // be every request's, moved with it (memcpy was 1.3 % of a single-record profile).
        Box::pin(self.convert_arena(tenant, topic, (arena, wanted), owed, hold, format)).await
    }

    /// [`Ingest::apply_schemas`] once some record wants a schema or the topic has a contract.
    async fn convert_arena(
        &self,
        tenant: &Arc<Tenant>,
        topic: &Topic,
        (arena, wanted): (RecordArena, Vec<Wanted>),
        mut owed: ChecksOwed,
        hold: &mut BodyHold,
        format: &BodyFormat<'_>,
    ) -> Result<Applied, ApiError> {
        let notes = format.schemas;
        let records = arena.records();
        // Converting records changes their bytes, never their number: a request that can
        // never be admitted for its number of records is refused before any schema work, and
        // a batch (whose failed entries are left out) once the records it kept are more than
        // a burst holds (review 35a of #37: a `records:batch` of 10 new raw schemas against a
        // burst of 1 cost 8 registry lookups and 8 compiles, 0.3 s, before its 413).
        let each = format.record.reports_each();
        let never =
            |n: usize| match self
                .admission
                .check_to(tenant, Some(topic), Charge::new(n as u64, 0))
            {
                Err(Denial::TooLarge(t)) => Some(ApiError::ExceedsBurst(t)),
                _ => None,
            };
        if let Some(e) = never(records.len()).filter(|_| !each) {
            return Err(e);
        }
        let mut out = RecordArena::default();
        let before = hold.bytes();
        let mut grown = 0u64;
        let (mut key_id, mut value_id) = (None, None);
        let charge = arena.charge();
        let still = {
            let (admission, tenant, topic) =
                (self.admission.clone(), tenant.clone(), topic.clone());
            move || admission.check_to(&tenant, Some(&topic), charge).is_ok()
        };
        let mut lookups = Lookups::per_request(tenant.id.as_str()).with_admission(Arc::new(still));
        // Records kept whose raw schemas wait to be registered: (record, place in `out`).
        let mut deferred: Vec<(usize, usize, Vec<Pending>)> = Vec::new();
        let keep = |i: usize, converted: Result<ConvertedRecord, ApiError>| {
            let converted = match converted {
                Ok(c) => c,
                Err(error) => {
                    // A batch reports the record in its place and writes the others.
                    let status = error.status().as_u16();
                    if format.record.fail_record(i, status, error.detail()) {
                        return Ok(());
                    }
                    return Err(error);
                }
            };
            owed.add(converted.checked);
            key_id = key_id.or(converted.key_id);
            value_id = value_id.or(converted.value_id);
            if !converted.pending.is_empty() {
                deferred.push((i, out.len(), converted.pending));
            }
            out.push(&converted.record);
            if let Some(e) = never(out.len()).filter(|_| each) {
                return Err(e);
            }
            // Held as it grows, not after: the new arena never outgrows the body budget.
            let held = out.held() as u64;
            if held > grown {
                let step = (held - grown).max(STEP);
                if !hold.grow(step) {
                    return Err(self.busy(tenant));
                }
                grown += step;
            }
            Ok(())
        };
        let to_convert = ToConvert {
            records: &records,
            wanted: &wanted,
            first: 0,
            whole: true,
        };
        if !self
            .convert_each(tenant, topic, to_convert, &mut lookups, keep)
            .await?
        {
            drop(records);
            return Ok(Applied::untouched(arena, owed));
        }
        let mut reserved = None;
        if !deferred.is_empty() {
            let (ids, reservation) = self
                .register_deferred(tenant, topic, &mut out, deferred, format)
                .await?;
            key_id = key_id.or(ids.0);
            value_id = value_id.or(ids.1);
            reserved = Some(reservation);
        }
        if let Some(n) = notes {
            n.used_ids(key_id, value_id);
        }
        drop(records);
        drop(arena);
        // The old arena is gone: what is held is what the body needed or the new arena, the
        // larger.
        let _ = hold.resize(before.max(out.held() as u64));
        Ok(Applied {
            arena: out,
            owed,
            reserved,
        })
    }

    /// The schema step over some records, the one loop every path shares: each record's key
    /// and value in their schemas, handed in order (with its index among `records`) to
    /// `keep`, whose error ends the step. `false`, and nothing handed, when no record wants a
    /// schema and the topic has no contract: the records pass untouched, at no cost.
    pub(super) async fn convert_each(
        &self,
        tenant: &Arc<Tenant>,
        topic: &Topic,
        records: ToConvert<'_, '_>,
        lookups: &mut Lookups,
        mut keep: impl FnMut(usize, Result<ConvertedRecord, ApiError>) -> Result<(), ApiError>,
    ) -> Result<bool, ApiError> {
        if !self.schemas.applies(topic, records.wanted) {
            return Ok(false);
        }
        let n = records.records.len();
        for (i, r) in records.records.iter().enumerate() {
            let at = (records.first + i, records.whole);
            lookups.more_after_this(i + 1 < n);
            let converted = self
                .convert_record(tenant, topic, at, r, records.wanted.get(i), lookups)
                .await;
            keep(i, converted)?;
        }
        Ok(true)
    }

    /// The request's raw schemas registered, once every record fit and the request would be
    /// admitted (and what it needs of its tenant is reserved), and their ids written into the
    /// kept records; a record whose registration failed is the request's refusal, or (a
    /// batch) its own failure and left out. The ids used, for the answer, and the
    /// reservation, for its admission.
    async fn register_deferred(
        &self,
        tenant: &Arc<Tenant>,
        topic: &Topic,
        out: &mut RecordArena,
        deferred: Vec<(usize, usize, Vec<Pending>)>,
        format: &BodyFormat<'_>,
    ) -> Result<((Option<u32>, Option<u32>), Reservation), ApiError> {
        // The topic again: its schema work may have taken a while since the early check.
        self.check_topic(topic, std::iter::empty()).await?;
        let reservation = self.reserve(tenant, topic, out.charge()).await?;
        let (mut ids, mut failed) = ((None, None), Vec::new());
        for (index, at, pending) in deferred {
            let registered = match self.schemas.register(tenant.id.as_str(), &pending).await {
                Ok(registered) => registered,
                Err(f) => {
                    let error = failure_error(index, &f);
                    let status = error.status().as_u16();
                    if format.record.fail_record(index, status, error.detail()) {
                        failed.push(at);
                        continue;
                    }
                    return Err(error);
                }
            };
            for (p, id) in pending.iter().zip(registered) {
                if p.header {
                    out.overwrite(at, p.side == Side::Key, 1, &id.to_be_bytes());
                }
                match p.side {
                    Side::Key => ids.0 = ids.0.or(Some(id)),
                    Side::Value => ids.1 = ids.1.or(Some(id)),
                }
            }
        }
        if !failed.is_empty() {
            *out = out.without(&failed);
        }
        Ok((ids, reservation))
    }

    /// Registers a stream record's pending raw schemas (the record is admitted alone).
    async fn register_pending(&self, tenant: &Tenant, c: &mut Converted) -> Result<(), Failure> {
        let pending = std::mem::take(&mut c.pending);
        let ids = self.schemas.register(tenant.id.as_str(), &pending).await?;
        for (p, id) in pending.iter().zip(ids) {
            c.set_id(p.side, id);
        }
        Ok(())
    }

    /// Whether a request (of this charge) could be admitted now: the topic exists and no
    /// budget, share or the buffer refuses it. Takes nothing.
    async fn would_admit(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        charge: Charge,
    ) -> Result<(), ApiError> {
        self.check_topic(topic, std::iter::empty()).await?;
        self.admission
            .check_to(tenant, Some(topic), charge)
            .map_err(|d| self.denied(tenant, d))
    }

    /// What the request needs of its tenant's budgets and buffer share reserved for its
    /// admission, if [`Ingest::would_admit`] would let it through (the topic is the caller's
    /// to have checked): what comes before registering raw schemas (and before a single v3
    /// record's answer).
    pub(super) async fn reserve(
        &self,
        tenant: &Arc<Tenant>,
        topic: &Topic,
        charge: Charge,
    ) -> Result<Reservation, ApiError> {
        // Cluster mode: what the slices lack is leased first, so what is reserved are tokens
        // this replica holds, which no other replica can spend during the registration.
        if let Some(cluster) = &self.cluster {
            if let Some(need) = self.admission.lease_need(tenant, Some(topic), charge) {
                let whole = LeaseNeed {
                    partial: false,
                    ..need
                };
                if let Err(r) = cluster.lease_for(tenant, whole).await {
                    return Err(super::admit::refused(tenant, r));
                }
            }
        }
        self.admission
            .reserve_to(tenant, Some(topic), charge)
            .map_err(|d| self.denied(tenant, d))
    }

    /// Record `index` in its schemas, or its error (counted when the data did not fit).
    async fn convert_record(
        &self,
        tenant: &Arc<Tenant>,
        topic: &Topic,
        (index, whole): (usize, bool),
        r: &Record<'_>,
        wanted: Option<&Wanted>,
        lookups: &mut Lookups,
    ) -> Result<ConvertedRecord, ApiError> {
        let converted = self
            .schemas
            .convert(
                tenant.id.as_str(),
                topic,
                (r.key.as_deref(), r.value.as_deref()),
                wanted,
                lookups,
            )
            .await;
        let mut c = match converted {
            Ok(c) => c,
            Err(Failure {
                error: SchemaError::Inadmissible,
                ..
            }) => {
                // Its budgets were spent while its check queued: admission's own refusal (or,
                // admissible again by now, a retry).
                let charge = Charge::of(std::slice::from_ref(r));
                self.would_admit(tenant, topic, charge).await?;
                return Err(self.busy(tenant));
            }
            Err(failure) => {
                if matches!(failure.error, SchemaError::Violation(_)) {
                    self.schemas.count_violation(tenant.id.as_str(), topic);
                }
                return Err(failure_error(index, &failure));
            }
        };
        // Its checks passed: owed by the record from here, charged if it is refused below.
        let mut owed = self.schemas.owed(tenant.id.as_str());
        owed.add(std::mem::take(&mut c.checked));
        // A schema's defaults can make a small JSON value large: what a record becomes is
        // bounded like what it was sent as.
        let too_large = |side: &str, n: usize, limit: usize| {
            ApiError::RecordTooLarge(format!(
                "record {index}: the {side} is {n} bytes in its schema; the limit is {limit}"
            ))
        };
        if let Some(n) = c.key.as_ref().map(Vec::len) {
            if n > self.bounds.max_key_bytes {
                return Err(too_large("key", n, self.bounds.max_key_bytes));
            }
        }
        if let Some(n) = c.value.as_ref().map(Vec::len) {
            if n > self.bounds.max_value_bytes {
                return Err(too_large("value", n, self.bounds.max_value_bytes));
            }
        }
        // A stream's record is admitted alone: its schemas are registered now, once every
        // other check has passed — its size above, its partition and its budgets here (review
        // 21 of #37: a v3 record naming a partition the topic does not have added a version).
        // A request's wait for every record ([`Ingest::register_deferred`]).
        let mut reserved = None;
        if !c.pending.is_empty() && !whole {
            self.check_topic(topic, std::iter::once(r.partition))
                .await?;
            let charge = Charge::of(std::slice::from_ref(r));
            reserved = Some(self.reserve(tenant, topic, charge).await?);
            self.register_pending(tenant, &mut c)
                .await
                .map_err(|f| failure_error(index, &f))?;
        }
        let owned = |b: Option<&[u8]>| b.map(|b| Cow::Owned(b.to_vec()));
        Ok(ConvertedRecord {
            reserved,
            checked: owed.hand_over(),
            key_id: c.key_id,
            value_id: c.value_id,
            pending: std::mem::take(&mut c.pending),
            record: Record {
                key: c.key.map(Cow::Owned).or_else(|| owned(r.key.as_deref())),
                value: c
                    .value
                    .map(Cow::Owned)
                    .or_else(|| owned(r.value.as_deref())),
                headers: r
                    .headers
                    .iter()
                    .map(|(k, v)| (Cow::Owned(k.to_string()), Cow::Owned(v.to_vec())))
                    .collect(),
                partition: r.partition,
                timestamp_ms: r.timestamp_ms,
            },
        })
    }
}

/// Records for the schema step: the records, what each wants (in record order), and the number
/// the first has in errors (a stream's records are numbered from the stream's start).
pub(super) struct ToConvert<'r, 'a> {
    pub records: &'r [Record<'a>],
    pub wanted: &'r [Wanted],
    pub first: usize,
    /// The records are admitted together (a request), not one by one (a stream's).
    pub whole: bool,
}

/// A record in its schemas, and the schema ids it was written with.
pub(super) struct ConvertedRecord {
    pub record: Record<'static>,
    pub key_id: Option<u32>,
    pub value_id: Option<u32>,
    /// A request's raw schemas still to register (written with id 0 until then).
    pub pending: Vec<Pending>,
    /// The CPU its checks took, owed until it is admitted ([`ChecksOwed`]).
    pub checked: std::time::Duration,
    /// A stream's record that registered raw schemas: what it reserved for its admission.
    pub reserved: Option<Reservation>,
}

/// The schema step's outcome for a request: its records, what their checks cost (owed until
/// they are admitted), and what it reserved of its tenant before registering raw schemas.
pub struct Applied {
    pub arena: RecordArena,
    pub owed: ChecksOwed,
    pub reserved: Option<Reservation>,
}

impl Applied {
    fn untouched(arena: RecordArena, owed: ChecksOwed) -> Self {
        Self {
            arena,
            owed,
            reserved: None,
        }
    }
}

//! Usage for chargeback: per tenant and hour, what this replica admitted (requests, records,
//! bytes), how many records Kafka acknowledged or failed, what it refused, by reason, and what
//! limits in shadow mode would have refused.
//!
//! The ledger reads the tenants' own counters (`tenant::TenantStats::usage`, atomics the
//! request path already keeps) every `[usage] tick_ms` and before every answer it gives, and
//! adds what changed since its last look to the row of the hour it looks in: nothing is
//! added to the request path, and a request is counted in the hour it was looked at in, at
//! most one tick after it was decided. Tenants with no traffic since the last look add no row.
//!
//! **Bounds.** Rows older than `retention_hours` go; beyond `max_rows` the oldest hour goes
//! first. A row holds only the reasons that refused something, so it is about 100 bytes.
//!
//! **Where it ends.** Each replica keeps its own (with `[cluster] redis_url`, the replicas'
//! rows add up: ask each, or read the export topic); a restart starts empty; the export
//! (`usage::export`) is the durable copy.
//!
//! Layer: decisions and state. Imports tenants, the calendar and the foundations.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::budget::Clock;
use crate::quota::{Calendar, Window};
use crate::refusal::Reason;
use crate::tenant::{Flow, Tenants, UsageCounts};

const HOUR_S: i64 = 3_600;

/// One tenant's usage in one interval.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    pub admitted: Flow,
    pub failed_records: u64,
    /// Records Kafka acknowledged (in the hour its answer came: a record in flight at an
    /// hour's edge is admitted in one and delivered in the next).
    pub delivered_records: u64,
    /// Refusals by reason: only the reasons that refused something.
    pub refused: Vec<(Reason, Flow)>,
    /// Would-be refusals of limits in shadow mode (admitted all the same), likewise.
    pub shadowed: Vec<(Reason, Flow)>,
}

/// `into += from`, reason by reason.
fn add_by_reason(into: &mut Vec<(Reason, Flow)>, from: &[(Reason, Flow)]) {
    for (reason, flow) in from {
        match into.iter_mut().find(|(r, _)| r == reason) {
            Some((_, f)) => f.add(*flow),
            None => into.push((*reason, *flow)),
        }
    }
}

/// What moved between two readings of counters by reason: the reasons that moved.
fn moved_by_reason(before: &[Flow], now: &[Flow]) -> Vec<(Reason, Flow)> {
    Reason::ALL
        .iter()
        .zip(before.iter().zip(now))
        .map(|(r, (b, n))| (*r, n.since(*b)))
        .filter(|(_, f)| !f.is_zero())
        .collect()
}

impl Row {
    fn add(&mut self, other: &Row) {
        self.admitted.add(other.admitted);
        self.failed_records = self.failed_records.saturating_add(other.failed_records);
        self.delivered_records = self
            .delivered_records
            .saturating_add(other.delivered_records);
        add_by_reason(&mut self.refused, &other.refused);
        add_by_reason(&mut self.shadowed, &other.shadowed);
    }

    /// What changed between two readings of a tenant's counters (`None`: nothing).
    fn between(before: &UsageCounts, now: &UsageCounts) -> Option<Row> {
        let row = Row {
            admitted: now.admitted.since(before.admitted),
            failed_records: now.failed_records.saturating_sub(before.failed_records),
            delivered_records: now
                .delivered_records
                .saturating_sub(before.delivered_records),
            refused: moved_by_reason(&before.refused, &now.refused),
            shadowed: moved_by_reason(&before.shadowed, &now.shadowed),
        };
        (row != Row::default()).then_some(row)
    }
}

/// How rows are kept (`[usage]`).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How often the counters are read.
    pub tick: std::time::Duration,
    pub retention_hours: u32,
    pub max_rows: usize,
}

/// How a query groups hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    Hour,
    Day,
}

/// One row of an answer: a tenant's usage in `[start, end)` (Unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    pub tenant: Arc<str>,
    pub start: i64,
    pub end: i64,
    pub row: Row,
}

impl Interval {
    /// The interval as `GET /admin/usage` and the export show it (openapi.json's schema).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "tenant": &*self.tenant,
            "start": rfc3339(self.start),
            "end": rfc3339(self.end),
            "admitted": self.row.admitted,
            "failed_records": self.row.failed_records,
            "delivered_records": self.row.delivered_records,
            "refused": by_reason(&self.row.refused),
            "shadowed": by_reason(&self.row.shadowed),
        })
    }
}

/// Flows by reason, as an object keyed by the reason's name.
fn by_reason(flows: &[(Reason, Flow)]) -> serde_json::Value {
    flows
        .iter()
        .map(|(reason, flow)| (reason.as_str().to_string(), serde_json::json!(flow)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// A Unix second as RFC 3339 (`null` past what the calendar holds).
pub fn rfc3339(unix_s: i64) -> serde_json::Value {
    time::OffsetDateTime::from_unix_timestamp(unix_s)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .map_or(serde_json::Value::Null, serde_json::Value::String)
}

/// Which rows a query wants, and the page.
#[derive(Debug, Clone)]
pub struct Query {
    pub tenant: Option<String>,
    /// Intervals starting at or after `from`, and before `to` (Unix seconds).
    pub from: i64,
    pub to: i64,
    pub granularity: Granularity,
    /// Only intervals after this one (the last of the previous page: start, tenant).
    pub after: Option<(i64, String)>,
    pub limit: usize,
}

#[derive(Debug, Default)]
struct Inner {
    rows: BTreeMap<(i64, Arc<str>), Row>,
    /// Each tenant's counters at the last look, by the tenant's serial (a tenant made again
    /// counts from zero).
    last: HashMap<u64, UsageCounts>,
    /// With an export: the rows that moved since the export last took them (every look
    /// adds to it, whoever looks: review 3 of #41 found the export missing the rows that the
    /// ticks and the admin answers had looked at).
    unexported: HashSet<(Arc<str>, i64)>,
}

/// The ledger: every tenant's usage by hour, as this replica counted it.
#[derive(Debug)]
pub struct Ledger {
    tenants: Arc<Tenants>,
    clock: Arc<dyn Clock>,
    calendar: Calendar,
    settings: Settings,
    inner: Mutex<Inner>,
    /// `[usage] topic`: where the rows are exported.
    export: Option<Arc<export::Export>>,
}

impl Ledger {
    pub fn new(
        tenants: Arc<Tenants>,
        clock: Arc<dyn Clock>,
        calendar: Calendar,
        settings: Settings,
    ) -> Self {
        Self {
            tenants,
            clock,
            calendar,
            settings,
            inner: Mutex::default(),
            export: None,
        }
    }

    /// A ledger whose rows are exported by `export`.
    pub fn exported(mut self, export: export::Export) -> Self {
        self.export = Some(Arc::new(export));
        self
    }

    /// Shutdown: writes what moved since the last export (within `within`), if there is an
    /// export.
    pub async fn flush(&self, within: std::time::Duration) {
        let Some(export) = &self.export else { return };
        match tokio::time::timeout(within, export.export(self)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "shutdown: usage not exported"),
            Err(_) => tracing::warn!("shutdown: usage not exported in time"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn unix_s(&self) -> i64 {
        i64::try_from(self.clock.unix_s()).unwrap_or(i64::MAX)
    }

    /// Adds what every tenant's counters moved since the last look to this hour's rows (and,
    /// with an export, to the rows it has to write); the rows past the bounds go.
    pub fn tick(&self) {
        // The calendar's hours: with a half-hour offset they start at :30 UTC, so its days
        // are whole hours.
        let hour = self.calendar.span(Window::Hour, self.unix_s()).start;
        let registry = self.tenants.load();
        let mut inner = self.lock();
        let exported = self.export.is_some();
        let Inner {
            rows,
            last,
            unexported,
        } = &mut *inner;
        let mut seen = HashSet::with_capacity(last.len());
        for t in registry.tenants() {
            let Some(stats) = t.stats_if_any() else {
                continue;
            };
            seen.insert(t.serial);
            let counts = stats.usage();
            let before = last.entry(t.serial).or_default();
            if let Some(delta) = Row::between(before, &counts) {
                let id: Arc<str> = Arc::from(t.id.as_str());
                rows.entry((hour, id.clone())).or_default().add(&delta);
                if exported {
                    unexported.insert((id, hour));
                }
            }
            *before = counts;
        }
        last.retain(|serial, _| seen.contains(serial));
        let oldest = hour.saturating_sub(i64::from(self.settings.retention_hours) * HOUR_S);
        while rows
            .first_key_value()
            .is_some_and(|((h, _), _)| *h < oldest)
            || rows.len() > self.settings.max_rows
        {
            rows.pop_first();
        }
        if exported {
            unexported.retain(|(t, h)| rows.contains_key(&(*h, t.clone())));
        }
    }

    /// The export: the rows that moved since it last took them (looking first), and none of
    /// them any more, until [`Ledger::unexported_again`] gives back those it could not write.
    pub fn take_unexported(&self) -> HashSet<(Arc<str>, i64)> {
        self.tick();
        std::mem::take(&mut self.lock().unexported)
    }

    /// Rows an export could not write: taken again by the next.
    pub fn unexported_again(&self, keys: HashSet<(Arc<str>, i64)>) {
        self.lock().unexported.extend(keys);
    }

    /// One tenant's row of one hour, if it has one.
    pub fn row(&self, tenant: &str, hour: i64) -> Option<Row> {
        self.lock().rows.get(&(hour, Arc::from(tenant))).cloned()
    }

    /// The hourly intervals of these (tenant, hour) rows, as they stand (gone ones left out).
    pub fn intervals(&self, keys: &HashSet<(Arc<str>, i64)>) -> Vec<Interval> {
        let inner = self.lock();
        keys.iter()
            .filter_map(|(tenant, hour)| {
                let row = inner.rows.get(&(*hour, tenant.clone()))?;
                Some(Interval {
                    tenant: tenant.clone(),
                    start: *hour,
                    end: hour.saturating_add(HOUR_S),
                    row: row.clone(),
                })
            })
            .collect()
    }

    /// The intervals a query asks for, at most `limit` of them, in (start, tenant) order, and
    /// whether more follow. Looks at the counters first, so the answer is current.
    pub fn query(&self, q: &Query) -> (Vec<Interval>, bool) {
        self.tick();
        let inner = self.lock();
        let mut grouped: BTreeMap<(i64, Arc<str>), (i64, Row)> = BTreeMap::new();
        for ((hour, tenant), row) in &inner.rows {
            if q.tenant.as_deref().is_some_and(|t| t != &**tenant) {
                continue;
            }
            let (start, end) = match q.granularity {
                Granularity::Hour => (*hour, hour.saturating_add(HOUR_S)),
                // The calendar's day holding the hour ([quotas] utc_offset, as quotas use).
                Granularity::Day => {
                    let span = self.calendar.span(Window::Day, *hour);
                    (span.start, span.end)
                }
            };
            if start < q.from || start >= q.to {
                continue;
            }
            if q.after
                .as_ref()
                .is_some_and(|(s, t)| (start, &**tenant) <= (*s, t.as_str()))
            {
                continue;
            }
            let (_, sum) = grouped
                .entry((start, tenant.clone()))
                .or_insert_with(|| (end, Row::default()));
            sum.add(row);
        }
        let more = grouped.len() > q.limit;
        let page = grouped
            .into_iter()
            .take(q.limit)
            .map(|((start, tenant), (end, row))| Interval {
                tenant,
                start,
                end,
                row,
            })
            .collect();
        (page, more)
    }

    /// Looks at the counters every `tick` until the process ends (and exports, if it does).
    pub fn start(self: &Arc<Self>) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks: Vec<_> = self.export.iter().map(|e| e.start(self.clone())).collect();
        tasks.push(self.looking());
        tasks
    }

    fn looking(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let ledger = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(ledger.settings.tick);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                ledger.tick();
            }
        })
    }
}

pub mod export;

#[cfg(test)]
mod tests;

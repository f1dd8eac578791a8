//! `GET /admin/usage`: each tenant's usage by hour or day, for chargeback, as this replica
//! counted it (`usage`), a page at a time.

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use time::format_description::well_known::Rfc3339;

use super::api::{params, AppRef};
use crate::outcome::AdminError;
use crate::usage::{Granularity, Interval, Query};

const MAX_LIMIT: usize = 1_000;

fn invalid(field: &str, detail: String) -> AdminError {
    AdminError::InvalidField {
        field: field.into(),
        detail,
    }
}

/// A time bound: RFC 3339 (`2027-07-01T00:00:00Z`) or Unix seconds.
fn instant(field: &str, v: &str) -> Result<i64, AdminError> {
    if let Ok(n) = v.parse::<i64>() {
        return Ok(n);
    }
    // RFC 3339 lets `t` and `z` be lower case.
    time::OffsetDateTime::parse(&v.to_ascii_uppercase(), &Rfc3339)
        .map(|t| t.unix_timestamp())
        .map_err(|_| {
            invalid(
                field,
                format!("must be RFC 3339 (2027-07-01T00:00:00Z) or Unix seconds, not {v:?}"),
            )
        })
}

/// The query the parameters ask for.
fn query(raw: Option<&str>) -> Result<Query, AdminError> {
    let mut q = Query {
        tenant: None,
        from: i64::MIN,
        to: i64::MAX,
        granularity: Granularity::Hour,
        after: None,
        limit: 100,
    };
    let allowed = ["tenant", "from", "to", "granularity", "limit", "after"];
    for (name, v) in params(raw, &allowed)? {
        match name.as_str() {
            "tenant" => q.tenant = Some(v),
            "from" => q.from = instant("from", &v)?,
            "to" => q.to = instant("to", &v)?,
            "granularity" => {
                q.granularity = match v.as_str() {
                    "hour" => Granularity::Hour,
                    "day" => Granularity::Day,
                    _ => {
                        return Err(invalid(
                            "granularity",
                            format!("must be hour or day, not {v:?}"),
                        ))
                    }
                }
            }
            "limit" => {
                q.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        invalid("limit", format!("must be 1 to {MAX_LIMIT}, not {v:?}"))
                    })?;
            }
            // "after": the `next` of the previous page, `START.TENANT`.
            _ => {
                let cursor = v.split_once('.').and_then(|(start, tenant)| {
                    Some((start.parse::<i64>().ok()?, tenant.to_string()))
                });
                q.after = Some(cursor.ok_or_else(|| {
                    invalid("after", "must be the `next` of the previous page".into())
                })?);
            }
        }
    }
    Ok(q)
}

pub async fn get(State(app): AppRef, RawQuery(raw): RawQuery) -> Result<Response, AdminError> {
    let q = query(raw.as_deref())?;
    let (rows, more) = app.usage.query(&q);
    let next = more
        .then(|| rows.last().map(|r| format!("{}.{}", r.start, r.tenant)))
        .flatten();
    Ok(Json(json!({
        "replica": app.ingest.cluster.as_ref().map(|c| c.replica_id().to_string()),
        "granularity": match q.granularity {
            Granularity::Hour => "hour",
            Granularity::Day => "day",
        },
        "rows": rows.iter().map(Interval::to_json).collect::<Vec<_>>(),
        "next": next,
    }))
    .into_response())
}

//! `/admin/adaptive`: the adaptive limit's settings, where it stands and why, changed live.
//!
//! Changes act at once on this replica and are not persisted: the configuration file's
//! `[adaptive]` applies again at the next start (as with `/admin/lag-guards`).

use std::sync::atomic::Ordering::Relaxed;

use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::api::{parse, AppRef};
use crate::app::AppState;
use crate::http::extract::Body;
use crate::outcome::AdminError;
use crate::registry::Actor;

pub(super) fn view(app: &AppState) -> Value {
    let a = &app.adaptive;
    let s = &a.stats;
    let settings = a.settings();
    let classes: serde_json::Map<String, Value> = crate::config::Priority::ALL
        .iter()
        .map(|p| (p.as_str().to_string(), json!(s.class_rate(*p))))
        .collect();
    let (phase, reason) = s.standing();
    let limit_records = s.limit_records.load(Relaxed);
    // 0 stands for "not known yet" in the stats cells; the API says null.
    let known = |v: f64| (v > 0.0).then_some(v);
    let level = known(s.recover_to());
    let ratio = s.limit_ratio();
    let level_records = s.recover_to_records.load(Relaxed);
    let target = known(s.target_ms());
    let (reading, judged) = s.reading();
    json!({
        "settings": settings,
        "limit_ratio": ratio,
        "limit_records_per_sec": limit_records,
        "limit_bytes_per_sec": s.limit_bytes.load(Relaxed),
        "target_delivery_ms": s.target_ms(),
        // Null when the last interval delivered too little to measure (a stalled broker):
        // then `stalled_ms` says how long records have waited with no delivery.
        "delivery_p99_ms": s.p99_ms(),
        "stalled_ms": s.stalled_ms(),
        "last_move": s.last_move(),
        "phase": phase,
        "reason": reason,
        "recovery_level_ratio": level,
        "recovery_level_learned": s.level_learned(),
        "recovery_level_records_per_sec": (level_records > 0).then_some(level_records),
        "time_to_recovery_level_s": level.map(|_| s.time_to_recover_s()),
        "dead_band_ms": target.map(|t| json!({
            "healthy_below": judged.healthy_below_ms.unwrap_or(t * settings.healthy_fraction),
            "target": t,
        })),
        "signal": signal(&settings, reading, judged),
        "librdkafka": librdkafka(&a.brokers()),
        "class_rates": classes,
    })
}

/// The latency the controller follows, at its real resolution, and what it is judged against.
fn signal(
    settings: &crate::config::AdaptiveConfig,
    reading: crate::adaptive_agent::Reading,
    judged: crate::adaptive_agent::Judged,
) -> Value {
    json!({
        "followed": "p90",
        "window_ms": settings.interval_ms.saturating_mul(u64::from(reading.intervals.max(1))),
        "resolution": crate::kafka::LATENCY_RESOLUTION,
        "deliveries": reading.deliveries,
        "value_ms": reading.p90_ms,
        "p50_ms": reading.p50_ms,
        "p99_ms": reading.p99_ms,
        "max_ms": reading.max_ms,
        "baseline_ms": judged.baseline_ms,
        "noise_ms": judged.noise_ms,
        "healthy_below_ms": judged.healthy_below_ms,
        "target_ms": judged.target_ms,
        "target_from": match (settings.target_delivery_ms, judged.target_ms, judged.accepted_ms) {
            (_, Some(_), Some(_)) => Some("accepted"),
            (Some(_), _, _) => Some("configured"),
            (None, Some(_), None) => Some("baseline"),
            (None, None, _) => None,
        },
        "accepted_ms": judged.accepted_ms,
    })
}

/// librdkafka's own view of each broker over its last statistics interval (ms): where the
/// delivery time went. Shown, not followed (a 5 s window, too late for a half-second loop).
fn librdkafka(brokers: &[crate::kafka::BrokerStats]) -> Value {
    let ms = |us: i64| us as f64 / 1000.0;
    brokers
        .iter()
        .map(|b| {
            json!({
                "broker": b.name,
                "rtt_p50_ms": ms(b.rtt.p50_us),
                "rtt_p99_ms": ms(b.rtt.p99_us),
                "int_latency_p99_ms": ms(b.int_latency.p99_us),
                "outbuf_latency_p99_ms": ms(b.outbuf_latency.p99_us),
            })
        })
        .collect()
}

/// `GET /admin/adaptive`: the adaptive limit's settings and where it stands.
pub async fn get(axum::extract::State(app): AppRef) -> Response {
    Json(view(&app)).into_response()
}

/// `PUT /admin/adaptive`: replaces the settings live (not persisted: the configuration file's
/// `[adaptive]` applies again at the next start).
pub async fn put(
    axum::extract::State(app): AppRef,
    Extension(actor): Extension<Actor>,
    body: Body,
) -> Result<Response, AdminError> {
    let settings: crate::config::AdaptiveConfig = parse(&body)?;
    let global = app.registry.global_config().await;
    if let Some(p) = settings.problems(&global).into_iter().next() {
        return Err(AdminError::InvalidField {
            field: p.key.trim_start_matches("adaptive.").to_string(),
            detail: p.message,
        });
    }
    tracing::info!(target: "floodgate::audit", actor = actor.as_str(), action = "adaptive.put",
        after = %serde_json::to_string(&settings).unwrap_or_default(), "adaptive settings changed");
    app.adaptive.set_settings(settings);
    Ok(Json(view(&app)).into_response())
}

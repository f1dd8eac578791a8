//! The adaptive limit's series: whether it is on, where it is against its ceiling and floor,
//! the signals it acted on (delivery p90 against its target and the path's baseline, stalls),
//! how often it moved and
//! why, and its allocation per priority class.

use std::sync::atomic::Ordering::Relaxed;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType::{Counter as C, Gauge as G};
use prometheus_client::registry::Unit;

use super::{family, gauge, Labels};
use crate::adaptive::controller::Cause;
use crate::adaptive_agent::{AdaptiveAgent, AdaptiveStats};
use crate::config::Priority;

pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    agent: &AdaptiveAgent,
) -> Result<(), std::fmt::Error> {
    encode_limit(encoder, agent)?;
    encode_signals(encoder, &agent.stats)?;
    encode_moves(encoder, &agent.stats)
}

/// An unlabelled gauge of a fractional value.
fn value(v: f64) -> [(Labels<'static>, ConstGauge<f64>); 1] {
    [(Vec::new(), ConstGauge::new(v))]
}

/// Where the limit is: on or off, against its ceiling and floor, and where it recovers to.
fn encode_limit(
    encoder: &mut DescriptorEncoder,
    agent: &AdaptiveAgent,
) -> Result<(), std::fmt::Error> {
    let s = &agent.stats;
    let settings = agent.settings();
    family(
        encoder,
        "adaptive_enabled",
        "1 when the adaptive limit is on ([adaptive] enabled)",
        None,
        G,
        &gauge(u64::from(settings.enabled)),
    )?;
    family(
        encoder,
        "adaptive_limit_ratio",
        "The adaptive limit as a fraction of its ceiling (1: the configured budgets decide)",
        None,
        G,
        &value(s.limit_ratio()),
    )?;
    family(
        encoder,
        "adaptive_floor_ratio",
        "The lowest the adaptive limit goes, as a fraction of its ceiling",
        None,
        G,
        &value(settings.floor),
    )?;
    let limits = [
        (
            vec![("bucket", "records")],
            ConstGauge::new(s.limit_records.load(Relaxed) as f64),
        ),
        (
            vec![("bucket", "bytes")],
            ConstGauge::new(s.limit_bytes.load(Relaxed) as f64),
        ),
    ];
    family(
        encoder,
        "adaptive_limit",
        "What the adaptive limit admits now, per second (0: that dimension has no ceiling)",
        None,
        G,
        &limits,
    )?;
    family(
        encoder,
        "adaptive_recovery_level_ratio",
        "What Kafka last carried at healthy latency, as a fraction of the ceiling: healthy \
         signals bring the limit back there by slow start (0 while unknown)",
        None,
        G,
        &value(s.recover_to()),
    )
}

/// What the controller last measured: the delivery target, the p90 it follows and the path's
/// baseline, the p99, and stalls.
fn encode_signals(
    encoder: &mut DescriptorEncoder,
    s: &AdaptiveStats,
) -> Result<(), std::fmt::Error> {
    family(
        encoder,
        "adaptive_target_delivery",
        "Delivery p90 above which Kafka counts as slow (0 while unknown)",
        Some(&Unit::Seconds),
        G,
        &value(s.target_ms() / 1000.0),
    )?;
    let (reading, judged) = s.reading();
    family(
        encoder,
        "adaptive_delivery_p90",
        "Delivery p90 over the controller's last interval, at 1 % resolution: the reading it \
         follows (0 when it delivered none to measure)",
        Some(&Unit::Seconds),
        G,
        &value(reading.p90_ms.unwrap_or(0.0) / 1000.0),
    )?;
    family(
        encoder,
        "adaptive_baseline",
        "The broker path's delivery p90 at its best, learned: what the target is judged from \
         (0 while unknown)",
        Some(&Unit::Seconds),
        G,
        &value(judged.baseline_ms.unwrap_or(0.0) / 1000.0),
    )?;
    family(
        encoder,
        "adaptive_noise",
        "How far the path's healthy delivery p90 wanders from its baseline (mean deviation)",
        Some(&Unit::Seconds),
        G,
        &value(judged.noise_ms / 1000.0),
    )?;
    family(
        encoder,
        "adaptive_delivery_p99",
        "Delivery p99 over the controller's last interval (0 when it delivered none to \
         measure: see floodgate_adaptive_stalled_seconds)",
        Some(&Unit::Seconds),
        G,
        &value(s.p99_ms().unwrap_or(0.0) / 1000.0),
    )?;
    family(
        encoder,
        "adaptive_stalled",
        "How long records had waited with no delivery at all at the controller's last \
         interval (0: something was delivered, or nothing waits)",
        Some(&Unit::Seconds),
        G,
        &value(s.stalled_ms() / 1000.0),
    )
}

/// How often the limit moved, by direction and cause, and its split by priority class.
fn encode_moves(encoder: &mut DescriptorEncoder, s: &AdaptiveStats) -> Result<(), std::fmt::Error> {
    let mut changes: Vec<_> = Cause::ALL
        .iter()
        .map(|c| {
            (
                vec![("direction", "decrease"), ("cause", c.as_str())],
                ConstCounter::new(s.decreases(*c)),
            )
        })
        .collect();
    changes.push((
        vec![("direction", "increase"), ("cause", "healthy")],
        ConstCounter::new(s.increases.load(Relaxed)),
    ));
    changes.push((
        vec![("direction", "increase"), ("cause", "recovery")],
        ConstCounter::new(s.recoveries.load(Relaxed)),
    ));
    family(
        encoder,
        "adaptive_changes",
        "Moves of the adaptive limit by direction and cause",
        None,
        C,
        &changes,
    )?;
    let classes: Vec<_> = Priority::ALL
        .iter()
        .map(|p| {
            (
                vec![("class", p.as_str())],
                ConstGauge::new(s.class_rate(*p)),
            )
        })
        .collect();
    family(
        encoder,
        "adaptive_class_rate",
        "The adaptive limit's allocation per priority class, per second",
        None,
        G,
        &classes,
    )
}

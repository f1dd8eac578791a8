//! The lag guards' series: consumers against producers per guard, the recovery time the
//! guard acts on, whether it caps and at what, and how often it started or let go.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use prometheus_client::metrics::MetricType::{Counter as C, Gauge as G};

use super::{family, Labels};
use crate::lag::guard::Phase;
use crate::lag_agent::{GuardStatus, LagAgent};

pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    agent: &LagAgent,
) -> Result<(), std::fmt::Error> {
    let statuses = agent.statuses();
    encode_readings(encoder, &statuses)?;
    encode_caps(encoder, &statuses)
}

/// One gauge per guard, labelled by guard and group.
fn per_guard(
    statuses: &[GuardStatus],
    f: impl Fn(&GuardStatus) -> f64,
) -> Vec<(Labels<'_>, ConstGauge<f64>)> {
    statuses
        .iter()
        .map(|s| {
            (
                vec![
                    ("guard", s.config.name.as_str()),
                    ("group", s.config.group.as_str()),
                ],
                ConstGauge::new(f(s)),
            )
        })
        .collect()
}

/// One counter per guard, labelled by guard.
fn per_guard_counter(
    statuses: &[GuardStatus],
    f: impl Fn(&GuardStatus) -> u64,
) -> Vec<(Labels<'_>, ConstCounter)> {
    statuses
        .iter()
        .map(|s| {
            (
                vec![("guard", s.config.name.as_str())],
                ConstCounter::new(f(s)),
            )
        })
        .collect()
}

/// What the guard read: the lag per topic, both rates, the recovery time against its bound.
fn encode_readings(
    encoder: &mut DescriptorEncoder,
    statuses: &[GuardStatus],
) -> Result<(), std::fmt::Error> {
    let lag: Vec<_> = statuses
        .iter()
        .flat_map(|s| {
            s.by_topic.iter().map(move |(topic, lag)| {
                (
                    vec![
                        ("guard", s.config.name.as_str()),
                        ("group", s.config.group.as_str()),
                        ("topic", topic.as_str()),
                    ],
                    ConstGauge::new(*lag as f64),
                )
            })
        })
        .collect();
    family(
        encoder,
        "consumer_lag_records",
        "Records the guarded consumer group has not committed yet, per topic (last reading)",
        None,
        G,
        &lag,
    )?;
    family(
        encoder,
        "lag_consumer_rate",
        "The guarded group's consumption rate C, records/s (smoothed)",
        None,
        G,
        &per_guard(statuses, |s| s.consumer_rate),
    )?;
    family(
        encoder,
        "lag_producer_rate",
        "The rate the guarded topics grow at, P, records/s (smoothed; every producer, not only floodgate)",
        None,
        G,
        &per_guard(statuses, |s| s.producer_rate),
    )?;
    family(
        encoder,
        "lag_recovery",
        "Time to drain the lag at C - P (0: caught up, +Inf: not shrinking)",
        Some(&Unit::Seconds),
        G,
        &per_guard(statuses, |s| s.recovery_s),
    )?;
    family(
        encoder,
        "lag_max_recovery",
        "The recovery time above which the guard caps producers",
        Some(&Unit::Seconds),
        G,
        &per_guard(statuses, |s| s.config.max_recovery_s),
    )
}

/// What the guard does about it: whether it caps and at what, its phase, how often it
/// started capping or let go.
fn encode_caps(
    encoder: &mut DescriptorEncoder,
    statuses: &[GuardStatus],
) -> Result<(), std::fmt::Error> {
    family(
        encoder,
        "lag_guard_capping",
        "1 while the guard caps producers of its topics",
        None,
        G,
        &per_guard(statuses, |s| if s.cap.is_some() { 1.0 } else { 0.0 }),
    )?;
    family(
        encoder,
        "lag_guard_cap",
        "The cap on producers of the guarded topics over the whole cluster, records/s (0 when not capping)",
        None,
        G,
        &per_guard(statuses, |s| s.cap.unwrap_or(0.0)),
    )?;
    let phases: Vec<_> = statuses
        .iter()
        .flat_map(|s| {
            Phase::ALL.iter().map(move |p| {
                (
                    vec![("guard", s.config.name.as_str()), ("phase", p.as_str())],
                    ConstGauge::new(if s.phase == *p { 1.0 } else { 0.0 }),
                )
            })
        })
        .collect();
    family(
        encoder,
        "lag_guard_phase",
        "The guard's phase (1 for the current one): starting, idle, capping, holding (offsets unreadable, last cap kept) or released (unreadable past hold_s: no cap)",
        None,
        G,
        &phases,
    )?;
    family(
        encoder,
        "lag_guard_activations",
        "Times the guard started capping producers",
        None,
        C,
        &per_guard_counter(statuses, |s| s.activations),
    )?;
    family(
        encoder,
        "lag_guard_fail_opens",
        "Times the guard let go because offsets stayed unreadable past hold_s",
        None,
        C,
        &per_guard_counter(statuses, |s| s.fail_opens),
    )
}

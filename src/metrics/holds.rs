//! `[wait]`'s series: requests held for their tokens now, and what became of those that
//! asked for a seat (every outcome from start-up, at 0).

use std::sync::atomic::Ordering::Relaxed;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType::{Counter as C, Gauge as G};

use super::{family, gauge};
use crate::hold::{WaitRoom, OUTCOMES};

pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    room: &WaitRoom,
) -> Result<(), std::fmt::Error> {
    family(
        encoder,
        "admission_held_requests",
        "Requests held now for their tokens instead of refused ([wait] max_ms)",
        None,
        G,
        &gauge(room.held() as u64),
    )?;
    let counts = [&room.admitted, &room.refused, &room.full];
    let series: Vec<_> = OUTCOMES
        .iter()
        .zip(counts)
        .map(|(outcome, n)| {
            (
                vec![("outcome", *outcome)],
                ConstCounter::new(n.load(Relaxed)),
            )
        })
        .collect();
    family(
        encoder,
        "admission_holds",
        "Requests over budget that [wait] could hold, by outcome: admitted after the hold, refused after it (their tokens went to others), or full (refused at once: no seat free)",
        None,
        C,
        &series,
    )
}

//! What reading a body or a stream costs that no budget pays for when its records end
//! refused: owed to the tenant's unpaid work (`[schema_registry] tenant_unpaid_work_ms_*`, the
//! same bucket the schema step spends) and forgiven for the records admission takes. It is
//! estimated from what arrived, not measured: per piece and per byte, from the profile of the
//! costliest ways in (review 37a of #37: 1-byte chunks cost 0.9 µs each; 8 MB of inflated
//! JSON ~26 ms), and per record a stream refuses (review 38a: 20 µs each, 404s of a partition
//! that does not exist, which take no token).
//!
//! The bucket is asked while the work goes on, not only once it is charged: a body larger than
//! small at its first piece, and every body and stream every [`ASK_EVERY`] pieces, so one that
//! arrives in tiny pieces stops being read once its tenant's unpaid work is spent (review 38a:
//! 64 KiB bodies in 1-byte HTTP/2 frames, never asked, cost 45 ms each while the tenant owed
//! two minutes).

use std::time::Duration;

use crate::outcome::ApiError;
use crate::schema::{SchemaError, Schemas};

/// Nanoseconds a piece of body costs to take in (the framing, the watch, the decoder's call).
pub(super) const NS_PER_PIECE: u64 = 900;
/// ... and a piece of a stream (its pump's turn besides: review 38a of #37 measured 15 s of CPU
/// for 6.6 M 1-byte chunks of one stream).
pub(super) const NS_PER_STREAM_PIECE: u64 = 2_300;
/// Nanoseconds a byte costs to inflate and scan.
const NS_PER_BYTE: u64 = 3;
/// Nanoseconds a record a stream refuses costs: decoded, checked, reported.
const NS_PER_REFUSED_RECORD: u64 = 20_000;
/// Bodies up to this long (declared, and not inflated past it) are read without asking first.
const SMALL_BODY: u64 = 64 * 1024;
/// Pieces between two looks at the tenant's unpaid work (~58 µs of reading: about what a
/// refused request costs). An ordinary body arrives in a few pieces and is never asked.
pub(super) const ASK_EVERY: u32 = 64;

fn piece_cost(per_piece: u64, len: usize) -> Duration {
    Duration::from_nanos(per_piece.saturating_add((len as u64).saturating_mul(NS_PER_BYTE)))
}

/// What a piece read means for what comes next.
pub(super) enum Reading {
    On,
    /// Ask the tenant's unpaid work first.
    Ask,
    /// It costs more than a request may owe.
    TooCostly(Duration),
}

/// A body being read: what its pieces cost, owed in [`BodyOwed`].
pub(super) struct BodyWork {
    declared: Option<u64>,
    asked: bool,
    count: u32,
    /// The most one request may owe for its pieces: past it the body is not read on, whatever
    /// it would have been (review 37a: one 8 MB body in 1-byte chunks took 7.4 s to read).
    /// Its bytes are bounded by `max_body_bytes`, the operator's own choice, so a large body in
    /// ordinary pieces is never refused for them.
    most: Duration,
    pieces: Duration,
}

impl BodyWork {
    pub(super) fn new(declared: Option<u64>, most: Duration) -> Self {
        Self {
            declared,
            asked: false,
            count: 0,
            most,
            pieces: Duration::ZERO,
        }
    }

    /// A piece of `len` bytes arrived, `received` in all: its cost owed, and what next.
    pub(super) fn read(&mut self, len: usize, received: u64, owed: &mut BodyOwed<'_>) -> Reading {
        owed.cost = owed.cost.saturating_add(piece_cost(NS_PER_PIECE, len));
        self.pieces = self
            .pieces
            .saturating_add(Duration::from_nanos(NS_PER_PIECE));
        self.count = self.count.saturating_add(1);
        if self.pieces > self.most {
            return Reading::TooCostly(self.most);
        }
        let large = self
            .declared
            .is_none_or(|d| d > SMALL_BODY || received > d.max(SMALL_BODY));
        if (large && !self.asked) || self.count % ASK_EVERY == 0 {
            self.asked = true;
            return Reading::Ask;
        }
        Reading::On
    }
}

/// A body's reading cost, charged to its tenant's unpaid work when dropped unless admission
/// took its records ([`BodyOwed::admitted`]): nothing is allocated unless it is charged.
pub(super) struct BodyOwed<'a> {
    schemas: &'a Schemas,
    tenant: &'a str,
    cost: Duration,
}

impl<'a> BodyOwed<'a> {
    pub(super) fn new(schemas: &'a Schemas, tenant: &'a str) -> Self {
        Self {
            schemas,
            tenant,
            cost: Duration::ZERO,
        }
    }

    /// The records were admitted: their budgets paid for reading them.
    pub(super) fn admitted(mut self) {
        self.cost = Duration::ZERO;
    }
}

impl Drop for BodyOwed<'_> {
    fn drop(&mut self) {
        self.schemas.charge_unpaid(self.tenant, self.cost);
    }
}

/// A stream being read: the cost of the pieces since its records were last decided, charged
/// then in the share of the records refused, with each refused record's own cost.
#[derive(Debug, Default)]
pub struct StreamWork {
    /// The cost of the pieces read and not yet charged to anyone.
    unsettled: Duration,
    /// The cost of the pieces read since records were last decided (charged or not): the
    /// bound on what one request may owe.
    undecided: Duration,
    count: u32,
}

impl StreamWork {
    /// A piece of `len` bytes arrived: `Ask` every [`ASK_EVERY`] pieces; too costly once the
    /// pieces not yet decided into records cost more than a request may owe (`most`).
    pub(super) fn read(&mut self, len: usize, most: Duration) -> Reading {
        let cost = piece_cost(NS_PER_STREAM_PIECE, len);
        self.unsettled = self.unsettled.saturating_add(cost);
        self.undecided = self.undecided.saturating_add(cost);
        self.count = self.count.saturating_add(1);
        if self.undecided > most {
            return Reading::TooCostly(most);
        }
        if self.count % ASK_EVERY == 0 {
            return Reading::Ask;
        }
        Reading::On
    }

    /// `refused` of `decided` records were refused: what they owe (their share of the pieces
    /// read since the last decision, and their own handling); the rest was paid by admission.
    pub(super) fn settle(&mut self, decided: usize, refused: usize) -> Duration {
        if decided == 0 {
            return Duration::ZERO;
        }
        self.undecided = Duration::ZERO;
        let unsettled = std::mem::take(&mut self.unsettled);
        let share = unsettled.mul_f64(refused as f64 / decided as f64);
        let own = Duration::from_nanos(NS_PER_REFUSED_RECORD.saturating_mul(refused as u64));
        share.saturating_add(own)
    }

    /// What the pieces read since the last decision cost, owed now: at every ask (a record
    /// still undecided after 64 pieces is paid for by the tenant's unpaid work, not by the
    /// admission it may never reach) and when the stream ends (review 40 of #37: a record
    /// sent in 300,000 1-byte pieces and never finished cost 0.7 s and was charged nothing).
    pub(super) fn take_unsettled(&mut self) -> Duration {
        std::mem::take(&mut self.unsettled)
    }
}

/// What a lingering read (the rest of a body or a stream read and dropped after an answer)
/// owes its tenant's unpaid work: charged every [`ASK_EVERY`] pieces, when the tenant is asked
/// whether reading may go on, and for the rest when dropped.
pub(super) struct LingerBill<'a> {
    schemas: &'a Schemas,
    tenant: &'a str,
    /// A body's piece costs [`NS_PER_PIECE`], a stream's [`NS_PER_STREAM_PIECE`].
    ns_per_piece: u64,
    pieces: u32,
    bytes: u64,
}

impl<'a> LingerBill<'a> {
    pub(super) fn new(schemas: &'a Schemas, tenant: &'a str, ns_per_piece: u64) -> Self {
        Self {
            schemas,
            tenant,
            ns_per_piece,
            pieces: 0,
            bytes: 0,
        }
    }

    /// A piece of `len` bytes was read: whether reading may go on.
    pub(super) fn read(&mut self, len: u64) -> bool {
        self.pieces += 1;
        self.bytes = self.bytes.saturating_add(len);
        self.pieces < ASK_EVERY || self.charge()
    }

    /// Charges what is owed; whether the tenant's unpaid work still allows reading on.
    fn charge(&mut self) -> bool {
        let cost = Duration::from_nanos(
            self.ns_per_piece
                .saturating_mul(u64::from(self.pieces))
                .saturating_add(self.bytes.saturating_mul(NS_PER_BYTE)),
        );
        (self.pieces, self.bytes) = (0, 0);
        self.schemas.charge_unpaid(self.tenant, cost);
        self.schemas.unpaid_allows(self.tenant).is_ok()
    }
}

impl Drop for LingerBill<'_> {
    fn drop(&mut self) {
        if self.pieces > 0 {
            self.charge();
        }
    }
}

/// The 400 for pieces that cost more to read than a request may owe.
/// `ns_per_piece`: what one of its pieces costs ([`NS_PER_PIECE`] for a body,
/// [`NS_PER_STREAM_PIECE`] for a stream).
pub(super) fn too_costly(most: Duration, ns_per_piece: u64) -> ApiError {
    ApiError::Malformed(format!(
        "the body's pieces cost more to read than a request may owe ({} ms: \
         [schema_registry] tenant_unpaid_work_ms_burst, at {ns_per_piece} ns a piece): send it \
         in larger pieces",
        most.as_millis()
    ))
}

/// The schema step's 429 for spent unpaid work, as a body's refusal.
pub(super) fn unpaid_refusal(e: &SchemaError) -> ApiError {
    match e {
        SchemaError::Busy(wait, detail) => ApiError::SchemaBusy(*wait, detail.clone()),
        // `Schemas::unpaid_allows` answers nothing else.
        _ => ApiError::SchemaBusy(
            Duration::from_secs(1),
            "this tenant's unpaid work is spent".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_owes_for_the_records_it_refused_and_their_share_of_the_pieces() {
        let mut w = StreamWork::default();
        for _ in 0..10 {
            assert!(matches!(w.read(100, Duration::from_secs(1)), Reading::On));
        }
        // 10 pieces of 100 bytes: 26 µs; 1 of 4 records refused owes a quarter and its own.
        let owed = w.settle(4, 1);
        assert_eq!(owed, Duration::from_nanos(6_500 + NS_PER_REFUSED_RECORD));
        assert_eq!(
            w.settle(4, 4),
            Duration::from_nanos(4 * NS_PER_REFUSED_RECORD)
        );
        assert_eq!(w.settle(0, 0), Duration::ZERO);
    }

    #[test]
    fn a_stream_asks_every_few_pieces_and_stops_past_what_a_request_may_owe() {
        let mut w = StreamWork::default();
        let asks = (0..ASK_EVERY * 3)
            .filter(|_| matches!(w.read(1, Duration::from_secs(1)), Reading::Ask))
            .count();
        assert_eq!(asks, 3);
        assert!(matches!(
            w.read(1, Duration::from_micros(100)),
            Reading::TooCostly(_)
        ));
    }

    #[test]
    fn a_record_never_decided_is_owed_at_each_ask_and_still_bounded_by_what_a_request_may_owe() {
        let mut w = StreamWork::default();
        let most = Duration::from_secs(1);
        for _ in 1..ASK_EVERY {
            assert!(matches!(w.read(1, most), Reading::On));
        }
        assert!(matches!(w.read(1, most), Reading::Ask));
        // 64 pieces of 1 byte, owed at the ask, and not again when the record is decided.
        let owed = w.take_unsettled();
        assert_eq!(
            owed,
            Duration::from_nanos(64 * (NS_PER_STREAM_PIECE + NS_PER_BYTE))
        );
        assert_eq!(w.take_unsettled(), Duration::ZERO);
        assert_eq!(w.settle(1, 1), Duration::from_nanos(NS_PER_REFUSED_RECORD));
        // Charged as it goes, an undecided record is still cut at what a request may owe.
        let mut w = StreamWork::default();
        let small = Duration::from_micros(300);
        let cut = (0..200).position(|_| {
            let r = w.read(1, small);
            w.take_unsettled();
            matches!(r, Reading::TooCostly(_))
        });
        assert_eq!(cut, Some(130), "300 µs at 2.3 µs a piece");
    }
}

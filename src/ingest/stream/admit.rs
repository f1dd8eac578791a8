//! A decoded group of a stream's records through the rest of the pipeline: the schema step
//! (a record that does not fit is refused alone), the topic's partitions, at most one lease
//! call for the group, each record admitted on its own, the admitted ones sent as one batch,
//! and every record's report queued in order.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::pump::{Pump, Stopped};
use super::reports::cost;
use super::reports::{Fate, Queued};
use super::LOOKUPS_REFILL;
use crate::admission::Reservation;
use crate::body::{RecordArena, RecordNotes};
use crate::buffer::BufferLease;
use crate::ingest::contracts::{ConvertedRecord, ToConvert};
use crate::ingest::RecordSchemas;
use crate::kafka::{Batch, TopicInfo};
use crate::outcome::ApiError;
use crate::record::{Charge, Record};
use crate::refusal::Denial;
use crate::schema::{Lookups, Wanted};

impl<P: RecordNotes + RecordSchemas + 'static> Pump<P> {
    /// Admits each decoded record on its own, sends the admitted ones as one batch, and queues
    /// every record's report in order.
    pub(super) async fn admit_decoded(&mut self) -> Result<(), Stopped> {
        if let Err(e) = self.recheck() {
            return Err(Some(e));
        }
        let arena = self.decoder.take_decoded();
        let notes = self.decoder.parser().take_notes();
        // A stream's parser names each record's schema itself (it cannot refuse the lot).
        let wanted = self
            .decoder
            .parser()
            .take_wanted(&arena.records())
            .unwrap_or_default();
        // The stream's registry calls come back once a minute: a long stream re-reads a
        // subject's latest schema as it is refreshed, a flood of new schemas stays bounded.
        if self.lookups_since.elapsed() >= LOOKUPS_REFILL {
            self.lookups = Lookups::per_request(self.tenant.id.as_str());
            self.lookups_since = Instant::now();
        }
        let mut lookups = std::mem::replace(&mut self.lookups, Lookups::none());
        let first = self.first.take();
        let (batch, fates) = self.admit(&arena, &wanted, &mut lookups, first).await;
        // Reading the records refused was paid by no budget: their tenant's unpaid work.
        let refused = fates.iter().filter(|f| f.is_err()).count();
        let owed = self.work.settle(fates.len(), refused);
        let tenant = self.tenant.id.as_str();
        self.ingest.schemas.charge_unpaid(tenant, owed);
        // The piece's records are decided: the next piece's checks owe from nothing.
        lookups.settled();
        self.lookups = lookups;
        self.numbered += notes.len();
        let mut queued = 0u64;
        let mut last: Option<Arc<ApiError>> = None;
        let mut entries = Vec::with_capacity(fates.len());
        for (fate, note) in fates.into_iter().zip(notes) {
            let mut entry_cost = cost::<P::Note>(None);
            let fate = match fate {
                Ok(index) => match &batch {
                    Some(batch) => Fate::Sent {
                        batch: batch.clone(),
                        index,
                    },
                    // Admitted records are always sent together; unreachable in practice.
                    None => Fate::Refused(Arc::new(ApiError::KafkaUnavailable(
                        "the record was not sent".into(),
                    ))),
                },
                Err(error) => {
                    let shared = last.as_ref().filter(|l| same_refusal(l, &error)).cloned();
                    let error = shared.unwrap_or_else(|| {
                        entry_cost = cost::<P::Note>(Some(&error));
                        Arc::new(error)
                    });
                    last = Some(error.clone());
                    Fate::Refused(error)
                }
            };
            queued += u64::from(entry_cost);
            entries.push(Queued::Record {
                fate,
                note,
                cost: entry_cost,
            });
        }
        drop(arena);
        // What was reserved for the decoded records is now the queue's (never more).
        self.memory
            .set(self.decoder.footprint() + self.rest.len(), queued);
        for entry in entries {
            if self.queue.try_send(entry).is_err() {
                return Err(None); // the client went away (room was checked before decoding)
            }
        }
        self.refusals_owed |= refused > 0;
        Ok(())
    }

    /// Each record's fate: its index in the batch sent, or why it was refused. `first`: the
    /// body's one record, converted already and its tokens reserved.
    async fn admit(
        &self,
        arena: &RecordArena,
        wanted: &[Wanted],
        lookups: &mut Lookups,
        first: Option<First>,
    ) -> (Option<Arc<Batch>>, Vec<Result<u32, ApiError>>) {
        let records = arena.records();
        // What the checks of the records refused below cost: no budget paid for them.
        let mut owed = self.ingest.schemas.owed(self.tenant.id.as_str());
        if records.is_empty() {
            return (None, Vec::new());
        }
        let (first, mut first_reserved) = match first {
            Some(f) if records.len() == 1 => (f.converted, f.reserved),
            _ => (None, None),
        };
        // Only the records the budgets would take now are converted: a stream far over its
        // budget makes the gateway do no schema work for records it refuses anyway. A single
        // record's tokens are reserved already.
        let reserved =
            first_reserved.is_some() || first.as_ref().is_some_and(|c| c.reserved.is_some());
        let admissible = if reserved {
            1
        } else {
            self.admissible(&records)
        };
        let mut converted = match first {
            Some(c) if admissible == 1 && records.len() == 1 => {
                let base = usize::try_from(self.memory.decoding()).unwrap_or(usize::MAX);
                vec![Some(self.hold_converted(base, &mut 0, c))]
            }
            unused => {
                // Its budgets refuse it now: what its check cost is owed.
                owed.add(unused.map_or(Duration::ZERO, |c| c.checked));
                if admissible == 0 {
                    Vec::new()
                } else {
                    self.convert(&records[..admissible], wanted, 0, lookups)
                        .await
                }
            }
        };
        let partitions = self.partitions().await;
        // A reserved record's tokens were leased when it reserved them: asked for the group
        // here, they would count once as reserved and once as wanted.
        let mut leases = if reserved {
            1
        } else {
            self.lease_group(arena, &converted).await
        };
        let mut lease: Option<BufferLease> = None;
        let mut admitted: Vec<Record<'_>> = Vec::with_capacity(records.len());
        let mut fates = Vec::with_capacity(records.len());
        for (i, sent) in records.iter().enumerate() {
            let (record, checked) = if i < admissible {
                match converted.get_mut(i).and_then(Option::take) {
                    None => (Ok((sent.clone(), first_reserved.take())), Duration::ZERO),
                    Some(c) => split(c),
                }
            } else {
                // Past what the budgets took at the start: refused as sent, unless tokens came
                // meanwhile — then converted alone, now.
                let raw = std::slice::from_ref(sent);
                if let Err(denial) =
                    self.ingest
                        .admission
                        .check_to(&self.tenant, Some(&self.topic), Charge::of(raw))
                {
                    fates.push(Err(self.refuse(denial, Charge::of(raw))));
                    continue;
                }
                let mut one = self
                    .convert(raw, wanted.get(i..).unwrap_or_default(), i, lookups)
                    .await;
                match one.pop().flatten() {
                    None => (Ok((sent.clone(), None)), Duration::ZERO),
                    Some(c) => split(c),
                }
            };
            let fate = self.admit_record(&partitions, record, &mut leases).await;
            if fate.is_err() {
                owed.add(checked);
            }
            fates.push(fate.map(|(taken, record)| {
                match lease.as_mut() {
                    None => lease = Some(taken),
                    // Same buffer, same tenant: always absorbed; were it not, its space is
                    // given back here, and the record still travels under the group's lease.
                    Some(held) => drop(held.absorb(taken)),
                }
                admitted.push(record);
                (admitted.len() - 1) as u32
            }));
        }
        let ingest = &self.ingest;
        let batch = lease.map(|lease| ingest.send(&self.tenant, &self.topic, &admitted, lease));
        (batch, fates)
    }

    /// The schema step, record by record: a record that does not fit is refused alone. Empty
    /// when the step does not apply (the records go as they are).
    async fn convert(
        &self,
        records: &[Record<'_>],
        wanted: &[Wanted],
        from: usize,
        lookups: &mut Lookups,
    ) -> Vec<Option<Result<Checked, ApiError>>> {
        let mut converted = Vec::new();
        // What the records become is held against the stream's share of the body budget
        // while they wait to be sent, on top of the records decoded.
        let base = usize::try_from(self.memory.decoding()).unwrap_or(usize::MAX);
        let mut extra = 0usize;
        let keep = |_, c: Result<ConvertedRecord, ApiError>| {
            converted.push(Some(
                c.and_then(|c| self.hold_converted(base, &mut extra, c)),
            ));
            Ok(())
        };
        let to_convert = ToConvert {
            records,
            wanted,
            first: self.numbered + from,
            whole: false,
        };
        // `keep` never fails: what fails is a record's own, and refuses that record alone.
        let _ = self
            .ingest
            .convert_each(&self.tenant, &self.topic, to_convert, lookups, keep)
            .await;
        converted
    }

    /// A converted record held against the stream's share of the body budget, on top of the
    /// records decoded (`base`) and those converted before it (`extra`), or refused.
    fn hold_converted(
        &self,
        base: usize,
        extra: &mut usize,
        c: ConvertedRecord,
    ) -> Result<Checked, ApiError> {
        let size = usize::try_from(c.record.size()).unwrap_or(usize::MAX);
        if self
            .memory
            .set(base.saturating_add(*extra).saturating_add(size), 0)
        {
            *extra += size;
            Ok((c.record, c.checked, c.reserved))
        } else {
            // Refused after its checks passed: they are the tenant's unpaid work.
            self.ingest
                .schemas
                .owed(self.tenant.id.as_str())
                .add(c.checked);
            Err(self.busy())
        }
    }

    /// The topic's partitions, or why they are not known (then every record's refusal).
    async fn partitions(&self) -> Result<u32, ApiError> {
        match self.ingest.catalog.lookup(self.topic.as_str()).await {
            Ok(TopicInfo::Exists { partitions }) => Ok(partitions),
            Ok(TopicInfo::Missing) => Err(ApiError::UnknownTopic(self.topic.as_str().into())),
            Err(e) => Err(ApiError::KafkaUnavailable(e)),
        }
    }

    /// One lease call for the whole group, at most, made up front for all of it (what the
    /// slices lack for the group, taken in part if Redis has less): the group's records are
    /// then admitted one by one from the slices, and a stream far over its budget costs Redis
    /// nothing per record. The lease calls the records may still make: none once it is made.
    async fn lease_group(
        &self,
        arena: &RecordArena,
        converted: &[Option<Result<Checked, ApiError>>],
    ) -> u32 {
        let ingest = &self.ingest;
        let Some(cluster) = &ingest.cluster else {
            return 1;
        };
        let group = if converted.is_empty() {
            arena.charge()
        } else {
            let mut charge = Charge::default();
            for (c, _, _) in converted.iter().flatten().flatten() {
                charge.records += 1;
                charge.bytes += c.size();
            }
            charge
        };
        let need = ingest
            .admission
            .lease_need(&self.tenant, Some(&self.topic), group);
        let Some(need) = need else {
            return 1;
        };
        // A refusal here (Redis has nothing) is what each record's check then says.
        let _ = cluster.lease_for(&self.tenant, need).await;
        0
    }

    /// One record after the schema step: refused for what the step or the topic said (a
    /// partition the topic does not have), or admitted, with its lease.
    async fn admit_record<'r>(
        &self,
        partitions: &Result<u32, ApiError>,
        record: Result<Reserved<'r>, ApiError>,
        leases: &mut u32,
    ) -> Result<(BufferLease, Record<'r>), ApiError> {
        let (record, mut reserved) = record?;
        let n = partitions.as_ref().map_err(Clone::clone)?;
        if let Some(detail) = crate::ingest::checks::missing_partition(record.partition, *n) {
            return Err(ApiError::UnknownPartition(detail));
        }
        let taken = self.admit_one(&record, reserved.as_mut(), leases).await?;
        Ok((taken, record))
    }

    /// How many of the group's records, in order, every budget would admit now as they were
    /// sent (the schema step may change their size: each is checked again when admitted). A
    /// few checks (a binary search), none taking.
    fn admissible(&self, records: &[Record<'_>]) -> usize {
        let check = |n: usize| {
            self.ingest.admission.check_to(
                &self.tenant,
                Some(&self.topic),
                Charge::of(&records[..n]),
            )
        };
        if check(records.len()).is_ok() {
            return records.len();
        }
        // check(lo) passes (none passes trivially), check(hi) fails.
        let (mut lo, mut hi) = (0, records.len());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if check(mid).is_ok() {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// A record the budgets refuse, counted as every refusal is.
    fn refuse(&self, denial: Denial, charge: Charge) -> ApiError {
        if let Denial::Refused(r) = &denial {
            self.tenant
                .stats()
                .decided(charge.records, charge.bytes, Some(r.reason), true);
        }
        self.ingest.denied(&self.tenant, denial)
    }

    /// One record: checked against every budget first (a record the tenant's own budgets
    /// refuse is not demand and costs no lease call), then admitted. A record that reserved
    /// its tenant's tokens before registering was checked then.
    async fn admit_one(
        &self,
        record: &Record<'_>,
        reserved: Option<&mut Reservation>,
        leases: &mut u32,
    ) -> Result<BufferLease, ApiError> {
        let ingest = &self.ingest;
        let charge = Charge::of(std::slice::from_ref(record));
        if reserved.is_none() {
            let checked = ingest
                .admission
                .check_to(&self.tenant, Some(&self.topic), charge);
            if let Err(denial) = checked {
                return Err(self.refuse(denial, charge));
            }
        }
        ingest
            .admit_with(&self.tenant, &self.topic, (charge, reserved), leases)
            .await
    }
}

/// Two refusals a report may share: the same error, or the same kind of 429 (the first one's
/// wait is never shorter than a later one's: a refused record takes no tokens).
fn same_refusal(a: &ApiError, b: &ApiError) -> bool {
    match (a, b) {
        (ApiError::RateLimited(x), ApiError::RateLimited(y)) => {
            x.reason == y.reason && x.class == y.class && x.lag == y.lag
        }
        _ => a == b,
    }
}

/// A body of one record, decided before its stream was answered: in its schemas (when they
/// apply), and what it needs of its tenant reserved (the converted record holds its own).
pub(super) struct First {
    pub converted: Option<ConvertedRecord>,
    /// The reservation of a record the schema step left as it was.
    pub reserved: Option<Reservation>,
}

/// A record after the schema step, with the CPU its checks took (owed until it is admitted)
/// and what it reserved before registering its raw schemas (for its admission).
type Checked = (Record<'static>, Duration, Option<Reservation>);

/// A record on its way to admission, with its reservation if it made one.
type Reserved<'r> = (Record<'r>, Option<Reservation>);

/// A converted record's outcome and what its checks cost (nothing when it was refused: a
/// refused record's checks were charged where it was refused).
fn split(c: Result<Checked, ApiError>) -> (Result<Reserved<'static>, ApiError>, Duration) {
    match c {
        Ok((record, checked, reserved)) => (Ok((record, reserved)), checked),
        Err(e) => (Err(e), Duration::ZERO),
    }
}

//! After admission: the records handed to the producer, and the wait for what the client
//! asked to wait for (Kafka's answer, or the hand-over); and the one way a request is
//! processed and then settled.

use std::sync::Arc;

use super::coding::Drain;
use super::request::Answer;
use super::{Ack, BodyFormat, Ingest, ProduceRequest};
use crate::admission::BucketsView;
use crate::buffer::BufferLease;
use crate::identity::Topic;
use crate::kafka::{Batch, OutcomeCounter};
use crate::outcome::{ApiError, Produced};
use crate::record::Record;
use crate::tenant::{Tenant, TenantStats};

impl Ingest {
    /// The usual way, for a request without a key and a keyed one its store cannot protect:
    /// the records processed, the rest of the body drained while Kafka is waited for, the
    /// batch settled; with the view admission took.
    pub(super) async fn process_and_settle(
        &self,
        tenant: &Arc<Tenant>,
        topic: &Topic,
        (request, declared): (ProduceRequest<'_>, Option<u64>),
        format: BodyFormat<'_>,
        drain: &Drain,
    ) -> (Answer, Option<BucketsView>) {
        let ack = request.ack;
        let sent = self
            .process(tenant, topic, request.body, declared, format, None)
            .await;
        drain.start();
        match sent {
            Ok(sent) => (
                Answer::Outcome(self.settle(sent.batch, ack).await),
                sent.view,
            ),
            Err(e) => (Answer::Outcome(Err(e)), None),
        }
    }

    /// Hands the admitted records to the producer.
    pub fn send(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        records: &[Record<'_>],
        lease: BufferLease,
    ) -> Arc<Batch> {
        self.producer
            .send(topic.as_str(), records, lease, tenant.stats().clone())
    }

    /// Waits for what the client asked to wait for.
    pub async fn settle(&self, batch: Arc<Batch>, ack: Ack) -> Result<Produced, ApiError> {
        if ack == Ack::Enqueued && !failed_at_enqueue(&batch) {
            return Ok(Produced::Accepted {
                records: batch.len(),
            });
        }
        if tokio::time::timeout(self.delivery_timeout, batch.wait())
            .await
            .is_err()
        {
            return Err(self.not_acknowledged(&batch, ""));
        }
        Ok(Produced::Settled(batch))
    }

    /// The 503 of a sync request whose records Kafka has not answered in time (`more` adds
    /// to the detail).
    pub(super) fn not_acknowledged(&self, batch: &Batch, more: &str) -> ApiError {
        let pending = batch.outcomes().filter(Option::is_none).count();
        ApiError::KafkaUnavailable(format!(
            "Kafka did not acknowledge {pending} of {} records within {} ms; they stay queued \
             and will be written when Kafka accepts them{more}",
            batch.len(),
            self.delivery_timeout.as_millis()
        ))
    }
}

/// Some record could not even be handed to the producer: an async request waits for the
/// others' outcome too.
pub(super) fn failed_at_enqueue(batch: &Batch) -> bool {
    batch.outcomes().any(|o| matches!(o, Some(Err(_))))
}

/// The tenant's counters are where Kafka's answers are counted.
impl OutcomeCounter for TenantStats {
    fn records_failed(&self, records: u64) {
        self.failed(records);
    }

    fn records_delivered(&self, records: u64) {
        self.delivered(records);
    }
}

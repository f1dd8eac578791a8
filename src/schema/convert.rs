//! One record's key and value through their schemas: each side's schema resolved, its data
//! checked and written in its wire format, and a topic's data contract held; what the checks
//! cost is handed back with the record ([`Converted::checked`]).

use super::unpaid_work::ChecksOwed;
use super::Compiled;
use super::{
    ContractConfig, ContractMode, Converted, Failure, Lookups, Mismatch, Resolved, SchemaError,
    Schemas, Side, Source, Strategy, Topic, Use, Wanted,
};
use std::sync::Arc;

impl Schemas {
    /// One record's key and value in their schemas (`key`/`value`: the JSON text as sent;
    /// `None` is a Kafka null, written as null). A raw schema the registry does not hold yet
    /// comes back in [`Converted::pending`]: the pipeline registers it ([`Schemas::register`])
    /// once the request passed every other check, or drops it.
    /// [`Converted::checked`] is the CPU its checks took, owed until the record is admitted;
    /// a side whose check passed beside one that failed is charged to the tenant here.
    pub async fn convert(
        &self,
        tenant: &str,
        topic: &Topic,
        (key, value): (Option<&[u8]>, Option<&[u8]>),
        wanted: Option<&Wanted>,
        lookups: &mut Lookups,
    ) -> Result<Converted, Failure> {
        let mut owed = self.owed(tenant);
        let mut out = self
            .convert_sides(tenant, topic, (key, value), wanted, lookups, &mut owed)
            .await?;
        out.checked = owed.hand_over();
        Ok(out)
    }

    async fn convert_sides(
        &self,
        tenant: &str,
        topic: &Topic,
        (key, value): (Option<&[u8]>, Option<&[u8]>),
        wanted: Option<&Wanted>,
        lookups: &mut Lookups,
        owed: &mut ChecksOwed,
    ) -> Result<Converted, Failure> {
        let mut out = Converted::default();
        let fail = |side| move |error| Failure { side, error };
        if let (Some(data), Some(u)) = (key, wanted.and_then(|w| w.key.as_ref())) {
            let r = self
                .resolve(tenant, topic, Side::Key, u, lookups)
                .await
                .map_err(fail(Side::Key))?;
            let (bytes, checked) = self
                .write(
                    tenant,
                    &r.schema,
                    data,
                    Side::Key,
                    self.limits.0,
                    false,
                    lookups,
                )
                .await?;
            out.key = bytes;
            owed.add(checked);
            self.settle(tenant, topic, Side::Key, r, &mut out)
                .await
                .map_err(fail(Side::Key))?;
        }
        let own = wanted.and_then(|w| w.value.as_ref());
        let contract = self.contract(topic);
        // A validate contract keeps the JSON as sent, even when the record names the
        // contract's schema itself.
        let keep_json = contract.is_some_and(|c| c.mode == ContractMode::Validate);
        let Some(data) = value else {
            return Ok(out);
        };
        let r = match (own, contract) {
            (Some(u), _) => self
                .resolve(tenant, topic, Side::Value, u, lookups)
                .await
                .map_err(fail(Side::Value))?,
            (None, Some(c)) => self
                .contract_schema(tenant, topic, c, lookups)
                .await
                .map(|schema| Resolved { schema, raw: None })
                .map_err(fail(Side::Value))?,
            (None, None) => return Ok(out),
        };
        let (bytes, checked) = self
            .write(
                tenant,
                &r.schema,
                data,
                Side::Value,
                self.limits.1,
                keep_json,
                lookups,
            )
            .await?;
        out.value = bytes;
        owed.add(checked);
        self.settle(tenant, topic, Side::Value, r, &mut out)
            .await
            .map_err(fail(Side::Value))?;
        // A value naming its own schema on a contracted topic is held to the contract too:
        // the schema must be the contract's (any other id, registered anywhere, would be a
        // way around it).
        if let (Some(_), Some(c)) = (own, contract) {
            let required = self
                .contract_schema(tenant, topic, c, lookups)
                .await
                .map_err(fail(Side::Value))?;
            if out.value_id != Some(required.id) {
                return Err(Failure {
                    side: Side::Value,
                    error: SchemaError::Violation(Mismatch {
                        too_costly: false,
                        pointer: String::new(),
                        message: format!(
                            "topic {:?} has a data contract: values are written in schema {} (the latest of its subject), not {}",
                            topic.as_str(),
                            required.id,
                            out.value_id.map_or_else(|| "a schema the registry does not hold".into(), |id| id.to_string())
                        ),
                    }),
                });
            }
        }
        Ok(out)
    }

    /// The schema a topic's contract holds its values to: the latest of its subject.
    async fn contract_schema(
        &self,
        tenant: &str,
        topic: &Topic,
        contract: &ContractConfig,
        lookups: &mut Lookups,
    ) -> Result<Arc<Compiled>, SchemaError> {
        let u = Use {
            source: Source::Version(None),
            subject: contract.subject.clone(),
            strategy: Strategy::TopicName,
            format: Some(contract.format),
        };
        self.resolve_as(tenant, topic, Side::Value, &u, lookups, true)
            .await
            .map(|r| r.schema)
    }
}

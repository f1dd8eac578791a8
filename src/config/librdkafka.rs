//! What floodgate must know about librdkafka's property names to validate `[kafka.producer]`:
//! which names are aliases of which, which properties floodgate reserves, and which hold
//! secrets.
//!
//! librdkafka accepts several properties under two names (CONFIGURATION.md, "Alias for").
//! Setting both names, or a reserved property under its other name, would make the outcome
//! depend on the order librdkafka happens to receive them; so every name is resolved to one
//! canonical name, and a property set twice or reserved is refused by `check-config`.

use std::collections::BTreeMap;

use super::{ConfigProblem, PropertyValue};

/// (alias, canonical name) for every alias in librdkafka 2.12's CONFIGURATION.md. The
/// canonical name is the one floodgate's defaults and documentation use.
pub const ALIASES: &[(&str, &str)] = &[
    ("metadata.broker.list", "bootstrap.servers"),
    ("max.in.flight", "max.in.flight.requests.per.connection"),
    ("sasl.mechanisms", "sasl.mechanism"),
    (
        "sasl.oauthbearer.client.credentials.client.id",
        "sasl.oauthbearer.client.id",
    ),
    (
        "sasl.oauthbearer.client.credentials.client.secret",
        "sasl.oauthbearer.client.secret",
    ),
    ("fetch.message.max.bytes", "max.partition.fetch.bytes"),
    ("queue.buffering.max.ms", "linger.ms"),
    ("message.send.max.retries", "retries"),
    ("compression.codec", "compression.type"),
    ("request.required.acks", "acks"),
    ("delivery.timeout.ms", "message.timeout.ms"),
];

/// Properties floodgate sets itself: the buffer bound depends on the queue limits, the
/// delivery promise on the message timeout, and `[kafka] bootstrap_servers` names the brokers.
pub const RESERVED: &[(&str, &str)] = &[
    (
        "queue.buffering.max.messages",
        "derived from [buffer] max_records, so librdkafka's queue never fills before ours",
    ),
    (
        "queue.buffering.max.kbytes",
        "derived from [buffer] max_bytes, so librdkafka's queue never fills before ours",
    ),
    ("bootstrap.servers", "set [kafka] bootstrap_servers instead"),
    (
        "message.timeout.ms",
        "always infinite: a record answered 202 must never time out inside floodgate",
    ),
];

/// The canonical name of a librdkafka property.
pub fn canonical(name: &str) -> &str {
    ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, canonical)| canonical)
}

/// Does this property hold a secret (never printed)?
pub fn is_sensitive(name: &str) -> bool {
    [
        "password",
        "secret",
        "sasl.oauthbearer",
        "ssl.key",
        "ssl_key",
        "sasl.jaas",
    ]
    .iter()
    .any(|needle| name.contains(needle))
}

/// Every problem with an operator's `[kafka.producer]` table.
pub fn problems(properties: &BTreeMap<String, PropertyValue>) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for name in properties.keys() {
        let key = format!("kafka.producer.{name}");
        let canonical = canonical(name);
        if let Some((_, why)) = RESERVED.iter().find(|(r, _)| *r == canonical) {
            let alias = if canonical == name {
                String::new()
            } else {
                format!(" (an alias of {canonical})")
            };
            problems.push(ConfigProblem::new(
                key,
                format!("is reserved by floodgate{alias}: {why}"),
            ));
            continue;
        }
        if let Some(first) = seen.insert(canonical, name) {
            problems.push(ConfigProblem::new(
                key,
                format!("sets {canonical} again (already set as {first}); keep one of the two"),
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(names: &[&str]) -> BTreeMap<String, PropertyValue> {
        names
            .iter()
            .map(|n| (n.to_string(), PropertyValue::Text("1".into())))
            .collect()
    }

    #[test]
    fn reserved_properties_are_refused_under_every_name() {
        for name in [
            "message.timeout.ms",
            "delivery.timeout.ms",
            "bootstrap.servers",
            "metadata.broker.list",
            "queue.buffering.max.messages",
            "queue.buffering.max.kbytes",
        ] {
            let p = problems(&table(&[name]));
            assert_eq!(p.len(), 1, "{name}");
            assert_eq!(p[0].key, format!("kafka.producer.{name}"));
            assert!(p[0].message.contains("reserved"), "{}", p[0].message);
        }
    }

    #[test]
    fn a_property_set_under_both_names_is_refused() {
        for (alias, canonical) in ALIASES {
            if RESERVED.iter().any(|(r, _)| r == canonical) {
                continue;
            }
            let p = problems(&table(&[alias, canonical]));
            assert_eq!(p.len(), 1, "{alias} and {canonical}: {p:?}");
            assert!(p[0].message.contains("again"), "{}", p[0].message);
        }
        assert!(problems(&table(&["linger.ms", "acks"])).is_empty());
    }

    #[test]
    fn secrets_are_recognised() {
        for name in [
            "sasl.password",
            "ssl.key.password",
            "ssl.key.pem",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.config",
        ] {
            assert!(is_sensitive(name), "{name}");
        }
        assert!(!is_sensitive("linger.ms"));
    }
}

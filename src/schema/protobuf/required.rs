//! proto2 `required` fields, checked in what a value sets: the JSON mapping does not check
//! them, and a message without one would be written and fail every consumer's parse.
//!
//! Why a table made when the schema is compiled: walking every field a message type
//! declares, for each sub-message of a value, cost (sub-messages × declared fields), not the
//! value's size. Review 36a of #37: a 4 KB value of a type of 20,000 message fields took
//! 120–150 ms where it was priced at 96 µs, and an 800 KB one held a schema thread for 26 s.
//! Now a schema without a required field (every proto3 one) walks nothing, and one with
//! them visits only the fields a value sets, plus the required fields of the types that
//! have any.

use std::collections::HashMap;

use prost_reflect::{
    Cardinality, DescriptorPool, DynamicMessage, FieldDescriptor, ReflectMessage as _, Value,
};

use super::super::pointer::Pointer;
use super::super::Mismatch;

/// The required fields of each message type that has any, by full name (at most
/// [`crate::schema::names::MAX_NAME_BYTES`] long: one hash of it per sub-message).
#[derive(Debug, Default)]
pub(super) struct Required {
    by_type: HashMap<Box<str>, Vec<FieldDescriptor>>,
}

impl Required {
    /// The table of `pool`'s message types; one pass over the declared fields, at compile.
    pub(super) fn of(pool: &DescriptorPool) -> Self {
        let by_type = pool
            .all_messages()
            .filter_map(|m| {
                let fields: Vec<_> = m
                    .fields()
                    .filter(|f| f.cardinality() == Cardinality::Required)
                    .collect();
                (!fields.is_empty()).then(|| (m.full_name().into(), fields))
            })
            .collect();
        Self { by_type }
    }

    /// The first required field `message` lacks, at any depth (in single fields, lists and
    /// maps), as a mismatch at its place.
    pub(super) fn check(&self, message: &DynamicMessage) -> Result<(), Mismatch> {
        self.check_counted(message, &mut 0)
    }

    /// [`Required::check`], counting the fields it looked at into `looked`.
    fn check_counted(&self, message: &DynamicMessage, looked: &mut u64) -> Result<(), Mismatch> {
        if self.by_type.is_empty() {
            return Ok(());
        }
        self.walk(message, &mut Pointer::default(), looked)
    }

    fn walk(
        &self,
        message: &DynamicMessage,
        at: &mut Pointer,
        looked: &mut u64,
    ) -> Result<(), Mismatch> {
        if let Some(fields) = self.by_type.get(message.descriptor().full_name()) {
            *looked += fields.len() as u64;
            if let Some(missing) = fields.iter().find(|f| !message.has_field(f)) {
                at.push(missing.json_name());
                return Err(Mismatch {
                    too_costly: false,
                    pointer: at.to_string(),
                    message: "a required field is missing".into(),
                });
            }
        }
        // The set fields only (the message's own map of values): what the value wrote.
        for (field, value) in message.fields() {
            *looked += 1;
            at.push(field.json_name());
            match value {
                Value::Message(inner) => self.walk(inner, at, looked)?,
                Value::List(items) => {
                    for (i, item) in items.iter().enumerate() {
                        if let Value::Message(inner) = item {
                            at.push_index(i);
                            self.walk(inner, at, looked)?;
                            at.pop();
                        }
                    }
                }
                Value::Map(entries) => {
                    for (key, item) in entries {
                        if let Value::Message(inner) = item {
                            at.push(&map_key(key));
                            self.walk(inner, at, looked)?;
                            at.pop();
                        }
                    }
                }
                _ => {}
            }
            at.pop();
        }
        Ok(())
    }
}

/// A map key as JSON writes it: a string, a number or a boolean, as text.
fn map_key(key: &prost_reflect::MapKey) -> String {
    use prost_reflect::MapKey;
    match key {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::ProtobufSchema;

    /// A type of many message fields, of which a value sets a few hundred: the walk looks at
    /// what the value sets and the required fields, never at every declared field per
    /// sub-message (review 36a of #37: that was sub-messages × 20,000 fields).
    fn wide(syntax: &str, label: &str, fields: usize, more: &str) -> ProtobufSchema {
        let declared: String = (1..=fields)
            .map(|i| format!("{label} M f{i} = {};", i + 1))
            .collect();
        let text = format!(r#"syntax = "{syntax}"; message M {{ {declared} }} {more}"#);
        ProtobufSchema::parse(&text).expect("schema")
    }

    fn value(set: usize) -> String {
        let inner: Vec<String> = (1..=set).map(|i| format!(r#""f{i}":{{}}"#)).collect();
        format!("{{{}}}", inner.join(","))
    }

    #[test]
    fn a_schema_without_required_fields_walks_nothing() {
        let s = wide("proto3", "", 2_000, "");
        assert!(s.required.by_type.is_empty());
        let message = s.decode_for_test(value(500).as_bytes());
        let mut looked = 0;
        s.required
            .check_counted(&message, &mut looked)
            .expect("valid");
        assert_eq!(looked, 0);
    }

    #[test]
    fn the_walk_looks_at_what_the_value_sets_not_at_what_its_types_declare() {
        // A type with a required field in the file: the walk runs.
        let s = wide(
            "proto2",
            "optional",
            2_000,
            "message N { required int32 x = 1; }",
        );
        assert_eq!(s.required.by_type.len(), 1);
        let set = 500;
        let message = s.decode_for_test(value(set).as_bytes());
        let mut looked = 0;
        s.required
            .check_counted(&message, &mut looked)
            .expect("valid");
        // One look per set field (the 500 sub-messages set nothing themselves).
        assert_eq!(looked, set as u64);
    }

    #[test]
    fn required_fields_are_checked_in_lists_and_maps_too() {
        let s = ProtobufSchema::parse(
            r#"syntax = "proto2"; message M { repeated N l = 1; map<string, N> m = 2; }
               message N { required int32 x = 1; }"#,
        )
        .expect("schema");
        assert!(s.encode(br#"{"l":[{"x":1}],"m":{"a":{"x":2}}}"#).is_ok());
        let e = s.encode(br#"{"l":[{"x":1},{}]}"#).expect_err("list");
        assert_eq!(e.pointer, "/l/1/x");
        let e = s.encode(br#"{"m":{"k":{}}}"#).expect_err("map");
        assert_eq!(e.pointer, "/m/k/x");
    }
}

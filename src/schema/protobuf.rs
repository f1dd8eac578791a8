//! Protobuf: a schema's `.proto` text compiled in process (protox: a pure-Rust protobuf
//! compiler, so no `protoc` binary), JSON turned into the first message by the standard
//! proto3 JSON mapping (prost-reflect's dynamic messages), and encoded. Imports of Google's
//! well-known types resolve; any other import is an invalid schema here (Schema Registry
//! references are not followed).

use prost::Message as _;
use prost_reflect::{DeserializeOptions, DynamicMessage, MessageDescriptor};

use super::pointer::Pointer;
use super::Mismatch;

mod names;
mod ranges;
mod required;

use required::Required;

const FILE: &str = "schema.proto";

#[derive(Debug)]
pub struct ProtobufSchema {
    message: MessageDescriptor,
    /// The first message's full name (RECORD_NAME strategy).
    pub record_name: Option<String>,
    /// It holds, at any depth, a field of Google's JSON types (`Value`, `ListValue`,
    /// `Struct`, or `Any`, which may hold them): every JSON value under one is a message of
    /// its own when it is read.
    dynamic: bool,
    /// The proto2 `required` fields of its message types.
    required: Required,
}

/// Google's types that take any JSON: each value read into one is a `DynamicMessage`. `Any`
/// holds whichever message its `@type` names, these included (review 27 of #37: a list read
/// through `Any` as a `ListValue` took 376 MB).
const JSON_TYPES: [&str; 4] = [
    "google.protobuf.Value",
    "google.protobuf.ListValue",
    "google.protobuf.Struct",
    "google.protobuf.Any",
];

/// Whether `message` holds a field of one of [`JSON_TYPES`], at any depth.
fn holds_json_types(message: &MessageDescriptor) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut open = vec![message.clone()];
    while let Some(m) = open.pop() {
        if !seen.insert(m.full_name().to_string()) {
            continue;
        }
        for field in m.fields() {
            if let prost_reflect::Kind::Message(inner) = field.kind() {
                if JSON_TYPES.contains(&inner.full_name()) {
                    return true;
                }
                open.push(inner);
            }
        }
    }
    false
}

/// Serves the schema as the one file, and Google's well-known types beside it.
///
/// The file is served parsed and without its source positions: checking a descriptor
/// against its positions finds each error's place by a scan of all of them, so a schema of
/// n faults (17,500 duplicate field numbers in 286 KB) took the checker O(n²) — 12.9 s of
/// CPU for one refused request. Without them the same schema is refused in 0.1 s; errors
/// still name the field, only not its line.
struct Source(prost_reflect::prost_types::FileDescriptorProto);

impl protox::file::FileResolver for Source {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        if name == FILE {
            return Ok(protox::file::File::from_file_descriptor_proto(
                self.0.clone(),
            ));
        }
        protox::file::GoogleFileResolver::new().open_file(name)
    }
}

impl ProtobufSchema {
    pub fn parse(text: &str) -> Result<Self, String> {
        let parsed = protox::file::File::from_source(FILE, text).map_err(|e| e.to_string())?;
        let mut descriptor = parsed.file_descriptor_proto().clone();
        drop(parsed);
        descriptor.source_code_info = None;
        names::within_bounds(&descriptor)?;
        ranges::within_bounds(&descriptor)?;
        let mut compiler = protox::Compiler::with_file_resolver(Source(descriptor));
        compiler.include_imports(true);
        compiler.open_file(FILE).map_err(|e| e.to_string())?;
        let pool = compiler.descriptor_pool();
        let file = pool
            .get_file_by_name(FILE)
            .ok_or_else(|| "the schema did not compile to a file".to_string())?;
        let message = file
            .messages()
            .next()
            .ok_or_else(|| "the schema defines no message".to_string())?;
        Ok(Self {
            record_name: Some(message.full_name().to_string()),
            dynamic: holds_json_types(&message),
            required: Required::of(&pool),
            message,
        })
    }

    /// What each JSON value of a record costs when it is read for this schema, at most:
    /// a value under Google's JSON types is a message of its own (~780 bytes, measured:
    /// review 26 of #37 read a 920 KB list of zeros into `google.protobuf.Value` in 360 MB).
    pub fn value_memory(&self) -> Option<u64> {
        self.dynamic.then_some(832)
    }

    /// The message's bytes, with Confluent's message-index array for the first message (a
    /// single 0) in front, or where and why the JSON does not fit.
    pub fn encode(&self, text: &[u8]) -> Result<Vec<u8>, Mismatch> {
        // Consumers' parsers refuse messages nested past 100 (upb's default limit): one
        // written deeper would be unreadable. A message nests no deeper than its JSON.
        if json_depth(text) > MAX_MESSAGE_DEPTH {
            return Err(Mismatch {
                too_costly: false,
                pointer: String::new(),
                message: format!(
                    "nests deeper than {MAX_MESSAGE_DEPTH}, which Protobuf consumers refuse to read"
                ),
            });
        }
        let mut de = serde_json::Deserializer::from_slice(text);
        let options = DeserializeOptions::new().deny_unknown_fields(true);
        let mut track = serde_path_to_error::Track::new();
        let tracked = serde_path_to_error::Deserializer::new(&mut de, &mut track);
        let message =
            DynamicMessage::deserialize_with_options(self.message.clone(), tracked, &options)
                .and_then(|m| de.end().map(|()| m))
                .map_err(|e| {
                    let message = strip_position(&e.to_string());
                    let mut pointer = Pointer::from_path(&track.path());
                    // An unknown field is refused at its name, before its value is entered:
                    // the path stops at the object, and the pointer names the field itself.
                    if let Some(name) = unknown_field(&message) {
                        pointer.push(name);
                    }
                    Mismatch {
                        too_costly: false,
                        pointer: pointer.to_string(),
                        message,
                    }
                })?;
        // Under Google's JSON types one JSON level is two or three messages (a `Value` holding
        // a `ListValue` or a `Struct`): the JSON's depth does not bound the message's there
        // (review 37a of #37: 50 nested lists wrote a message 101 deep, 50 objects 151, and
        // upb refused to read them back). Counted on the message itself, O(its size).
        if self.dynamic && message_depth(&message) > MAX_MESSAGE_DEPTH {
            return Err(Mismatch {
                too_costly: false,
                pointer: String::new(),
                message: format!(
                    "nests messages deeper than {MAX_MESSAGE_DEPTH} (under Google's JSON types \
                     a JSON level is two or three), which Protobuf consumers refuse to read"
                ),
            });
        }
        self.required.check(&message)?;
        // `encode` sizes the message once to check the buffer; sizing it for the capacity too
        // cost another 10% of the whole conversion (perf: `encoded_len` was the top symbol).
        let mut out = vec![0u8];
        message.encode(&mut out).map_err(|e| Mismatch {
            too_costly: false,
            pointer: String::new(),
            message: e.to_string(),
        })?;
        Ok(out)
    }
}

/// How deep `message` nests messages, itself counted as 1: what a consumer's parser counts.
fn message_depth(message: &DynamicMessage) -> usize {
    use prost_reflect::Value;
    let inner = |v: &Value| match v {
        Value::Message(m) => message_depth(m),
        Value::List(items) => items
            .iter()
            .map(|i| match i {
                Value::Message(m) => message_depth(m),
                _ => 0,
            })
            .max()
            .unwrap_or(0),
        // Each map entry is a message of its own on the wire.
        Value::Map(entries) => entries
            .values()
            .map(|i| match i {
                Value::Message(m) => 1 + message_depth(m),
                _ => 1,
            })
            .max()
            .unwrap_or(0),
        _ => 0,
    };
    1 + message.fields().map(|(_, v)| inner(v)).max().unwrap_or(0)
}

/// Deepest message nesting written.
const MAX_MESSAGE_DEPTH: usize = 100;

/// The deepest bracket nesting of JSON text, strings skipped.
fn json_depth(text: &[u8]) -> usize {
    depths(text).0
}

/// The deepest a JSON text nests, and every byte weighed by the depth it lies at plus one.
fn depths(text: &[u8]) -> (usize, u64) {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    let mut weight = 0u64;
    for &b in text {
        match (in_string, b) {
            (true, _) if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (true, b'"') => in_string = false,
            (true, _) => {}
            (false, b'"') => in_string = true,
            (false, b'{' | b'[') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, b'}' | b']') => depth = depth.saturating_sub(1),
            _ => {}
        }
        weight = weight.saturating_add(depth as u64 + 1);
    }
    (deepest, weight)
}

/// The cost model's units (a nanosecond each) per byte of a value and level it lies under.
/// Reading the JSON is linear, but writing the message sizes each nested message once per
/// level above it, so a byte costs about as many steps as it is deep: review 35a of #37 sent a
/// chain 97 deep ending in 280,000 empty messages (840 KB, valid), priced 0.84 ms at a unit a
/// byte, which ran 0.83–0.88 s on the thread kept for short checks — ~10.5 ns a byte and level.
const UNITS_PER_BYTE_LEVEL: u64 = 12;

/// What checking and writing `text` may cost at most, in the cost model's units.
pub fn work(text: &[u8]) -> u64 {
    depths(text).1.saturating_mul(UNITS_PER_BYTE_LEVEL)
}

/// The field prost-reflect names in its unknown-field error (`unrecognized field name 'x'`).
fn unknown_field(message: &str) -> Option<&str> {
    message
        .strip_prefix("unrecognized field name '")?
        .strip_suffix('\'')
}

fn strip_position(message: &str) -> String {
    message
        .rsplit_once(" at line ")
        .map_or(message, |(m, _)| m)
        .to_string()
}

#[cfg(test)]
impl ProtobufSchema {
    /// The dynamic message of a JSON value, for tests of the steps after the parse.
    fn decode_for_test(&self, text: &[u8]) -> DynamicMessage {
        let mut de = serde_json::Deserializer::from_slice(text);
        DynamicMessage::deserialize(self.message.clone(), &mut de).expect("decodes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review 35a of #37: each byte is priced by its depth, so a value that nests deep costs
    /// what writing it costs. Its record (a chain 97 deep ending in 280,000 empty messages,
    /// 840 KB) ran 0.83–0.88 s, priced 0.84 ms at a unit a byte; an ordinary flat record
    /// stays well within what a request worker checks inline.
    #[test]
    fn a_value_is_priced_by_the_depth_of_its_bytes() {
        let leaves = vec!["{}"; 280_000].join(",");
        let deep = format!(
            "{}{{\"l\":[{leaves}]}}{}",
            "{\"c\":".repeat(96),
            "}".repeat(96)
        );
        let priced = work(deep.as_bytes());
        assert!(priced >= 500_000_000, "at least the 500 ms line: {priced}");
        let flat = format!("{{\"name\":\"{}\",\"n\":1}}", "x".repeat(1000));
        let priced = work(flat.as_bytes());
        assert!(
            priced <= 50_000,
            "a quarter of one record's inline work: {priced}"
        );
        // Brackets in strings are not levels: every byte at depth 1 but the closing brace.
        let quoted = format!("{{\"s\":\"{}\"}}", "[{".repeat(500));
        let weight = 2 * quoted.len() as u64 - 1;
        assert_eq!(work(quoted.as_bytes()), weight * UNITS_PER_BYTE_LEVEL);
    }

    const ORDER: &str = r#"syntax = "proto3"; package shop;
        message Order { int64 id = 1; string sku = 2; repeated Line lines = 3; }
        message Line { string sku = 1; int32 qty = 2; }"#;

    #[test]
    fn encodes_the_first_message_with_its_index() {
        let s = ProtobufSchema::parse(ORDER).expect("schema");
        assert_eq!(s.record_name.as_deref(), Some("shop.Order"));
        let bytes = s
            .encode(br#"{"id":"7","sku":"a","lines":[{"sku":"b","qty":2}]}"#)
            .expect("valid");
        assert_eq!(bytes[0], 0, "message index of the first message");
        let back = DynamicMessage::decode(s.message.clone(), &bytes[1..]).expect("decodes");
        assert_eq!(
            back.get_field_by_name("id").and_then(|v| v.as_i64()),
            Some(7)
        );
    }

    #[test]
    fn mismatches_name_the_field() {
        let s = ProtobufSchema::parse(ORDER).expect("schema");
        let e = s
            .encode(br#"{"id":1,"lines":[{"qty":"many"}]}"#)
            .expect_err("bad qty");
        assert_eq!(e.pointer, "/lines/0/qty", "{}", e.message);
        let e = s
            .encode(br#"{"id":1,"colour":"red"}"#)
            .expect_err("unknown field");
        assert_eq!(e.pointer, "/colour", "{}", e.message);
        assert!(e.message.contains("colour"), "{}", e.message);
        let e = s
            .encode(br#"{"id":1,"lines":[{"sku":"a"},{"q/ty":2}]}"#)
            .expect_err("unknown nested field");
        assert_eq!(e.pointer, "/lines/1/q~1ty", "{}", e.message);
        assert!(ProtobufSchema::parse("message {").is_err());
        // Checked without source positions (see `Source`): the fault is still named.
        let e =
            ProtobufSchema::parse(r#"syntax = "proto3"; message M { int32 a = 1; int32 b = 1; }"#)
                .expect_err("duplicate number");
        assert!(e.contains("field number '1' is already used"), "{e}");
        assert!(ProtobufSchema::parse(r#"syntax = "proto3"; import "other.proto";"#).is_err());
    }

    #[test]
    fn proto2_required_fields_are_checked() {
        let s = ProtobufSchema::parse(
            r#"syntax = "proto2"; message M { required string name = 1; optional N n = 2; }
               message N { required int32 x = 1; }"#,
        )
        .expect("schema");
        assert!(s.encode(br#"{"name":"a"}"#).is_ok());
        assert_eq!(s.encode(br#"{}"#).expect_err("missing").pointer, "/name");
        assert_eq!(
            s.encode(br#"{"name":"a","n":{}}"#)
                .expect_err("nested")
                .pointer,
            "/n/x"
        );
    }

    /// Nested lists and objects under `google.protobuf.Value` are two and three messages a
    /// JSON level: refused by the message's own depth (review 37a of #37).
    #[test]
    fn json_types_nested_past_what_consumers_read_are_refused() {
        let s = ProtobufSchema::parse(
            r#"syntax = "proto3"; import "google/protobuf/struct.proto";
               message M { google.protobuf.Value v = 1; }"#,
        )
        .expect("schema");
        let lists = |n: usize| format!("{{\"v\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        assert!(s.encode(lists(40).as_bytes()).is_ok(), "81 deep");
        let e = s.encode(lists(50).as_bytes()).expect_err("101 deep");
        assert!(e.message.contains("deeper than 100"), "{}", e.message);
        let objects = |n: usize| format!("{{\"v\":{}1{}}}", "{\"a\":".repeat(n), "}".repeat(n));
        assert!(s.encode(objects(30).as_bytes()).is_ok(), "92 deep");
        assert!(s.encode(objects(34).as_bytes()).is_err(), "104 deep");
    }

    #[test]
    fn messages_nested_past_what_consumers_read_are_refused() {
        let s = ProtobufSchema::parse(r#"syntax = "proto3"; message M { M m = 4; int32 x = 1; }"#)
            .expect("schema");
        let nest = |n: usize| format!("{}{{\"x\":1}}{}", "{\"m\":".repeat(n), "}".repeat(n));
        assert!(s.encode(nest(90).as_bytes()).is_ok());
        let e = s.encode(nest(125).as_bytes()).expect_err("too deep");
        assert!(e.message.contains("deeper than 100"), "{}", e.message);
        assert_eq!(json_depth(br#"{"a":"{{{{","b":[1]}"#), 2, "strings skipped");
    }

    /// The parse-memory bound (`schema::parse_memory`) holds for a Protobuf value too: what the
    /// dynamic message of a ~1 MB value keeps is within its estimate (measured by the counting
    /// allocator the unit tests run under).
    #[test]
    fn a_messages_memory_is_within_the_parse_estimate() {
        for (proto, data) in [
            (
                "syntax = \"proto3\"; message M { repeated E items = 1; } message E {}",
                format!("{{\"items\":[{}{{}}]}}", "{},".repeat(300_000)),
            ),
            (
                "syntax = \"proto3\"; message M { repeated int32 items = 1; }",
                format!("{{\"items\":[{}0]}}", "0,".repeat(450_000)),
            ),
            (
                "syntax = \"proto3\"; message M { repeated E items = 1; } message E { int32 a = 1; }",
                format!("{{\"items\":[{}{{\"a\":1}}]}}", "{\"a\":1},".repeat(120_000)),
            ),
        ] {
            let s = ProtobufSchema::parse(proto).expect("proto");
            let (message, kept) = crate::heap::measure(|| {
                let mut de = serde_json::Deserializer::from_slice(data.as_bytes());
                DynamicMessage::deserialize(s.message.clone(), &mut de).expect("message")
            });
            let kept = kept.expect("counted") as u64;
            let estimate = super::super::parse_memory::estimate(data.as_bytes());
            assert!(kept <= estimate, "{proto}: kept {kept} > {estimate}");
            drop(message);
        }
    }
}

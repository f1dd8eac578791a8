//! The JSON Schema cost model's measures of data: how big a value is for the work bound, what
//! an `enum` or `const` costs per value it checks (as jsonschema really compares them), what
//! `uniqueItems` costs on a value, and how many regexes a schema makes (what one costs to run
//! is `pattern`'s).

use serde_json::Value;

/// The size of a value for the work bound: its nodes (objects, arrays and scalars), and a
/// string's bytes in steps of [`STRING_STEP`] (a `pattern` or `const` reads all of them).
pub(super) fn nodes(value: &Value, depth: usize) -> u64 {
    match value {
        // The body decoder bounds nesting; this only keeps the count from recursing further.
        _ if depth > 256 => 1,
        Value::Array(items) => 1 + items.iter().map(|v| nodes(v, depth + 1)).sum::<u64>(),
        Value::Object(o) => {
            1 + o
                .iter()
                .map(|(k, v)| k.len() as u64 / STRING_STEP + nodes(v, depth + 1))
                .sum::<u64>()
        }
        Value::String(s) => 1 + s.len() as u64 / STRING_STEP,
        _ => 1,
    }
}

/// String bytes counted as one node.
const STRING_STEP: u64 = 64;

/// What checking one value against an `enum` or `const` costs, in nodes: jsonschema hashes
/// an enum of strings only (and null), and binary-searches integers only for an integer
/// value (a float value scans the list); every other enum is compared element by element,
/// and a `const` node by node.
pub(super) fn data_cost(keyword: &str, v: &Value) -> u64 {
    match (keyword, v) {
        ("enum", Value::Array(items))
            if items
                .iter()
                .all(|i| matches!(i, Value::String(_) | Value::Null)) =>
        {
            1
        }
        ("enum" | "const", v) => nodes(v, 0),
        _ => 1,
    }
}

/// The regexes a schema makes: every `pattern` string and `patternProperties` key, wherever
/// they are (a `$ref`'d subschema is compiled once).
/// `$ref`s anywhere in a schema (counted on its parsed JSON: a key may be spelled with
/// escapes, `"$r\u0065f"`, which a count of the text would miss).
pub(super) fn refs(v: &Value, depth: usize) -> usize {
    match v {
        _ if depth > 256 => 0,
        Value::Array(items) => items.iter().map(|i| refs(i, depth + 1)).sum(),
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| usize::from(k == "$ref") + refs(v, depth + 1))
            .sum(),
        _ => 0,
    }
}

pub(super) fn patterns(v: &Value, depth: usize) -> usize {
    match v {
        _ if depth > 256 => 0,
        Value::Array(items) => items.iter().map(|i| patterns(i, depth + 1)).sum(),
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| match (k.as_str(), v) {
                ("pattern", Value::String(_)) => 1,
                ("patternProperties", Value::Object(p)) => p.len() + patterns(v, depth + 1),
                _ => patterns(v, depth + 1),
            })
            .sum(),
        _ => 0,
    }
}

/// Subschema checks a `contentMediaType` or `contentEncoding` costs per string node (64
/// bytes): under draft 6 and 7 jsonschema parses (or base64-decodes) the whole string again for
/// each such keyword. Measured (review 13 of #37): one `contentMediaType: application/json`
/// over a 650 KB string (10,000 nodes) took 0.10 s of CPU, ~10 µs a node, about 200 checks
/// at the model's ~50 ns (20 million is the ~1 s a record may take); 600 of them took 15–33 s
/// while the model counted each as one check.
pub(super) const CONTENT_WEIGHT: u64 = 256;

/// Subschema checks a `format` costs per string node (64 bytes): asserted (draft 7 and before),
/// each parses the whole string again. Measured (review 41-r8 of #37, release binary):
/// `uri-template` over a 900 KB string (14,063 nodes) took 2.0–3.9 ms of CPU per keyword,
/// ~280 ns a node, about 6 checks at the model's ~50 ns; `iri-reference` ~0.7 ms; `email`,
/// `uri`, `date-time` and the rest under 0.12 ms. Counted as one check, 600 `uri-template`s
/// under an `allOf` were 1.4–2.4 s of CPU for one record. 16 is the dearest measured with
/// room to spare (at most ~0.35 s of such checks fit under [`super::MAX_CHECK_WORK`]), and
/// costs a record of ordinary fields with formats nothing it notices.
pub(super) const FORMAT_WEIGHT: u64 = 16;

/// Extra work `uniqueItems` may cost on `value`: jsonschema hashes the items of an array and
/// compares those whose hashes meet; items that are arrays or objects can all hash alike
/// (arrays of empty arrays hash to nothing), so such an array costs its length times its
/// nodes. An array of scalars is hashed well: linear, already counted.
pub(super) fn unique_items_cost(value: &Value, depth: usize) -> u64 {
    match value {
        _ if depth > 256 => 0,
        Value::Array(items) => {
            let inner: u64 = items.iter().map(|v| unique_items_cost(v, depth + 1)).sum();
            let composite = items
                .iter()
                .any(|v| matches!(v, Value::Array(_) | Value::Object(_)));
            let own = if composite {
                (items.len() as u64).saturating_mul(nodes(value, depth))
            } else {
                0
            };
            inner.saturating_add(own)
        }
        Value::Object(o) => o.values().map(|v| unique_items_cost(v, depth + 1)).sum(),
        _ => 0,
    }
}

/// Whether a schema has `keyword: value` anywhere (`uniqueItems: true`, `format: "regex"`).
pub(super) fn uses(v: &Value, keyword: &str, value: &Value, depth: usize) -> bool {
    match v {
        _ if depth > 256 => false,
        Value::Array(items) => items.iter().any(|i| uses(i, keyword, value, depth + 1)),
        Value::Object(o) => o
            .iter()
            .any(|(k, v)| (k == keyword && v == value) || uses(v, keyword, value, depth + 1)),
        _ => false,
    }
}

/// ECMA control escapes (`\cX`) in a schema's strings and keys, anywhere: the regex
/// translation (jsonschema-regex) rewrites one and parses the whole pattern again for each, so
/// a pattern of N costs N parses of itself (a review of #37: 8,000 in a 32 KB pattern were
/// 3.7 s of CPU, 65,000 in 256 KB about 110 s). Counted everywhere, not only under `pattern`:
/// a `$ref` may point a pattern's place anywhere in the document.
pub(super) fn control_escapes(v: &Value, depth: usize) -> usize {
    let count = |s: &str| s.matches("\\c").count();
    match v {
        _ if depth > 256 => 0,
        Value::String(s) => count(s),
        Value::Array(items) => items.iter().map(|i| control_escapes(i, depth + 1)).sum(),
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| count(k) + control_escapes(v, depth + 1))
            .sum(),
        _ => 0,
    }
}

/// Most ECMA control escapes (`\cX`) a JSON Schema's patterns may hold in all: at 16, the
/// translation parses its patterns at most 16 more times (milliseconds at the largest).
pub(super) const MAX_CONTROL_ESCAPES: usize = 16;

/// Whether a schema has `keyword` anywhere, whatever its value.
pub(super) fn has(v: &Value, keyword: &str, depth: usize) -> bool {
    match v {
        _ if depth > 256 => false,
        Value::Array(items) => items.iter().any(|i| has(i, keyword, depth + 1)),
        Value::Object(o) => o
            .iter()
            .any(|(k, v)| k == keyword || has(v, keyword, depth + 1)),
        _ => false,
    }
}

/// A string's 64-byte steps, squared, twice: what the regex parser's name checks cost on it.
fn squared_steps(s: &str) -> u64 {
    let steps = s.len() as u64 / STRING_STEP;
    steps.saturating_mul(steps).saturating_mul(2)
}

/// What `format: "regex"` may cost on `value`: the regex parser checks each named group
/// against every name before it, so a string costs the square of its 64-byte steps, twice
/// (a review of #37: 82,000 named groups, 891 KB, were 13.2 s of CPU; 209 KB 0.52 s).
pub(super) fn regex_format_cost(value: &Value, depth: usize) -> u64 {
    match value {
        _ if depth > 256 => 0,
        Value::String(s) => squared_steps(s),
        Value::Array(items) => items
            .iter()
            .map(|v| regex_format_cost(v, depth + 1))
            .fold(0, u64::saturating_add),
        // Keys too: `propertyNames: {"format": "regex"}` parses each one.
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| squared_steps(k).saturating_add(regex_format_cost(v, depth + 1)))
            .fold(0, u64::saturating_add),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::super::JsonSchema;
    use super::*;
    use serde_json::json;

    /// A review of #37: `uniqueItems` over 15,500 arrays that all hash alike was 13.45 s of
    /// CPU for one 895 KB record. Such an array costs its length times its nodes: refused
    /// unchecked. An array of scalars (hashed well) is not.
    #[test]
    fn unique_items_over_arrays_costs_length_times_nodes() {
        let s = JsonSchema::parse(r#"{"type":"array","uniqueItems":true}"#).expect("schema");
        let nested: Vec<Value> = (0..15_500u32)
            .map(|i| {
                let bits: Vec<Value> = (0..14)
                    .map(|b| {
                        if i >> b & 1 == 1 {
                            json!([[]])
                        } else {
                            json!([])
                        }
                    })
                    .collect();
                Value::Array(bits)
            })
            .collect();
        let e = s.check(&Value::Array(nested)).expect_err("too costly");
        assert!(e.too_costly, "{}", e.message);
        assert!(s.check(&json!((0..100_000).collect::<Vec<_>>())).is_ok());
    }
    /// Review 41-r8 of #37: 600 `format: "uri-template"` under an `allOf` (16.9 KB) over a
    /// 900 KB string were 1.4–2.4 s of CPU for one record, each counted as one check. Each now
    /// weighs as the parse it is: refused before it runs; one over a short string still checks.
    #[test]
    fn formats_weigh_as_the_parse_they_are() {
        let formats: Vec<Value> = (0..600)
            .map(|_| json!({"format": "uri-template"}))
            .collect();
        let s = JsonSchema::parse(
            &json!({"$schema": "http://json-schema.org/draft-07/schema#", "allOf": formats})
                .to_string(),
        )
        .expect("schema");
        let text = format!("{{{}b}}", "a,".repeat(449_990));
        let e = s.check(&json!(text)).expect_err("refused before it runs");
        assert!(e.too_costly, "{}", e.message);
        let one = JsonSchema::parse(
            r#"{"$schema":"http://json-schema.org/draft-07/schema#","format":"uri-template"}"#,
        )
        .expect("schema");
        assert!(one.check(&json!("/users/{id}")).is_ok());
    }

    /// A review of #37: `format: "regex"` on `(?<n0>)(?<n1>)…(` was 13.2 s of CPU for 891 KB
    /// (quadratic in the names); `unevaluatedProperties` beside 22 nested `anyOf`s 3 s for a 2 KB
    /// record (doubling per level). Both are refused before they run; shallow uses still check.
    #[test]
    fn quadratic_and_doubling_keywords_are_counted() {
        let s = JsonSchema::parse(
            r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"string","format":"regex"}"#,
        )
        .expect("schema");
        let names: String = (0..82_000)
            .map(|i| format!("(?<n{i}>)"))
            .collect::<String>()
            + "(";
        let e = s.check(&json!(names)).expect_err("too costly");
        assert!(e.too_costly, "{}", e.message);
        assert!(s.check(&json!("^[a-z]+$")).is_ok());
        // The same string as a key under `propertyNames` (a fourth review of #37: 14.4 s).
        let keys = JsonSchema::parse(
            r#"{"$schema":"http://json-schema.org/draft-07/schema#","propertyNames":{"format":"regex"}}"#,
        )
        .expect("schema");
        let e = keys
            .check(&json!({ names.clone(): 1 }))
            .expect_err("too costly");
        assert!(e.too_costly, "{}", e.message);

        let mut level =
            json!({"type":"object","properties":{"zz":{}},"unevaluatedProperties":false});
        for k in 0..22 {
            level = json!({"anyOf":[level, {"properties":{format!("q{k}"):{}}}], "unevaluatedProperties":false});
        }
        let refused = JsonSchema::parse(&level.to_string()).map(|s| {
            let record: serde_json::Map<_, _> =
                (0..10).map(|i| (format!("p{i}"), json!(1))).collect();
            s.check(&Value::Object(record)).map_err(|e| e.too_costly)
        });
        assert!(
            matches!(refused, Err(_) | Ok(Err(true))),
            "compiled and checked: {refused:?}"
        );
        // A chain hidden under a data keyword is not taken; a property named `default` is.
        let hidden = r##"{"default":{"a0":{"anyOf":[{"$ref":"#/default/a1"}]},"a1":{}},"items":{"anyOf":[{"$ref":"#/default/a0"}],"unevaluatedProperties":false}}"##;
        let e = JsonSchema::parse(hidden).expect_err("refused");
        assert!(e.contains("holds data"), "{e}");
        let named = r##"{"properties":{"default":{"type":"string"}},"items":{"$ref":"#/properties/default"}}"##;
        assert!(JsonSchema::parse(named).is_ok());
        let shallow = JsonSchema::parse(
            r#"{"anyOf":[{"properties":{"a":{}}}],"unevaluatedProperties":false}"#,
        )
        .expect("schema");
        assert!(shallow.check(&json!({"a": 1})).is_ok());
    }
}

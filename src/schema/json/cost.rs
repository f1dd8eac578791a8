//! The JSON Schema cost model's measures of data: how big a value is for the work bound, what
//! an `enum` or `const` costs per value it checks (as jsonschema really compares them), and how
//! many regexes a schema makes.

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

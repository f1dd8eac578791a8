//! Record fields' defaults, taken out of a schema's JSON before apache-avro parses it (its
//! parser would check them by rules of its own); the walk writes them where a field is absent.

use std::collections::HashMap;

use serde_json::Value;

use super::MAX_DEPTH;

/// Takes every record field's `default` out of a schema's JSON, keyed by the record's full
/// name (as the specification resolves it: a dotted name is full, else the record's own
/// `namespace` or the enclosing one) and the field's name.
pub(super) fn take_defaults(
    schema: &mut Value,
    namespace: Option<&str>,
    out: &mut HashMap<(String, String), Value>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    match schema {
        Value::Array(branches) => {
            for b in branches {
                take_defaults(b, namespace, out, depth + 1);
            }
        }
        Value::Object(o) => {
            let named = matches!(
                o.get("type").and_then(Value::as_str),
                Some("record" | "error" | "enum" | "fixed")
            );
            let mut inner = namespace.map(str::to_string);
            let mut full = None;
            if named {
                if let Some(name) = o.get("name").and_then(Value::as_str) {
                    // A leading dot names the null namespace: apache-avro drops it.
                    let f = if let Some(bare) = name.strip_prefix('.') {
                        bare.to_string()
                    } else if name.contains('.') {
                        name.to_string()
                    } else {
                        match o.get("namespace").and_then(Value::as_str).or(namespace) {
                            Some(ns) if !ns.is_empty() => format!("{ns}.{name}"),
                            _ => name.to_string(),
                        }
                    };
                    inner = f.rsplit_once('.').map(|(ns, _)| ns.to_string());
                    full = Some(f);
                }
            }
            if let (Some(full), Some(Value::Array(fields))) = (&full, o.get_mut("fields")) {
                for field in fields {
                    let Value::Object(f) = field else { continue };
                    let name = f.get("name").and_then(Value::as_str).map(str::to_string);
                    if let (Some(name), Some(default)) = (name, f.remove("default")) {
                        out.insert((full.clone(), name), default);
                    }
                    if let Some(t) = f.get_mut("type") {
                        take_defaults(t, inner.as_deref(), out, depth + 1);
                    }
                }
            }
            for key in ["items", "values"] {
                if let Some(t) = o.get_mut(key) {
                    take_defaults(t, inner.as_deref(), out, depth + 1);
                }
            }
            if let Some(t) = o.get_mut("type").filter(|t| !t.is_string()) {
                take_defaults(t, inner.as_deref(), out, depth + 1);
            }
        }
        _ => {}
    }
}

//! An Avro schema's names, bounded (see [`crate::schema::names`]) on its JSON before anything
//! else reads it: apache-avro and the defaults' walk build every named type's full name, a
//! copy of its namespace, so a long namespace costs once per named type. Full names are
//! resolved as the specification says (a dotted name is full; else the type's own
//! `namespace`, or the enclosing one), by their extents alone: nothing is copied.

use serde_json::Value;

use super::MAX_DEPTH;
use crate::schema::compiled::MAX_AVRO_ALIASES;
use crate::schema::names::Extent;
use crate::schema::pointer::Pointer;

const PRIMITIVES: [&str; 8] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

/// Whether every name in `schema` is within the bounds, and its aliases at most
/// [`MAX_AVRO_ALIASES`], or where the first is not.
pub(super) fn within_bounds(schema: &Value) -> Result<(), String> {
    let n = aliases(schema, 0);
    if n > MAX_AVRO_ALIASES {
        return Err(format!(
            "the schema names {n} aliases; at most {MAX_AVRO_ALIASES}"
        ));
    }
    let copies = alias_copies(schema, 0);
    if copies > MAX_ALIAS_COPIES {
        return Err(format!(
            "the schema's aliases would copy its named types {copies} JSON nodes over (each alias copies the whole type it names); at most {MAX_ALIAS_COPIES}: name fewer aliases, or alias smaller types"
        ));
    }
    Walk::default().schema(schema, Extent::default(), 0)
}

/// Most JSON nodes the aliases of a schema's named types may copy in all: apache-avro keeps a
/// copy of a named type for each of its aliases, so 256 aliases on a record of 10,000 fields
/// (300 KB) took 1 GB (measured with the heap counter; ~130 bytes a node copied). A real
/// schema's few aliases on a few hundred fields copy a few thousand.
const MAX_ALIAS_COPIES: u64 = 256 * 1024;

/// The JSON nodes the named types' aliases copy: for each named type, its aliases times the
/// nodes of its JSON (fields, nested types and all).
fn alias_copies(v: &Value, depth: usize) -> u64 {
    match v {
        _ if depth > MAX_DEPTH => 0,
        Value::Array(items) => items.iter().map(|i| alias_copies(i, depth + 1)).sum(),
        Value::Object(o) => {
            let named = o
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(is_named_kind);
            let own = match o.get("aliases") {
                Some(Value::Array(a)) if named && !a.is_empty() => {
                    (a.len() as u64).saturating_mul(nodes(v, depth))
                }
                _ => 0,
            };
            o.values()
                .map(|v| alias_copies(v, depth + 1))
                .fold(own, u64::saturating_add)
        }
        _ => 0,
    }
}

/// JSON nodes in `v`, itself included.
fn nodes(v: &Value, depth: usize) -> u64 {
    1 + match v {
        _ if depth > MAX_DEPTH => 0,
        Value::Array(items) => items.iter().map(|i| nodes(i, depth + 1)).sum(),
        Value::Object(o) => o.values().map(|v| nodes(v, depth + 1)).sum(),
        _ => 0,
    }
}

/// Aliases named anywhere in the schema, wherever apache-avro might read them: counted on the
/// parsed JSON, so `"\u0061liases"` is `aliases` too (a review of #37 passed 2,000 aliases,
/// 1.9 GiB, past a count of the text's literal key).
fn aliases(v: &Value, depth: usize) -> usize {
    match v {
        _ if depth > MAX_DEPTH => 0,
        Value::Array(items) => items.iter().map(|i| aliases(i, depth + 1)).sum(),
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| match (k.as_str(), v) {
                ("aliases", Value::Array(a)) => a.len(),
                _ => aliases(v, depth + 1),
            })
            .sum(),
        _ => 0,
    }
}

#[derive(Default)]
struct Walk {
    at: Pointer,
}

impl Walk {
    fn schema(&mut self, schema: &Value, namespace: Extent, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Ok(());
        }
        match schema {
            Value::String(reference) => self.reference(reference, namespace),
            Value::Array(branches) => {
                for (i, b) in branches.iter().enumerate() {
                    self.at.push_index(i);
                    self.schema(b, namespace, depth + 1)?;
                    self.at.pop();
                }
                Ok(())
            }
            Value::Object(o) => {
                let inner = self.named(o, namespace)?;
                if let Some(Value::Array(fields)) = o.get("fields") {
                    self.at.push("fields");
                    for (i, field) in fields.iter().enumerate() {
                        self.at.push_index(i);
                        if let Some(name) = field.get("name").and_then(Value::as_str) {
                            Extent::of(name).within(self.place("name"), name)?;
                        }
                        self.aliases(field.get("aliases"), Extent::default())?;
                        if let Some(t) = field.get("type") {
                            self.at.push("type");
                            self.schema(t, inner, depth + 1)?;
                            self.at.pop();
                        }
                        self.at.pop();
                    }
                    self.at.pop();
                }
                if let Some(Value::Array(symbols)) = o.get("symbols") {
                    for s in symbols.iter().filter_map(Value::as_str) {
                        Extent::of(s).within(self.place("symbols"), s)?;
                    }
                }
                for key in ["items", "values"] {
                    if let Some(t) = o.get(key) {
                        self.at.push(key);
                        self.schema(t, inner, depth + 1)?;
                        self.at.pop();
                    }
                }
                match o.get("type") {
                    Some(Value::String(t)) if !is_named_kind(t) => self.reference(t, inner),
                    Some(t @ (Value::Object(_) | Value::Array(_))) => {
                        self.at.push("type");
                        self.schema(t, inner, depth + 1)?;
                        self.at.pop();
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// A named type's full name, checked, and the namespace it gives the types inside it.
    fn named(
        &self,
        o: &serde_json::Map<String, Value>,
        namespace: Extent,
    ) -> Result<Extent, String> {
        let kind = o.get("type").and_then(Value::as_str);
        if !kind.is_some_and(is_named_kind) {
            return Ok(namespace);
        }
        let own = o.get("namespace").and_then(Value::as_str);
        if let Some(ns) = own {
            Extent::of(ns).within(self.place("namespace"), ns)?;
        }
        let Some(name) = o.get("name").and_then(Value::as_str) else {
            return Ok(namespace);
        };
        let (scope, inner) = match name.strip_prefix('.').unwrap_or(name).rsplit_once('.') {
            // A dotted name is full: its namespace is what comes before its last dot.
            Some((ns, _)) => (Extent::default(), Extent::of(ns)),
            None => {
                let ns = own.map_or(namespace, Extent::of);
                (ns, ns)
            }
        };
        scope.join(name).within(self.place("name"), name)?;
        self.aliases(o.get("aliases"), scope).map(|()| inner)
    }

    /// A named type's aliases (resolved in its namespace unless dotted: a dotted alias is a
    /// full name, as the specification says) or a field's (in none).
    fn aliases(&self, aliases: Option<&Value>, namespace: Extent) -> Result<(), String> {
        if let Some(Value::Array(aliases)) = aliases {
            for a in aliases.iter().filter_map(Value::as_str) {
                let full = if a.contains('.') {
                    Extent::of(a)
                } else {
                    namespace.join(a)
                };
                full.within(self.place("aliases"), a)?;
            }
        }
        Ok(())
    }

    /// A type named by reference, resolved in the enclosing namespace unless dotted.
    fn reference(&self, name: &str, namespace: Extent) -> Result<(), String> {
        if PRIMITIVES.contains(&name) {
            return Ok(());
        }
        let full = if name.contains('.') {
            Extent::of(name)
        } else {
            namespace.join(name)
        };
        full.within(self.place(""), name).map(drop)
    }

    /// Where a name stands, written only if it is refused.
    fn place<'w>(&'w self, key: &'w str) -> Place<'w> {
        Place { at: &self.at, key }
    }
}

struct Place<'w> {
    at: &'w Pointer,
    key: &'w str,
}

impl std::fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.key {
            "" => write!(f, "the type named at {}", self.at),
            key => write!(f, "the {key} at {}/{key}", self.at),
        }
    }
}

fn is_named_kind(kind: &str) -> bool {
    matches!(kind, "record" | "error" | "enum" | "fixed")
}

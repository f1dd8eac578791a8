//! JSON to Avro binary, walking the schema: each value is checked against its schema where it
//! stands, so an error names the field by its JSON pointer, and the datum is written in the
//! same pass (no intermediate value tree).
//!
//! The JSON is Avro's JSON encoding, as Confluent's REST Proxy takes it: a union value is
//! `{"<branch>": value}` (or `null`); bytes and fixed are strings of code points 0–255. A bare
//! union value is taken too when exactly one branch accepts it, which is what most producers
//! mean. apache-avro parses the schema (names, namespaces, logical types); the encoding is the
//! specification's and small enough to own.

use std::collections::HashMap;

use apache_avro::schema::{Name, Namespace, RecordSchema, Schema, UnionSchema};
use serde_json::Value;

use super::pointer::Pointer;
use super::Mismatch;

/// A parsed Avro schema with every named type it defines, for references.
#[derive(Debug)]
pub struct AvroSchema {
    root: Schema,
    names: HashMap<Name, Schema>,
    /// Record fields' defaults by (record full name, field name). Taken out of the schema
    /// before apache-avro parses it: apache-avro checks a default by resolving it, which
    /// expands a record default's own defaults recursively (a 4.5 KB schema took 10 s and
    /// 1.5 GB); our walk uses them, bounded by the datum's limit.
    defaults: HashMap<(String, String), Value>,
    /// Each enum's symbols by name, so a symbol is found without a search.
    enums: HashMap<Name, HashMap<String, usize>>,
    /// The full name of the top-level named type, if it is one (RECORD_NAME strategy).
    pub record_name: Option<String>,
}

/// Deepest nesting followed through a schema: a recursive schema meeting a deeply nested value
/// must not exhaust the stack (the body decoder already bounds JSON depth; this bounds the walk).
const MAX_DEPTH: usize = 160;

impl AvroSchema {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let mut defaults = HashMap::new();
        take_defaults(&mut json, None, &mut defaults, 0);
        let root = Schema::parse(&json).map_err(|e| e.to_string())?;
        let names: HashMap<Name, Schema> = apache_avro::schema::ResolvedSchema::try_from(&root)
            .map_err(|e| e.to_string())?
            .get_names()
            .iter()
            .map(|(n, s)| (n.clone(), (*s).clone()))
            .collect();
        let record_name = match &root {
            Schema::Record(r) => Some(r.name.fullname(None)),
            Schema::Enum(e) => Some(e.name.fullname(None)),
            Schema::Fixed(f) => Some(f.name.fullname(None)),
            _ => None,
        };
        let enums = names
            .iter()
            .filter_map(|(name, schema)| match schema {
                Schema::Enum(e) => Some((
                    name.clone(),
                    e.symbols
                        .iter()
                        .enumerate()
                        .map(|(i, s)| (s.clone(), i))
                        .collect(),
                )),
                _ => None,
            })
            .collect();
        Ok(Self {
            root,
            names,
            defaults,
            enums,
            record_name,
        })
    }

    /// The Avro binary datum of `value`, at most `limit` bytes, or where and why it does not
    /// fit the schema (or the limit: a schema's defaults can make a small JSON value large, so
    /// the walk stops as soon as the datum passes the limit, before it is built).
    ///
    /// The walk also takes at most `steps` steps (a value or default visited is one): items
    /// that write nothing (nulls, empty records) do not grow the datum, but visiting millions
    /// of them from a schema's defaults would still be unbounded work.
    pub fn encode(&self, value: &Value, limit: usize, steps: u64) -> Result<Vec<u8>, Mismatch> {
        let mut out = Vec::with_capacity(64);
        let mut at = Pointer::default();
        Walk {
            names: &self.names,
            defaults: &self.defaults,
            enums: &self.enums,
            out: &mut out,
            limit,
            steps,
        }
        .value(&self.root, value, &mut at, &None, 0)?;
        if out.len() > limit {
            return Err(too_large(&Pointer::default(), limit));
        }
        Ok(out)
    }
}

struct Walk<'s, 'o> {
    names: &'s HashMap<Name, Schema>,
    defaults: &'s HashMap<(String, String), Value>,
    enums: &'s HashMap<Name, HashMap<String, usize>>,
    out: &'o mut Vec<u8>,
    /// The most bytes the datum may take.
    limit: usize,
    /// Steps left.
    steps: u64,
}

fn too_large(at: &Pointer, limit: usize) -> Mismatch {
    mismatch(
        at,
        format!("the value is larger than {limit} bytes in its schema (its defaults included)"),
    )
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn mismatch(at: &Pointer, message: String) -> Mismatch {
    Mismatch {
        pointer: at.to_string(),
        message,
    }
}

fn expected(at: &Pointer, what: &str, found: &Value) -> Mismatch {
    mismatch(at, format!("expected {what}, found {}", kind(found)))
}

impl Walk<'_, '_> {
    /// Takes `n` steps from the budget: a value visited is one, a search through a large
    /// enum or union costs in proportion (their names are compared one by one).
    fn charge(&mut self, n: u64, at: &Pointer) -> Result<(), Mismatch> {
        match self.steps.checked_sub(n) {
            Some(left) => {
                self.steps = left;
                Ok(())
            }
            None => Err(mismatch(
                at,
                "the value takes too many steps to write in its schema (its defaults included)"
                    .into(),
            )),
        }
    }

    fn long(&mut self, n: i64) {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        while z >= 0x80 {
            self.out.push((z as u8 & 0x7f) | 0x80);
            z >>= 7;
        }
        self.out.push(z as u8);
    }

    fn bytes(&mut self, b: &[u8]) {
        self.long(b.len() as i64);
        self.out.extend_from_slice(b);
    }

    fn value(
        &mut self,
        schema: &Schema,
        v: &Value,
        at: &mut Pointer,
        ns: &Namespace,
        depth: usize,
    ) -> Result<(), Mismatch> {
        if depth > MAX_DEPTH {
            return Err(mismatch(at, "nested too deeply for the schema".into()));
        }
        // Every value writes at most its own bytes before the next check: the datum never
        // grows far past the limit.
        if self.out.len() > self.limit {
            return Err(too_large(at, self.limit));
        }
        self.charge(1, at)?;
        match schema {
            Schema::Null => match v {
                Value::Null => Ok(()),
                _ => Err(expected(at, "null", v)),
            },
            Schema::Boolean => match v {
                Value::Bool(b) => {
                    self.out.push(u8::from(*b));
                    Ok(())
                }
                _ => Err(expected(at, "a boolean", v)),
            },
            Schema::Int | Schema::Date | Schema::TimeMillis => {
                let n = integer(v, at)?;
                let n = i32::try_from(n)
                    .map_err(|_| mismatch(at, format!("{n} is out of range for an Avro int")))?;
                self.long(i64::from(n));
                Ok(())
            }
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => {
                let n = integer(v, at)?;
                self.long(n);
                Ok(())
            }
            Schema::Float => {
                let f = number(v, at)?;
                self.out.extend_from_slice(&(f as f32).to_le_bytes());
                Ok(())
            }
            Schema::Double => {
                let f = number(v, at)?;
                self.out.extend_from_slice(&f.to_le_bytes());
                Ok(())
            }
            Schema::String | Schema::Uuid => match v {
                Value::String(s) => {
                    self.bytes(s.as_bytes());
                    Ok(())
                }
                _ => Err(expected(at, "a string", v)),
            },
            Schema::Bytes | Schema::BigDecimal => {
                let b = latin1(v, at)?;
                self.bytes(&b);
                Ok(())
            }
            Schema::Decimal(d) => self.value(&d.inner, v, at, ns, depth + 1),
            Schema::Fixed(f) => {
                let b = latin1(v, at)?;
                if b.len() != f.size {
                    return Err(mismatch(
                        at,
                        format!(
                            "expected {} bytes (fixed {}), found {}",
                            f.size,
                            f.name.name,
                            b.len()
                        ),
                    ));
                }
                self.out.extend_from_slice(&b);
                Ok(())
            }
            Schema::Duration => {
                let b = latin1(v, at)?;
                if b.len() != 12 {
                    return Err(mismatch(
                        at,
                        format!("expected 12 bytes (duration), found {}", b.len()),
                    ));
                }
                self.out.extend_from_slice(&b);
                Ok(())
            }
            Schema::Enum(e) => {
                let Value::String(s) = v else {
                    return Err(expected(at, "an enum symbol (a string)", v));
                };
                let i = match self.enums.get(&e.name).and_then(|m| m.get(s.as_str())) {
                    Some(i) => Some(*i),
                    None => {
                        self.charge(e.symbols.len() as u64 / 8, at)?;
                        e.symbols.iter().position(|sym| sym == s)
                    }
                };
                let Some(i) = i else {
                    return Err(mismatch(
                        at,
                        format!(
                            "{s:?} is not a symbol of enum {} ({})",
                            e.name.name,
                            e.symbols.join(", ")
                        ),
                    ));
                };
                self.long(i as i64);
                Ok(())
            }
            Schema::Array(a) => {
                let Value::Array(items) = v else {
                    return Err(expected(at, "an array", v));
                };
                if !items.is_empty() {
                    self.long(items.len() as i64);
                    for (i, item) in items.iter().enumerate() {
                        at.push_index(i);
                        self.value(&a.items, item, at, ns, depth + 1)?;
                        at.pop();
                    }
                }
                self.long(0);
                Ok(())
            }
            Schema::Map(m) => {
                let Value::Object(entries) = v else {
                    return Err(expected(at, "an object (an Avro map)", v));
                };
                if !entries.is_empty() {
                    self.long(entries.len() as i64);
                    for (k, item) in entries {
                        self.bytes(k.as_bytes());
                        at.push(k);
                        self.value(&m.types, item, at, ns, depth + 1)?;
                        at.pop();
                    }
                }
                self.long(0);
                Ok(())
            }
            Schema::Union(u) => self.union(u, v, at, ns, depth),
            Schema::Record(r) => self.record(r, v, at, depth),
            Schema::Ref { name } => {
                let full = name.fully_qualified_name(ns);
                let Some(target) = self.names.get(&full).or_else(|| self.names.get(name)) else {
                    return Err(mismatch(
                        at,
                        format!("the schema names an unknown type {}", name.name),
                    ));
                };
                self.value(target, v, at, ns, depth + 1)
            }
        }
    }

    fn record(
        &mut self,
        r: &RecordSchema,
        v: &Value,
        at: &mut Pointer,
        depth: usize,
    ) -> Result<(), Mismatch> {
        let Value::Object(fields) = v else {
            return Err(expected(
                at,
                &format!("an object (record {})", r.name.name),
                v,
            ));
        };
        if let Some(extra) = fields.keys().find(|k| !r.lookup.contains_key(k.as_str())) {
            at.push(extra);
            return Err(mismatch(
                at,
                format!("record {} has no field {extra:?}", r.name.name),
            ));
        }
        let ns = r.name.namespace.clone();
        for field in &r.fields {
            at.push(&field.name);
            let default = || {
                self.defaults
                    .get(&(r.name.fullname(None), field.name.clone()))
                    .or(field.default.as_ref())
            };
            match fields.get(&field.name) {
                Some(value) => self.value(&field.schema, value, at, &ns, depth + 1)?,
                None => match default() {
                    // A union's default is its first branch's value (the specification's rule),
                    // never a branch named or guessed.
                    Some(default) => match &field.schema {
                        Schema::Union(u) => match u.variants().first() {
                            Some(first) => {
                                self.long(0);
                                self.value(first, default, at, &ns, depth + 1)?;
                            }
                            None => return Err(mismatch(at, "an empty union has no value".into())),
                        },
                        schema => self.value(schema, default, at, &ns, depth + 1)?,
                    },
                    None => return Err(mismatch(at, "a required field is missing".into())),
                },
            }
            at.pop();
        }
        Ok(())
    }

    fn union(
        &mut self,
        u: &UnionSchema,
        v: &Value,
        at: &mut Pointer,
        ns: &Namespace,
        depth: usize,
    ) -> Result<(), Mismatch> {
        let branches = u.variants();
        // Branches are matched by name or kind one by one.
        self.charge(branches.len() as u64, at)?;
        if v.is_null() {
            if let Some(i) = branches.iter().position(|b| matches!(b, Schema::Null)) {
                self.long(i as i64);
                return Ok(());
            }
            return Err(mismatch(at, "null is not a branch of the union".into()));
        }
        // Avro's JSON encoding: {"<branch name>": value}.
        if let Value::Object(o) = v {
            if o.len() == 1 {
                if let Some((name, inner)) = o.iter().next() {
                    if let Some(i) = branches.iter().position(|b| branch_name(b, ns) == *name) {
                        self.long(i as i64);
                        at.push(name);
                        self.value(&branches[i], inner, at, ns, depth + 1)?;
                        at.pop();
                        return Ok(());
                    }
                }
            }
        }
        // A bare value: the one branch its JSON kind can be, chosen without trying branches
        // (a trial per branch is exponential in nesting).
        let candidates: Vec<usize> = branches
            .iter()
            .enumerate()
            .filter(|(_, b)| self.kind_fits(b, v, ns))
            .map(|(i, _)| i)
            .collect();
        let i = match candidates.as_slice() {
            [i] => *i,
            [] => {
                let names: Vec<String> = branches.iter().map(|b| branch_name(b, ns)).collect();
                return Err(mismatch(
                    at,
                    format!("{} fits no branch of the union ({})", kind(v), names.join(", ")),
                ));
            }
            _ => {
                return Err(mismatch(
                    at,
                    "the value could be more than one branch of the union; name it as {\"<type>\": value}".into(),
                ))
            }
        };
        self.long(i as i64);
        self.value(&branches[i], v, at, ns, depth + 1)
    }

    fn has_symbol(&self, e: &apache_avro::schema::EnumSchema, s: &str) -> bool {
        match self.enums.get(&e.name) {
            Some(m) => m.contains_key(s),
            None => e.symbols.iter().any(|sym| sym == s),
        }
    }

    /// Whether `v`'s JSON kind is one `schema` takes (no deeper look, except an enum's
    /// symbol and a fixed's length).
    fn kind_fits(&self, schema: &Schema, v: &Value, ns: &Namespace) -> bool {
        match (schema, v) {
            (Schema::Null, Value::Null) | (Schema::Boolean, Value::Bool(_)) => true,
            (Schema::Int | Schema::Date | Schema::TimeMillis, Value::Number(n)) => {
                n.as_i64().is_some_and(|n| i32::try_from(n).is_ok())
            }
            (
                Schema::Long
                | Schema::TimeMicros
                | Schema::TimestampMillis
                | Schema::TimestampMicros
                | Schema::TimestampNanos
                | Schema::LocalTimestampMillis
                | Schema::LocalTimestampMicros
                | Schema::LocalTimestampNanos,
                Value::Number(n),
            ) => n.as_i64().is_some(),
            (Schema::Float | Schema::Double, Value::Number(_)) => true,
            (
                Schema::String | Schema::Uuid | Schema::Bytes | Schema::BigDecimal,
                Value::String(_),
            ) => true,
            (Schema::Enum(e), Value::String(s)) => self.has_symbol(e, s),
            (Schema::Fixed(f), Value::String(s)) => s.chars().count() == f.size,
            (Schema::Duration, Value::String(s)) => s.chars().count() == 12,
            (Schema::Decimal(d), _) => self.kind_fits(&d.inner, v, ns),
            (Schema::Array(_), Value::Array(_)) => true,
            (Schema::Map(_) | Schema::Record(_), Value::Object(_)) => true,
            (Schema::Ref { name }, _) => {
                let full = name.fully_qualified_name(ns);
                match self.names.get(&full).or_else(|| self.names.get(name)) {
                    // A named type's kind needs no walk: records are objects, enums and fixed
                    // are strings (checked above once resolved).
                    Some(Schema::Record(_)) => v.is_object(),
                    Some(Schema::Enum(e)) => v.as_str().is_some_and(|s| self.has_symbol(e, s)),
                    Some(Schema::Fixed(f)) => {
                        v.as_str().is_some_and(|s| s.chars().count() == f.size)
                    }
                    _ => false,
                }
            }
            _ => false,
        }
    }
}

/// Takes every record field's `default` out of a schema's JSON, keyed by the record's full
/// name (as the specification resolves it: a dotted name is full, else the record's own
/// `namespace` or the enclosing one) and the field's name.
fn take_defaults(
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

/// A union branch's name in Avro's JSON encoding: the type name, or a named type's full name.
fn branch_name(schema: &Schema, ns: &Namespace) -> String {
    match schema {
        Schema::Null => "null".into(),
        Schema::Boolean => "boolean".into(),
        Schema::Int | Schema::Date | Schema::TimeMillis => "int".into(),
        Schema::Long
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => "long".into(),
        Schema::Float => "float".into(),
        Schema::Double => "double".into(),
        Schema::Bytes | Schema::BigDecimal => "bytes".into(),
        Schema::String | Schema::Uuid => "string".into(),
        Schema::Array(_) => "array".into(),
        Schema::Map(_) => "map".into(),
        Schema::Record(r) => r.name.fullname(ns.clone()),
        Schema::Enum(e) => e.name.fullname(ns.clone()),
        Schema::Fixed(f) => f.name.fullname(ns.clone()),
        Schema::Decimal(d) => branch_name(&d.inner, ns),
        Schema::Duration => "fixed".into(),
        Schema::Ref { name } => name.fullname(ns.clone()),
        Schema::Union(_) => "union".into(),
    }
}

fn integer(v: &Value, at: &Pointer) -> Result<i64, Mismatch> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| mismatch(at, format!("expected an integer, found {n}"))),
        _ => Err(expected(at, "an integer", v)),
    }
}

fn number(v: &Value, at: &Pointer) -> Result<f64, Mismatch> {
    match v {
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| mismatch(at, format!("{n} is not a number Avro can hold"))),
        _ => Err(expected(at, "a number", v)),
    }
}

/// Avro's JSON encoding of bytes: a string whose code points 0–255 are the bytes.
fn latin1(v: &Value, at: &Pointer) -> Result<Vec<u8>, Mismatch> {
    let Value::String(s) = v else {
        return Err(expected(at, "a string of bytes (code points 0-255)", v));
    };
    s.chars()
        .map(|c| u8::try_from(u32::from(c)))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| {
            mismatch(
                at,
                "bytes are code points 0-255 (Avro's JSON encoding)".into(),
            )
        })
}

#[cfg(test)]
mod tests;

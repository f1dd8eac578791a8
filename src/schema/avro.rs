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
use std::time::{Duration, Instant};

use apache_avro::schema::{EnumSchema, Name, Namespace, RecordSchema, Schema};
use serde_json::Value;

use super::pointer::Pointer;
use super::thread_cpu::thread_cpu;
use super::Mismatch;

mod blocks;
mod defaults;
mod names;
mod union;
mod values;
use defaults::take_defaults;
use values::{expected, integer, latin1, mismatch, number, too_large};

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
    /// Steps a value visited costs: 1, and 1 more per [`NAME_BYTES_PER_STEP`] bytes of the
    /// schema's longest name. A visit copies or hashes a name (a reference resolved in its
    /// namespace, a default looked up by its record's full name, a field's name on the
    /// pointer), so with a 255 KB namespace one small item cost ~23 copies of it, counted as
    /// ~3 steps: 28 s of CPU for a 60 KB value.
    step_cost: u64,
}

/// A visit costs one more step per this many bytes of the schema's longest name.
const NAME_BYTES_PER_STEP: usize = 32;
/// Why a walk that ran out of steps stopped.
const TOO_MANY_STEPS: &str =
    "the value takes too many steps to write in its schema (its defaults included)";
/// The walk reads the clock every this many steps (a backstop: the step budget is the bound).
const CLOCK_EVERY: u32 = 4096;

/// Deepest nesting followed through a schema: a recursive schema meeting a deeply nested value
/// must not exhaust the stack (the body decoder already bounds JSON depth; this bounds the walk).
const MAX_DEPTH: usize = 160;

impl AvroSchema {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        names::within_bounds(&json)?;
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
        // At most `MAX_NAME_BYTES`: the names were bounded before the parse.
        let longest = longest_name(&names);
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
            step_cost: 1 + (longest / NAME_BYTES_PER_STEP) as u64,
        })
    }

    /// The Avro binary datum of `value`, at most `limit` bytes, or where and why it does not
    /// fit the schema (or the limit: a schema's defaults can make a small JSON value large, so
    /// the walk stops as soon as the datum passes the limit, before it is built).
    ///
    /// The walk also takes at most `steps` steps (a value or default visited is one): items
    /// that write nothing (nulls, empty records) do not grow the datum, but visiting millions
    /// of them from a schema's defaults would still be unbounded work.
    ///
    /// Past `deadline` the walk stops too (read every few thousand steps): a backstop for
    /// anything the step count misses, so the check's CPU bound holds while it runs.
    pub fn encode(
        &self,
        value: &Value,
        limit: usize,
        steps: u64,
        deadline: Option<Instant>,
    ) -> Result<Vec<u8>, Mismatch> {
        let mut steps = steps;
        let until = Until {
            wall: deadline,
            cpu: None,
        };
        self.encode_counted(value, limit, &mut steps, until)
    }

    /// [`Self::encode`] taking its steps from `steps`, which holds what is left after it
    /// (0 when the walk ran out of them).
    pub fn encode_counted(
        &self,
        value: &Value,
        limit: usize,
        steps: &mut u64,
        until: Until,
    ) -> Result<Vec<u8>, Mismatch> {
        let mut out = Vec::with_capacity(64);
        let mut at = Pointer::default();
        let mut walk = Walk {
            names: &self.names,
            defaults: &self.defaults,
            enums: &self.enums,
            out: &mut out,
            limit,
            steps: *steps,
            step_cost: self.step_cost,
            until,
            clock_in: CLOCK_EVERY,
        };
        let walked = walk.value(&self.root, value, &mut at, &None, 0);
        *steps = walk.steps;
        walked?;
        if out.len() > limit {
            return Err(too_large(&Pointer::default(), limit));
        }
        Ok(out)
    }
}

/// When a walk stops, whatever its steps: past an instant, or past a CPU time of its thread
/// (the thread's clock: a walk preempted or paused is not stopped for that).
#[derive(Debug, Clone, Copy, Default)]
pub struct Until {
    pub wall: Option<Instant>,
    pub cpu: Option<Duration>,
}

impl Until {
    fn passed(&self) -> bool {
        self.wall.is_some_and(|d| Instant::now() > d)
            || self
                .cpu
                .is_some_and(|c| thread_cpu().is_some_and(|spent| spent > c))
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
    /// What one step of the walk costs, by the schema's longest name.
    step_cost: u64,
    until: Until,
    /// Steps until the clock is read again.
    clock_in: u32,
}

/// The longest name a walk copies or hashes: a named type's full name, a record's field
/// name, an enum's symbol.
fn longest_name(names: &HashMap<Name, Schema>) -> usize {
    names
        .iter()
        .map(|(name, schema)| {
            let full = name.name.len() + name.namespace.as_ref().map_or(0, |n| n.len() + 1);
            let inner = match schema {
                Schema::Record(r) => r.fields.iter().map(|f| f.name.len()).max(),
                Schema::Enum(e) => e.symbols.iter().map(String::len).max(),
                _ => None,
            };
            full.max(inner.unwrap_or(0))
        })
        .max()
        .unwrap_or(0)
}

impl Walk<'_, '_> {
    /// Takes `n` steps from the budget: a value visited is one, a search through a large
    /// enum or union costs in proportion (their names are compared one by one).
    fn charge(&mut self, n: u64, at: &Pointer) -> Result<(), Mismatch> {
        self.clock_in = self.clock_in.saturating_sub(1);
        if self.clock_in == 0 {
            self.clock_in = CLOCK_EVERY;
            if self.until.passed() {
                return Err(Mismatch {
                    too_costly: true,
                    ..mismatch(
                        at,
                        "writing the value in its schema ran past its time".into(),
                    )
                });
            }
        }
        match self.steps.checked_sub(n.saturating_mul(self.step_cost)) {
            Some(left) => {
                self.steps = left;
                Ok(())
            }
            None => {
                // Out of steps: what is left says so to the caller (an inline run's share
                // spent goes to the pool).
                self.steps = 0;
                Err(Mismatch {
                    too_costly: true,
                    ..mismatch(at, TOO_MANY_STEPS.into())
                })
            }
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

    /// Bytes of a fixed size (a `fixed` or a `duration`), written without a length.
    fn exact_bytes(
        &mut self,
        v: &Value,
        at: &Pointer,
        size: usize,
        what: &str,
    ) -> Result<(), Mismatch> {
        let b = latin1(v, at)?;
        if b.len() != size {
            return Err(mismatch(
                at,
                format!("expected {size} bytes ({what}), found {}", b.len()),
            ));
        }
        self.out.extend_from_slice(&b);
        Ok(())
    }

    /// An enum symbol, written as its index: looked up in the enum's map, or (an enum the map
    /// does not hold) searched, the search charged to the step budget.
    fn symbol(&mut self, e: &EnumSchema, v: &Value, at: &Pointer) -> Result<(), Mismatch> {
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
            Schema::Fixed(f) => self.exact_bytes(v, at, f.size, &format!("fixed {}", f.name.name)),
            Schema::Duration => self.exact_bytes(v, at, 12, "duration"),
            Schema::Enum(e) => self.symbol(e, v, at),
            Schema::Array(a) => self.array(&a.items, v, at, ns, depth),
            Schema::Map(m) => self.map(&m.types, v, at, ns, depth),
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
        let ns = &r.name.namespace;
        for field in &r.fields {
            at.push(&field.name);
            let default = || {
                self.defaults
                    .get(&(r.name.fullname(None), field.name.clone()))
                    .or(field.default.as_ref())
            };
            match fields.get(&field.name) {
                Some(value) => self.value(&field.schema, value, at, ns, depth + 1)?,
                None => match default() {
                    // A union's default is its first branch's value (the specification's rule),
                    // never a branch named or guessed.
                    Some(default) => match &field.schema {
                        Schema::Union(u) => match u.variants().first() {
                            Some(first) => {
                                self.long(0);
                                self.value(first, default, at, ns, depth + 1)?;
                            }
                            None => return Err(mismatch(at, "an empty union has no value".into())),
                        },
                        schema => self.value(schema, default, at, ns, depth + 1)?,
                    },
                    None => return Err(mismatch(at, "a required field is missing".into())),
                },
            }
            at.pop();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

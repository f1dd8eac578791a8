//! A union's value: the branch it names (`{"<branch>": value}`), or the one branch its JSON
//! kind can be.

use serde_json::Value;

use apache_avro::schema::{Namespace, Schema, UnionSchema};

use super::values::{branch_name, kind, mismatch};
use super::{Pointer, Walk, NAME_BYTES_PER_STEP};
use crate::schema::Mismatch;

impl Walk<'_, '_> {
    pub(super) fn union(
        &mut self,
        u: &UnionSchema,
        v: &Value,
        at: &mut Pointer,
        ns: &Namespace,
        depth: usize,
    ) -> Result<(), Mismatch> {
        let branches = u.variants();
        // Branches are matched by name or kind one by one (a fixed's by its string's length).
        let per_branch = v
            .as_str()
            .map_or(1, |s| 1 + (s.len() / NAME_BYTES_PER_STEP) as u64);
        self.charge((branches.len() as u64).saturating_mul(per_branch), at)?;
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

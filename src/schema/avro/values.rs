//! JSON values read as Avro's scalars (long, double, latin-1 bytes) and union branches named
//! as Avro's JSON encoding names them.

use apache_avro::schema::{Namespace, Schema};
use serde_json::Value;

use super::super::pointer::Pointer;
use super::super::Mismatch;
/// A union branch's name in Avro's JSON encoding: the type name, or a named type's full name.
pub(super) fn branch_name(schema: &Schema, ns: &Namespace) -> String {
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

pub(super) fn integer(v: &Value, at: &Pointer) -> Result<i64, Mismatch> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| mismatch(at, format!("expected an integer, found {n}"))),
        _ => Err(expected(at, "an integer", v)),
    }
}

pub(super) fn number(v: &Value, at: &Pointer) -> Result<f64, Mismatch> {
    match v {
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| mismatch(at, format!("{n} is not a number Avro can hold"))),
        _ => Err(expected(at, "a number", v)),
    }
}

/// Avro's JSON encoding of bytes: a string whose code points 0–255 are the bytes.
pub(super) fn latin1(v: &Value, at: &Pointer) -> Result<Vec<u8>, Mismatch> {
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

pub(super) fn too_large(at: &Pointer, limit: usize) -> Mismatch {
    mismatch(
        at,
        format!("the value is larger than {limit} bytes in its schema (its defaults included)"),
    )
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(super) fn mismatch(at: &Pointer, message: String) -> Mismatch {
    Mismatch {
        too_costly: false,
        pointer: at.to_string(),
        message,
    }
}

pub(super) fn expected(at: &Pointer, what: &str, found: &Value) -> Mismatch {
    mismatch(at, format!("expected {what}, found {}", kind(found)))
}

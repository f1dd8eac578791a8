//! Avro's arrays and maps: items written in blocks, a count before them and an empty block
//! after.

use apache_avro::schema::{Namespace, Schema};
use serde_json::Value;

use super::super::pointer::Pointer;
use super::super::Mismatch;
use super::values::expected;
use super::Walk;

impl Walk<'_, '_> {
    /// An array: its items in blocks (one block, then the empty one that ends it).
    pub(super) fn array(
        &mut self,
        items_schema: &Schema,
        v: &Value,
        at: &mut Pointer,
        ns: &Namespace,
        depth: usize,
    ) -> Result<(), Mismatch> {
        let Value::Array(items) = v else {
            return Err(expected(at, "an array", v));
        };
        if !items.is_empty() {
            self.long(items.len() as i64);
            for (i, item) in items.iter().enumerate() {
                at.push_index(i);
                self.value(items_schema, item, at, ns, depth + 1)?;
                at.pop();
            }
        }
        self.long(0);
        Ok(())
    }

    /// A map: a JSON object's entries in blocks, as an array's items are.
    pub(super) fn map(
        &mut self,
        values_schema: &Schema,
        v: &Value,
        at: &mut Pointer,
        ns: &Namespace,
        depth: usize,
    ) -> Result<(), Mismatch> {
        let Value::Object(entries) = v else {
            return Err(expected(at, "an object (an Avro map)", v));
        };
        if !entries.is_empty() {
            self.long(entries.len() as i64);
            for (k, item) in entries {
                self.bytes(k.as_bytes());
                at.push(k);
                self.value(values_schema, item, at, ns, depth + 1)?;
                at.pop();
            }
        }
        self.long(0);
        Ok(())
    }
}

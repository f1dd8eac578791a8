//! JSON Schema: a record's JSON checked against the schema (jsonschema, the most complete
//! Rust validator: drafts 4 to 2020-12, errors with the instance's JSON pointer). Built
//! without its HTTP and file resolvers, so a schema's `$ref` can never make the gateway fetch
//! a URL or read a file: a remote reference is an invalid schema here.

use serde_json::Value;

use super::Mismatch;

#[derive(Debug)]
pub struct JsonSchema {
    validator: jsonschema::Validator,
    /// The schema's `title`, the record name of the RECORD_NAME strategy.
    pub record_name: Option<String>,
}

impl JsonSchema {
    pub fn parse(text: &str) -> Result<Self, String> {
        let schema: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let validator = jsonschema::validator_for(&schema).map_err(|e| e.to_string())?;
        let record_name = schema
            .get("title")
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(Self {
            validator,
            record_name,
        })
    }

    /// Whether `value` is valid; the first error, by the instance's JSON pointer, if not.
    pub fn check(&self, value: &Value) -> Result<(), Mismatch> {
        match self.validator.iter_errors(value).next() {
            None => Ok(()),
            Some(e) => Err(Mismatch {
                pointer: e.instance_path().to_string(),
                message: e.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_the_field() {
        let s = JsonSchema::parse(
            r#"{"title":"Order","type":"object","properties":{"id":{"type":"integer"},
               "lines":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"}},"required":["sku"]}}},
               "required":["id"],"additionalProperties":false}"#,
        )
        .expect("schema");
        assert!(s.check(&json!({"id": 1, "lines": [{"sku": "a"}]})).is_ok());
        assert_eq!(
            s.check(&json!({"id": "1"})).expect_err("type").pointer,
            "/id"
        );
        assert_eq!(
            s.check(&json!({"id": 1, "lines": [{"sku": 3}]}))
                .expect_err("nested")
                .pointer,
            "/lines/0/sku"
        );
        let missing = s.check(&json!({})).expect_err("required");
        assert!(missing.message.contains("id"), "{}", missing.message);
        assert!(
            s.check(&json!({"id": 1, "colour": "red"})).is_err(),
            "additionalProperties"
        );
        assert_eq!(s.record_name.as_deref(), Some("Order"));
    }

    #[test]
    fn remote_references_are_refused_not_fetched() {
        let e = JsonSchema::parse(r#"{"$ref":"http://127.0.0.1:9/x.json"}"#).expect_err("remote");
        assert!(!e.is_empty());
        assert!(JsonSchema::parse("{not json").is_err());
    }
}

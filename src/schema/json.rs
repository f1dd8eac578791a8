//! JSON Schema: a record's JSON checked against the schema (jsonschema, the most complete
//! Rust validator: drafts 4 to 2020-12, errors with the instance's JSON pointer). Built
//! without its HTTP and file resolvers, so a schema's `$ref` can never make the gateway fetch
//! a URL or read a file: a remote reference is an invalid schema here.

use serde_json::Value;

mod cost;
mod expansion;
mod pattern;

use super::{clip, CompileError, Mismatch, MAX_SCHEMA_REFS};
use cost::{
    control_escapes, has, nodes, patterns, regex_format_cost, unique_items_cost, uses,
    MAX_CONTROL_ESCAPES,
};
pub use expansion::MAX_EXPANSION;
use expansion::{expansion_within_bounds, weighted_cost};

#[derive(Debug)]
pub struct JsonSchema {
    validator: jsonschema::Validator,
    /// The subschema checks one value can cause ([`expansion_within_bounds`]).
    cost: u64,
    /// Its regexes (`pattern`, `patternProperties` keys).
    patterns: usize,
    /// Whether it uses `uniqueItems` (a value's arrays then cost more: [`unique_items_cost`]).
    unique_items: bool,
    /// Whether it uses `format: "regex"` (a string then costs its square:
    /// [`regex_format_cost`]).
    regex_format: bool,
    /// Whether it has `anyOf` or `oneOf` anywhere: the validator's first error then holds
    /// every branch's errors (see [`DETAILED_ERROR_WORK`]).
    alternatives: bool,
    /// The schema's `title`, the record name of the RECORD_NAME strategy.
    pub record_name: Option<String>,
}

/// The bounds a JSON Schema is compiled within (`[schema_registry]`).
#[derive(Debug, Clone, Copy)]
pub struct JsonBounds {
    /// Most `pattern`s and `patternProperties` keys (each is a regex compiled, and run).
    pub max_patterns: usize,
    /// Each regex's compiled size (the engine's `size_limit`): `\\w{2000}` is ~470 KB.
    pub max_pattern_bytes: usize,
}

impl Default for JsonBounds {
    fn default() -> Self {
        Self {
            max_patterns: 100,
            max_pattern_bytes: 256 * 1024,
        }
    }
}

impl JsonSchema {
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::parse_within(text, JsonBounds::default()).map_err(|e| e.to_string())
    }

    /// The subschema checks one value node can cause.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Its regexes.
    pub fn patterns(&self) -> usize {
        self.patterns
    }

    pub(super) fn parse_within(text: &str, bounds: JsonBounds) -> Result<Self, CompileError> {
        let schema: Value = serde_json::from_str(text)
            .map_err(|e| CompileError::Invalid(format!("not JSON: {e}")))?;
        let refs = cost::refs(&schema, 0);
        if refs > MAX_SCHEMA_REFS {
            return Err(CompileError::Invalid(format!(
                "the schema has {refs} $refs; at most {MAX_SCHEMA_REFS}"
            )));
        }
        expansion_within_bounds(&schema).map_err(CompileError::Invalid)?;
        let escapes = control_escapes(&schema, 0);
        if escapes > MAX_CONTROL_ESCAPES {
            return Err(CompileError::TooCostly(format!(
                "the schema has {escapes} ECMA control escapes (\\cX) in its strings; at most {MAX_CONTROL_ESCAPES} (each makes the regex translation read its whole pattern again)"
            )));
        }
        let patterns = patterns(&schema, 0);
        if patterns > bounds.max_patterns {
            return Err(CompileError::TooCostly(format!(
                "the schema has {patterns} patterns (pattern, patternProperties); at most {} ([schema_registry] max_schema_patterns)",
                bounds.max_patterns
            )));
        }
        // The linear-time regex engine: a `pattern` never backtracks (fancy-regex's did, up
        // to 15 ms of CPU per record within its limit). Each regex within a compiled size:
        // regexes are many thousand times their text.
        let validator = jsonschema::options()
            .with_pattern_options(
                jsonschema::PatternOptions::regex()
                    .size_limit(bounds.max_pattern_bytes)
                    .dfa_size_limit(DFA_CACHE_BYTES),
            )
            .build(&schema)
            .map_err(|e| {
                let e = e.to_string();
                // The validator says only that a pattern is not a regex: both reasons it may
                // have (a backreference was told only of the size, review 41-r12 of #37).
                CompileError::Invalid(if e.contains("regex") || e.contains("pattern") {
                    format!(
                        "{e} (a pattern must be one the linear-time engine takes, with no backreferences or look-around, and compile to at most {} bytes: [schema_registry] max_pattern_bytes)",
                        bounds.max_pattern_bytes
                    )
                } else {
                    e
                })
            })?;
        // After the validator compiled: a pattern it refuses is never weighed here.
        let cost = weighted_cost(&schema);
        let record_name = schema
            .get("title")
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(Self {
            validator,
            cost,
            patterns,
            unique_items: uses(&schema, "uniqueItems", &Value::Bool(true), 0),
            regex_format: uses(&schema, "format", &Value::from("regex"), 0),
            alternatives: has(&schema, "anyOf", 0) || has(&schema, "oneOf", 0),
            record_name,
        })
    }

    /// Whether `value` is valid; the first error, by the instance's JSON pointer, if not.
    pub fn check(&self, value: &Value) -> Result<(), Mismatch> {
        // `is_valid` stops at the first failing branch; the errors (which collect every
        // branch's) are asked for only to name the field of a record that is invalid.
        // The work of one check is about the schema's subschemas times the value's nodes: a
        // 14 KB schema against a 900 KB array was 29 s on a request thread.
        let mut work = self.cost.saturating_mul(nodes(value, 0));
        if self.unique_items {
            work = work.saturating_add(unique_items_cost(value, 0));
        }
        if self.regex_format {
            work = work.saturating_add(regex_format_cost(value, 0));
        }
        // Stable code: the pipeline names this bound in a 422 `schema_too_costly`.
        if work > MAX_CHECK_WORK {
            return Err(Mismatch {
                pointer: String::new(),
                message: format!(
                    "checking it would take about {work} subschema checks, more than {MAX_CHECK_WORK}: send a smaller value or a simpler schema"
                ),
                too_costly: true,
            });
        }
        if self.validator.is_valid(value) {
            return Ok(());
        }
        if self.alternatives && work > DETAILED_ERROR_WORK {
            return Err(Mismatch {
                pointer: String::new(),
                message: format!(
                    "the value does not fit the schema (none of an anyOf's branches, or not exactly one of a oneOf's, fits somewhere in it); the field is named for values of at most {DETAILED_ERROR_WORK} subschema checks under anyOf/oneOf, and this one is about {work}"
                ),
                too_costly: false,
            });
        }
        // `validate` stops at the first error; `iter_errors` collects every failing check
        // before the first is read (one per check and element: gigabytes for a few KB).
        match self.validator.validate(value) {
            Ok(()) => Ok(()),
            Err(e) => Err(Mismatch {
                pointer: e.instance_path().to_string(),
                message: quoted_briefly(&e.to_string(), e.instance()),
                too_costly: false,
            }),
        }
    }
}

/// An error's message with the value it quotes cut to [`super::MAX_QUOTE`] bytes (a
/// `type` error quoted the whole 800 KB string).
fn quoted_briefly(message: &str, instance: &Value) -> String {
    if message.len() <= super::MAX_QUOTE {
        return message.to_string();
    }
    let quoted = instance.to_string();
    if quoted.len() > super::MAX_QUOTE && message.contains(&quoted) {
        let short = format!(
            "{}… ({} bytes)",
            clip(&quoted, super::MAX_QUOTE),
            quoted.len()
        );
        return message.replacen(&quoted, &short, 1);
    }
    message.to_string()
}

/// Each regex's lazy-DFA cache, per schema thread that runs it (the engine's
/// `dfa_size_limit`; its default, 2 MiB, let three refused 4 KB requests with 100 patterns
/// each raise RSS by 340 MiB). Past it the engine falls back to its NFA simulation, which the
/// cost model counts ([`pattern::pattern_cost`]).
const DFA_CACHE_BYTES: usize = 64 * 1024;

/// Most work one value's check may take: subschema checks times the value's nodes.
pub const MAX_CHECK_WORK: u64 = 20_000_000;

/// Most work of an invalid value whose first error is asked for when the schema has `anyOf`
/// or `oneOf`: that error holds every error of every branch (the validator collects them),
/// about one per subschema check, ~335 bytes each. An 800 KB array against a four-branch
/// `anyOf` took 540 MB and 0.6 s for its one error. Past this the record is refused without
/// the field's name: at most ~7 MB per check.
const DETAILED_ERROR_WORK: u64 = 20_000;

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

    #[test]
    fn schemas_whose_checks_branch_exponentially_are_refused() {
        // anyOf [a(i+1), a(i+1)] 23 deep: 2^23 checks of one value from 1.7 KB.
        let mut defs = serde_json::Map::new();
        for i in 0..23 {
            let next = format!("#/$defs/a{}", i + 1);
            defs.insert(
                format!("a{i}"),
                json!({"anyOf": [{"$ref": next}, {"$ref": next}]}),
            );
        }
        defs.insert("a23".into(), json!({"type": "integer"}));
        let dag = json!({"$ref": "#/$defs/a0", "$defs": defs});
        let e = JsonSchema::parse(&dag.to_string()).expect_err("exponential");
        assert!(e.contains("subschema checks"), "{e}");
        // Recursion through two branches of one anyOf doubles at every level of the data.
        let doubling = json!({"anyOf": [{"type": "array", "items": {"$ref": "#"}},
                                        {"type": "array", "items": {"$ref": "#"}}]});
        let e = JsonSchema::parse(&doubling.to_string()).expect_err("doubling");
        assert!(e.contains("check the same value"), "{e}");
        // The same through allOf beside anyOf, and through refs the analysis would not follow.
        let two_keywords = json!({"$defs": {"n": {"type": ["array", "integer"], "items": {"$ref": "#"}}},
                                  "allOf": [{"$ref": "#/$defs/n"}], "anyOf": [{"$ref": "#/$defs/n"}]});
        assert!(
            JsonSchema::parse(&two_keywords.to_string()).is_err(),
            "allOf + anyOf"
        );
        for schema in [
            json!({"$ref": "#a1", "$defs": {"a1": {"$anchor": "a1", "type": "integer"}}}),
            json!({"$ref": "#/%24defs/a1", "$defs": {"a1": {"type": "integer"}}}),
            json!({"$defs": {"a1": {"$id": "http://x.example/a1", "type": "integer"}}, "$ref": "http://x.example/a1"}),
        ] {
            assert!(JsonSchema::parse(&schema.to_string()).is_err(), "{schema}");
        }
        // Review 8 of #37: draft-04's `id` rebases references as `$id` does. Under it,
        // `#/definitions/a0` is the nested resource's own chain; the walk followed the root's.
        let rebased = |draft: &str| {
            let mut own = serde_json::Map::new();
            for i in 0..12 {
                let next = format!("#/definitions/a{}", i + 1);
                own.insert(
                    format!("a{i}"),
                    json!({"anyOf": [{"$ref": next}, {"$ref": next}]}),
                );
            }
            own.insert("a12".into(), json!({"type": "string"}));
            let cheap: serde_json::Map<String, Value> =
                (0..13).map(|i| (format!("a{i}"), json!({}))).collect();
            json!({"$schema": draft, "definitions": cheap, "type": "object",
                   "properties": {"id": {"type": "string"},
                                  "x": {"anyOf": [{"id": "http://x.example/n", "definitions": own,
                                                   "allOf": [{"$ref": "#/definitions/a0"}]}]}}})
            .to_string()
        };
        let e = JsonSchema::parse(&rebased("http://json-schema.org/draft-04/schema#"))
            .expect_err("a nested id in draft-04");
        assert!(e.contains("a nested id"), "{e}");
        // In later drafts `id` is no keyword (and a property named `id` never was one).
        assert!(JsonSchema::parse(&rebased("http://json-schema.org/draft-07/schema#")).is_ok());
        // A DAG hidden under a keyword an allow-list would not name is counted too.
        let mut hidden = serde_json::Map::new();
        for i in 0..23 {
            let next = format!("#/dependencies/x/definitions/a{}", i + 1);
            hidden.insert(
                format!("a{i}"),
                json!({"anyOf": [{"$ref": next}, {"$ref": next}]}),
            );
        }
        hidden.insert("a23".into(), json!({"type": "integer"}));
        let dependencies = json!({"$ref": "#/dependencies/x/definitions/a0",
                                  "dependencies": {"x": {"definitions": hidden}}});
        assert!(
            JsonSchema::parse(&dependencies.to_string()).is_err(),
            "hidden DAG"
        );
        // A tree (recursion through one branch) and a shared definition used twice are fine.
        let tree = json!({"type": "object", "properties": {
            "children": {"type": "array", "items": {"$ref": "#"}},
            "a": {"$ref": "#/$defs/s"}, "b": {"$ref": "#/$defs/s"}},
            "$defs": {"s": {"type": "string"}}});
        let s = JsonSchema::parse(&tree.to_string()).expect("tree");
        assert!(s
            .check(&json!({"children": [{"a": "x"}], "b": "y"}))
            .is_ok());
        assert_eq!(
            s.check(&json!({"children": [{"a": 1}]}))
                .expect_err("nested")
                .pointer,
            "/children/0/a"
        );
    }

    #[test]
    fn patterns_run_on_the_linear_engine() {
        let s = JsonSchema::parse(r#"{"type":"string","pattern":"^(a|aa)*b$"}"#).expect("schema");
        assert!(s.check(&json!(format!("{}b", "a".repeat(40)))).is_ok());
        assert!(s.check(&json!("a".repeat(40))).is_err());
        assert!(
            JsonSchema::parse(r#"{"type":"string","pattern":"^(?=(a|aa)*$)(a|aa)*(?!x)b$"}"#)
                .is_err(),
            "lookarounds need backtracking: refused"
        );
    }

    #[test]
    fn an_invalid_value_costs_one_error_and_a_large_check_is_refused_before_it_runs() {
        // 15,000 failing checks per element: collecting every error was gigabytes.
        let branches = vec![json!({"minimum": 0}); 15_000];
        let s =
            JsonSchema::parse(&json!({"items": {"allOf": branches}}).to_string()).expect("schema");
        let e = s.check(&json!(vec![-1; 100])).expect_err("invalid");
        assert_eq!(e.pointer, "/0", "{}", e.message);
        // The same schema against 3,000 elements is 45 million checks: refused unchecked.
        let e = s.check(&json!(vec![0; 3_000])).expect_err("too much work");
        assert!(e.message.contains("subschema checks"), "{}", e.message);
    }

    #[test]
    fn a_large_value_failing_an_any_of_is_refused_without_collecting_every_branchs_errors() {
        let branches: Vec<Value> = (0..4)
            .map(|i| json!({"items": {"type": "string", "title": format!("b{i}")}}))
            .collect();
        let s = JsonSchema::parse(&json!({"anyOf": branches}).to_string()).expect("schema");
        // A small value: its field is named.
        let e = s.check(&json!([1])).expect_err("small");
        assert!(!e.too_costly);
        assert!(e.message.contains("[1]"), "{}", e.message);
        assert!(!e.message.contains("subschema checks"), "{}", e.message);
        // 100,000 elements: the validator's error would hold 400,000 (~130 MB).
        let e = s.check(&json!(vec![1; 100_000])).expect_err("large");
        assert!(!e.too_costly);
        assert!(
            e.message.contains("at most 20000 subschema checks"),
            "{}",
            e.message
        );
        // A schema without alternatives still names the field of a large value.
        let s = JsonSchema::parse(&json!({"items": {"type": "string"}}).to_string()).expect("s");
        assert_eq!(
            s.check(&json!(vec![1; 100_000]))
                .expect_err("plain")
                .pointer,
            "/0"
        );
    }

    /// Review 12 of #37: jsonschema-regex parses a pattern once more for each `\cX` in it
    /// (65,000 in 256 KB: ~110 s of CPU). More than 16 in a schema are refused before any
    /// regex is built.
    #[test]
    fn control_escapes_are_bounded_before_any_regex_is_built() {
        let schema = |n: usize| {
            json!({"type": "string", "pattern": format!("^{}$", "\\cA".repeat(n))}).to_string()
        };
        let s = JsonSchema::parse(&schema(16)).expect("16 compile");
        assert!(
            s.check(&json!("\u{1}".repeat(16))).is_ok(),
            "\\cA is control-A"
        );
        let e = JsonSchema::parse(&schema(17)).expect_err("17");
        assert!(e.contains("control escapes"), "{e}");
        // Wherever they hide: a $ref may make any string a pattern.
        let hidden = json!({"$defs": {"x": {"const": "\\cA".repeat(17)}}}).to_string();
        assert!(JsonSchema::parse(&hidden).is_err());
    }

    /// Review 12 of #37: a pattern under a `$ref` cycle was weighed (an NFA compiled) at
    /// every visit of the cost walk: 4,096 times for 51 `$ref`s. It is weighed once.
    #[test]
    fn a_pattern_under_a_ref_cycle_is_weighed_once() {
        let fan = |to: &str| -> Vec<Value> { (0..16).map(|_| json!({"$ref": to})).collect() };
        // z is on a cycle (through a property), so its cost is not memoised: y's 16 and the
        // root's 16 references walk it 256 times.
        let schema = json!({
            "allOf": fan("#/$defs/y"),
            "$defs": {
                "y": {"allOf": fan("#/$defs/z")},
                "z": {"pattern": "^(ab|cd|ef)$", "properties": {"n": {"$ref": "#/$defs/z"}}}
            }
        });
        pattern::WEIGHED.with(|n| n.set(0));
        let parsed = JsonSchema::parse(&schema.to_string());
        assert!(parsed.is_ok(), "{:?}", parsed.err());
        assert_eq!(pattern::WEIGHED.with(std::cell::Cell::get), 1);
    }

    /// Review 13 of #37: each `contentMediaType`/`contentEncoding` parses the whole string
    /// again (draft 7), but the cost model counted it as one check: 600 of them over a 650 KB
    /// string were 15–33 s of CPU. Each now weighs as the parse it is.
    #[test]
    fn content_keywords_weigh_as_the_parse_they_are() {
        let content: Vec<Value> = (0..600)
            .map(|_| json!({"contentMediaType": "application/json"}))
            .collect();
        let s = JsonSchema::parse(
            &json!({"$schema": "http://json-schema.org/draft-07/schema#",
                    "type": "string", "allOf": content})
            .to_string(),
        )
        .expect("schema");
        let text = format!("[{}0]", "0,".repeat(300_000));
        let e = s.check(&json!(text)).expect_err("refused before it runs");
        assert!(
            e.too_costly && e.message.contains("subschema checks"),
            "{}",
            e.message
        );
        // One of them over a short string still runs.
        let one = JsonSchema::parse(
            &json!({"$schema": "http://json-schema.org/draft-07/schema#",
                    "type": "string", "contentMediaType": "application/json"})
            .to_string(),
        )
        .expect("schema");
        assert!(one.check(&json!("[1, 2]")).is_ok());
    }
}

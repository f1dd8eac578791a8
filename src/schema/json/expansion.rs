//! The JSON Schema cost model's walk over a schema: how many subschema checks one value node
//! can cause, `$ref`s followed and recursion bounded (the bounds a schema must pass), then the
//! same walk with each regex weighed by what it costs to run.

use serde_json::Value;

use super::cost::{data_cost, CONTENT_WEIGHT, FORMAT_WEIGHT};
use super::pattern::{pattern_cost, WEIGH_BUDGET};

/// Most subschema visits one validation of the schema can make, counted over its `$ref`s
/// (a chain of `anyOf: [$ref a1, $ref a1]` 23 long is 8 million visits from 1.7 KB).
pub const MAX_EXPANSION: u64 = 100_000;
/// Steps the expansion count itself may take.
const MAX_ANALYSIS_STEPS: u64 = 1_000_000;

/// Refuses a schema whose validation could branch exponentially, or whose references
/// floodgate does not follow the way the validator does:
/// - only local JSON-pointer references (`"$ref": "#"` or `"#/..."`, no `%` escapes) are
///   taken; `$anchor`, `$dynamicRef`, `$recursiveRef`, a nested `$id` (which rebases
///   references) are refused, and so is a nested `id` in a draft-03 or draft-04 schema (their
///   `$id`: a `"#/definitions/a"` under it is that subschema's own, while this walk followed
///   the root's — 2 KB whose walk counted a few dozen checks made the validator branch 2^21
///   times, 9–14 s of CPU and 3 GiB for one refused request);
/// - the subschemas one check can visit — every object and array under any keyword, each
///   `$ref` counted as its target's (memoised) — stay under [`MAX_EXPANSION`];
/// - a recursive schema (a `$ref` cycle) may reach its cycle through at most one subschema
///   of any node that applies to the same value (`allOf`/`anyOf`/`oneOf`, `not`, `if`/`then`/
///   `else`, a sibling `$ref`, `items` with `contains`, ...): two would check every level of
///   the data twice. Subschemas that apply to different parts of the value (two entries of
///   `properties`, of `prefixItems`) may both recurse: a tree.
pub(super) fn expansion_within_bounds(schema: &Value) -> Result<u64, String> {
    let (cost, _) = Expansion::new(schema, false).cost(schema, true)?;
    if cost > MAX_EXPANSION {
        return Err(format!(
            "the schema can make {cost} subschema checks per value (more than {MAX_EXPANSION}): its $refs branch too widely"
        ));
    }
    Ok(cost)
}

/// The work one value node can cause, once [`expansion_within_bounds`] passed: the same walk
/// with each regex weighed by what it costs to run ([`pattern_cost`]) rather than as one
/// check, so a regex reached through many `$ref`s is counted as often as it runs.
pub(super) fn weighted_cost(schema: &Value) -> u64 {
    Expansion::new(schema, true)
        .cost(schema, true)
        .map_or(u64::MAX, |(cost, _)| cost)
}

struct Expansion<'a> {
    root: &'a Value,
    /// Weigh regexes by their cost to run (the second walk; the bounds were checked by the
    /// first, which counts each as one check).
    weigh_patterns: bool,
    /// Costs of `$ref` targets that are not part of a cycle.
    memo: std::collections::HashMap<String, u64>,
    /// `$ref` targets being expanded.
    stack: Vec<String>,
    /// Each regex's weight, by its text: a cycle's targets are not memoised, and a pattern
    /// under one was weighed again at every visit (a review of #37: 4,096 visits of one 250 KB
    /// alternation, each an NFA compile, were 317 s of CPU).
    pattern_weights: std::collections::HashMap<String, u64>,
    /// Bytes of NFA the patterns may still be weighed with ([`WEIGH_BUDGET`]).
    weigh_budget: usize,
    steps: u64,
    /// The schema is draft-03 or draft-04, where `id` is what later drafts call `$id`.
    legacy_id: bool,
}

/// Applicators whose subschemas check the value itself (in place): `unevaluatedProperties`
/// and `unevaluatedItems` beside one make the validator evaluate them once more to learn
/// what they evaluated.
const IN_PLACE: [&str; 9] = [
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "$ref",
    "dependentSchemas",
];

/// A node whose in-place applicators are evaluated twice: its cost doubles, and nested ones
/// compound (a review of #37: 22 nested `anyOf` levels with `unevaluatedProperties`, 1.6 KB,
/// were 3 s of CPU for a 2 KB record, doubling with every level).
fn evaluates_twice(o: &serde_json::Map<String, Value>) -> bool {
    (o.contains_key("unevaluatedProperties") || o.contains_key("unevaluatedItems"))
        && IN_PLACE.iter().any(|k| o.contains_key(*k))
}

/// Keywords whose entries each apply to a different part of the value: their recursive
/// entries count as one.
const DISJOINT: [&str; 3] = ["properties", "prefixItems", "dependentRequired"];
/// Keywords that change how references resolve, which this analysis does not follow.
const UNFOLLOWED: [&str; 5] = [
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$recursiveRef",
    "$recursiveAnchor",
];

impl<'a> Expansion<'a> {
    fn new(root: &'a Value, weigh_patterns: bool) -> Self {
        Self {
            root,
            weigh_patterns,
            memo: std::collections::HashMap::new(),
            stack: Vec::new(),
            pattern_weights: std::collections::HashMap::new(),
            weigh_budget: WEIGH_BUDGET,
            steps: 0,
            legacy_id: root
                .get("$schema")
                .and_then(Value::as_str)
                .is_some_and(|s| s.contains("draft-04") || s.contains("draft-03")),
        }
    }

    /// The node's cost, and whether it reaches a `$ref` cycle. `root`: the document itself
    /// (the one place an `$id` is taken).
    fn cost(&mut self, node: &Value, root: bool) -> Result<(u64, bool), String> {
        self.steps += 1;
        if self.steps > MAX_ANALYSIS_STEPS {
            return Err("the schema's references are too intricate to bound".into());
        }
        let (mut total, mut cyclic, mut recursive) = (1u64, false, 0usize);
        match node {
            Value::Array(items) => {
                for v in items {
                    let (c, cy) = self.cost(v, false)?;
                    total = total.saturating_add(c);
                    recursive += usize::from(cy);
                    cyclic |= cy;
                }
            }
            Value::Object(o) => {
                for key in UNFOLLOWED {
                    if o.contains_key(key) {
                        return Err(format!(
                            "{key} is not taken: floodgate follows only local JSON-pointer $refs (\"#/...\")"
                        ));
                    }
                }
                if !root && o.contains_key("$id") {
                    return Err("a nested $id is not taken: floodgate follows only local JSON-pointer $refs (\"#/...\")".into());
                }
                // A string: in a schema object `id` is the keyword; a property or definition
                // named `id` holds an object.
                if !root && self.legacy_id && o.get("id").is_some_and(Value::is_string) {
                    return Err("a nested id (a draft-04 schema's $id) is not taken: floodgate follows only local JSON-pointer $refs (\"#/...\")".into());
                }
                for (key, v) in o {
                    let (c, cy) = match (key.as_str(), v) {
                        ("$ref", Value::String(target)) => self.reference(target)?,
                        // Data, not schemas: never validated as subschemas.
                        ("enum" | "const", v) => (data_cost(key, v), false),
                        // A regex costs per byte it reads, by the states it compiles to.
                        ("pattern", Value::String(p)) if self.weigh_patterns => {
                            (self.pattern_weight(p), false)
                        }
                        ("patternProperties", v @ Value::Object(entries))
                            if self.weigh_patterns =>
                        {
                            let (c, cy) = self.cost(v, false)?;
                            let keys: Vec<u64> =
                                entries.keys().map(|k| self.pattern_weight(k)).collect();
                            (keys.into_iter().fold(c, u64::saturating_add), cy)
                        }
                        // The string parsed or decoded again, whole, for each.
                        ("contentMediaType" | "contentEncoding", _) if self.weigh_patterns => {
                            (CONTENT_WEIGHT, false)
                        }
                        ("format", Value::String(_)) if self.weigh_patterns => {
                            (FORMAT_WEIGHT, false)
                        }
                        ("examples" | "default" | "required", _) => (1, false),
                        (k, Value::Object(entries)) if DISJOINT.contains(&k) => {
                            let (mut sum, mut any) = (1u64, false);
                            for e in entries.values() {
                                let (c, cy) = self.cost(e, false)?;
                                sum = sum.saturating_add(c);
                                any |= cy;
                            }
                            (sum, any)
                        }
                        (k, Value::Array(entries)) if DISJOINT.contains(&k) => {
                            let (mut sum, mut any) = (1u64, false);
                            for e in entries {
                                let (c, cy) = self.cost(e, false)?;
                                sum = sum.saturating_add(c);
                                any |= cy;
                            }
                            (sum, any)
                        }
                        (_, v @ (Value::Object(_) | Value::Array(_))) => self.cost(v, false)?,
                        _ => (1, false),
                    };
                    total = total.saturating_add(c);
                    recursive += usize::from(cy);
                    cyclic |= cy;
                }
            }
            _ => return Ok((1, false)),
        }
        if node.as_object().is_some_and(evaluates_twice) {
            total = total.saturating_mul(2);
        }
        if recursive >= 2 {
            return Err(format!(
                "the schema recurses through {recursive} subschemas that check the same value: its checks double at every level of a value"
            ));
        }
        if total > MAX_EXPANSION && !self.weigh_patterns {
            return Err(format!(
                "the schema can make more than {MAX_EXPANSION} subschema checks per value: its $refs branch too widely"
            ));
        }
        Ok((total, cyclic))
    }

    /// A regex's weight ([`pattern_cost`]), computed once per text.
    fn pattern_weight(&mut self, pattern: &str) -> u64 {
        if let Some(weight) = self.pattern_weights.get(pattern) {
            return *weight;
        }
        let weight = pattern_cost(pattern, &mut self.weigh_budget);
        self.pattern_weights.insert(pattern.to_string(), weight);
        weight
    }

    fn reference(&mut self, target: &str) -> Result<(u64, bool), String> {
        let pointer = match target.strip_prefix('#') {
            Some(p) if (p.is_empty() || p.starts_with('/')) && !p.contains('%') => p,
            _ => {
                return Err(format!(
                    "$ref {target:?} is not taken: floodgate follows only local JSON-pointer $refs (\"#/...\", no % escapes)"
                ))
            }
        };
        if let Some(keyword) = into_data(pointer) {
            return Err(format!(
                "$ref {target:?} points into {keyword}, which holds data, not schemas: floodgate does not take it"
            ));
        }
        if let Some(c) = self.memo.get(pointer) {
            return Ok((*c, false));
        }
        if self.stack.iter().any(|p| p == pointer) {
            return Ok((1, true));
        }
        let Some(node) = self.root.pointer(pointer) else {
            return Err(format!("$ref {target:?} points at nothing in the schema"));
        };
        self.stack.push(pointer.to_string());
        let result = self.cost(node, pointer.is_empty());
        self.stack.pop();
        let (c, cyclic) = result?;
        // A target inside a cycle costs differently from each way in: not remembered.
        let on_cycle = cyclic && !self.stack.is_empty();
        if !on_cycle {
            self.memo.insert(pointer.to_string(), c);
        }
        Ok((c, cyclic && on_cycle))
    }
}

/// Keywords whose values are data: this walk counts them as data, so a `$ref` into one would
/// hide a schema from it (a fourth review of #37 chained 990 `anyOf`s under `default`).
const DATA: [&str; 5] = ["default", "examples", "example", "enum", "const"];
/// Keywords whose entries are schemas under names of the schema author's choosing.
const NAMED: [&str; 5] = [
    "properties",
    "$defs",
    "definitions",
    "patternProperties",
    "dependentSchemas",
];

/// The data keyword a JSON pointer passes through as a keyword (not as a property's name).
fn into_data(pointer: &str) -> Option<&str> {
    let mut previous = "";
    for segment in pointer.split('/').skip(1) {
        if DATA.contains(&segment) && !NAMED.contains(&previous) {
            return Some(segment);
        }
        previous = segment;
    }
    None
}

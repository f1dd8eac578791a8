//! What a JSON Schema `pattern` (or `patternProperties` key) costs to run per string it
//! reads, weighed once when its schema compiles: the NFA threads that can be live at once,
//! each by its class's fan-out, within a budget of NFA built per schema.
//!
//! Layer: domain (the schema room's).

/// What one `pattern` (or `patternProperties` key) costs per string node it reads, in
/// subschema checks: the NFA states its live threads can step per byte ([`width`]), times
/// [`PATTERN_WEIGHT`]. Counting a regex as one check let `[ab]*a[ab]{200}x` ×100 cost 33 s of
/// CPU on a 100 KB string: when the lazy DFA's cache is too small for the search, the engine
/// steps every live NFA state for every byte. The width is read from the parsed pattern, which
/// is cheap; its NFA, built within `budget` bytes for a schema's patterns in all
/// ([`WEIGH_BUDGET`]: building takes about as long as its size), only lowers it (never more
/// live threads than states). A pattern the translation or parser refuses costs its text's
/// length (the validator refuses it too).
pub(super) fn pattern_cost(pattern: &str, budget: &mut usize) -> u64 {
    #[cfg(test)]
    WEIGHED.with(|n| n.set(n.get() + 1));
    // The engine refuses a pattern the translation or the parser refuses: the schema is
    // refused by the validator, whatever this says.
    let Some((hir, rust)) = jsonschema_regex::to_rust_regex(pattern)
        .ok()
        .and_then(|rust| Some((regex_automata::util::syntax::parse(&rust).ok()?, rust)))
    else {
        return 1 + (pattern.len() as u64).saturating_mul(PATTERN_WEIGHT);
    };
    // The parsed form is cheap (microseconds where its NFA takes milliseconds) and bounds the
    // live threads whatever is left of the budget: priced by its text once the budget was
    // spent, `[ab]*a[ab]{2500}x0` (19 characters, ~2,500 live threads) cost 44.5 s of CPU in
    // one check behind two patterns that took the budget (review 29 of #37).
    let live = width(&hir);
    let limit = NFA_SIZE_LIMIT.min(*budget);
    if limit == 0 {
        return 1 + live.saturating_mul(PATTERN_WEIGHT);
    }
    #[cfg(test)]
    NFA_BYTES.with(|n| n.set(n.get() + limit));
    let nfa = regex_automata::nfa::thompson::NFA::compiler()
        .configure(regex_automata::nfa::thompson::Config::new().nfa_size_limit(Some(limit)))
        .build(&rust);
    // A build stopped at the limit did about as much work as the limit.
    *budget -= nfa.as_ref().map_or(limit, |n| n.memory_usage().min(limit));
    let states = nfa.map_or(u64::MAX, |nfa| nfa.states().len() as u64);
    1 + live.min(states).saturating_mul(PATTERN_WEIGHT)
}

/// What stepping a regex's live NFA threads costs per byte, at most, in NFA states: how many
/// threads can be live at once — its states with each character class counted as one — each
/// weighed by its class's fan-out ([`class_weight`]). A class compiles to a UTF-8 automaton of
/// up to hundreds of states (`\p{L}` 303), but that automaton is deterministic: reading a
/// string, one thread is in it at a time, and a step scans the byte ranges of the state it is
/// in (up to 48 for `\p{L}`). So `^[\p{L} .-]{1,64}$` has ~19,400 states and weighs 390, and
/// counting its states priced a 394-byte record of five such names at 0.6 s, where its check
/// takes under a millisecond (review 28 of #37). Everything else counts as the Thompson
/// compiler builds it: a literal's bytes, a repetition's copies (`{m,n}` n copies, `{m,}`
/// m + 1) and its split, an alternation's branches, each empty branch, look-around and capture
/// (the epsilon closure visits them on every byte). Measured (debug build, one `pattern`, a
/// 11 KB string of random letters that keeps the lazy DFA from settling):
/// `[\p{L}]*\p{Lu}[\p{L}]{4}x` took 5.3 ms, and this weighs it at 7.6 ms by the foresight's
/// nanosecond (its states would say 370 ms); `[ab]*a[ab]{200}x` on 4 KB of random a/b took
/// 14.5–18 ms against 13.7 ms, as before (its classes have one range each).
fn width(hir: &regex_syntax::hir::Hir) -> u64 {
    use regex_syntax::hir::HirKind;
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => 1,
        HirKind::Class(class) => class_weight(class),
        HirKind::Literal(bytes) => bytes.0.len() as u64,
        HirKind::Repetition(r) => {
            let copies = r.max.unwrap_or_else(|| r.min.saturating_add(1)).max(1);
            u64::from(copies)
                .saturating_mul(width(&r.sub))
                .saturating_add(1)
        }
        HirKind::Capture(c) => width(&c.sub).saturating_add(2),
        HirKind::Concat(subs) | HirKind::Alternation(subs) => subs
            .iter()
            .map(width)
            .fold(subs.len() as u64, u64::saturating_add),
    }
}

/// One live thread in a class's automaton, in states stepped per byte: one, plus one per 128
/// of the class's ranges (its automaton's states' byte ranges grow with them: `\p{L}` is 677
/// ranges, at most 48 in one state, and weighs 6; `[a-z0-9.]` 1), or, if more, one per 32 of
/// the byte ranges its first state may hold (its ASCII ranges and one per lead byte of the
/// rest, at most 64): a class of every other ASCII byte and a character per lead byte has 125
/// ranges and ~113 in its first state, which the engine's fallback reads one by one, and
/// weighed 1 it ran 2.3× its price (review 31 of #37). Read off the class, not counted
/// through its UTF-8 sequences: a schema may hold tens of thousands of classes.
fn class_weight(class: &regex_syntax::hir::Class) -> u64 {
    use regex_syntax::hir::Class;
    let (ranges, ascii) = match class {
        Class::Unicode(c) => (
            c.ranges().len(),
            c.ranges().iter().filter(|r| r.start() < '\u{80}').count(),
        ),
        Class::Bytes(b) => (
            b.ranges().len(),
            b.ranges().iter().filter(|r| r.start() < 0x80).count(),
        ),
    };
    let first_state = ascii + (ranges - ascii).min(64);
    1 + (ranges as u64 / 128).max(first_state as u64 / 32)
}

#[cfg(test)]
thread_local! {
    /// Regexes weighed on this thread (tests: a pattern is weighed once per schema).
    pub(super) static WEIGHED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Bytes of NFA the weighing on this thread was allowed to build.
    pub(super) static NFA_BYTES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Subschema checks one NFA state costs per string node (64 bytes). Measured on the release
/// binary: 100 patterns `[ab]*a[ab]{200}xN` (210 states each) against a 4 KB string took
/// 0.56–0.97 s of CPU, about 8 ns per state and byte. At 16 that string is 21.8 million, over
/// `MAX_CHECK_WORK` (20 million, the ~1 s a record's check may take): refused unchecked.
pub(super) const PATTERN_WEIGHT: u64 = 16;
/// The estimate's own bound: an NFA larger than this is refused by the validator's
/// `size_limit` too, and is weighed by its parsed form alone here.
const NFA_SIZE_LIMIT: usize = 4 << 20;
/// Bytes of NFA a schema's patterns are weighed within, in all. Each pattern's NFA was built
/// up to [`NFA_SIZE_LIMIT`]: 100 patterns `^\p{L}{400}$` (6 MB of NFA each, though the
/// validator compiles them in a few milliseconds) took 1.9–2.5 s of a schema thread to weigh,
/// in one piece, for a tenant allowed 1 s of unpaid work at once (review 22 of #37). 8 MiB is
/// about 35 ms of building; ordinary patterns are a few KB each.
pub(super) const WEIGH_BUDGET: usize = 8 << 20;

#[cfg(test)]
mod tests {
    use super::super::JsonSchema;
    use super::*;
    use serde_json::{json, Value};

    /// An a/b string that none of the review's patterns match (none has an `x` after 201).
    fn ab(len: usize) -> String {
        let mut seed = 7u32;
        (0..len)
            .map(|_| {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                if seed >> 16 & 1 == 0 {
                    'a'
                } else {
                    'b'
                }
            })
            .collect()
    }

    fn heavy_patterns(n: usize) -> JsonSchema {
        let any: Vec<_> = (0..n)
            .map(|i| json!({"type": "string", "pattern": format!("[ab]*a[ab]{{200}}x{i}")}))
            .collect();
        JsonSchema::parse(&json!({"anyOf": any}).to_string()).expect("schema")
    }

    /// A review of #37: 100 such patterns against a 100 KB string were 33.5 s of CPU (a 4 KB
    /// one up to 0.97 s), counted as 100 checks. Counted by their NFA's states, both values
    /// are refused before they run.
    #[test]
    fn a_regex_costs_its_states_per_string_it_reads() {
        let s = heavy_patterns(100);
        for len in [4_096, 100_000] {
            let e = s.check(&json!(ab(len))).expect_err("too costly");
            assert!(e.too_costly, "{len}: {}", e.message);
        }
        // A short string still runs (and fails: no pattern matches).
        let e = s.check(&json!(ab(100))).expect_err("no match");
        assert!(!e.too_costly, "{}", e.message);
    }

    /// Everyday patterns stay cheap: a 10 KB record of 100 e-mail fields passes.
    #[test]
    fn an_everyday_pattern_keeps_its_record_cheap() {
        let s = JsonSchema::parse(
            r#"{"type":"object","additionalProperties":{"type":"string","pattern":"^[a-z0-9.]+@[a-z0-9-]+(\\.[a-z0-9-]+)+$"}}"#,
        )
        .expect("schema");
        let record: serde_json::Map<_, _> = (0..100)
            .map(|i| {
                (
                    format!("f{i}"),
                    json!(format!("someone.{i}@{}.example.com", "x".repeat(60))),
                )
            })
            .collect();
        assert!(s.check(&Value::Object(record)).is_ok());
        let cost = pattern_cost("^[a-z]+$", &mut WEIGH_BUDGET.clone());
        assert!(cost < 1_000, "{}", cost);
    }

    /// Review 22 of #37: each of 100 patterns `^\p{L}{400+j}$` was weighed by building its
    /// NFA up to 4 MiB, 1.9–2.5 s of a schema thread for one compile. A schema's patterns are
    /// weighed within 8 MiB of NFA in all; the rest by their parsed width alone.
    #[test]
    fn a_schemas_patterns_are_weighed_within_one_budget() {
        let props: serde_json::Map<String, Value> = (0..100)
            .map(|j| {
                let pattern = format!("^\\p{{L}}{{{}}}$", 400 + j);
                (
                    format!("p{j}"),
                    json!({"type": "string", "pattern": pattern}),
                )
            })
            .collect();
        let schema = json!({"type": "object", "properties": props});
        NFA_BYTES.with(|n| n.set(0));
        let cost = super::super::expansion::weighted_cost(&schema);
        let built = NFA_BYTES.with(std::cell::Cell::get);
        assert!(
            built <= WEIGH_BUDGET,
            "{built} bytes of NFA for 100 patterns"
        );
        assert!(cost > 0);
        // Everyday patterns are weighed as before, far within it.
        let mut budget = WEIGH_BUDGET;
        let everyday = pattern_cost("^[a-z0-9.]+@[a-z0-9-]+(\\.[a-z0-9-]+)+$", &mut budget);
        assert!(
            WEIGH_BUDGET - budget < 64 * 1024,
            "{}",
            WEIGH_BUDGET - budget
        );
        assert_eq!(
            everyday,
            pattern_cost(
                "^[a-z0-9.]+@[a-z0-9-]+(\\.[a-z0-9-]+)+$",
                &mut WEIGH_BUDGET.clone()
            )
        );
    }

    /// Review 28 of #37: five name fields of `^[\p{L} .-]{1,64}$` priced a 394-byte record at
    /// 0.6 s of foreseen CPU (by the NFA's ~19,400 states; its check takes under a
    /// millisecond), so it waited with the long jobs; eight such fields refused a 225-byte
    /// record as too costly. Weighed by their live threads, both are cheap; a class's fan-out
    /// still counts.
    #[test]
    fn a_name_pattern_is_weighed_by_its_live_threads_not_its_states() {
        let name = "Zoë Müller-Lüdenscheidt von Hohenzollern-Sigmaringen Jr.";
        for fields in [5, 8, 10] {
            let props: serde_json::Map<String, Value> = (0..fields)
                .map(|i| {
                    let p = json!({"type": "string", "pattern": "^[\\p{L} .-]{1,64}$"});
                    (format!("f{i}"), p)
                })
                .collect();
            let schema = json!({"type": "object", "properties": props}).to_string();
            let s = JsonSchema::parse(&schema).expect("schema");
            let value: serde_json::Map<String, Value> = (0..fields)
                .map(|i| (format!("f{i}"), json!(name)))
                .collect();
            let value = Value::Object(value);
            assert!(s.check(&value).is_ok(), "{fields} fields");
            let foreseen_ns = s.cost() * (value.to_string().len() as u64 + 1);
            assert!(
                foreseen_ns < 100_000_000,
                "{fields} fields: {foreseen_ns} ns"
            );
        }
        let mut budget = WEIGH_BUDGET;
        let letters = pattern_cost("\\p{L}", &mut budget);
        assert!(letters > 5 * pattern_cost("[ab]", &mut budget), "{letters}");
    }

    /// Review 29 of #37: two patterns that take the weighing budget (`^\p{L}{400}$` builds
    /// over 4 MiB of NFA) left every later one priced by its text, and `[ab]*a[ab]{2500}x0`,
    /// 19 characters for ~2,500 live threads, took 44.5 s of CPU in one check. It is priced
    /// by its width whatever the budget, and such a value is refused before it runs.
    /// Review 31 of #37: a class of every other ASCII byte and one character per UTF-8 lead
    /// byte (125 ranges) weighed as `[ab]` does, and ran 2.3× its price; its first state's
    /// byte ranges now weigh it.
    #[test]
    fn a_class_of_many_byte_ranges_weighs_more_than_one_of_few() {
        let ascii = (1u32..0x80).step_by(2);
        // The first code point of each UTF-8 lead byte, 0xC2 to 0xF4.
        let leads = (0xc2u32..=0xf4).map(|lead| match lead {
            0xc2..=0xdf => (lead & 0x1f) << 6,
            0xe0 => 0x800,
            0xe1..=0xef => (lead & 0x0f) << 12,
            0xf0 => 0x1_0000,
            _ => (lead & 0x07) << 18,
        });
        let wide: String = ascii
            .chain(leads)
            .map(|c| format!("\\x{{{c:X}}}"))
            .collect();
        let narrow = width(&regex_syntax::parse("[ab]*a[ab]{30}").expect("parse"));
        let wide =
            width(&regex_syntax::parse(&format!("[{wide}]*a[{wide}]{{30}}")).expect("parse"));
        assert!(wide >= 3 * narrow, "{wide} against {narrow}");
        // `\p{L}` and everyday classes weigh as before.
        let letters = regex_syntax::parse(r"\p{L}").expect("parse");
        assert_eq!(width(&letters), 6);
        assert_eq!(width(&regex_syntax::parse("[a-z0-9.]").expect("parse")), 1);
    }

    #[test]
    fn a_pattern_past_the_weighing_budget_is_priced_by_its_width() {
        let mut budget = WEIGH_BUDGET;
        pattern_cost("^\\p{L}{400}$", &mut budget);
        pattern_cost("^\\p{L}{401}$", &mut budget);
        assert_eq!(budget, 0, "the two took the budget");
        let heavy = pattern_cost("[ab]*a[ab]{2500}x0", &mut budget);
        assert!(heavy > 2_500 * PATTERN_WEIGHT, "{heavy}");
        let any = json!({"anyOf": [
            {"type": "string", "pattern": "^\\p{L}{400}$"},
            {"type": "string", "pattern": "^\\p{L}{401}$"},
            {"type": "string", "pattern": "[ab]*a[ab]{2500}x0"},
        ]});
        let s = JsonSchema::parse(&any.to_string()).expect("schema");
        let e = s.check(&json!(ab(20_000))).expect_err("too costly");
        assert!(e.too_costly, "{}", e.message);
    }
}

//! What parsing a record's JSON into a `serde_json::Value` allocates, known before it is
//! parsed. A check (JSON Schema) or an encoding (Avro) reads the value as a tree, and the tree
//! is many times the text: 17× for an array of small numbers, 99× for an array of one-key
//! objects (each a B-tree node of ~700 bytes). A review of #37 found that a few refused 918 KB
//! records could take hundreds of MB on the schema threads this way. Past
//! [`MAX_PARSE_MEMORY`] a value is refused (422 `schema_too_costly`) before it is parsed, so
//! the schema step's value memory is at most its `workers` × that.
//!
//! The estimate is one pass over the bytes (strings skipped byte by byte), an upper bound of
//! what serde_json allocates at its peak, per node kind (measured with a counting allocator
//! on x86-64, serde_json without `preserve_order`):
//! - every value: its slot in its parent (32 bytes), three times over for the vector's growth;
//! - a non-empty array: its first allocation (4 slots); an array of one-element arrays is
//!   ~40× its text;
//! - an object: a B-tree leaf of ~700 bytes per 11 keys, and each key's `String`, and 64
//!   bytes even when empty (a Protobuf message of no fields kept 97 bytes with its slot);
//! - a string: its bytes.

/// Most bytes a value's parsed tree may take (the estimate's).
pub const MAX_PARSE_MEMORY: u64 = 48 * 1024 * 1024;

/// A value's slot in its parent (32 bytes), three times: while a vector grows from n to 2n
/// slots both are held, 3n slots for n + 1 values.
const VALUE: u64 = 96;
/// A non-empty array's first allocation.
const ARRAY: u64 = 4 * 32;
/// A B-tree leaf (11 keys and values, lengths, parent link), per 11 keys of an object.
const LEAF: u64 = 720;
const LEAF_KEYS: u32 = 11;
/// An object, empty or not: what a Protobuf message costs beside its fields (a
/// `DynamicMessage` of no fields kept 97 bytes in its parent's list, measured).
const OBJECT: u64 = 64;
/// A key: its `String` (24 bytes) in the leaf, and its allocation's rounding.
const KEY: u64 = 48;
/// The most one byte of text adds to the estimate (a key's `:`: its leaf and its `String`;
/// a `{` adds 96 + 128 + 64): a value of at most `MAX_PARSE_MEMORY / MOST_PER_BYTE` bytes
/// (64 KiB) fits whatever it holds, and is not scanned.
pub const MOST_PER_BYTE: u64 = LEAF + KEY;
// A value's opening byte adds its slot, its array's first allocation and an object's part.
const _: () = assert!(VALUE + ARRAY + OBJECT <= MOST_PER_BYTE);
/// Deepest nesting followed (serde_json refuses a value deeper than 128).
const DEPTH: usize = 130;

/// The open container's index in the per-depth arrays, if any is open and followed.
fn open(depth: usize) -> Option<usize> {
    depth.checked_sub(1).filter(|&t| t < DEPTH)
}

/// An upper bound of what parsing `data` allocates at its peak (see the module). Never panics,
/// whatever the bytes: text that is not JSON gets a number too, and its parse then fails.
pub fn estimate(data: &[u8]) -> u64 {
    estimate_at(data, VALUE)
}

/// [`estimate`], each value's slot counted as `value` bytes (more where the reader makes each
/// value a structure of its own: a Protobuf `google.protobuf.Value`).
pub fn estimate_at(data: &[u8], value: u64) -> u64 {
    // Per open container: keys (objects) or elements (arrays) seen so far, and its kind.
    let mut counts = [0u32; DEPTH];
    let mut is_object = [false; DEPTH];
    let mut depth = 0usize;
    let mut total = 0u64;
    let mut in_string = false;
    // Whether the last byte outside strings and white space opened a value's place.
    let mut expecting = true;
    let mut at = 0;
    while at < data.len() {
        if in_string {
            // To the string's end (or its next escape) at once: its bytes are its memory.
            let Some(n) = memchr::memchr2(b'"', b'\\', &data[at..]) else {
                total += (data.len() - at) as u64;
                break;
            };
            if data[at + n] == b'"' {
                in_string = false;
                total += n as u64 + 1;
                at += n + 1;
            } else {
                total += n as u64 + 2;
                at += n + 2;
            }
            continue;
        }
        let b = data[at];
        at += 1;
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => continue,
            b':' => {
                // A key: the object's leaf when it starts one, and the key's String.
                if let Some(top) = open(depth).filter(|&t| is_object[t]) {
                    let keys = &mut counts[top];
                    if *keys % LEAF_KEYS == 0 {
                        total += LEAF;
                    }
                    *keys = keys.saturating_add(1);
                }
                total += KEY;
                expecting = true;
                continue;
            }
            b',' => {
                // In an object a key follows (counted at its `:`), in an array a value.
                expecting = !open(depth).is_some_and(|t| is_object[t]);
                continue;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                expecting = false;
                continue;
            }
            _ => {}
        }
        if !expecting {
            // Inside a number or literal, or a key's opening quote (counted at its `:`).
            if b == b'"' {
                in_string = true;
            }
            continue;
        }
        expecting = false;
        // A value starts: its slot, and the array's first allocation if it is the first.
        if let Some(top) = open(depth).filter(|&t| !is_object[t]) {
            let elements = &mut counts[top];
            if *elements == 0 {
                total += ARRAY;
            }
            *elements = elements.saturating_add(1);
        }
        total += value;
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                if b == b'{' {
                    total += OBJECT;
                }
                if depth < DEPTH {
                    counts[depth] = 0;
                    is_object[depth] = b == b'{';
                }
                depth += 1;
                // A key's place follows `{`: it is not a value (counted at its `:`).
                expecting = b == b'[';
            }
            _ => {}
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What serde_json allocated at its peak for each shape, ~1 MB of text (measured with a
    /// counting global allocator, x86-64): the estimate is never below it, nor far above.
    #[test]
    fn the_estimate_bounds_what_serde_json_allocated_for_each_shape() {
        let shapes: [(&str, String, u64); 8] = [
            ("ints", format!("[{}0]", "0,".repeat(500_000)), 25_165_824),
            (
                "empty objects",
                format!("[{}{{}}]", "{},".repeat(330_000)),
                25_165_824,
            ),
            (
                "one-key objects",
                format!("[{}{{\"\":0}}]", "{\"\":0},".repeat(140_000)),
                96_869_240,
            ),
            (
                "empty arrays",
                format!("[{}[]]", "[],".repeat(330_000)),
                25_165_824,
            ),
            (
                "short strings",
                format!("[{}\"\"]", "\"\",".repeat(330_000)),
                25_165_824,
            ),
            (
                "wide object",
                format!(
                    "{{{}\"z\":0}}",
                    (0..100_000)
                        .map(|i| format!("\"{i:x}\":0,"))
                        .collect::<String>()
                ),
                11_062_201,
            ),
            (
                "one-key objects with arrays",
                format!("[{}{{\"\":[]}}]", "{\"\":[]},".repeat(110_000)),
                73_714_936,
            ),
            (
                "arrays of one int",
                format!("[{}[0]]", "[0],".repeat(250_000)),
                40_388_736,
            ),
        ];
        for (name, text, measured) in shapes {
            assert!(
                serde_json::from_str::<serde_json::Value>(&text).is_ok(),
                "{name}"
            );
            let estimate = estimate(text.as_bytes());
            assert!(estimate >= measured, "{name}: {estimate} < {measured}");
            assert!(estimate <= measured * 4, "{name}: {estimate} ≫ {measured}");
        }
    }

    #[test]
    fn no_byte_adds_more_than_the_most_per_byte() {
        // The densest texts there are: one-key objects, and nested arrays of objects.
        for text in [
            format!("[{}{{\"\":0}}]", "{\"\":0},".repeat(9_000)),
            format!("[{}{{}}]", "[{},".repeat(9_000)),
            "{\"\":".repeat(120),
        ] {
            assert!(estimate(text.as_bytes()) <= text.len() as u64 * MOST_PER_BYTE);
        }
    }

    #[test]
    fn strings_are_skipped_whatever_they_hold() {
        let tricky = r#"{"a\"{[:,":"]}\\","b":[1,"x"]}"#;
        assert!(serde_json::from_str::<serde_json::Value>(tricky).is_ok());
        let plain = r#"{"aaaaaaa":"bbbb","b":[1,"x"]}"#;
        assert_eq!(tricky.len(), plain.len());
        assert_eq!(estimate(tricky.as_bytes()), estimate(plain.as_bytes()));
    }

    #[test]
    fn any_bytes_get_an_estimate_without_a_panic() {
        for text in [
            &b"]]]]}}}"[..],
            b"[[[[[[",
            b"\"\\",
            b":::",
            &[0xff; 64],
            b"",
        ] {
            let _ = estimate(text);
        }
        let deep = "[".repeat(10_000);
        assert!(estimate(deep.as_bytes()) > 0);
    }
}

//! A schema ready to use: its codec compiled within the shape bounds every parser is safe
//! with, and what it writes (Confluent's wire format) or why a value does not fit.

use std::sync::Arc;

use super::avro::Until;
use super::parse_memory::{estimate, estimate_at, MAX_PARSE_MEMORY, MOST_PER_BYTE};
use super::{avro, json, protobuf, CompileError, Format, Mismatch};

pub(super) enum Codec {
    Avro(Box<avro::AvroSchema>),
    Json(json::JsonSchema),
    Protobuf(protobuf::ProtobufSchema),
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Avro(_) => "Avro",
            Self::Json(_) => "Json",
            Self::Protobuf(_) => "Protobuf",
        })
    }
}

/// A schema ready to use: its id and its codec.
#[derive(Debug)]
pub struct Compiled {
    /// Its id in the registry; 0 while a raw schema is not yet looked up or registered.
    pub id: u32,
    pub format: Format,
    pub(super) codec: Arc<Codec>,
    /// Bytes its compile kept on the heap (measured; an estimate where nothing counts).
    pub(super) memory: usize,
}

/// The bounds of a compile (`[schema_registry]`).
#[derive(Debug, Clone, Copy)]
pub struct CompileBounds {
    pub max_text: usize,
    /// Most bytes the compiled schema may keep.
    pub max_memory: usize,
    pub json: json::JsonBounds,
}

impl Default for CompileBounds {
    fn default() -> Self {
        Self {
            max_text: usize::MAX,
            max_memory: usize::MAX,
            json: json::JsonBounds::default(),
        }
    }
}

/// Match-time memory a regex may add beyond its compile (its lazy DFA's cache), as the cache
/// counts it.
const PATTERN_CACHE_BYTES: usize = 64 * 1024;

/// What one step of an Avro walk costs in the JSON Schema cost model's units (one unit is a
/// nanosecond or two): a step that looks up a record's default and walks it measured ~112 ns
/// (release build, this machine), a plain record's ~100 ns.
const WORK_PER_AVRO_STEP: u64 = 80;

/// The steps an Avro value of `len` bytes may take: a few per byte of the value as sent, and
/// room for its schema's defaults.
fn avro_steps(len: usize) -> u64 {
    16 * len as u64 + 16_384
}

/// A value checked (`None`: kept as it is) or written in its wire format, or why it does not fit.
pub(super) type Written = Result<Option<Vec<u8>>, Mismatch>;

/// Deepest bracket nesting (`{`, `[`, `(`) a schema's text may have: the parsers and
/// validators recurse on it (a Protobuf option value nested 1,500 deep overflows a worker's
/// stack), and no real schema comes near.
pub const MAX_SCHEMA_NESTING: usize = 64;
/// Most `$ref`s a JSON Schema may hold (a long reference chain is recursion too).
pub const MAX_SCHEMA_REFS: usize = 1_000;
/// Most `aliases` an Avro schema may name, over all its names: the Avro library's name
/// resolution keeps memory growing with their square (a review measured 2,000 aliases: 348 MiB;
/// 20,000 in a 169 KB schema: 23.9 GB, the process killed), and real schemas name a few.
pub const MAX_AVRO_ALIASES: usize = 256;

/// Whether a schema's text is within the shape bounds every parser is safe with: its size, and
/// its bracket nesting outside string literals (and, in Protobuf, comments). What else is
/// bounded is counted on the parsed JSON, where a key spelled with escapes is the key: a JSON
/// Schema's `$ref`s in `json`, an Avro schema's aliases in `avro::names`.
pub(super) fn within_bounds(format: Format, text: &str, max_bytes: usize) -> Result<(), String> {
    if text.len() > max_bytes {
        return Err(format!(
            "the schema is {} bytes; at most {max_bytes} ([schema_registry] max_schema_bytes)",
            text.len()
        ));
    }
    let deepest = nesting(format, text.as_bytes());
    if deepest > MAX_SCHEMA_NESTING {
        return Err(format!(
            "the schema nests {deepest} deep; at most {MAX_SCHEMA_NESTING}"
        ));
    }
    Ok(())
}

/// The deepest bracket nesting (`{`, `[`, `(`; Protobuf's `<` too) of `text`, read as its
/// parser reads it: brackets inside string literals do not count, nor, in Protobuf, inside
/// comments (`//` and, in an option's text-format value, `#` to the line's end; `/* */`). A
/// review of #37 hid 87,000 levels of an option value between two `// "` lines, which a scan
/// that took the comments' quotes for strings counted as none.
fn nesting(format: Format, text: &[u8]) -> usize {
    enum In {
        Code,
        Quote(u8),
        Escaped(u8),
        LineComment,
        BlockComment,
    }
    let proto = format == Format::Protobuf;
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut state = In::Code;
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        let next = text.get(i + 1).copied();
        i += 1;
        state = match state {
            In::Escaped(q) => In::Quote(q),
            In::Quote(q) if b == b'\\' => In::Escaped(q),
            In::Quote(q) if b == q => In::Code,
            In::Quote(q) => In::Quote(q),
            In::LineComment if b == b'\n' => In::Code,
            In::LineComment => In::LineComment,
            In::BlockComment if b == b'*' && next == Some(b'/') => {
                i += 1;
                In::Code
            }
            In::BlockComment => In::BlockComment,
            In::Code => match b {
                b'"' => In::Quote(b),
                // Protobuf strings may be single-quoted too; JSON has no such strings.
                b'\'' if proto => In::Quote(b),
                b'#' if proto => In::LineComment,
                b'/' if proto && next == Some(b'/') => In::LineComment,
                b'/' if proto && next == Some(b'*') => {
                    i += 1;
                    In::BlockComment
                }
                // Protobuf's text format nests option values in `< >` as well as `{ }`.
                b'{' | b'[' | b'(' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                    In::Code
                }
                b'<' if proto => {
                    depth += 1;
                    deepest = deepest.max(depth);
                    In::Code
                }
                b'}' | b']' | b')' => {
                    depth = depth.saturating_sub(1);
                    In::Code
                }
                b'>' if proto => {
                    depth = depth.saturating_sub(1);
                    In::Code
                }
                _ => In::Code,
            },
        };
    }
    deepest
}

/// Compiles a schema within its bounds, measuring what the compile keeps on the heap: a
/// schema over `max_memory` is refused (and freed) here.
pub(super) fn compile(
    format: Format,
    text: &str,
    bounds: &CompileBounds,
) -> Result<(Codec, usize), CompileError> {
    within_bounds(format, text, bounds.max_text).map_err(CompileError::Invalid)?;
    let (codec, measured) = crate::heap::measure(|| -> Result<Codec, CompileError> {
        Ok(match format {
            Format::Avro => Codec::Avro(Box::new(
                avro::AvroSchema::parse(text).map_err(CompileError::Invalid)?,
            )),
            Format::Json => Codec::Json(json::JsonSchema::parse_within(text, bounds.json)?),
            Format::Protobuf => Codec::Protobuf(
                protobuf::ProtobufSchema::parse(text).map_err(CompileError::Invalid)?,
            ),
        })
    });
    let codec = codec?;
    // Without the counting allocator (a benchmark's own), the multiples the review measured:
    // a Protobuf descriptor pool ~150x its text, a JSON Schema validator ~25x, Avro ~16x.
    let memory = measured.unwrap_or_else(|| {
        let factor = match format {
            Format::Avro => 16,
            Format::Json => 32,
            Format::Protobuf => 160,
        };
        text.len().saturating_mul(factor)
    });
    if memory > bounds.max_memory {
        return Err(CompileError::TooCostly(format!(
            "the compiled schema takes {memory} bytes of memory; at most {} ([schema_registry] max_schema_memory_bytes)",
            bounds.max_memory
        )));
    }
    Ok((codec, memory))
}

pub(super) fn format_name(format: Format) -> &'static str {
    match format {
        Format::Avro => "AVRO",
        Format::Json => "JSONSCHEMA",
        Format::Protobuf => "PROTOBUF",
    }
}

impl Codec {
    pub(super) fn record_name(&self) -> Option<&str> {
        match self {
            Self::Avro(s) => s.record_name.as_deref(),
            Self::Json(s) => s.record_name.as_deref(),
            Self::Protobuf(s) => s.record_name.as_deref(),
        }
    }
}

impl Compiled {
    /// A schema compiled from its text, as if the registry had given it this id (the
    /// benchmarks and tests use it; the gateway compiles what the registry answers).
    pub fn new(id: u32, format: Format, text: &str) -> Result<Self, String> {
        let (codec, memory) =
            compile(format, text, &CompileBounds::default()).map_err(|e| e.to_string())?;
        Ok(Self {
            id,
            format,
            codec: Arc::new(codec),
            memory,
        })
    }

    /// The same schema under its registry id.
    pub(super) fn with_id(&self, id: u32) -> Self {
        Self {
            id,
            format: self.format,
            codec: self.codec.clone(),
            memory: self.memory,
        }
    }

    /// What checking `data` may cost at most, in the JSON Schema cost model's units, where it
    /// is known before the check runs: a JSON Schema's cost model (by its length), a Protobuf
    /// value's mapping and writing (each byte by its depth: [`super::protobuf::work`]). An
    /// Avro value's walk is bounded in steps instead, and its schema's defaults may make a
    /// short value long to walk, so it has none here.
    pub(super) fn work_bound(&self, data: &[u8]) -> Option<u64> {
        match &*self.codec {
            Codec::Json(j) => Some(j.cost().saturating_mul(data.len() as u64 + 1)),
            Codec::Protobuf(_) => Some(super::protobuf::work(data)),
            Codec::Avro(_) => None,
        }
    }

    /// The most CPU a check of `data` may take by the cost model (one unit a nanosecond), for
    /// a check that cannot be stopped while it runs (JSON Schema, Protobuf); `None` for an
    /// Avro walk, which stops where it is told.
    pub(super) fn unstoppable_cpu(&self, data: &[u8]) -> Option<std::time::Duration> {
        self.work_bound(data).map(std::time::Duration::from_nanos)
    }

    /// `data` checked (`keep_json`: kept as it is) or written in its wire format, stopped past
    /// `deadline` where the codec can stop.
    pub(super) fn write_by(
        &self,
        data: &[u8],
        limit: usize,
        keep_json: bool,
        until: Until,
    ) -> Written {
        if keep_json {
            self.check_by(data, until).map(|()| None)
        } else {
            self.encode_by(data, limit, until).map(Some)
        }
    }

    /// [`Self::write_by`] on the request worker, doing at most `work` (the cost model's units):
    /// what it found and the work it took, or `Err(work taken)` if the check would need more
    /// than `work` — it goes to the pool. A JSON Schema or Protobuf check past `work` by its
    /// bound does not start; an Avro walk stops when it has taken `work` in steps (review 19
    /// of #37: records `{}` whose schema's defaults expand to thousands of steps each were
    /// counted by their length, so a request of 10,000 of them ran ~9.5 s on a request worker).
    pub(super) fn write_inline(
        &self,
        data: &[u8],
        limit: usize,
        keep_json: bool,
        work: u64,
    ) -> Result<(Written, u64), u64> {
        let Codec::Avro(_) = &*self.codec else {
            return match self.work_bound(data) {
                Some(bound) if bound <= work => Ok((
                    self.write_by(data, limit, keep_json, Until::default()),
                    bound,
                )),
                _ => Err(0),
            };
        };
        let whole = avro_steps(data.len());
        let given = whole.min(work / WORK_PER_AVRO_STEP);
        let mut left = given;
        // A check keeps the JSON: encoded without a limit, as `check_by` does.
        let result = self.encode_within(
            data,
            if keep_json { usize::MAX } else { limit },
            Some(&mut left),
            Until::default(),
        );
        let taken = (given - left).saturating_mul(WORK_PER_AVRO_STEP);
        match result {
            // Out of the steps given here, not of the value's own: the pool's run decides.
            Err(m) if m.too_costly && left == 0 && given < whole => Err(taken),
            result => Ok((result.map(|out| (!keep_json).then_some(out)), taken)),
        }
    }

    /// `data` (JSON text) in Confluent's wire format under this schema, the payload at most
    /// `limit` bytes (Avro's defaults can make a small value large).
    pub fn encode(&self, data: &[u8], limit: usize) -> Result<Vec<u8>, Mismatch> {
        self.encode_by(data, limit, Until::default())
    }

    /// [`Self::encode`], stopped past `deadline` where the codec can stop (Avro's walk; a
    /// JSON Schema check is bounded by its cost model before it starts, a Protobuf value's
    /// mapping is linear in it).
    pub fn encode_by(&self, data: &[u8], limit: usize, until: Until) -> Result<Vec<u8>, Mismatch> {
        self.encode_within(data, limit, None, until)
    }

    /// [`Self::encode_by`], an Avro walk taking its steps from `steps` when given (the
    /// inline share, what is left of it after), else from its value's own bound.
    fn encode_within(
        &self,
        data: &[u8],
        limit: usize,
        steps: Option<&mut u64>,
        until: Until,
    ) -> Result<Vec<u8>, Mismatch> {
        let value = match &*self.codec {
            Codec::Protobuf(p) => p.value_memory(),
            _ => None,
        };
        parse_within_memory(data, value)?;
        let payload = match (&*self.codec, steps) {
            (Codec::Avro(a), Some(steps)) => {
                a.encode_counted(&parse_json(data)?, limit, steps, until)?
            }
            (Codec::Avro(a), None) => {
                let mut steps = avro_steps(data.len());
                a.encode_counted(&parse_json(data)?, limit, &mut steps, until)?
            }
            (Codec::Protobuf(p), _) => p.encode(data)?,
            (Codec::Json(j), _) => {
                j.check(&parse_json(data)?)?;
                data.to_vec()
            }
        };
        let mut out = Vec::with_capacity(5 + payload.len());
        out.push(0);
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&payload);
        Ok(out)
    }

    /// What the compiled schema takes in memory, as the cache counts it: what its compile
    /// kept, its patterns' match caches, and a fixed part.
    pub(super) fn footprint(&self) -> usize {
        let patterns = match &*self.codec {
            Codec::Json(j) => j.patterns(),
            _ => 0,
        };
        self.memory
            .saturating_add(patterns.saturating_mul(PATTERN_CACHE_BYTES))
            .saturating_add(1024)
    }

    /// Checks `data` (JSON text) against a JSON Schema, keeping it as it is.
    pub fn check(&self, data: &[u8]) -> Result<(), Mismatch> {
        self.check_by(data, Until::default())
    }

    /// [`Self::check`], stopped past `deadline` as [`Self::encode_by`] is.
    pub fn check_by(&self, data: &[u8], until: Until) -> Result<(), Mismatch> {
        match &*self.codec {
            Codec::Json(j) => {
                parse_within_memory(data, None)?;
                j.check(&parse_json(data)?)
            }
            // A contract's validate mode is for JSON Schema only (the configuration says so);
            // any other codec encodes to check.
            _ => self.encode_by(data, usize::MAX, until).map(drop),
        }
    }
}

/// Whether the value's parsed form fits [`MAX_PARSE_MEMORY`] (see [`super::parse_memory`]):
/// asked before any codec reads it.
fn parse_within_memory(data: &[u8], value: Option<u64>) -> Result<(), Mismatch> {
    // A value this short fits whatever it holds: the common record is not scanned.
    let most = MOST_PER_BYTE.max(value.unwrap_or(0) + MOST_PER_BYTE);
    if (data.len() as u64).saturating_mul(most) <= MAX_PARSE_MEMORY {
        return Ok(());
    }
    let memory = value.map_or_else(|| estimate(data), |v| estimate_at(data, v));
    if memory <= MAX_PARSE_MEMORY {
        return Ok(());
    }
    Err(Mismatch {
        too_costly: true,
        pointer: String::new(),
        message: format!(
            "reading it for its schema would take about {} MiB of memory, more than {} MiB: send a smaller value, or one of fewer and larger parts",
            memory.div_ceil(1024 * 1024),
            MAX_PARSE_MEMORY / (1024 * 1024)
        ),
    })
}

fn parse_json(data: &[u8]) -> Result<serde_json::Value, Mismatch> {
    serde_json::from_slice(data).map_err(|e| Mismatch {
        too_costly: false,
        pointer: String::new(),
        message: format!("is not JSON: {e}"),
    })
}

//! Content-coded request bodies (`Content-Encoding`), inflated a piece at a time within bounds.
//!
//! [`Codings::parse`] reads a body's codings: `gzip` (and `x-gzip`), `deflate` (zlib, or raw
//! deflate as some browsers send it — told apart by the zlib header), `zstd` and `snappy` (the
//! framing format, or one raw block as Vector and Prometheus send it — told apart by the
//! framing format's stream identifier); `identity` is no coding at all. At most
//! [`MAX_CODINGS`] may be stacked; they are decoded in the reverse of the order they were
//! applied, as RFC 9110 §8.4 lists them.
//!
//! An [`Inflater`] is a chain of push decoders, one stage per coding: wire bytes go in
//! ([`Inflater::push`]), output comes out in pieces of at most [`PIECE`] bytes
//! ([`Inflater::next_piece`]), and each stage is asked for no more than the next one needs. So
//! one call does at most a piece's work per stage, what a stage holds is its own state plus a
//! piece, and a bomb is refused while it inflates: every stage's output is bounded by
//! `max_output` and by `ratio` times the wire bytes consumed so far (plus [`RATIO_FLOOR`]),
//! checked after every piece. A stage's output counts, not only the last one's, so a stack
//! cannot inflate a middle layer without limit and throw it away (zstd's skippable frames).
//!
//! Layer: foundations. Imports nothing of floodgate's.

mod codings;
mod flate;
mod snappy;
mod snappy_raw;
mod zstd;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

pub use codings::{Coding, Codings, Unsupported};

/// Most codings one body may stack (`Content-Encoding: gzip, zstd` is two). More are refused
/// (415): no client stacks three, and each layer is another decoder's state to hold.
pub const MAX_CODINGS: usize = 2;

/// Most bytes one call of [`Inflater::next_piece`] produces, and what each stage is asked for
/// at once: small enough that one step is tens of microseconds, large enough that the calls
/// cost nothing beside the inflating.
pub const PIECE: usize = 64 * 1024;

/// Output a body may always inflate to, whatever its ratio: small bodies of repetitive records
/// compress far past any ratio a bomb is told apart by.
pub const RATIO_FLOOR: u64 = 64 * 1024;

/// The largest zstd window a frame may ask for (2^23 = 8 MiB, what zstd's levels 1 to 19 use;
/// `--long` asks for 128 MiB and is refused): the decoder allocates the window the frame names.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// The value of `Accept-Encoding` on a 415: what a body may be coded with.
pub const ACCEPTED: &str = "gzip, deflate, zstd, snappy, identity";

/// The bounds one body is inflated within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes any stage may produce (`max_body_bytes` for a request; a stream's length is
    /// bounded by its time instead).
    pub max_output: u64,
    /// Most wire bytes (`max_body_bytes` for a request: the coded body is bounded too).
    pub max_input: u64,
    /// Most bytes a stage may produce per wire byte consumed, past [`RATIO_FLOOR`].
    pub ratio: u32,
    /// Largest raw snappy block (its length is declared up front and the whole block is kept
    /// while it is decoded, so it is bounded even on a stream).
    pub max_block: u64,
}

/// Why a body could not be inflated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InflateError {
    /// Not valid data of its coding.
    Invalid { coding: Coding, detail: String },
    /// It inflates past this many bytes (or its coded form is longer).
    TooLarge { limit: u64 },
    /// It inflates to more than this many times the bytes it was sent in.
    Ratio { ratio: u32 },
}

impl fmt::Display for InflateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InflateError::Invalid { coding, detail } => {
                write!(f, "the body is not valid {coding}: {detail}")
            }
            InflateError::TooLarge { limit } => {
                write!(f, "the body inflates past {limit} bytes")
            }
            InflateError::Ratio { ratio } => {
                write!(
                    f,
                    "the body inflates to more than {ratio} times its coded size"
                )
            }
        }
    }
}

impl std::error::Error for InflateError {}

/// What a stage's step found wrong.
#[derive(Debug)]
enum StageError {
    Invalid(String),
    TooLarge(u64),
}

impl From<String> for StageError {
    fn from(detail: String) -> Self {
        StageError::Invalid(detail)
    }
}

/// One coding's decoder: a push decoder driven by the chain.
enum Stage {
    Flate(flate::Flate),
    Zstd(zstd::Zstd),
    Snappy(snappy::Snappy),
}

impl Stage {
    /// Allocates nothing yet: a decoder's state is made at its first byte.
    fn new(coding: Coding, limits: &Limits) -> Self {
        match coding {
            Coding::Gzip => Stage::Flate(flate::Flate::gzip()),
            Coding::Deflate => Stage::Flate(flate::Flate::deflate()),
            Coding::Zstd => Stage::Zstd(zstd::Zstd::new()),
            Coding::Snappy => Stage::Snappy(snappy::Snappy::new(limits.max_block)),
        }
    }

    /// Decodes from the front of `input` into `out`: (bytes consumed, bytes written). `end`:
    /// no input will come after `input`. Makes progress, or needs more input, or (at the
    /// end, all input consumed) is finished.
    fn step(
        &mut self,
        input: &[u8],
        end: bool,
        out: &mut [u8],
    ) -> Result<(usize, usize), StageError> {
        match self {
            Stage::Flate(s) => s.step(input, end, out).map_err(StageError::Invalid),
            Stage::Zstd(s) => s.step(input, out).map_err(StageError::Invalid),
            Stage::Snappy(s) => s.step(input, end, out),
        }
    }

    /// The coded data ended where it may end (or never began: an empty body).
    fn finished(&self) -> bool {
        match self {
            Stage::Flate(s) => s.finished(),
            Stage::Zstd(s) => s.finished(),
            Stage::Snappy(s) => s.finished(),
        }
    }

    /// Bytes of memory the decoder holds now.
    fn memory(&self) -> usize {
        match self {
            Stage::Flate(s) => s.memory(),
            Stage::Zstd(s) => s.memory(),
            Stage::Snappy(s) => s.memory(),
        }
    }
}

/// One stage and the input waiting for it.
struct Slot {
    coding: Coding,
    stage: Stage,
    /// Input not consumed yet, from `start`.
    input: Vec<u8>,
    start: usize,
    /// No input will be added.
    input_end: bool,
    consumed: u64,
    produced: u64,
    /// Input consumed since this stage last wrote anything: past a piece, the task yields
    /// (empty deflate blocks, gzip members or zstd frames make no output, so no piece would
    /// ever mark a turn, and the ratio bound never sees them).
    idle: usize,
}

impl Slot {
    fn pending(&self) -> &[u8] {
        self.input.get(self.start..).unwrap_or_default()
    }

    /// Drops the consumed front of the input.
    fn compact(&mut self) {
        if self.start > 0 {
            self.input.drain(..self.start);
            self.start = 0;
        }
    }
}

/// What [`Inflater::next_piece`] has.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// The next piece of output (at most [`PIECE`] bytes).
    Piece(Vec<u8>),
    /// Nothing until more wire bytes are pushed.
    NeedInput,
    /// A piece of work done and nothing to hand out yet (an inner layer took a piece of the
    /// outer one's output and made nothing of it, as zstd skipping a frame does): ask again,
    /// after letting others run.
    Again,
    /// The body is done: every stage finished.
    End,
}

/// What filling a stage's output found.
enum Filled {
    Wrote(usize),
    NeedInput,
    Again,
    End,
}

/// Bytes in and out of each coding's decoder, and bodies coded with it, since start (the
/// metrics read them; relaxed counters, one add per stage and piece).
#[derive(Debug, Default)]
pub struct Counters {
    bodies: [AtomicU64; Coding::ALL.len()],
    coded: [AtomicU64; Coding::ALL.len()],
    decoded: [AtomicU64; Coding::ALL.len()],
}

impl Counters {
    /// Per coding: (bodies, bytes in, bytes out).
    pub fn snapshot(&self) -> impl Iterator<Item = (Coding, u64, u64, u64)> + '_ {
        Coding::ALL.iter().map(|c| {
            let i = *c as usize;
            (
                *c,
                self.bodies[i].load(Ordering::Relaxed),
                self.coded[i].load(Ordering::Relaxed),
                self.decoded[i].load(Ordering::Relaxed),
            )
        })
    }
}

/// A chain of decoders for one body (see the module's comment).
pub struct Inflater {
    /// In decoding order: the first decodes the wire, the last produces the output.
    slots: Vec<Slot>,
    limits: Limits,
    pushed: u64,
    /// The output piece being filled (kept: one allocation per body).
    piece: Vec<u8>,
    counters: std::sync::Arc<Counters>,
}

impl fmt::Debug for Inflater {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inflater")
            .field(
                "codings",
                &self.slots.iter().map(|s| s.coding).collect::<Vec<_>>(),
            )
            .field("pushed", &self.pushed)
            .finish_non_exhaustive()
    }
}

impl Inflater {
    /// A chain for `codings`; `None` for identity (nothing to inflate). Cheap: the decoders
    /// allocate their state at their first byte.
    pub fn new(
        codings: Codings,
        limits: Limits,
        counters: std::sync::Arc<Counters>,
    ) -> Option<Self> {
        if codings.is_identity() {
            return None;
        }
        let slots = codings
            .applied()
            .rev()
            .map(|coding| {
                counters.bodies[coding as usize].fetch_add(1, Ordering::Relaxed);
                Slot {
                    coding,
                    stage: Stage::new(coding, &limits),
                    input: Vec::new(),
                    start: 0,
                    input_end: false,
                    consumed: 0,
                    produced: 0,
                    idle: 0,
                }
            })
            .collect();
        Some(Self {
            slots,
            limits,
            pushed: 0,
            piece: Vec::new(),
            counters,
        })
    }

    /// Hands in the next wire bytes (after [`Next::NeedInput`]).
    pub fn push(&mut self, wire: &[u8]) -> Result<(), InflateError> {
        self.pushed += wire.len() as u64;
        if self.pushed > self.limits.max_input {
            return Err(InflateError::TooLarge {
                limit: self.limits.max_input,
            });
        }
        if let Some(first) = self.slots.first_mut() {
            first.compact();
            first.input.extend_from_slice(wire);
        }
        Ok(())
    }

    /// No more wire bytes will come.
    pub fn end_input(&mut self) {
        if let Some(first) = self.slots.first_mut() {
            first.input_end = true;
        }
    }

    /// The next piece of output, or what is needed before there is one.
    pub fn next_piece(&mut self) -> Result<Next, InflateError> {
        let mut piece = std::mem::take(&mut self.piece);
        piece.resize(PIECE, 0);
        let last = self.slots.len().saturating_sub(1);
        let filled = self.fill(last, &mut piece);
        let next = match filled {
            Ok(Filled::Wrote(n)) => Ok(Next::Piece(piece[..n].to_vec())),
            Ok(Filled::NeedInput) => Ok(Next::NeedInput),
            Ok(Filled::Again) => Ok(Next::Again),
            Ok(Filled::End) => Ok(Next::End),
            Err(e) => Err(e),
        };
        self.piece = piece;
        next
    }

    /// Bytes of memory the chain holds now: its decoders' state and the input waiting for them.
    pub fn memory(&self) -> usize {
        self.piece.capacity()
            + self
                .slots
                .iter()
                .map(|s| s.stage.memory() + s.input.capacity())
                .sum::<usize>()
    }

    /// Fills `out` from stage `i`, pulling input from the stage before it as needed — one
    /// piece of it per call at most, so a call's work stays a piece per stage.
    fn fill(&mut self, i: usize, out: &mut [u8]) -> Result<Filled, InflateError> {
        let mut refilled = false;
        loop {
            let Some(slot) = self.slots.get_mut(i) else {
                return Ok(Filled::End);
            };
            let coding = slot.coding;
            let end = slot.input_end;
            let pending = slot.input.get(slot.start..).unwrap_or_default();
            let (used, wrote) = slot.stage.step(pending, end, out).map_err(|e| match e {
                StageError::Invalid(detail) => InflateError::Invalid { coding, detail },
                StageError::TooLarge(limit) => InflateError::TooLarge { limit },
            })?;
            slot.start += used;
            slot.consumed += used as u64;
            slot.produced += wrote as u64;
            slot.idle = if wrote > 0 { 0 } else { slot.idle + used };
            let turn_over = slot.idle >= PIECE;
            if turn_over {
                slot.idle = 0;
            }
            if slot.start == slot.input.len() {
                slot.input.clear();
                slot.start = 0;
            }
            self.counters.coded[coding as usize].fetch_add(used as u64, Ordering::Relaxed);
            self.counters.decoded[coding as usize].fetch_add(wrote as u64, Ordering::Relaxed);
            self.check_bounds(i)?;
            if wrote > 0 {
                return Ok(Filled::Wrote(wrote));
            }
            if turn_over {
                return Ok(Filled::Again);
            }
            if used > 0 {
                continue;
            }
            let slot = &self.slots[i];
            if slot.input_end {
                // No progress, and no input will come: the coded data ends here, or too soon.
                if slot.pending().is_empty() && slot.stage.finished() {
                    return Ok(Filled::End);
                }
                return Err(InflateError::Invalid {
                    coding,
                    detail: "the body ended before the coded data did".into(),
                });
            }
            if i == 0 {
                return Ok(Filled::NeedInput);
            }
            if refilled {
                return Ok(Filled::Again);
            }
            refilled = true;
            match self.refill(i)? {
                Filled::NeedInput => return Ok(Filled::NeedInput),
                Filled::Again => return Ok(Filled::Again),
                Filled::Wrote(_) | Filled::End => {}
            }
        }
    }

    /// Adds a piece of the previous stage's output to stage `i`'s input.
    fn refill(&mut self, i: usize) -> Result<Filled, InflateError> {
        let slot = &mut self.slots[i];
        slot.compact();
        let mut input = std::mem::take(&mut slot.input);
        let had = input.len();
        input.resize(had + PIECE, 0);
        let filled = self.fill(i - 1, &mut input[had..]);
        let slot = &mut self.slots[i];
        match &filled {
            Ok(Filled::Wrote(n)) => input.truncate(had + n),
            Ok(Filled::End) => {
                input.truncate(had);
                slot.input_end = true;
            }
            Ok(Filled::NeedInput | Filled::Again) | Err(_) => input.truncate(had),
        }
        slot.input = input;
        filled
    }

    /// Every stage's output so far within `max_output`, and within `ratio` times the wire
    /// bytes consumed (past the floor).
    fn check_bounds(&self, i: usize) -> Result<(), InflateError> {
        let produced = self.slots[i].produced;
        if produced > self.limits.max_output {
            return Err(InflateError::TooLarge {
                limit: self.limits.max_output,
            });
        }
        let wire = self.slots.first().map_or(0, |s| s.consumed);
        let allowed = wire
            .saturating_mul(u64::from(self.limits.ratio))
            .saturating_add(RATIO_FLOOR);
        if produced > allowed {
            return Err(InflateError::Ratio {
                ratio: self.limits.ratio,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

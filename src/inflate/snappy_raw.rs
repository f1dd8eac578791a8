//! One raw snappy block (google/snappy `format_description.txt`), decoded a piece at a time.
//!
//! snap decodes a raw block in one call, all of it; a body of `max_body_bytes` would be one
//! long step on a request worker. The format is small enough to decode resumably here: the
//! inflated length (a varint), then elements — a literal (its length in the tag or in 1 to 4
//! bytes after it, then the bytes) or a copy of 1 to 64 bytes from an offset back in what is
//! already inflated. Copies may reach back anywhere in the block, so the inflated block is
//! kept whole until it ends (its declared length, at most `max_block`, is checked first and
//! the memory is counted as it grows). Elements are decoded only when whole, and only until
//! the next piece is full. Tested against snap's own encoder and decoder (`tests.rs`).

use super::StageError;

pub(super) struct RawBlock {
    max_block: u64,
    /// The declared inflated length, once read.
    len: Option<usize>,
    /// What is inflated so far (copies refer back into it).
    inflated: Vec<u8>,
    /// How much of it has been handed out.
    given: usize,
}

impl RawBlock {
    pub(super) fn new(max_block: u64) -> Self {
        Self {
            max_block,
            len: None,
            inflated: Vec::new(),
            given: 0,
        }
    }

    pub(super) fn step(
        &mut self,
        input: &[u8],
        end: bool,
        out: &mut [u8],
    ) -> Result<(usize, usize), StageError> {
        let mut used = 0;
        let len = match self.len {
            Some(len) => len,
            None => match varint(input)? {
                None if end && !input.is_empty() => {
                    return Err("the body ends inside the block's length".to_string().into())
                }
                None => return Ok((0, 0)),
                Some((declared, n)) => {
                    if declared > self.max_block {
                        return Err(StageError::TooLarge(self.max_block));
                    }
                    used = n;
                    let declared = usize::try_from(declared).unwrap_or(usize::MAX);
                    *self.len.insert(declared)
                }
            },
        };
        // Decode whole elements until a piece is waiting to be handed out.
        while self.inflated.len() - self.given < out.len() && self.inflated.len() < len {
            let Some(n) = self.element(&input[used..], len)? else {
                break;
            };
            used += n;
        }
        if self.inflated.len() == len && used < input.len() {
            return Err("bytes after the end of the block".to_string().into());
        }
        let ready = &self.inflated[self.given..];
        let wrote = ready.len().min(out.len());
        out[..wrote].copy_from_slice(&ready[..wrote]);
        self.given += wrote;
        Ok((used, wrote))
    }

    /// The declared length is inflated and handed out (or nothing began: an empty body).
    pub(super) fn finished(&self) -> bool {
        self.len
            .is_none_or(|len| self.inflated.len() == len && self.given == len)
    }

    pub(super) fn memory(&self) -> usize {
        self.inflated.capacity()
    }

    /// Decodes the element at the front of `input` if it is whole: the bytes it took.
    fn element(&mut self, input: &[u8], len: usize) -> Result<Option<usize>, String> {
        let Some(&tag) = input.first() else {
            return Ok(None);
        };
        let (offset, copy, taken) = match tag & 3 {
            0 => return self.literal(tag, input, len),
            1 => match input.get(1) {
                // Copy with a 1-byte offset: 4 to 11 bytes, an 11-bit offset.
                Some(&low) => (
                    usize::from(tag >> 5) << 8 | usize::from(low),
                    4 + usize::from(tag >> 2 & 7),
                    2,
                ),
                None => return Ok(None),
            },
            2 => match input.get(1..3) {
                Some(&[a, b]) => (
                    usize::from(u16::from_le_bytes([a, b])),
                    1 + usize::from(tag >> 2),
                    3,
                ),
                _ => return Ok(None),
            },
            _ => match input.get(1..5) {
                Some(&[a, b, c, d]) => (
                    usize::try_from(u32::from_le_bytes([a, b, c, d])).unwrap_or(usize::MAX),
                    1 + usize::from(tag >> 2),
                    5,
                ),
                _ => return Ok(None),
            },
        };
        self.copy(offset, copy, len)?;
        Ok(Some(taken))
    }

    /// A literal: its length (in the tag, or in the 1 to 4 bytes after it), then its bytes.
    fn literal(&mut self, tag: u8, input: &[u8], len: usize) -> Result<Option<usize>, String> {
        let mut n = usize::from(tag >> 2);
        let mut head = 1;
        if n >= 60 {
            let extra = n - 59;
            let Some(bytes) = input.get(1..1 + extra) else {
                return Ok(None);
            };
            n = bytes
                .iter()
                .rev()
                .fold(0usize, |acc, b| acc << 8 | usize::from(*b));
            head += extra;
        }
        let n = n.saturating_add(1);
        if n > len - self.inflated.len() {
            return Err("a literal runs past the block's declared length".into());
        }
        let Some(bytes) = input.get(head..head + n) else {
            return Ok(None);
        };
        self.grow(n, len);
        self.inflated.extend_from_slice(bytes);
        Ok(Some(head + n))
    }

    /// A copy of `n` bytes from `offset` back: repeating, when it overlaps what it writes.
    fn copy(&mut self, offset: usize, n: usize, len: usize) -> Result<(), String> {
        if offset == 0 || offset > self.inflated.len() {
            return Err("a copy reaches before the start of the block".into());
        }
        if n > len - self.inflated.len() {
            return Err("a copy runs past the block's declared length".into());
        }
        self.grow(n, len);
        let from = self.inflated.len() - offset;
        let mut left = n;
        while left > 0 {
            // What lies from `from` to the end repeats with period `offset`: copying a span
            // of it that ends at the end keeps the byte-by-byte meaning.
            let take = left.min(self.inflated.len() - from);
            self.inflated.extend_from_within(from..from + take);
            left -= take;
        }
        Ok(())
    }

    /// Room for `n` more bytes, growing by doubling but never past the declared length, so the
    /// memory counted follows what is inflated.
    fn grow(&mut self, n: usize, len: usize) {
        let need = self.inflated.len() + n;
        if need > self.inflated.capacity() {
            let target = need.max(2 * self.inflated.capacity()).min(len);
            self.inflated.reserve_exact(target - self.inflated.len());
        }
    }
}

/// The block's inflated length: a little-endian base-128 varint of at most 32 bits.
fn varint(input: &[u8]) -> Result<Option<(u64, usize)>, String> {
    let mut value = 0u64;
    for (i, b) in input.iter().take(5).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if value > u64::from(u32::MAX) {
                return Err("the block's length is over 4 GiB".into());
            }
            return Ok(Some((value, i + 1)));
        }
    }
    if input.len() >= 5 {
        return Err("the block's length is not a varint of at most 5 bytes".into());
    }
    Ok(None)
}

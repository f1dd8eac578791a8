//! The common `/v1` record, read in one pass without serde: what serde_json costs per record
//! on our shape (~270-byte objects of short strings and numbers) is mostly per-token overhead,
//! and neither SIMD JSON crate is faster there (BENCHMARKS.md, "Parsing").
//!
//! This reader is a fast path only. It accepts a record exactly when it is valid JSON, a valid
//! `/v1` record within its bounds, and simple enough for this reader (field names, keys and
//! header strings without escapes; whole numbers written as such); then it returns the same
//! record serde_json's path would. Anything else — every error, and every rarer form — it
//! declines (`None`), and the serde_json path decides and names the error. A differential test
//! holds the two paths to that, on valid records and thousands of mutations of them.

use std::ops::Range;

use crate::body::arena::{RecordArena, RecordWriter};
use crate::body::MAX_VALUE_DEPTH;
use crate::config::RequestBounds;

/// Reads a `/v1` record from the start of `text` straight into `arena`: its length, or `None`
/// with `arena` as it was. With `whole`, only JSON white space may follow the record.
pub(crate) fn record_into(
    text: &[u8],
    bounds: &RequestBounds,
    arena: &mut RecordArena,
    whole: bool,
) -> Option<usize> {
    let mut r = Reader { text, at: 0 };
    let mut out = arena.writer();
    let mut value: Option<Option<&[u8]>> = None;
    let mut value_b64: Option<&[u8]> = None;
    let mut key: Option<&[u8]> = None;
    let mut key_b64: Option<&[u8]> = None;
    let mut headers_seen = false;
    let mut partition: Option<i32> = None;
    let mut timestamp_ms: Option<i64> = None;
    r.expect(b'{')?;
    loop {
        r.skip_space();
        let name = r.plain_string()?;
        r.skip_space();
        r.expect(b':')?;
        r.skip_space();
        match name {
            b"value" if value.is_none() => {
                let start = r.at;
                r.value()?;
                let raw = text.get(start..r.at)?;
                value = Some((raw != b"null").then_some(raw));
            }
            b"value_b64" if value_b64.is_none() => value_b64 = Some(r.plain_string()?),
            b"key" if key.is_none() => key = Some(r.plain_string()?),
            b"key_b64" if key_b64.is_none() => key_b64 = Some(r.plain_string()?),
            b"headers" if !headers_seen => {
                headers_seen = true;
                r.headers(&mut out, bounds.max_headers_bytes)?;
            }
            b"partition" if partition.is_none() => {
                partition = Some(i32::try_from(r.whole()?).ok()?);
            }
            b"timestamp_ms" if timestamp_ms.is_none() => timestamp_ms = Some(r.whole()?),
            // Unknown or repeated fields: the serde path names them.
            _ => return None,
        }
        r.skip_space();
        match r.next()? {
            b',' => continue,
            b'}' => break,
            _ => return None,
        }
    }
    // Everything that can decline without copying is checked before anything is copied.
    if whole && !text.get(r.at..)?.iter().all(|&b| is_json_space(b)) {
        return None;
    }
    if partition.is_some_and(|p| p < 0) || timestamp_ms.is_some_and(|t| t < 0) {
        return None;
    }
    let value = match (value, value_b64) {
        (Some(raw), None) => raw.map(|v| out.put(v)),
        (None, Some(b64)) => Some(out.put_base64(&LENIENT_B64, b64)?),
        _ => return None,
    };
    let key = match (key, key_b64) {
        (Some(k), None) => Some(out.put(k)),
        (None, Some(b64)) => Some(out.put_base64(&LENIENT_B64, b64)?),
        (None, None) => None,
        _ => return None,
    };
    let len = |r: &Option<Range<usize>>| r.as_ref().map_or(0, |r| r.len());
    if len(&key) > bounds.max_key_bytes || len(&value) > bounds.max_value_bytes {
        return None;
    }
    out.commit(key, value, partition, timestamp_ms);
    Some(r.at)
}

/// `/v1`'s base64 (both readers): standard alphabet with padding; unused bits in the last
/// symbol are ignored (RFC 4648 lets decoders accept them, and clients that emit them exist).
pub(super) const LENIENT_B64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

/// JSON's white space (not `u8::is_ascii_whitespace`, which also takes form feed).
fn is_json_space(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

/// Bytes that end the quick run through a string: the quote, a backslash, control characters
/// (invalid in JSON strings) and non-ASCII bytes (whose UTF-8 is then checked).
const STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = i < 0x20 || i == b'"' as usize || i == b'\\' as usize || i >= 0x80;
        i += 1;
    }
    t
};

/// The first byte of eight (little-endian in `w`) that is in [`STOP`], and whether it is the
/// quote, by SWAR: each test sets a byte's high bit; borrows can only mark bytes after a true
/// match, so the lowest mark is exact, and it is the quote's exactly when the quote test set it.
#[inline]
fn word_stop(w: u64) -> Option<(usize, bool)> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    let quote = zero_byte(w ^ (ONES * u64::from(b'"')));
    let backslash = zero_byte(w ^ (ONES * u64::from(b'\\')));
    let marks = control | quote | backslash | (w & HIGH);
    if marks == 0 {
        return None;
    }
    let first = marks & marks.wrapping_neg();
    Some(((marks.trailing_zeros() / 8) as usize, quote & first != 0))
}

/// Eight bytes of `text` from `at`, as a little-endian word, if there are eight.
#[inline]
fn word_at(text: &[u8], at: usize) -> Option<u64> {
    let mut word = [0u8; 8];
    word.copy_from_slice(text.get(at..at.checked_add(8)?)?);
    Some(u64::from_le_bytes(word))
}

/// From `at` inside a string, the first [`STOP`] byte, and whether it is the quote (so the
/// common short string ends without a second look at its quote). `None` if no stop follows.
#[inline]
fn plain_run_end(text: &[u8], mut at: usize) -> Option<(usize, bool)> {
    while let Some(w) = word_at(text, at) {
        if let Some((k, quote)) = word_stop(w) {
            return Some((at + k, quote));
        }
        at += 8;
    }
    let tail = text.get(at..)?;
    let k = tail.iter().position(|&b| STOP[b as usize])?;
    Some((at + k, tail.get(k) == Some(&b'"')))
}

struct Reader<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    fn skip_space(&mut self) {
        // Most tokens have no white space before them: one comparison rules it out.
        while self.peek().is_some_and(|b| b <= b' ' && is_json_space(b)) {
            self.at += 1;
        }
    }

    /// The bytes of a string without escapes (valid UTF-8: checked as it is run through);
    /// declines escapes and control characters.
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let start = self.at;
        self.string_body(false)?;
        self.text.get(start..self.at - 1)
    }

    /// Runs to the closing quote (the opening one is consumed). With `escapes`, valid escapes
    /// are stepped over (value strings); without, a backslash declines. Checks the UTF-8 of
    /// any non-ASCII run.
    ///
    /// Always inlined: most strings end in their first word, and inlined the reader's
    /// position stays in a register instead of going through memory for every string.
    #[inline(always)]
    fn string_body(&mut self, escapes: bool) -> Option<()> {
        let (stop, quote) = plain_run_end(self.text, self.at)?;
        self.at = stop;
        if quote {
            self.at += 1;
            return Some(());
        }
        self.string_rest(escapes)
    }

    /// The rest of a string whose plain run stopped at something other than its quote.
    #[inline(never)]
    fn string_rest(&mut self, escapes: bool) -> Option<()> {
        loop {
            match self.next()? {
                b'"' => return Some(()),
                b'\\' if escapes => self.escape()?,
                b if b >= 0x80 => {
                    // Check this run of non-ASCII text as UTF-8 up to the next ASCII stop.
                    let start = self.at - 1;
                    let rest = self.text.get(start..)?;
                    let end = rest.iter().position(|&b| b < 0x80).unwrap_or(rest.len());
                    std::str::from_utf8(rest.get(..end)?).ok()?;
                    self.at = start + end;
                }
                _ => return None,
            }
            let (stop, quote) = plain_run_end(self.text, self.at)?;
            self.at = stop;
            if quote {
                self.at += 1;
                return Some(());
            }
        }
    }

    fn escape(&mut self) -> Option<()> {
        match self.next()? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(()),
            b'u' => {
                let hex = self.text.get(self.at..self.at + 4)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                self.at += 4;
                Some(())
            }
            _ => None,
        }
    }

    /// A whole number written as one (`-?digits`, no fraction or exponent), in i64.
    fn whole(&mut self) -> Option<i64> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        let digits = self.at;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
        let n = self.at - digits;
        // No leading zeros (JSON), no fraction or exponent (the serde path handles `7.0`).
        if n == 0 || (n > 1 && self.text.get(digits) == Some(&b'0')) {
            return None;
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        std::str::from_utf8(self.text.get(start..self.at)?)
            .ok()?
            .parse()
            .ok()
    }

    /// `{"name": "value", ...}`: names unique, the byte total within `limit`.
    fn headers(&mut self, out: &mut RecordWriter<'_>, limit: usize) -> Option<()> {
        self.expect(b'{')?;
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Some(());
        }
        let mut bytes = 0usize;
        loop {
            self.skip_space();
            // UTF-8, as a header name must be: checked as the string was run through.
            let name = self.plain_string()?;
            self.skip_space();
            self.expect(b':')?;
            self.skip_space();
            let value = self.plain_string()?;
            bytes = bytes.saturating_add(name.len() + value.len());
            // Long header lists go to the serde path's hash set.
            if bytes > limit || out.header_count() >= 16 || out.has_header(name) {
                return None;
            }
            out.header(name, value);
            self.skip_space();
            match self.next()? {
                b',' => continue,
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }

    /// Any JSON value, validated, nesting at most [`MAX_VALUE_DEPTH`] levels.
    fn value(&mut self) -> Option<()> {
        // One bit per open container: set for an object, clear for an array.
        let mut kinds: u128 = 0;
        let mut depth = 0usize;
        loop {
            // A value is expected here.
            self.skip_space();
            match self.peek()? {
                b'{' | b'[' => {
                    let object = self.next()? == b'{';
                    if depth == MAX_VALUE_DEPTH {
                        return None;
                    }
                    kinds = (kinds << 1) | u128::from(object);
                    depth += 1;
                    self.skip_space();
                    let close = if object { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.at += 1;
                        kinds >>= 1;
                        depth -= 1;
                    } else {
                        if object {
                            self.member_name()?;
                        }
                        continue;
                    }
                }
                b'"' => {
                    self.at += 1;
                    self.string_body(true)?;
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // After a value: close containers, or a comma and the next value.
            loop {
                if depth == 0 {
                    return Some(());
                }
                self.skip_space();
                let object = kinds & 1 == 1;
                match (self.next()?, object) {
                    (b',', _) => {
                        if object {
                            self.skip_space();
                            self.member_name()?;
                        }
                        break;
                    }
                    (b'}', true) | (b']', false) => {
                        kinds >>= 1;
                        depth -= 1;
                    }
                    _ => return None,
                }
            }
        }
    }

    /// `"name":` inside a value (escapes allowed, as in any JSON string).
    fn member_name(&mut self) -> Option<()> {
        self.expect(b'"')?;
        self.string_body(true)?;
        self.skip_space();
        self.expect(b':')
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.text.get(self.at..end)? == word).then_some(())?;
        self.at = end;
        Some(())
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            self.some_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }
}

#[cfg(test)]
mod tests;

//! gzip and deflate: zlib's inflate through flate2's push API (`Decompress`), which reads as
//! much input as the output it was given has room for.
//!
//! - gzip: one member or several (RFC 1952 §2.2: concatenated members are one file, as
//!   `MultiGzDecoder` and gzip(1) read them); each member's CRC-32 and length are checked.
//! - deflate: RFC 9110 means the zlib format (RFC 1950), but some clients send raw deflate
//!   (RFC 1951). The first two bytes tell: a zlib header names method 8 with a window of at
//!   most 32 KiB and is a multiple of 31 read as a big-endian number; anything else is read as
//!   raw deflate (and refused as such if it is not).

use flate2::{Decompress, FlushDecompress, Status};

/// zlib's inflate state (about 7 KiB) and its 32 KiB window, allocated by zlib itself.
const STATE_BYTES: usize = 44 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gzip,
    Deflate,
}

pub(super) struct Flate {
    kind: Kind,
    /// The decoder of the current stream; `None` before the first byte (deflate waits for two
    /// to tell zlib from raw).
    inner: Option<Decompress>,
    /// The current stream has ended (a gzip member may follow).
    ended: bool,
}

impl Flate {
    pub(super) fn gzip() -> Self {
        Self {
            kind: Kind::Gzip,
            inner: None,
            ended: false,
        }
    }

    pub(super) fn deflate() -> Self {
        Self {
            kind: Kind::Deflate,
            inner: None,
            ended: false,
        }
    }

    pub(super) fn step(
        &mut self,
        input: &[u8],
        end: bool,
        out: &mut [u8],
    ) -> Result<(usize, usize), String> {
        if input.is_empty() && (self.ended || self.inner.is_none()) {
            return Ok((0, 0));
        }
        if self.ended {
            // Bytes after a finished stream: another gzip member, or trailing garbage.
            if self.kind == Kind::Deflate {
                return Err("bytes after the end of the deflate stream".into());
            }
            if input.len() < 2 && !end {
                return Ok((0, 0));
            }
            if !input.starts_with(&[0x1f, 0x8b]) {
                return Err(
                    "bytes after the end of the gzip stream that are not another \
                            gzip member"
                        .into(),
                );
            }
            self.inner = None;
            self.ended = false;
        }
        let inner = match &mut self.inner {
            Some(inner) => inner,
            None => {
                let decoder = match self.kind {
                    Kind::Gzip => Decompress::new_gzip(15),
                    Kind::Deflate => {
                        if input.len() < 2 && !end {
                            return Ok((0, 0));
                        }
                        Decompress::new(is_zlib_header(input))
                    }
                };
                self.inner.insert(decoder)
            }
        };
        let (in_before, out_before) = (inner.total_in(), inner.total_out());
        let status = inner
            .decompress(input, out, FlushDecompress::None)
            .map_err(|e| detail(&e))?;
        let used = usize::try_from(inner.total_in() - in_before).unwrap_or(usize::MAX);
        let wrote = usize::try_from(inner.total_out() - out_before).unwrap_or(usize::MAX);
        if status == Status::StreamEnd {
            self.ended = true;
        }
        Ok((used, wrote))
    }

    /// A stream ended, or none began (an empty body).
    pub(super) fn finished(&self) -> bool {
        self.ended || self.inner.is_none()
    }

    pub(super) fn memory(&self) -> usize {
        if self.inner.is_some() {
            STATE_BYTES
        } else {
            0
        }
    }
}

/// RFC 1950 §2.2: CM = 8 (deflate), CINFO ≤ 7 (a window of at most 32 KiB), and CMF·256 + FLG
/// a multiple of 31.
pub(super) fn is_zlib_header(input: &[u8]) -> bool {
    match input {
        [cmf, flg, ..] => {
            cmf & 0x0f == 8 && cmf >> 4 <= 7 && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0
        }
        _ => false,
    }
}

/// zlib's own message ("invalid block type", "incorrect data check"), without flate2's prefix.
fn detail(e: &flate2::DecompressError) -> String {
    match (e.needs_dictionary(), e.message()) {
        (Some(_), _) => "it needs a preset dictionary, which is not supported".into(),
        (None, Some(message)) => message.to_string(),
        (None, None) => "invalid compressed data".into(),
    }
}

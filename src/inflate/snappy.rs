//! snappy, in either of its two forms, told apart by the first ten bytes:
//!
//! - the framing format (google/snappy `framing_format.txt`: chunks, each at most 64 KiB
//!   inflated, with a CRC-32C of its data), which starts with the stream identifier chunk. It
//!   is what the format's spec registers (`application/x-snappy-framed`) and what Netty's
//!   `snappy` content coding sends. Decoded by snap's `FrameDecoder`, handed one whole chunk at
//!   a time, so it never blocks on a partial one and each call inflates at most one chunk.
//! - one raw block (`format_description.txt`), what Vector's `http` sink (and Prometheus
//!   remote write) send as `snappy`: its inflated length comes first and bounds it
//!   ([`super::snappy_raw`]).
//!
//! The stream identifier is never the start of a valid raw block (its eighth byte would be a
//! copy reaching before the block's start), so the sniff cannot mistake one for the other.

use std::io::Read as _;

use super::snappy_raw::RawBlock;
use super::StageError;

/// The framing format's stream identifier chunk: type 0xff, length 6, "sNaPpY".
const STREAM_IDENTIFIER: &[u8; 10] = b"\xff\x06\x00\x00sNaPpY";

/// The longest chunk snap's decoder takes (its compressed-chunk buffer): the largest
/// compressed 64 KiB block, its CRC and header. The spec allows longer padding chunks; snap
/// refuses them, and so do we, before buffering one.
const MAX_CHUNK: usize = 76_490;

/// snap's `FrameDecoder` keeps a compressed and an inflated chunk buffer.
const FRAME_DECODER_BYTES: usize = MAX_CHUNK + 65_536;

pub(super) enum Snappy {
    /// Not enough bytes yet to tell the forms apart.
    Sniffing {
        max_block: u64,
    },
    Framed(Box<snap::read::FrameDecoder<Chunk>>),
    Raw(RawBlock),
}

/// What the frame decoder reads from: one whole chunk at a time, then nothing (end of input,
/// for now) until the next is handed in.
#[derive(Default)]
pub(super) struct Chunk {
    bytes: Vec<u8>,
    read: usize,
}

impl std::io::Read for Chunk {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let rest = self.bytes.get(self.read..).unwrap_or_default();
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.read += n;
        Ok(n)
    }
}

impl Snappy {
    pub(super) fn new(max_block: u64) -> Self {
        Snappy::Sniffing { max_block }
    }

    pub(super) fn step(
        &mut self,
        input: &[u8],
        end: bool,
        out: &mut [u8],
    ) -> Result<(usize, usize), StageError> {
        if let Snappy::Sniffing { max_block } = *self {
            let seen = input.len().min(STREAM_IDENTIFIER.len());
            let could_be_framed = input[..seen] == STREAM_IDENTIFIER[..seen];
            if input.is_empty() || (could_be_framed && seen < STREAM_IDENTIFIER.len() && !end) {
                return Ok((0, 0));
            }
            *self = if could_be_framed && seen == STREAM_IDENTIFIER.len() {
                Snappy::Framed(Box::new(snap::read::FrameDecoder::new(Chunk::default())))
            } else {
                Snappy::Raw(RawBlock::new(max_block))
            };
        }
        match self {
            Snappy::Sniffing { .. } => Ok((0, 0)),
            Snappy::Framed(decoder) => framed_step(decoder, input, end, out),
            Snappy::Raw(block) => block.step(input, end, out),
        }
    }

    /// Framed: a chunk boundary is a valid end. Raw: the block is whole and handed out.
    pub(super) fn finished(&self) -> bool {
        match self {
            Snappy::Sniffing { .. } | Snappy::Framed(_) => true,
            Snappy::Raw(block) => block.finished(),
        }
    }

    pub(super) fn memory(&self) -> usize {
        match self {
            Snappy::Sniffing { .. } => 0,
            Snappy::Framed(decoder) => FRAME_DECODER_BYTES + decoder.get_ref().bytes.capacity(),
            Snappy::Raw(block) => block.memory(),
        }
    }
}

/// What the decoder still has of its last chunk first; else the next whole chunk of `input`.
fn framed_step(
    decoder: &mut snap::read::FrameDecoder<Chunk>,
    input: &[u8],
    end: bool,
    out: &mut [u8],
) -> Result<(usize, usize), StageError> {
    let wrote = decoder.read(out).map_err(|e| e.to_string())?;
    if wrote > 0 {
        return Ok((0, wrote));
    }
    let header: [u8; 4] = match input.get(..4).and_then(|h| h.try_into().ok()) {
        Some(header) => header,
        None if input.is_empty() || !end => return Ok((0, 0)),
        None => return Err("the body ends inside a chunk header".to_string().into()),
    };
    let len = usize::from(header[1]) | usize::from(header[2]) << 8 | usize::from(header[3]) << 16;
    if len > MAX_CHUNK {
        return Err(
            format!("a chunk of {len} bytes, over the {MAX_CHUNK} this reader takes").into(),
        );
    }
    let Some(chunk) = input.get(..4 + len) else {
        if end {
            return Err("the body ends inside a chunk".to_string().into());
        }
        return Ok((0, 0));
    };
    let next = decoder.get_mut();
    next.bytes.clear();
    next.bytes.extend_from_slice(chunk);
    next.read = 0;
    let wrote = decoder.read(out).map_err(|e| e.to_string())?;
    Ok((chunk.len(), wrote))
}

//! Content codings for the tests, each made by its own reference encoder (zlib through flate2,
//! libzstd, snap), and the bombs: 1 GiB of zeros in each.

use std::io::Write as _;
use std::sync::OnceLock;

/// One way a test body is coded: its `Content-Encoding` and the encoder.
#[derive(Clone, Copy)]
pub struct Coded {
    /// A name for messages (two ways of `deflate` and of `snappy` are told apart here).
    pub label: &'static str,
    pub header: &'static str,
    pub encode: fn(&[u8]) -> Vec<u8>,
}

/// Every coding floodgate decodes, each form of it, a stacked pair, and identity.
pub const ALL: [Coded; 8] = [
    Coded {
        label: "gzip",
        header: "gzip",
        encode: gzip,
    },
    Coded {
        label: "deflate (zlib)",
        header: "deflate",
        encode: zlib,
    },
    Coded {
        label: "deflate (raw)",
        header: "deflate",
        encode: raw_deflate,
    },
    Coded {
        label: "zstd",
        header: "zstd",
        encode: zstd,
    },
    Coded {
        label: "snappy (framed)",
        header: "snappy",
        encode: snappy_framed,
    },
    Coded {
        label: "snappy (raw block)",
        header: "snappy",
        encode: snappy_raw,
    },
    Coded {
        label: "gzip then zstd",
        header: "gzip, zstd",
        encode: gzip_then_zstd,
    },
    Coded {
        label: "identity",
        header: "identity",
        encode: <[u8]>::to_vec,
    },
];

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("in memory");
    e.finish().expect("in memory")
}

pub fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("in memory");
    e.finish().expect("in memory")
}

pub fn raw_deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("in memory");
    e.finish().expect("in memory")
}

pub fn zstd(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
    zstd_safe::compress(&mut out, data, 3).expect("in memory");
    out
}

pub fn snappy_framed(data: &[u8]) -> Vec<u8> {
    let mut e = snap::write::FrameEncoder::new(Vec::new());
    e.write_all(data).expect("in memory");
    e.into_inner().expect("in memory")
}

pub fn snappy_raw(data: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new()
        .compress_vec(data)
        .expect("in memory")
}

pub fn gzip_then_zstd(data: &[u8]) -> Vec<u8> {
    zstd(&gzip(data))
}

const GIB: usize = 1 << 30;

/// What a bomb inflates to: 1 GiB of zeros (not JSON: refused at its first inflated byte), or
/// 1 GiB of JSON white space between `{"records":[` and `]}` (valid to the end: only a bound
/// on inflating stops it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    Zeros,
    Spaces,
}

impl Fill {
    /// The inflated body, 1 MiB at a time.
    fn pieces(self) -> impl Iterator<Item = Vec<u8>> {
        let n = GIB >> 20;
        (0..n).map(move |i| match self {
            Fill::Zeros => vec![0u8; 1 << 20],
            Fill::Spaces => {
                let mut piece = vec![b' '; 1 << 20];
                if i == 0 {
                    piece[..12].copy_from_slice(b"{\"records\":[");
                }
                if i + 1 == n {
                    let at = piece.len() - 2;
                    piece[at..].copy_from_slice(b"]}");
                }
                piece
            }
        })
    }
}

/// 1 GiB as one gzip member, at zlib's best compression: about 1 MB.
pub fn gzip_bomb(fill: Fill) -> &'static [u8] {
    static BOMBS: [OnceLock<Vec<u8>>; 2] = [OnceLock::new(), OnceLock::new()];
    BOMBS[fill as usize].get_or_init(|| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        for piece in fill.pieces() {
            e.write_all(&piece).expect("in memory");
        }
        e.finish().expect("in memory")
    })
}

/// 1 GiB as one zstd frame (level 19: its largest window, 8 MiB; its size in the header):
/// about 32 KB.
pub fn zstd_bomb(fill: Fill) -> &'static [u8] {
    static BOMBS: [OnceLock<Vec<u8>>; 2] = [OnceLock::new(), OnceLock::new()];
    BOMBS[fill as usize].get_or_init(|| {
        use zstd_safe::zstd_sys::ZSTD_EndDirective::{ZSTD_e_continue, ZSTD_e_end};
        let mut cctx = zstd_safe::CCtx::create();
        cctx.set_parameter(zstd_safe::CParameter::CompressionLevel(19))
            .expect("level");
        cctx.set_pledged_src_size(Some(GIB as u64)).expect("size");
        let mut wire: Vec<u8> = Vec::with_capacity(1 << 20);
        let n = GIB >> 20;
        for (i, piece) in fill.pieces().enumerate() {
            let mut input = zstd_safe::InBuffer::around(&piece);
            let last = i + 1 == n;
            loop {
                if wire.capacity() - wire.len() < 64 * 1024 {
                    wire.reserve(1 << 20);
                }
                let pos = wire.len();
                let mut out = zstd_safe::OutBuffer::around_pos(&mut wire, pos);
                let op = if last { ZSTD_e_end } else { ZSTD_e_continue };
                let left = cctx
                    .compress_stream2(&mut out, &mut input, op)
                    .expect("compressed");
                if input.pos() == piece.len() && (!last || left == 0) {
                    break;
                }
            }
        }
        wire
    })
}

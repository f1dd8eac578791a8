use std::io::Write as _;
use std::sync::Arc;

use super::*;

/// Records of a log-like shape: repetitive enough to compress as real ones do, varied enough
/// that no coding degenerates.
fn records(n: usize) -> Vec<u8> {
    let mut text = String::from("{\"records\":[");
    let mut x = 0x9e37_79b9_u32;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!(
            r#"{{"key":"user-{}","value":{{"level":"info","msg":"request {} took {} ms","host":"10.0.{}.{}"}}}}"#,
            x % 5000,
            x,
            x % 997,
            x % 256,
            (x >> 8) % 256
        ));
    }
    text.push_str("]}");
    text.into_bytes()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("in memory");
    e.finish().expect("in memory")
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("in memory");
    e.finish().expect("in memory")
}

fn raw_deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("in memory");
    e.finish().expect("in memory")
}

fn zstd(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
    zstd_safe::compress(&mut out, data, 3).expect("in memory");
    out
}

fn snappy_framed(data: &[u8]) -> Vec<u8> {
    let mut e = snap::write::FrameEncoder::new(Vec::new());
    e.write_all(data).expect("in memory");
    e.into_inner().expect("in memory")
}

fn snappy_raw(data: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new()
        .compress_vec(data)
        .expect("in memory")
}

fn codings(header: &str) -> Codings {
    Codings::parse([header.as_bytes()]).expect("accepted")
}

fn limits() -> Limits {
    Limits {
        max_output: 64 << 20,
        max_input: 64 << 20,
        ratio: 100,
        max_block: 64 << 20,
    }
}

/// Inflates `wire`, pushed `chunk` bytes at a time: the output and its largest piece.
fn inflate(
    codings: Codings,
    limits: Limits,
    wire: &[u8],
    chunk: usize,
) -> Result<(Vec<u8>, usize), InflateError> {
    let counters = Arc::new(Counters::default());
    let mut inflater = Inflater::new(codings, limits, counters).expect("a coding");
    let mut chunks = wire.chunks(chunk.max(1));
    let (mut out, mut largest) = (Vec::new(), 0);
    loop {
        match inflater.next_piece()? {
            Next::Piece(piece) => {
                assert!(!piece.is_empty(), "a piece has bytes");
                largest = largest.max(piece.len());
                out.extend_from_slice(&piece);
            }
            Next::NeedInput => match chunks.next() {
                Some(c) => inflater.push(c)?,
                None => inflater.end_input(),
            },
            Next::Again => {}
            Next::End => return Ok((out, largest)),
        }
    }
}

#[test]
fn content_encoding_lists_are_read_in_order_identity_skipped() {
    assert!(codings("").is_identity());
    assert!(codings("identity").is_identity());
    assert!(codings(" Identity , ").is_identity());
    assert_eq!(
        codings("GZIP").applied().collect::<Vec<_>>(),
        [Coding::Gzip]
    );
    assert_eq!(
        codings("x-gzip").applied().collect::<Vec<_>>(),
        [Coding::Gzip]
    );
    assert_eq!(
        codings("x-snappy-framed").applied().collect::<Vec<_>>(),
        [Coding::Snappy]
    );
    assert_eq!(
        Codings::parse([&b"gzip"[..], b"identity, zstd"])
            .expect("two fields")
            .applied()
            .collect::<Vec<_>>(),
        [Coding::Gzip, Coding::Zstd]
    );
}

#[test]
fn unknown_and_over_stacked_codings_are_refused() {
    assert_eq!(
        Codings::parse([&b"br"[..]]),
        Err(Unsupported::Unknown("br".into()))
    );
    assert_eq!(
        Codings::parse([&b"gzip, compress"[..]]),
        Err(Unsupported::Unknown("compress".into()))
    );
    assert_eq!(
        Codings::parse([&b"gzip, gzip, gzip"[..]]),
        Err(Unsupported::TooMany(3))
    );
    assert!(matches!(
        Codings::parse([&b"gz\xffip"[..]]),
        Err(Unsupported::Unknown(_))
    ));
    let shown = Unsupported::Unknown("br".into()).to_string();
    assert!(
        shown.contains("\"br\"") && shown.contains(ACCEPTED),
        "{shown}"
    );
}

#[test]
fn every_coding_inflates_byte_for_byte_in_bounded_pieces_however_it_arrives() {
    let data = records(4000);
    let cases: [(&str, Vec<u8>); 7] = [
        ("gzip", gzip(&data)),
        ("deflate", zlib(&data)),
        ("deflate", raw_deflate(&data)),
        ("zstd", zstd(&data)),
        ("snappy", snappy_framed(&data)),
        ("snappy", snappy_raw(&data)),
        ("x-snappy-framed", snappy_framed(&data)),
    ];
    for (name, wire) in &cases {
        for chunk in [1, 3, 1000, 16 * 1024, wire.len()] {
            let (out, largest) =
                inflate(codings(name), limits(), wire, chunk).unwrap_or_else(|e| {
                    panic!("{name} in chunks of {chunk}: {e}");
                });
            assert!(
                out == data,
                "{name} in chunks of {chunk}: not the same bytes"
            );
            assert!(largest <= PIECE, "{name}: a piece of {largest} bytes");
        }
    }
}

#[test]
fn stacked_codings_are_decoded_last_applied_first() {
    let data = records(500);
    let wire = zstd(&gzip(&data));
    let (out, _) = inflate(codings("gzip, zstd"), limits(), &wire, 999).expect("inflates");
    assert!(out == data);
    // The other order is not valid zstd, and the error names the coding that failed.
    let err = inflate(codings("zstd, gzip"), limits(), &wire, 999).expect_err("wrong order");
    assert!(
        matches!(
            &err,
            InflateError::Invalid {
                coding: Coding::Gzip,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn gzip_members_are_read_one_after_another() {
    let (a, b) = (records(10), records(20));
    let mut wire = gzip(&a);
    wire.extend(gzip(&b));
    let (out, _) = inflate(codings("gzip"), limits(), &wire, 7).expect("two members");
    assert_eq!(out, [a, b].concat());
}

#[test]
fn an_empty_coded_body_is_an_empty_body() {
    for name in ["gzip", "deflate", "zstd", "snappy"] {
        let (out, _) = inflate(codings(name), limits(), b"", 1).expect("empty");
        assert!(out.is_empty(), "{name}");
    }
}

#[test]
fn invalid_truncated_and_trailing_data_name_their_coding() {
    let data = records(200);
    let cases: [(&str, Coding, Vec<u8>); 10] = [
        ("gzip", Coding::Gzip, b"{\"records\":[]}".to_vec()),
        ("gzip", Coding::Gzip, {
            let w = gzip(&data);
            w[..w.len() - 9].to_vec()
        }),
        (
            "gzip",
            Coding::Gzip,
            [gzip(&data), b"junk".to_vec()].concat(),
        ),
        ("gzip", Coding::Gzip, {
            // A flipped byte of the CRC-32.
            let mut w = gzip(&data);
            let at = w.len() - 6;
            w[at] ^= 1;
            w
        }),
        (
            "deflate",
            Coding::Deflate,
            [zlib(&data), b"x".to_vec()].concat(),
        ),
        ("zstd", Coding::Zstd, b"not zstd at all".to_vec()),
        ("zstd", Coding::Zstd, {
            let w = zstd(&data);
            w[..w.len() / 2].to_vec()
        }),
        ("snappy", Coding::Snappy, {
            let w = snappy_framed(&data);
            w[..w.len() - 3].to_vec()
        }),
        ("snappy", Coding::Snappy, {
            let mut w = snappy_framed(&data);
            let at = w.len() / 2;
            w[at] ^= 0x55;
            w
        }),
        ("snappy", Coding::Snappy, {
            let w = snappy_raw(&data);
            w[..w.len() - 1].to_vec()
        }),
    ];
    for (i, (name, coding, wire)) in cases.iter().enumerate() {
        let err = inflate(codings(name), limits(), wire, 64).expect_err("refused");
        match &err {
            InflateError::Invalid { coding: c, .. } => assert_eq!(c, coding, "case {i}"),
            other => panic!("case {i}: {other:?}"),
        }
        let shown = err.to_string();
        assert!(shown.contains(coding.as_str()), "case {i}: {shown}");
    }
}

#[test]
fn a_bomb_is_refused_while_it_inflates_at_the_ratio() {
    let zeros = vec![0u8; 64 << 20];
    for (name, wire) in [("gzip", gzip(&zeros)), ("zstd", zstd(&zeros))] {
        let counters = Arc::new(Counters::default());
        let mut inflater =
            Inflater::new(codings(name), limits(), counters.clone()).expect("a coding");
        let mut chunks = wire.chunks(4096);
        let err = loop {
            match inflater.next_piece() {
                Err(e) => break e,
                Ok(Next::NeedInput) => inflater
                    .push(chunks.next().expect("refused before the end"))
                    .expect("within max_input"),
                Ok(Next::Piece(_) | Next::Again) => {}
                Ok(Next::End) => panic!("{name}: inflated whole"),
            }
        };
        assert_eq!(err, InflateError::Ratio { ratio: 100 }, "{name}");
        let (_, _, coded, decoded) = counters
            .snapshot()
            .find(|c| c.0.as_str() == name)
            .expect("counted");
        assert!(
            decoded <= coded * 100 + RATIO_FLOOR + PIECE as u64,
            "{name}: {decoded} bytes out of {coded}: refused a piece past the ratio at most"
        );
        assert!(
            decoded < 4 << 20,
            "{name}: stopped early, at {decoded} bytes"
        );
    }
}

#[test]
fn a_stacked_bomb_is_bounded_at_every_layer() {
    // gzip inside zstd: the middle layer inflates as much as the last one is allowed to.
    let wire = zstd(&gzip(&vec![0u8; 32 << 20]));
    let err = inflate(codings("gzip, zstd"), limits(), &wire, 1024).expect_err("a bomb");
    assert_eq!(err, InflateError::Ratio { ratio: 100 });
}

#[test]
fn output_and_input_are_bounded() {
    let data = records(3000);
    let small = Limits {
        max_output: 100_000,
        ratio: 1000,
        ..limits()
    };
    assert_eq!(
        inflate(codings("gzip"), small, &gzip(&data), 4096).expect_err("too large"),
        InflateError::TooLarge { limit: 100_000 }
    );
    let wire = zstd(&data);
    let narrow = Limits {
        max_input: wire.len() as u64 - 1,
        ..limits()
    };
    assert!(matches!(
        inflate(codings("zstd"), narrow, &wire, 4096).expect_err("too long"),
        InflateError::TooLarge { .. }
    ));
    // A raw snappy block declares its length first: refused before it is inflated.
    let block = Limits {
        max_block: 1000,
        ..limits()
    };
    assert_eq!(
        inflate(codings("snappy"), block, &snappy_raw(&data), 4096).expect_err("too large"),
        InflateError::TooLarge { limit: 1000 }
    );
}

#[test]
fn a_zstd_window_past_the_cap_is_refused_naming_it() {
    let data = records(100);
    let mut cctx = zstd_safe::CCtx::create();
    cctx.set_parameter(zstd_safe::CParameter::WindowLog(27))
        .expect("window log");
    cctx.set_parameter(zstd_safe::CParameter::EnableLongDistanceMatching(true))
        .expect("long");
    // Streamed (the size unknown when the frame starts), so the frame keeps its 128 MiB window.
    use zstd_safe::zstd_sys::ZSTD_EndDirective::{ZSTD_e_continue, ZSTD_e_end};
    let mut wire = Vec::with_capacity(zstd_safe::compress_bound(data.len()) + 64);
    let mut out = zstd_safe::OutBuffer::around(&mut wire);
    let mut input = zstd_safe::InBuffer::around(&data);
    cctx.compress_stream2(&mut out, &mut input, ZSTD_e_continue)
        .expect("compressed");
    let mut empty = zstd_safe::InBuffer::around(&[]);
    while cctx
        .compress_stream2(&mut out, &mut empty, ZSTD_e_end)
        .expect("ended")
        > 0
    {}
    let err = inflate(codings("zstd"), limits(), &wire, 4096).expect_err("window");
    assert!(err.to_string().contains("8 MiB"), "{err}");
}

#[test]
fn memory_counts_what_the_decoders_hold() {
    let data = records(3000);
    let counters = Arc::new(Counters::default());
    let mut zstd_chain =
        Inflater::new(codings("zstd"), limits(), counters.clone()).expect("a coding");
    zstd_chain.push(&zstd(&data)).expect("pushed");
    let _ = zstd_chain.next_piece().expect("a piece");
    // A zstd frame of a known size gets a window of that size; the context is larger still.
    assert!(zstd_chain.memory() > 64 * 1024, "{}", zstd_chain.memory());
    let mut raw = Inflater::new(codings("snappy"), limits(), counters).expect("a coding");
    raw.push(&snappy_raw(&data)).expect("pushed");
    while raw.next_piece().expect("pieces") != Next::NeedInput {}
    assert!(
        raw.memory() >= data.len(),
        "the whole block is kept while it is read"
    );
}

#[test]
fn deflate_tells_zlib_from_raw_by_the_header() {
    assert!(flate::is_zlib_header(&zlib(b"x")));
    for data in [records(50), raw::noise(5, 1000)] {
        let wire = raw_deflate(&data);
        let (out, _) = inflate(codings("deflate"), limits(), &wire, 1).expect("raw");
        assert!(out == data);
    }
}

#[test]
fn counters_count_bodies_and_bytes_per_coding() {
    let data = records(100);
    let wire = gzip(&data);
    let counters = Arc::new(Counters::default());
    let mut inflater =
        Inflater::new(codings("gzip"), limits(), counters.clone()).expect("a coding");
    inflater.push(&wire).expect("pushed");
    inflater.end_input();
    while inflater.next_piece().expect("pieces") != Next::End {}
    let (_, bodies, coded, decoded) = counters.snapshot().next().expect("gzip first");
    assert_eq!(
        (bodies, coded, decoded),
        (1, wire.len() as u64, data.len() as u64)
    );
}

#[test]
fn an_inner_layer_that_makes_nothing_of_a_piece_hands_back_again() {
    // zstd inside gzip: a 4 MiB skippable frame (nothing to output), then a real frame.
    let data = records(50);
    let mut inner = 0x184D_2A50u32.to_le_bytes().to_vec();
    inner.extend((4u32 << 20).to_le_bytes());
    inner.extend(vec![7u8; 4 << 20]);
    inner.extend(zstd(&data));
    let wire = gzip(&inner);
    let generous = Limits {
        ratio: 100_000,
        ..limits()
    };
    let counters = Arc::new(Counters::default());
    let mut inflater = Inflater::new(codings("zstd, gzip"), generous, counters).expect("a coding");
    inflater.push(&wire).expect("pushed");
    inflater.end_input();
    let (mut out, mut again) = (Vec::new(), 0);
    loop {
        match inflater.next_piece().expect("inflates") {
            Next::Piece(piece) => out.extend(piece),
            Next::Again => again += 1,
            Next::NeedInput => panic!("all input is in"),
            Next::End => break,
        }
    }
    assert!(out == data);
    // A piece of the middle layer per call: 4 MiB of it is dozens of calls, not one.
    assert!(again >= (4 << 20) / PIECE - 2, "{again}");
}

mod raw;

/// A hostile review of #43: 8 MB of empty dynamic-Huffman deflate blocks (or empty gzip
/// members, zstd frames) inflate to nothing, so no piece marked a turn and one poll decoded
/// all of it (up to 0.36 s of CPU on a request worker). A piece of input without output now
/// hands back `Again`, so the task yields.
#[test]
fn input_that_inflates_to_nothing_hands_back_again_every_piece() {
    // Empty gzip members: 20 bytes each of header and trailer, nothing inside.
    let member = gzip(b"");
    let wire: Vec<u8> = member
        .iter()
        .copied()
        .cycle()
        .take(member.len() * 20_000)
        .collect();
    let counters = Arc::new(Counters::default());
    let mut inflater = Inflater::new(codings("gzip"), limits(), counters).expect("a coding");
    inflater.push(&wire).expect("pushed");
    inflater.end_input();
    let mut turns = 0;
    loop {
        match inflater.next_piece().expect("valid") {
            Next::Again => turns += 1,
            Next::End => break,
            other => panic!("{other:?}"),
        }
    }
    assert!(
        turns >= wire.len() / PIECE,
        "{turns} turns for {} bytes",
        wire.len()
    );
}

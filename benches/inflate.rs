//! Inflating a content-coded body, per coding, as the pipeline does it: the coded body pushed
//! in, the output taken in pieces of at most 64 KiB. Throughput is of output (what a coding
//! costs per byte of records), on 4 MiB of log-like JSON records; each coding at its clients'
//! usual level (gzip 6, zstd 3, snappy's only one). Beside it, the ratio each reached, and
//! snap's raw decoder inflating the whole block in one call, for reference.

use std::hint::black_box;
use std::io::Write as _;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use floodgate::inflate::{Codings, Counters, Inflater, Limits, Next};

/// Records like a log shipper's: field names repeat, values vary.
fn body(bytes: usize) -> Vec<u8> {
    let mut text = String::from("{\"records\":[");
    let mut x = 0x2545_f491_u32;
    let mut i = 0u32;
    while text.len() < bytes {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!(
            r#"{{"key":"user-{}","value":{{"ts":17000000{:05},"level":"{}","msg":"GET /api/v2/items/{} took {} ms","host":"10.0.{}.{}","trace":"{:08x}"}}}}"#,
            x % 5000,
            i,
            ["info", "warn", "error", "debug"][(x % 4) as usize],
            x % 100_000,
            x % 997,
            x % 256,
            (x >> 8) % 256,
            x
        ));
        i += 1;
    }
    text.push_str("]}");
    text.into_bytes()
}

fn coded(name: &str, data: &[u8]) -> Vec<u8> {
    match name {
        "gzip" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
            e.write_all(data).expect("in memory");
            e.finish().expect("in memory")
        }
        "deflate" => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
            e.write_all(data).expect("in memory");
            e.finish().expect("in memory")
        }
        "zstd" => {
            let mut out = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
            zstd_safe::compress(&mut out, data, 3).expect("in memory");
            out
        }
        "snappy (framed)" => {
            let mut e = snap::write::FrameEncoder::new(Vec::new());
            e.write_all(data).expect("in memory");
            e.into_inner().expect("in memory")
        }
        _ => snap::raw::Encoder::new()
            .compress_vec(data)
            .expect("in memory"),
    }
}

fn inflate(codings: Codings, wire: &[u8], counters: &Arc<Counters>) -> usize {
    let limits = Limits {
        max_output: u64::MAX,
        max_input: u64::MAX,
        ratio: 1000,
        max_block: u64::MAX,
    };
    let Some(mut inflater) = Inflater::new(codings, limits, counters.clone()) else {
        return 0;
    };
    let mut out = 0;
    let mut pushed = false;
    loop {
        match inflater.next_piece() {
            Ok(Next::Piece(piece)) => out += black_box(piece).len(),
            Ok(Next::Again) => {}
            Ok(Next::NeedInput) if !pushed => {
                let _ = inflater.push(wire);
                inflater.end_input();
                pushed = true;
            }
            _ => return out,
        }
    }
}

fn bench(c: &mut Criterion) {
    let data = body(4 << 20);
    let counters = Arc::new(Counters::default());
    let mut group = c.benchmark_group("inflate 4 MiB of records");
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.sample_size(20);
    for name in [
        "gzip",
        "deflate",
        "zstd",
        "snappy (framed)",
        "snappy (raw block)",
    ] {
        let wire = coded(name, &data);
        let header = name.split(' ').next().unwrap_or(name);
        let codings = Codings::parse([header.as_bytes()]).expect("a coding");
        assert_eq!(inflate(codings, &wire, &counters), data.len(), "{name}");
        println!(
            "{name}: {} bytes coded, ratio {:.1}",
            wire.len(),
            data.len() as f64 / wire.len() as f64
        );
        group.bench_function(name, |b| {
            b.iter(|| black_box(inflate(codings, black_box(&wire), &counters)))
        });
    }
    // The reference for the raw block: snap's own decoder, the whole block in one call (what a
    // request worker would be held for, were it used: the reason for the resumable one).
    let wire = coded("snappy (raw block)", &data);
    group.bench_function("snappy (raw block, snap in one call)", |b| {
        let mut decoder = snap::raw::Decoder::new();
        b.iter(|| black_box(decoder.decompress_vec(black_box(&wire)).map(|v| v.len())))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

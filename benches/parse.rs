//! Parsing request bodies into records, per format: 100 records of ~200 bytes.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use floodgate::config::RequestBounds;
use floodgate::http::v1::{parse, Format};

fn bodies() -> (String, String, String) {
    let value = |i: usize| {
        format!(
            r#"{{"user":"u{i}","event":"click","ts":1700000000{i:03},"props":{{"page":"/home","ref":"campaign-{i}","x":12.5}}}}"#
        )
    };
    let json_records: Vec<String> = (0..100)
        .map(|i| {
            format!(
                r#"{{"key":"user-{i}","value":{},"headers":{{"trace":"t{i}"}}}}"#,
                value(i)
            )
        })
        .collect();
    let json = format!(r#"{{"records":[{}]}}"#, json_records.join(","));
    let ndjson = json_records.join("\n");
    let b64_records: Vec<String> = (0..100)
        .map(|i| {
            use base64::Engine as _;
            let v = base64::engine::general_purpose::STANDARD.encode(value(i));
            format!(r#"{{"key":"user-{i}","value_b64":"{v}"}}"#)
        })
        .collect();
    let b64 = format!(r#"{{"records":[{}]}}"#, b64_records.join(","));
    (json, ndjson, b64)
}

fn bench(c: &mut Criterion) {
    let limits = RequestBounds::default();
    let (json, ndjson, b64) = bodies();
    let mut group = c.benchmark_group("parse 100 records");
    for (name, format, body) in [
        ("json", Format::Json, &json),
        ("ndjson", Format::Ndjson, &ndjson),
        ("json+base64", Format::Json, &b64),
    ] {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                black_box(parse(format, black_box(body.as_bytes()), &limits).map(|r| r.len()))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

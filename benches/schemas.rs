//! The schema step's cost per record: a ~200-byte JSON event validated against a JSON Schema
//! (written unchanged), or serialized to Avro or Protobuf in Confluent's wire format, against
//! the copy every record costs without a schema. 100 records per iteration.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use floodgate::schema::{Compiled, Format};

const JSON_SCHEMA: &str = r#"{"type":"object","additionalProperties":false,
  "required":["user","event","ts","props"],
  "properties":{"user":{"type":"string"},"event":{"type":"string","enum":["click","view","buy"]},
    "ts":{"type":"integer"},
    "props":{"type":"object","additionalProperties":false,
      "properties":{"page":{"type":"string"},"ref":{"type":"string"},"x":{"type":"number"}}}}}"#;

const AVRO: &str = r#"{"type":"record","name":"Event","namespace":"bench","fields":[
  {"name":"user","type":"string"},
  {"name":"event","type":{"type":"enum","name":"Kind","symbols":["click","view","buy"]}},
  {"name":"ts","type":"long"},
  {"name":"props","type":{"type":"record","name":"Props","fields":[
    {"name":"page","type":"string"},{"name":"ref","type":"string"},{"name":"x","type":"double"}]}}]}"#;

const PROTO: &str = r#"syntax = "proto3"; package bench;
  message Event { string user = 1; string event = 2; int64 ts = 3; Props props = 4; }
  message Props { string page = 1; string ref = 2; double x = 3; }"#;

fn events() -> Vec<Vec<u8>> {
    (0..100)
        .map(|i| {
            format!(
                r#"{{"user":"u{i}","event":"click","ts":1700000000{i:03},"props":{{"page":"/home","ref":"campaign-{i}","x":12.5}}}}"#
            )
            .into_bytes()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let records = events();
    let json = Compiled::new(1, Format::Json, JSON_SCHEMA).expect("json schema");
    let avro = Compiled::new(2, Format::Avro, AVRO).expect("avro schema");
    let proto = Compiled::new(3, Format::Protobuf, PROTO).expect("proto schema");
    let mut group = c.benchmark_group("schema step, 100 records");
    group.throughput(Throughput::Elements(records.len() as u64));
    group.bench_function("none (copy)", |b| {
        b.iter(|| {
            for r in &records {
                black_box(r.to_vec());
            }
        })
    });
    group.bench_function("json schema validate", |b| {
        b.iter(|| {
            for r in &records {
                json.check(black_box(r)).expect("valid");
            }
        })
    });
    group.bench_function("json schema serialize", |b| {
        b.iter(|| {
            for r in &records {
                black_box(json.encode(black_box(r), 1 << 20).expect("valid"));
            }
        })
    });
    group.bench_function("avro serialize", |b| {
        b.iter(|| {
            for r in &records {
                black_box(avro.encode(black_box(r), 1 << 20).expect("valid"));
            }
        })
    });
    group.bench_function("protobuf serialize", |b| {
        b.iter(|| {
            for r in &records {
                black_box(proto.encode(black_box(r), 1 << 20).expect("valid"));
            }
        })
    });
    group.finish();
}

/// What a refused Protobuf compile costs as its faults grow: a message of n fields that all
/// take number 1. The checker once found each fault's place by a scan of the whole schema's
/// positions (O(n²): 12.9 s at 17,500); it should grow with n.
fn refused_compile(c: &mut Criterion) {
    let mut group = c.benchmark_group("protobuf compile refused, n duplicate field numbers");
    group.sample_size(10);
    for n in [1_000usize, 4_000, 16_000] {
        let mut text = String::from("syntax = \"proto3\"; message M {");
        for i in 0..n {
            text.push_str(&format!("int32 f{i} = 1;"));
        }
        text.push('}');
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(n.to_string(), |b| {
            b.iter(|| Compiled::new(1, Format::Protobuf, black_box(&text)).expect_err("duplicates"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench, refused_compile);
criterion_main!(benches);

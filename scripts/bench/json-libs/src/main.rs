use serde::Deserialize;
use std::borrow::Cow;
use std::hint::black_box;
use std::time::Instant;
#[derive(Deserialize)]
#[allow(dead_code)]
#[serde(deny_unknown_fields)]
struct SonicRec<'a> {
    #[serde(borrow)]
    value: Option<sonic_rs::LazyValue<'a>>,
    #[serde(borrow)]
    key: Option<Cow<'a, str>>,
    #[serde(borrow)]
    headers: Option<std::collections::BTreeMap<Cow<'a, str>, Cow<'a, str>>>,
}
#[derive(Deserialize)]
#[allow(dead_code)]
#[serde(deny_unknown_fields)]
struct JRec<'a> {
    #[serde(borrow)]
    value: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow)]
    key: Option<Cow<'a, str>>,
    #[serde(borrow)]
    headers: Option<std::collections::BTreeMap<Cow<'a, str>, Cow<'a, str>>>,
}
fn time(name: &str, bytes: usize, f: &mut dyn FnMut() -> usize) {
    for _ in 0..2000 {
        black_box(f());
    }
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..5000 {
            black_box(f());
        }
        let e = t.elapsed().as_secs_f64() / 5000.0;
        best = best.min(e);
    }
    println!(
        "{name:30} {:8.2} µs {:8.0} MiB/s",
        best * 1e6,
        bytes as f64 / best / 1048576.0
    );
}
fn main() {
    // The records of benches/parse.rs (100 records of ~270 bytes).

    let value = |i: usize| {
        format!(
            r#"{{"user":"u{i}","event":"click","ts":1700000000{i:03},"props":{{"page":"/home","ref":"campaign-{i}","x":12.5}}}}"#
        )
    };
    let recs: Vec<String> = (0..100)
        .map(|i| {
            format!(
                r#"{{"key":"user-{i}","value":{},"headers":{{"trace":"t{i}"}}}}"#,
                value(i)
            )
        })
        .collect();
    let body = format!(r#"{{"records":[{}]}}"#, recs.join(","));
    let total: usize = recs.iter().map(|r| r.len()).sum();
    time("json ignored per rec", total, &mut || {
        let mut n = 0;
        for r in &recs {
            let _x: serde::de::IgnoredAny =
                serde_json::from_slice(black_box(r.as_bytes())).unwrap();
            n += 1;
        }
        n
    });
    time("json struct per rec", total, &mut || {
        let mut n = 0;
        for r in &recs {
            let x: JRec = serde_json::from_slice(black_box(r.as_bytes())).unwrap();
            n += x.value.map_or(0, |v| v.get().len());
        }
        n
    });
    time("sonic lazy per rec", total, &mut || {
        let mut n = 0;
        for r in &recs {
            let x: sonic_rs::LazyValue = sonic_rs::from_slice(black_box(r.as_bytes())).unwrap();
            n += x.as_raw_str().len();
        }
        n
    });
    time("sonic struct per rec", total, &mut || {
        let mut n = 0;
        for r in &recs {
            let x: SonicRec = sonic_rs::from_slice(black_box(r.as_bytes())).unwrap();
            n += x.value.map_or(0, |v| v.as_raw_str().len());
        }
        n
    });
    time("json ignored body", body.len(), &mut || {
        let _x: serde::de::IgnoredAny = serde_json::from_slice(black_box(body.as_bytes())).unwrap();
        1
    });
    time("sonic lazy body", body.len(), &mut || {
        let x: sonic_rs::LazyValue = sonic_rs::from_slice(black_box(body.as_bytes())).unwrap();
        x.as_raw_str().len()
    });
    #[derive(Deserialize)]
    struct Env<'a> {
        #[serde(borrow)]
        records: Vec<SonicRec<'a>>,
    }
    #[derive(Deserialize)]
    struct JEnv<'a> {
        #[serde(borrow)]
        records: Vec<JRec<'a>>,
    }
    time("sonic struct body", body.len(), &mut || {
        let x: Env = sonic_rs::from_slice(black_box(body.as_bytes())).unwrap();
        x.records.len()
    });
    time("json struct body", body.len(), &mut || {
        let x: JEnv = serde_json::from_slice(black_box(body.as_bytes())).unwrap();
        x.records.len()
    });
    let mut buf = body.clone().into_bytes();
    time("simd tape body", body.len(), &mut || {
        buf.copy_from_slice(body.as_bytes());
        let t = simd_json::to_tape(black_box(&mut buf)).unwrap();
        t.0.len()
    });
    let mut bufs: Vec<Vec<u8>> = recs.iter().map(|r| r.clone().into_bytes()).collect();
    time("simd tape per rec", total, &mut || {
        let mut n = 0;
        for (b, r) in bufs.iter_mut().zip(&recs) {
            b.copy_from_slice(r.as_bytes());
            let t = simd_json::to_tape(black_box(b)).unwrap();
            n += t.0.len();
        }
        n
    });
    let mut buffers = simd_json::Buffers::new(4096);
    time("simd tape per rec reuse", total, &mut || {
        let mut n = 0;
        for (b, r) in bufs.iter_mut().zip(&recs) {
            b.copy_from_slice(r.as_bytes());
            let t = simd_json::Deserializer::from_slice_with_buffers(black_box(b), &mut buffers)
                .unwrap();
            n += t.into_tape().0.len();
        }
        n
    });
    time("sonic get(records) body", body.len(), &mut || {
        let x = sonic_rs::get(black_box(body.as_bytes()), &["records"]).unwrap();
        x.as_raw_str().len()
    });
}

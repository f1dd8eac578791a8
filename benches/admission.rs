//! The cost of one admission decision, admitted and refused: the work floodgate does for every
//! request before touching Kafka. A refused decision must be far cheaper than an admitted one
//! (it reserves nothing and allocates nothing).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use floodgate::admission::Admission;
use floodgate::budget::{BudgetSpec, GlobalBudget, MonotonicClock, RateSpec};
use floodgate::buffer::Buffer;
use floodgate::config::TenantConfig;
use floodgate::record::Charge;
use floodgate::tenant::Tenant;

fn tenant(records_per_sec: u64, burst: u64) -> Tenant {
    Tenant::from_config(&TenantConfig {
        id: "bench".into(),
        api_key_sha256: vec![],
        topics: vec!["*".into()],
        records_per_sec: Some(records_per_sec),
        records_burst: Some(burst),
        // Bytes unlimited at the tenant; the global byte bucket still runs on every decision.
        max_buffer_share: Some(0.5),
        ..TenantConfig::default()
    })
    .expect("valid")
}

fn admission() -> Admission {
    let rate = |r| {
        Some(RateSpec {
            per_sec: r,
            burst: 1 << 50,
        })
    };
    Admission::new(
        Arc::new(MonotonicClock::new()),
        Arc::new(GlobalBudget::new(BudgetSpec {
            records: rate(10_000_000_000),
            bytes: rate(10_000_000_000),
        })),
        Arc::new(Buffer::new(1 << 40, 1 << 40)),
    )
}

fn bench(c: &mut Criterion) {
    let admission = admission();
    // Admitted: a bucket so large it never runs out during the run.
    let open = tenant(10_000_000_000, 1 << 50);
    c.bench_function("admit/admitted (100 records, 10 KiB; lease dropped)", |b| {
        b.iter(|| {
            let (lease, view) = admission.admit(black_box(&open), Charge::new(100, 10_240));
            black_box(view);
            black_box(lease.is_ok())
        })
    });
    // Refused: an empty bucket that refills 1 record/s.
    let empty = tenant(1, 1);
    let _ = admission.admit(&empty, Charge::new(1, 1));
    c.bench_function("admit/refused (tenant_records)", |b| {
        b.iter(|| {
            let (lease, view) = admission.admit(black_box(&empty), Charge::new(1, 10));
            black_box(view);
            black_box(lease.is_err())
        })
    });
    c.bench_function("precheck/refused before reading the body", |b| {
        b.iter(|| black_box(admission.precheck(black_box(&empty), 10_240).is_err()))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

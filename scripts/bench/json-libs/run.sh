#!/usr/bin/env bash
# serde_json vs sonic-rs vs simd-json on the parse bench's records, built for any x86-64 and
# for this CPU (sonic-rs asks for -C target-cpu=native). Best of 5 runs of 5,000 iterations.
set -euo pipefail
cd "$(dirname "$0")"
echo "== default target"
cargo run --release -q
echo "== -C target-cpu=native"
RUSTFLAGS="-C target-cpu=native" CARGO_TARGET_DIR=target/native cargo run --release -q

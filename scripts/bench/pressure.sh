#!/usr/bin/env bash
# The two pressure scenarios, each run without and with floodgate's answer, plotted side by
# side (floodgate-load, in-process gateway on librdkafka's mock cluster; no broker needed):
#   slow-broker:   broker RTT 1 -> 300 -> 1 ms under steady load; adaptive admission off / on
#   slow-consumer: a group reading 500 records/s of 3,000/s offered; lag guard off / on
# Output: docs/slow-broker.{png,csv}, docs/slow-consumer.{png,csv}, a summary line per run.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
cargo build --release -p floodgate-load
echo "== slow broker (adaptive off / on)"
"$LOAD_BIN" slow-broker --csv "$OUT/slow-broker.csv" --png docs/slow-broker.png 2>/dev/null
cp "$OUT/slow-broker.csv" docs/slow-broker.csv
echo "== slow consumer (lag guard off / on)"
"$LOAD_BIN" slow-consumer --csv "$OUT/slow-consumer.csv" --png docs/slow-consumer.png 2>/dev/null
cp "$OUT/slow-consumer.csv" docs/slow-consumer.csv

#!/usr/bin/env bash
# The whole test suite: installs Tansu if missing, starts it on loopback, runs every test
# against it (and librdkafka's in-process mock cluster for fault injection), stops it.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=${FLOODGATE_TEST_PORT:-19192}
DIR=$(mktemp -d /tmp/floodgate-tansu.XXXXXX)

scripts/tansu.sh install
scripts/tansu.sh start "$PORT" "$DIR"
trap 'scripts/tansu.sh stop "$DIR"' EXIT

export FLOODGATE_TEST_BROKER="127.0.0.1:$PORT"
export FLOODGATE_TEST_BROKER_PID
FLOODGATE_TEST_BROKER_PID=$(cat "$DIR/tansu.pid")

cargo test --lib --bins --tests "$@"

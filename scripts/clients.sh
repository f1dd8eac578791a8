#!/usr/bin/env bash
# Creates (or brings up to date) the real ecosystem clients the compatibility tests drive:
#   scripts/clients.sh DIR
#   - DIR/venv: urllib3 (PyPI), whose Retry honours Retry-After (tests/it/mock/retry_after.rs
#     measures what such a client gets of its budget, scripts/retry-after-client.py); requests
#     and zstandard beside it, posting compressed bodies as Python producers do
#     (tests/it/tansu/encodings.rs, scripts/coded-client.py; scripts/bench/bombs.sh);
#   - DIR/node: Confluent's Node client for REST Proxy, kafka-rest 0.0.5 (npm), which
#     tests/it/tansu/node_client.rs drives through scripts/kafka-rest-node.js.
# Pinned; a stamp file names the pins: a folder made with other pins is made again, a
# current one is left alone (no network).
set -euo pipefail

DIR=${1:?usage: scripts/clients.sh DIR}
PY_PINS='urllib3==2.5.0 requests==2.34.2 zstandard==0.25.0'
NPM_PINS='kafka-rest@0.0.5'
VENV="$DIR/venv"
NODE="$DIR/node"
mkdir -p "$DIR"

if ! { [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.floodgate-pins" 2>/dev/null)" = "$PY_PINS" ] &&
  "$VENV/bin/python" -c 'import urllib3, requests, zstandard' 2>/dev/null; }; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  # shellcheck disable=SC2086 # the pins are separate words
  "$VENV/bin/pip" install -q $PY_PINS
  "$VENV/bin/python" -c 'import urllib3, requests, zstandard'
  echo "$PY_PINS" > "$VENV/.floodgate-pins"
fi

if ! { [ -f "$NODE/node_modules/kafka-rest/package.json" ] &&
  [ "$(cat "$NODE/.floodgate-pins" 2>/dev/null)" = "$NPM_PINS" ]; }; then
  rm -rf "$NODE"
  mkdir -p "$NODE"
  npm install --prefix "$NODE" --no-audit --no-fund --silent "$NPM_PINS" >/dev/null
  node -e "require('$NODE/node_modules/kafka-rest')"
  echo "$NPM_PINS" > "$NODE/.floodgate-pins"
fi

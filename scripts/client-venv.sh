#!/usr/bin/env bash
# Creates (or brings up to date) the venv with the plain HTTP clients the compression test uses
# (scripts/coded-client.py): requests and urllib3 (what Python producers post with), and
# zstandard (PyPI's binding of libzstd) for zstd bodies.
#   scripts/client-venv.sh DIR
# A stamp file names the pins: a venv made with other pins is made again; a current one is left
# alone (no network). Its own venv, not the schema tests': each is remade only when its pins move.
set -euo pipefail

VENV=${1:?usage: scripts/client-venv.sh DIR}
PINS='requests==2.34.2 urllib3==2.8.0 zstandard==0.25.0'
STAMP="$VENV/.floodgate-pins"

if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$PINS" ] &&
  "$VENV/bin/python" -c 'import requests, urllib3, zstandard' 2>/dev/null; then
  exit 0
fi
mkdir -p "$(dirname "$VENV")"
rm -rf "$VENV"
python3 -m venv "$VENV"
# shellcheck disable=SC2086 # the pins are separate words
"$VENV/bin/pip" install -q $PINS
"$VENV/bin/python" -c 'import requests, urllib3, zstandard'
echo "$PINS" > "$STAMP"

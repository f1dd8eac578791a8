#!/usr/bin/env bash
# The status page in a real browser: makes (or reuses) a venv with selenium, then runs
# scripts/ui-check.py against `floodgate dev`. Needs chromium and chromium-driver (Debian).
#   scripts/ui-check.sh [--screenshot docs/status-page.png]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${UI_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/floodgate/ui-venv}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import selenium' 2>/dev/null; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q 'selenium==4.27.1'
fi
[ -x target/debug/floodgate ] || cargo build --bin floodgate
exec "$VENV/bin/python" scripts/ui-check.py "$@"

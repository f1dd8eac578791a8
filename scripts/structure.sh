#!/usr/bin/env bash
# The structure rules of docs/ARCHITECTURE.md that the compiler does not check: no source file
# over 500 lines, rdkafka used only in kafka/ (and dev.rs's embedded mock cluster), redis only in
# cluster/, and the seven layers (scripts/layers.py: every module has one, in src/lib.rs's list,
# and none names a module of a higher layer). Function length is clippy's too_many_lines
# (clippy.toml); with nothing importing upward, no import circle crosses layers.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
while read -r lines file; do
  if [ "$file" != total ] && [ "$lines" -gt 500 ]; then
    echo "structure: $file has $lines lines (at most 500)"
    status=1
  fi
done < <(find src -name '*.rs' -print0 | xargs -0 wc -l)
if out=$(grep -rln --include='*.rs' -E '\brdkafka::|use rdkafka' src | grep -v -E '^src/(kafka/|kafka\.rs|dev\.rs)'); then
  echo "structure: rdkafka used outside kafka/: $out"
  status=1
fi
if out=$(grep -rln --include='*.rs' -E '(^|[^_a-z])redis::|use redis' src | grep -v -E '^src/(cluster/|cluster\.rs)'); then
  echo "structure: redis used outside cluster/: $out"
  status=1
fi
python3 scripts/layers.py src || status=1
exit $status

#!/usr/bin/env bash
# Creates (or brings up to date) the venv with Confluent's Python serdes that the schema tests
# use to read records back (scripts/schema-readback.py, scripts/schema-produce.py):
#   scripts/schema-venv.sh DIR
# confluent-kafka is pinned (its wheel bundles librdkafka 2.16, which reads from Tansu); its
# extras bring what its schema_registry modules import: fastavro (avro), jsonschema and
# referencing (json_schema), protobuf and googleapis-common-protos (protobuf), httpx, attrs,
# cachetools and authlib (the registry client). A stamp file names the pins: a venv made with
# other pins is made again; a current one is left alone (no network).
set -euo pipefail

VENV=${1:?usage: scripts/schema-venv.sh DIR}
PINS='confluent-kafka[schemaregistry,avro,json,protobuf]==2.16.1'
STAMP="$VENV/.floodgate-pins"

if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$PINS" ] &&
  "$VENV/bin/python" -c 'import confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.json_schema, confluent_kafka.schema_registry.protobuf' 2>/dev/null; then
  exit 0
fi
mkdir -p "$(dirname "$VENV")"
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q "$PINS"
"$VENV/bin/python" -c 'import confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.json_schema, confluent_kafka.schema_registry.protobuf'
echo "$PINS" > "$STAMP"

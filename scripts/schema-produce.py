#!/usr/bin/env python3
"""Produces records with Confluent's own serializers (the harness's check of itself).

Reads JSON lines from stdin ({"key": ..., "value": ...}; the value is serialized, the key
written as UTF-8 text when present) and writes them to --topic with confluent-kafka's
AvroSerializer / JSONSerializer (schema --schema, auto-registered under <topic>-value) or
ProtobufSerializer (the latest schema of <topic>-value, registered beforehand as .proto text;
the message class is built from the registry's `format=serialized` answer). Prints the schema
id used. With scripts/schema-readback.py this checks the test registry and the read-back
against Confluent's serdes, independently of the gateway.

    schema-produce.py --broker B --topic T --registry URL --format avro|json|protobuf [--schema TEXT]
"""

import argparse
import base64
import json
import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--broker", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--registry", required=True)
    p.add_argument("--format", required=True, choices=["avro", "json", "protobuf"])
    p.add_argument("--schema", default=None)
    args = p.parse_args()
    client = SchemaRegistryClient({"url": args.registry})
    subject = f"{args.topic}-value"
    if args.format == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        ser = AvroSerializer(client, args.schema)
        to_obj = lambda v: v  # noqa: E731
    elif args.format == "json":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        ser = JSONSerializer(args.schema, client)
        to_obj = lambda v: v  # noqa: E731
    else:
        from google.protobuf import descriptor_pb2, descriptor_pool
        from google.protobuf.json_format import ParseDict
        from google.protobuf.message_factory import GetMessageClass
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        latest = client.get_latest_version(subject, fmt="serialized")
        fd = descriptor_pb2.FileDescriptorProto()
        fd.ParseFromString(base64.b64decode(latest.schema.schema_str))
        fd.name = fd.name or "schema.proto"
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fd)
        full = (fd.package + "." if fd.package else "") + fd.message_type[0].name
        cls = GetMessageClass(pool.FindMessageTypeByName(full))
        ser = ProtobufSerializer(
            cls, client, {"auto.register.schemas": False, "use.latest.version": True, "use.deprecated.format": False}
        )
        to_obj = lambda v: ParseDict(v, cls())  # noqa: E731

    producer = Producer({"bootstrap.servers": args.broker})
    failures = []
    for line in sys.stdin:
        if not line.strip():
            continue
        record = json.loads(line)
        ctx = SerializationContext(args.topic, MessageField.VALUE)
        value = ser(to_obj(record["value"]), ctx)
        key = record.get("key")
        producer.produce(
            args.topic,
            key=None if key is None else str(key).encode(),
            value=value,
            on_delivery=lambda err, _m: err and failures.append(err),
        )
    left = producer.flush(20)
    if left or failures:
        print(f"schema-produce: {left} undelivered, errors {failures}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"schema_id": int.from_bytes(value[1:5], "big")}))


if __name__ == "__main__":
    main()

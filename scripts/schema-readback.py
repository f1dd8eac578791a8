#!/usr/bin/env python3
"""Reads a topic back and decodes it with Confluent's own deserializers.

The proof that records are in Confluent's wire format is that Confluent's Python serdes
(confluent-kafka's AvroDeserializer, JSONDeserializer, ProtobufDeserializer), fetching the
writer schema from the registry by the id in each record, decode them. Prints one JSON line per
record, in partition/offset order:

    {"partition": 0, "offset": 3, "key": <decoded or raw>, "value": <decoded>}

Reads every partition from offset 0 (assigned, no consumer group join) until --count records
have arrived, then for --linger seconds more (so extra records show), or until --timeout.
Exits 2 on a decode error (naming the record and the field), 3 when fewer than --count records
arrived in time.

    schema-readback.py --broker 127.0.0.1:19292 --topic T --registry http://127.0.0.1:PORT \
        --format avro|json|protobuf [--field value|key|both] [--count N]

A field not decoded (the key, with --field value) is printed as text when it is UTF-8, else as
{"base64": "..."}. Decoded bytes values print as {"base64": "..."} too.

Protobuf: the message class comes from the writer schema itself (the registry's
`format=serialized` answer, a FileDescriptorProto, built with google.protobuf's descriptor pool)
and the record's message indexes: what a consumer compiled from the same .proto would hold,
without needing protoc here. --proto-file, when given, is compiled with grpcio-tools when that
is installed, and its message of the same full name is used instead. Messages print as
MessageToDict(preserving_proto_field_name=True, always_print_fields_with_no_presence=True).
"""

import argparse
import base64
import decimal
import json
import sys
import time
import uuid

from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext


def fail(code, message):
    print(f"schema-readback: {message}", file=sys.stderr)
    sys.exit(code)


def plain(value):
    """What json.dumps cannot print itself."""
    if isinstance(value, (bytes, bytearray)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"cannot print {type(value).__name__}")


def raw(data):
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def zigzag_varint(data, at):
    shift = 0
    value = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated message index")
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return (value >> 1) ^ -(value & 1), at


def message_indexes(data):
    """The message-index array after Confluent's 5-byte header ([0] for the single 0 byte)."""
    if len(data) < 6 or data[0] != 0:
        raise ValueError("not in Confluent's wire format (magic byte 0, 4-byte schema id)")
    count, at = zigzag_varint(data, 5)
    if count == 0:
        return [0]
    indexes = []
    for _ in range(count):
        i, at = zigzag_varint(data, at)
        indexes.append(i)
    return indexes


class Protobuf:
    """A ProtobufDeserializer per (writer schema id, message indexes)."""

    def __init__(self, client, proto_file):
        self.client = client
        self.proto_file = proto_file
        self.compiled = None
        self.deserializers = {}

    def message_class(self, schema_id, indexes):
        from google.protobuf import descriptor_pb2, descriptor_pool
        from google.protobuf.message_factory import GetMessageClass

        schema = self.client.get_schema(schema_id, fmt="serialized")
        fd_proto = descriptor_pb2.FileDescriptorProto()
        fd_proto.ParseFromString(base64.b64decode(schema.schema_str))
        pool = descriptor_pool.DescriptorPool()
        for dep in fd_proto.dependency:
            # Google's well-known types come with the protobuf package.
            known = descriptor_pool.Default().FindFileByName(dep)
            known_proto = descriptor_pb2.FileDescriptorProto()
            known.CopyToProto(known_proto)
            pool.Add(known_proto)
        if not fd_proto.name:
            fd_proto.name = f"schema-{schema_id}.proto"
        pool.Add(fd_proto)
        desc = None
        messages = fd_proto.message_type
        path = []
        for i in indexes:
            if i < 0 or i >= len(messages):
                raise ValueError(f"message index {indexes} out of range")
            path.append(messages[i].name)
            messages = messages[i].nested_type
        full = ".".join(([fd_proto.package] if fd_proto.package else []) + path)
        desc = pool.FindMessageTypeByName(full)
        if self.proto_file:
            return self.from_proto_file(full)
        return GetMessageClass(desc)

    def from_proto_file(self, full_name):
        if self.compiled is None:
            import importlib.util
            import os
            import tempfile

            try:
                from grpc_tools import protoc
            except ImportError:
                fail(1, "--proto-file needs grpcio-tools in the venv")
            out = tempfile.mkdtemp(prefix="readback-proto.")
            folder, name = os.path.split(os.path.abspath(self.proto_file))
            if protoc.main(["protoc", f"-I{folder}", f"--python_out={out}", name]) != 0:
                fail(1, f"protoc failed on {self.proto_file}")
            module_name = name[: -len(".proto")].replace("-", "_") + "_pb2"
            spec = importlib.util.spec_from_file_location(module_name, os.path.join(out, module_name + ".py"))
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self.compiled = module
        from google.protobuf.message_factory import GetMessageClass

        desc = self.compiled.DESCRIPTOR.pool.FindMessageTypeByName(full_name)
        return GetMessageClass(desc)

    def __call__(self, data, ctx):
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
        from google.protobuf.json_format import MessageToDict

        if data is None:
            return None
        if len(data) < 5 or data[0] != 0:
            raise ValueError("not in Confluent's wire format (magic byte 0, 4-byte schema id)")
        schema_id = int.from_bytes(data[1:5], "big")
        indexes = message_indexes(data)
        key = (schema_id, tuple(indexes))
        if key not in self.deserializers:
            cls = self.message_class(schema_id, indexes)
            self.deserializers[key] = ProtobufDeserializer(
                cls, {"use.deprecated.format": False}, schema_registry_client=self.client
            )
        message = self.deserializers[key](data, ctx)
        return MessageToDict(
            message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )


def deserializer(fmt, client, proto_file):
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroDeserializer

        return AvroDeserializer(client)
    if fmt == "json":
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        return JSONDeserializer(None, schema_registry_client=client)
    if fmt == "protobuf":
        return Protobuf(client, proto_file)
    fail(1, f"unknown format {fmt}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--broker", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--registry", required=True)
    p.add_argument("--format", required=True, choices=["avro", "json", "protobuf"])
    p.add_argument("--field", default="value", choices=["value", "key", "both"])
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for --count records")
    p.add_argument("--linger", type=float, default=0.5, help="seconds to keep reading after --count")
    p.add_argument("--proto-file", default=None)
    args = p.parse_args()

    client = SchemaRegistryClient({"url": args.registry})
    decode_value = args.field in ("value", "both")
    decode_key = args.field in ("key", "both")
    value_de = deserializer(args.format, client, args.proto_file) if decode_value else None
    key_de = deserializer(args.format, client, args.proto_file) if decode_key else None

    consumer = Consumer(
        {
            "bootstrap.servers": args.broker,
            "group.id": f"readback-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    deadline = time.monotonic() + args.timeout
    partitions = []
    while not partitions:
        meta = consumer.list_topics(args.topic, timeout=5)
        topic = meta.topics.get(args.topic)
        if topic is not None and topic.error is None and topic.partitions:
            partitions = sorted(topic.partitions)
        elif time.monotonic() > deadline:
            fail(3, f"topic {args.topic} not found on {args.broker}")
        else:
            time.sleep(0.1)
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions])

    records = []
    reached = time.monotonic() if args.count <= 0 else None
    while True:
        now = time.monotonic()
        if reached is not None and now - reached > args.linger:
            break
        if now > deadline:
            break
        m = consumer.poll(0.1)
        if m is None:
            continue
        if m.error():
            fail(1, f"consumer error: {m.error()}")
        where = f"record at partition {m.partition()} offset {m.offset()}"
        out = {"partition": m.partition(), "offset": m.offset()}
        for field, de, data, kind in (
            ("key", key_de, m.key(), MessageField.KEY),
            ("value", value_de, m.value(), MessageField.VALUE),
        ):
            if de is None:
                out[field] = raw(data)
                continue
            try:
                out[field] = de(data, SerializationContext(args.topic, kind, m.headers()))
            except Exception as e:  # every decode error ends the run, named
                head = data[:16].hex() if data else repr(data)
                fail(2, f"{where}: {field} does not decode as {args.format} ({type(e).__name__}: {e}); bytes start {head}")
        records.append(out)
        if reached is None and len(records) >= args.count:
            reached = time.monotonic()
    consumer.close()

    records.sort(key=lambda r: (r["partition"], r["offset"]))
    for r in records:
        print(json.dumps(r, default=plain, sort_keys=True))
    if len(records) < args.count:
        fail(3, f"{len(records)} of {args.count} records arrived from {args.topic} in {args.timeout} s")


if __name__ == "__main__":
    main()

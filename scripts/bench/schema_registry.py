#!/usr/bin/env python3
"""A small Confluent Schema Registry for the benchmarks: in memory, on a loopback port, the four
calls floodgate makes (the tests have their own in Rust, tests/it/common/schema_registry.rs):

  GET  /schemas/ids/{id}
  POST /subjects/{subject}                       lookup: id and version, or 404 40401/40403
  POST /subjects/{subject}/versions              register (or find): {"id": N}
  GET  /subjects/{subject}/versions/{v|latest}   404 40401/40402 when missing
  POST /compatibility/subjects/{subject}/versions/latest   {"is_compatible": ...}, 40401

and two of its own for the scripts: GET /_stats (calls by kind, versions per subject) and
POST /_register/{subject} (registers without counting a call).

With --compatibility it keeps one rule of Confluent's default BACKWARD compatibility: a JSON
Schema may not change the "type" of a property its subject's latest version declares
(registering one is 409, and the compatibility call says so).

Usage: schema_registry.py PORT [--compatibility]
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

LOCK = threading.Lock()
SCHEMAS = []  # (type, text); id N at index N - 1
SUBJECTS = {}  # subject -> [id, ...], version 1 first
CALLS = {}
COMPATIBILITY = "--compatibility" in sys.argv[2:]


def incompatible(subject, kind, text):
    """Why text may not follow the subject's latest version, or None."""
    ids = SUBJECTS.get(subject)
    if not COMPATIBILITY or not ids or kind != "JSON" or SCHEMAS[ids[-1] - 1][0] != "JSON":
        return None
    def props(t):
        try:
            p = json.loads(t).get("properties")
        except (ValueError, AttributeError):
            return {}
        return p if isinstance(p, dict) else {}
    old, new = props(SCHEMAS[ids[-1] - 1][1]), props(text)
    for name, was in old.items():
        if name in new and isinstance(was, dict) and isinstance(new[name], dict) \
                and was.get("type") != new[name].get("type"):
            return "the type of %s changed" % name
    return None


def register(subject, kind, text):
    text = text.strip()
    for i, s in enumerate(SCHEMAS):
        if s == (kind, text):
            sid = i + 1
            break
    else:
        SCHEMAS.append((kind, text))
        sid = len(SCHEMAS)
    versions = SUBJECTS.setdefault(subject, [])
    if sid not in versions:
        versions.append(sid)
    return sid


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/vnd.schemaregistry.v1+json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def count(self, kind):
        with LOCK:
            CALLS[kind] = CALLS.get(kind, 0) + 1

    def posted(self):
        n = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        return body.get("schemaType", "AVRO"), body.get("schema", "").strip()

    def do_GET(self):
        parts = [unquote(p) for p in self.path.split("?")[0].strip("/").split("/")]
        if parts == ["_stats"]:
            with LOCK:
                return self.reply(200, {"calls": CALLS, "versions": {s: len(v) for s, v in SUBJECTS.items()}})
        if len(parts) == 3 and parts[:2] == ["schemas", "ids"]:
            self.count("by_id")
            with LOCK:
                i = int(parts[2]) - 1 if parts[2].isdigit() else -1
                if 0 <= i < len(SCHEMAS):
                    kind, text = SCHEMAS[i]
                    return self.reply(200, {"schema": text, "schemaType": kind})
            return self.reply(404, {"error_code": 40403, "message": "Schema not found"})
        if len(parts) == 4 and parts[0] == "subjects" and parts[2] == "versions":
            self.count("version")
            with LOCK:
                ids = SUBJECTS.get(parts[1])
                if not ids:
                    return self.reply(404, {"error_code": 40401, "message": "Subject not found."})
                v = len(ids) if parts[3] in ("latest", "-1") else int(parts[3]) if parts[3].isdigit() else 0
                if not 1 <= v <= len(ids):
                    return self.reply(404, {"error_code": 40402, "message": "Version not found."})
                sid = ids[v - 1]
                kind, text = SCHEMAS[sid - 1]
                return self.reply(200, {"subject": parts[1], "version": v, "id": sid, "schema": text,
                                        "schemaType": kind})
        self.reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})

    def do_POST(self):
        parts = [unquote(p) for p in self.path.split("?")[0].strip("/").split("/")]
        kind, text = self.posted()
        if len(parts) == 2 and parts[0] == "_register":
            with LOCK:
                return self.reply(200, {"id": register(parts[1], kind, text)})
        if len(parts) == 2 and parts[0] == "subjects":
            self.count("lookup")
            with LOCK:
                for v, sid in enumerate(SUBJECTS.get(parts[1], [])):
                    if SCHEMAS[sid - 1] == (kind, text):
                        return self.reply(200, {"subject": parts[1], "version": v + 1, "id": sid})
            return self.reply(404, {"error_code": 40403, "message": "Schema not found"})
        if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
            self.count("register")
            with LOCK:
                bad = incompatible(parts[1], kind, text)
                if bad:
                    return self.reply(409, {"error_code": 409, "message":
                                            "Schema being registered is incompatible with an earlier schema: " + bad})
                return self.reply(200, {"id": register(parts[1], kind, text)})
        if len(parts) == 5 and parts[0] == "compatibility" and parts[1] == "subjects":
            self.count("compatibility")
            with LOCK:
                if parts[2] not in SUBJECTS:
                    return self.reply(404, {"error_code": 40401, "message": "Subject not found."})
                bad = incompatible(parts[2], kind, text)
            return self.reply(200, {"is_compatible": bad is None, "messages": [bad] if bad else []})
        self.reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()

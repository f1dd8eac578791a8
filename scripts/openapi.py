"""Writes openapi.json, the API contract schemathesis checks the live gateway against
(scripts/contract.sh). Edit this file, run `python3 scripts/openapi.py`, commit both.
`--check` writes nothing and fails when openapi.json is not what this file makes (an edit
made to the JSON by hand, which the next run here would undo)."""
import json
import os
import sys
import tempfile

COMMITTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "openapi.json")
CHECK = sys.argv[1:] == ["--check"]
OUT = tempfile.mkstemp(suffix=".json")[1] if CHECK else COMMITTED
MAX_RATE = 10_000_000_000
MAX_BURST = 1 << 50
# Every record costs this many bytes besides its key, value and headers (src/record.rs): a bytes
# bucket smaller than that could never admit a record.
RECORD_OVERHEAD_BYTES = 8
B64 = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
def ref(n): return {"$ref": f"#/components/schemas/{n}"}
# A time bound of /admin/usage: Unix seconds, or RFC 3339.
INSTANT = {"anyOf": [{"type": "string", "pattern": "^-?[0-9]{1,18}$"}, {"type": "string", "format": "date-time"}]}
LIMIT_MODE = {"type": "string", "enum": ["enforce", "shadow"], "default": "enforce", "description": "shadow: refuses nothing, counts what it would refuse"}
def jres(desc, schema, headers=None):
    r = {"description": desc, "content": {"application/json": {"schema": schema}}}
    if headers: r["headers"] = headers
    return r
def err(desc): return jres(desc, ref("Error"))
RL_HEADERS = {
    "RateLimit-Policy": {"description": "draft-ietf-httpapi-ratelimit-headers: one item per bucket (q = burst, w = seconds to refill, qu = unit: records, or content-bytes for the bytes buckets, which count a record's key, value, header names and values plus 8 bytes of overhead per record, not the HTTP body)", "schema": {"type": "string"}},
    "RateLimit": {"description": "tokens available now (r) and seconds until full (t), per bucket", "schema": {"type": "string"}},
}
RETRY = {"Retry-After": {"description": "whole seconds, rounded up; at most a day (a longer wait is told again then)", "schema": {"type": "integer", "minimum": 1, "maximum": 86400}}}
# Idempotency-Key (draft-ietf-httpapi-idempotency-key-header): a bare token or a Structured
# Field string of 1 to 255 visible ASCII characters; the pattern is exactly what is accepted.
IDEM_KEY = {"name": "Idempotency-Key", "in": "header", "required": False,
    "schema": {"type": "string", "pattern": '^(?:[!#-~][!-~]{0,254}|"(?:[!#-\\[\\]-~]|\\\\["\\\\]){1,255}")$'},
    "description": "Exactly once from the client's view: a retry with the same key and the same request (tenant, method, path, async, Content-Type, body — as inflated, when it has a Content-Encoding) gets the first answer again, byte for byte, with Idempotent-Replayed: true, and writes nothing; a retry while the first one's records are still with Kafka waits for their outcome (or 503 again after [kafka] delivery_timeout_ms); a retry while the first is still being read or admitted is 409 idempotency_key_in_use; the same key for another request is 422 idempotency_key_reused. An answer is kept [idempotency] ttl_s (86400) once final (200, 202, 207, 502, a 4xx decided after the whole body was read); a 429, 408 or 503 keeps nothing. Keys are per tenant. Single replica: kept in memory within max_entries and max_bytes, oldest evicted first; cluster mode: in Redis."}
REPLAYED = {"Idempotent-Replayed": {"description": "true: this is the stored answer to an earlier request with the same Idempotency-Key, sent again", "schema": {"type": "string", "enum": ["true"]}}}
def nullable_int(lo, hi):
    return {"type": ["integer", "null"], "minimum": lo, "maximum": hi}
def int_range(lo, hi):
    return {"type": "integer", "minimum": lo, "maximum": hi}
budget_props = {
    "records_per_sec": int_range(1, MAX_RATE),
    "records_burst": int_range(1, MAX_BURST),
    "bytes_per_sec": int_range(1, MAX_RATE),
    "bytes_burst": int_range(RECORD_OVERHEAD_BYTES, MAX_BURST),
}
budget_view_props = {k: nullable_int(v["minimum"], v["maximum"]) for k, v in budget_props.items()}
dependent = {"records_burst": ["records_per_sec"], "bytes_burst": ["bytes_per_sec"]}
# An unset bytes_burst is bytes_per_sec: below one record's overhead it must be set.
small_bytes_rate = {
    "if": {"required": ["bytes_per_sec"], "properties": {"bytes_per_sec": {"type": "integer", "maximum": RECORD_OVERHEAD_BYTES - 1}}},
    "then": {"required": ["bytes_burst"]},
}
topic_pattern = "^[a-zA-Z0-9._*?-]{1,249}$"
# A claim value or certificate name: 1 to 512 bytes (UTF-8) without control characters (Unicode
# Cc). JSON Schema counts characters: a longer one in bytes is 422 naming the field.
credential_name = {"type": "string", "minLength": 1, "maxLength": 512, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"}
tenant_settings_props = {
    "topics": {"type": "array", "minItems": 1, "maxItems": 100, "items": {"type": "string", "pattern": topic_pattern}, "description": "glob patterns (*, ?) of the topics the tenant may write"},
    **budget_props,
    "quotas": {"type": "array", "maxItems": 3, "items": ref("Quota"), "description": "calendar quotas, at most one per window; a change keeps what each window has used"},
    "budget_mode": LIMIT_MODE,
    "max_buffer_share": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1},
    "priority": {"type": ["string", "null"], "enum": ["critical", "standard", "batch", None], "description": "who is refused first under the adaptive limit: batch, then standard; critical keeps a reserved share"},
    "jwt_claims": {"type": "array", "maxItems": 100, "uniqueItems": True, "description": "JWTs this tenant accepts: an issuer of [[auth.jwt]] (another issuer is 422) and the value of its tenant_claim; each belongs to one tenant at most (422)",
                   "items": {"type": "object", "required": ["issuer", "value"], "additionalProperties": False, "properties": {
                       "issuer": credential_name, "value": credential_name}}},
    "cert_names": {"type": "array", "maxItems": 100, "uniqueItems": True, "items": credential_name, "description": "client-certificate names this tenant accepts (the kind [auth.client_cert] name picks: SAN URI, SAN DNS or CN); each belongs to one tenant at most"},
}
schemas = {
    "Flow": {"type": "object", "required": ["requests", "records", "bytes"], "properties": {
        "requests": {"type": "integer", "minimum": 0}, "records": {"type": "integer", "minimum": 0}, "bytes": {"type": "integer", "minimum": 0}}},
    "Error": {
        "type": "object", "required": ["error", "detail"],
        "properties": {
            "error": {"type": "string", "description": "stable code"},
            "detail": {"type": "string"},
            "field": {"type": "string", "description": "422 only: the offending field"},
            "reason": {"type": "string", "enum": ["tenant_records", "tenant_bytes", "global_records", "global_bytes", "tenant_buffer", "buffer_full", "server_busy", "adaptive", "consumer_lag", "tenant_quota", "global_quota", "auth_failures", "tenant_connections", "idempotency_releases"], "description": "429 only"},
            "retry_after_ms": {"type": "integer", "minimum": 0, "maximum": 86400000, "description": "429, and 409 idempotency_key_in_use"},
            "offsets": {"type": "array", "items": ref("RecordResult"), "description": "502/503 after delivery: each record's offset or error"},
            "current_version": {"type": "integer", "minimum": 0, "description": "409 only: the tenant's version now"},
        },
    },
    "RecordResult": {
        "oneOf": [
            {"type": "object", "required": ["partition", "offset"], "additionalProperties": False, "properties": {"partition": {"type": "integer"}, "offset": {"type": "integer"}}},
            {"type": "object", "required": ["error"], "additionalProperties": False, "properties": {"error": {"type": "string"}}},
        ]
    },
    "Record": {
        "type": "object", "additionalProperties": False,
        "properties": {
            "value": {"description": "any JSON; its text is written byte for byte (null: a Kafka null value)"},
            "value_b64": {"type": "string", "contentEncoding": "base64", "pattern": B64},
            "key": {"type": "string"},
            "key_b64": {"type": "string", "contentEncoding": "base64", "pattern": B64},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "partition": {"type": "integer", "minimum": 0, "maximum": 2147483647},
            "timestamp_ms": {"type": "integer", "minimum": 0, "maximum": 9223372036854775807},
        },
        "oneOf": [{"required": ["value"]}, {"required": ["value_b64"]}],
        "not": {"required": ["key", "key_b64"]},
    },
    "TenantSettings": {
        "type": "object", "additionalProperties": False, "required": ["topics"],
        "properties": tenant_settings_props, "dependentRequired": dependent, **small_bytes_rate,
    },
    "TenantPatch": {
        "type": "object", "additionalProperties": False,
        "description": "JSON merge patch (RFC 7396) of the tenant's settings: a field set to null is unset (a rate with its burst); a burst is changed together with its rate; topics cannot be unset",
        "properties": {**tenant_settings_props, **budget_view_props,
                       **{k: {**tenant_settings_props[k], "type": ["array", "null"]} for k in ["quotas", "jwt_claims", "cert_names"]},
                       "budget_mode": {**LIMIT_MODE, "type": ["string", "null"], "enum": ["enforce", "shadow", None]}},
        # No rule on a small bytes_per_sec here: a patch keeps the tenant's bytes_burst.
        "dependentRequired": dependent,
    },
    "Tenant": {
        "type": "object", "required": ["id", "version", "topics", "keys", "live"],
        "properties": {
            "id": {"type": "string"},
            "version": {"type": "integer", "minimum": 0, "description": "changes of this tenant so far (also the ETag): send it as If-Match to change the tenant only if nobody else has"},
            **tenant_settings_props,
            **budget_view_props,
            "keys": {"type": "array", "items": {"type": "object", "required": ["key_id"], "properties": {"key_id": {"type": "string"}}}},
            "live": {"type": ["object", "null"], "description": "tokens now, buffer held, admitted, failed and rejected counts since start"},
            "warnings": {"type": "array", "description": "valid settings that cost clients something, with what: a records_burst (bytes_burst) below records_per_sec (bytes_per_sec) gives a client that honours Retry-After (whole seconds) about burst / rate of its budget, unless [wait] max_ms holds its requests; absent when there is none", "items": {"type": "object", "required": ["field", "detail"], "properties": {"field": {"type": "string"}, "detail": {"type": "string"}}}},
        },
    },
    "GlobalSettings": {
        "type": "object", "additionalProperties": False,
        "properties": {**budget_props, "hide_from_tenants": {"type": "boolean", "description": "leave the global buckets out of tenants' RateLimit fields"}, "mode": LIMIT_MODE,
                       "quotas": {"type": "array", "maxItems": 3, "items": ref("Quota"), "description": "calendar quotas on all tenants together, at most one per window, refused as global_quota; a change keeps what each window has used"}},
        "dependentRequired": dependent, **small_bytes_rate,
    },
    "Global": {
        "type": "object",
        "properties": {**budget_view_props, "hide_from_tenants": {"type": "boolean"}, "mode": LIMIT_MODE, "quotas": {"type": "array", "items": ref("Quota")},
                       "live": {"type": "object", "description": "tokens now, and each global quota's window as used (window, dimension, used, limit, reset_in_s)"}},
    },
    "AdaptiveSettings": {
        "type": "object", "additionalProperties": False,
        "properties": {
            "enabled": {"type": "boolean"},
            "interval_ms": {**int_range(100, 60000), "description": "the controller's interval; a window of fewer than 20 deliveries is merged into the next, over at most 8 intervals"},
            "target_delivery_ms": {"type": ["integer", "null"], "minimum": 1, "maximum": 3600000, "description": "delivery p90 above which Kafka counts as slow; null: learned from the path's baseline (baseline_factor x baseline + 4 x noise, at least min_target_ms)"},
            "baseline_factor": {"type": "number", "minimum": 1, "maximum": 100, "description": "how many times its own baseline the path's p90 may reach (besides its noise) before it counts as slow"},
            "min_target_ms": {**int_range(1, 3600000), "description": "the learned target is at least this"},
            "healthy_fraction": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "buffer_pressure": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "decrease_factor": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "increase_step": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "recovery_factor": {"type": "number", "exclusiveMinimum": 1, "maximum": 10, "description": "below the recovery level the limit is multiplied by this once per healthy interval (slow start)"},
            "decrease_cooldown_ms": int_range(1, 3600000),
            "increase_cooldown_ms": int_range(1, 3600000),
            "floor": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "critical_reserve": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
            "max_records_per_sec": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_RATE},
            "max_bytes_per_sec": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_RATE},
        },
    },
    "Adaptive": {
        "type": "object", "required": ["settings", "limit_ratio", "last_move", "phase", "reason"],
        "properties": {"settings": {"type": "object"}, "limit_ratio": {"type": "number"}, "limit_records_per_sec": {"type": "integer"},
                       "limit_bytes_per_sec": {"type": "integer"}, "target_delivery_ms": {"type": "number", "description": "the delivery p90 above which Kafka counts as slow (0 while unknown)"}, "delivery_p99_ms": {"type": ["number", "null"], "description": "the last interval's p99 at 1 % resolution (shown; the controller follows the p90 in signal); null when it delivered nothing (see stalled_ms)"},
                       "stalled_ms": {"type": "number", "description": "how long records had waited with no delivery at all at the last interval (0: something was delivered, or nothing waits); over the target it cuts the limit (cause stall)"},
                       "last_move": {"type": "string"}, "class_rates": {"type": "object"},
                       "phase": {"type": "string", "enum": ["ceiling", "cutting", "floor", "dead_band", "recovering", "probing", "demand_below_limit"], "description": "where the limit stands"},
                       "reason": {"type": "string", "description": "why the limit is where it is, in a sentence"},
                       "recovery_level_ratio": {"type": ["number", "null"], "description": "what Kafka last carried at healthy latency (fraction of the ceiling): healthy signals bring the limit back there by slow start; the ceiling (1.0) while nothing was carried yet"},
                       "recovery_level_learned": {"type": "boolean", "description": "whether the recovery level was carried at healthy latency (false: the ceiling, assumed)"},
                       "recovery_level_records_per_sec": {"type": ["integer", "null"]},
                       "time_to_recovery_level_s": {"type": ["number", "null"], "description": "seconds of healthy signals from the limit now to the recovery level (at most)"},
                       "dead_band_ms": {"type": ["object", "null"], "description": "the limit holds while the delivery p90 is between healthy_below and target; null while the target is unknown",
                                        "properties": {"healthy_below": {"type": "number"}, "target": {"type": "number"}}},
                       "signal": {"type": "object", "description": "the latency the controller follows, at its real resolution, and what it is judged against",
                                  "properties": {"followed": {"type": "string", "enum": ["p90"]}, "window_ms": {"type": "integer", "description": "the window of the reading: one interval, or several merged while each had fewer than 20 deliveries (at most 8)"},
                                                 "resolution": {"type": "number", "description": "readings are within this fraction of the true value"},
                                                 "deliveries": {"type": "integer"}, "value_ms": {"type": ["number", "null"], "description": "the window's delivery p90: the reading followed (it counts from 20 deliveries, or 5 over 8 merged intervals)"},
                                                 "p50_ms": {"type": ["number", "null"]}, "p99_ms": {"type": ["number", "null"]}, "max_ms": {"type": ["number", "null"]},
                                                 "baseline_ms": {"type": ["number", "null"], "description": "the path's p90 at its best, learned (low load after start and after each recovery)"},
                                                 "noise_ms": {"type": "number", "description": "how far healthy readings wander from the baseline (mean deviation)"},
                                                 "healthy_below_ms": {"type": ["number", "null"]}, "target_ms": {"type": ["number", "null"]},
                                                 "target_from": {"type": ["string", "null"], "enum": ["configured", "baseline", "accepted", None]},
                                                 "accepted_ms": {"type": ["number", "null"], "description": "a delivery p90 that cutting the limit to its floor did not move (at most 16 x the baseline's floor), taken as the path's own until a reading is healthy by the baseline: slow above 1.5 x it, healthy under 1.25 x it"}}},
                       "librdkafka": {"type": "array", "description": "librdkafka's own windows per broker over its last statistics interval: where delivery time went (shown, not followed)",
                                      "items": {"type": "object", "properties": {"broker": {"type": "string"}, "rtt_p50_ms": {"type": "number"}, "rtt_p99_ms": {"type": "number"},
                                                                                 "int_latency_p99_ms": {"type": "number"}, "outbuf_latency_p99_ms": {"type": "number"}}}}},
    },
    "LagGuardSettings": {
        "type": "object", "additionalProperties": False, "required": ["topics", "group", "max_recovery_s"],
        "description": "A lag guard. The name comes from the path (a name in the body must match it).",
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
            "topics": {"type": "array", "minItems": 1, "maxItems": 100, "items": {"type": "string", "minLength": 1, "maxLength": 249, "pattern": "^[A-Za-z0-9._*?-]+$"}, "description": "topic names or glob patterns"},
            "group": {"type": "string", "minLength": 1, "maxLength": 255, "description": "the consumer group whose lag counts (read, never joined)"},
            "max_recovery_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400},
            "max_lag_records": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_RATE},
            "headroom": {"type": "number", "minimum": 1, "maximum": 100},
            "interval_ms": int_range(10, 3600000),
            "floor_records_per_sec": int_range(0, MAX_RATE),
            "release_fraction": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "caught_up_s": {"type": "number", "minimum": 0, "maximum": 86400},
            "hold_s": {"type": "number", "minimum": 0, "maximum": 86400},
            "rate_window_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
            "stopped_after_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400},
        },
    },
    "LagGuard": {
        "type": "object", "required": ["guard", "phase", "lag_records", "consumer_rate", "producer_rate"],
        "properties": {
            "guard": {"type": "object"}, "phase": {"type": "string", "enum": ["starting", "idle", "capping", "holding", "released"]},
            "lag_records": {"type": "integer"}, "lag_by_topic": {"type": "array"},
            "partitions_measured": {"type": "integer", "description": "partitions with a rate (read twice in the window): rates and lag are summed over these"},
            "partitions_unread": {"type": "integer", "description": "partitions in the last answer without an end or committed offset (an error for them, or no commit yet)"},
            "consumer_rate": {"type": "number"}, "producer_rate": {"type": "number"},
            "recovery_s": {"type": ["number", "null"], "description": "null while the lag is not shrinking"},
            "cap_records_per_sec": {"type": ["number", "null"]}, "last_error": {"type": ["string", "null"]},
            "activations": {"type": "integer"}, "fail_opens": {"type": "integer"},
            "offered_rate": {"type": "number", "description": "records/s floodgate's producers offer to the guarded topics (all replicas), refused ones included"},
            "cap_basis": {"type": ["string", "null"], "enum": ["drain", "recovery", "consumer_rate", "probe", "floor", None], "description": "what set the cap: C / headroom, the most that drains the lag in time, C, a step above C while caught up, or the floor"},
            "release_blocked_by": {"type": ["string", "null"], "enum": ["lag", "behind", "demand", "settling", "growing", None], "description": "why the cap is not lifted yet"},
            "reason": {"type": "string", "description": "why the guard is where it is, in a sentence"},
        },
    },
    "Readiness": {
        "type": "object", "required": ["ready"],
        "properties": {"ready": {"type": "boolean"}, "reason": {"type": "string"}, "detail": {"type": "string"}},
    },
}
sec_key = [{"apiKey": []}]
sec_admin = [{"adminToken": []}]
ADMIN_COMMON = {
    "401": err("unauthorized: no or wrong admin token (or none configured)"),
    "429": {**err("auth_failures: too many failed authentications from this address"), "headers": RETRY},
}
guard_param = {"name": "name", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"}}
id_param = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,128}$"}}
def admin_op(summary, responses, body=None, params=None):
    op = {"summary": summary, "security": sec_admin, "responses": {**responses, **ADMIN_COMMON}}
    if params: op["parameters"] = params
    if body: op["requestBody"] = body
    return op
def json_body(schema, merge=False):
    content = {"application/json": {"schema": schema}}
    if merge: content = {"application/merge-patch+json": {"schema": schema}, **content}
    return {"required": True, "content": content}
not_saved = err("state_not_saved: the change could not be persisted, so nothing changed")
conflict = err("conflict: the tenant is not at the If-Match version, or (shared registry) another change of it came first; nothing changed")
registry_down = err("kafka_unavailable (shared registry): the registry topic could not be written or read back in time")
if_match = {"name": "If-Match", "in": "header", "required": False, "schema": {"type": "string", "pattern": '^(\\*|(W/)?"?[0-9]{1,19}"?)$'}, "description": "the tenant version (ETag) the change is based on"}
etag = {"ETag": {"description": "the tenant's version", "schema": {"type": "string"}}}
tenant_view = lambda d: jres(d, ref("Tenant"), etag)
paths = {
    "/v1/topics/{topic}/records": {"post": {
        "summary": "Produce records",
        "description": "Admitted whole or not at all. Every answer to an authenticated client carries the RateLimit fields.",
        "security": sec_key,
        "parameters": [
            {"name": "topic", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,248}$"}, "description": "a Kafka topic name the tenant's patterns allow", "example": "events.demo"},
            {"name": "async", "in": "query", "schema": {"type": "boolean"}, "description": "answer 202 once handed to the producer"},
            IDEM_KEY,
        ],
        "requestBody": {"required": True, "content": {
            "application/json": {"schema": {"type": "object", "additionalProperties": False, "required": ["records"], "properties": {"records": {"type": "array", "minItems": 1, "maxItems": 10000, "items": ref("Record")}}}, "example": {"records": [{"key": "user-1", "value": {"hello": "world"}, "headers": {"trace": "t1"}}]}},
            "application/x-ndjson": {"schema": {"type": "string", "description": "one Record object per line; blank lines are skipped"}},
        }},
        "responses": {
            "200": jres("every record acknowledged by Kafka; offsets in record order", {"type": "object", "required": ["offsets"], "properties": {"offsets": {"type": "array", "items": ref("RecordResult")}}}, {**RL_HEADERS, **REPLAYED}),
            "202": jres("every record handed to the producer (?async=true)", {"type": "object", "required": ["accepted"], "properties": {"accepted": {"type": "integer", "minimum": 1}}}, {**RL_HEADERS, **REPLAYED}),
            "400": err("malformed_body, invalid_topic: the detail names the record (and line); invalid_idempotency_key: the Idempotency-Key header is sent twice, empty, longer than 255 characters or not visible ASCII"),
            "401": {**err("unauthorized: missing or unknown API key; token_expired, token_not_yet_valid, token_audience, token_issuer, token_algorithm, token_key_unknown, token_signature, token_claims, token_malformed: a JWT that does not verify; certificate_expired"), "headers": {"WWW-Authenticate": {"description": "Bearer error=\"invalid_token\" for a JWT that does not verify", "schema": {"type": "string"}}}},
            "403": err("forbidden_topic: the topic is outside the tenant's patterns (or the token's topics claim); unknown_tenant: a valid JWT or client certificate that belongs to no tenant"),
            "404": err("unknown_topic: the topic does not exist in Kafka; unknown_partition: a record names a partition the topic does not have"),
            "408": err("body_timeout"),
            "413": err("body_too_large, too_many_records, record_too_large, exceeds_burst"),
            "415": err("unsupported_media_type"),
            "409": {**err("idempotency_key_in_use: another request with this Idempotency-Key is still being read or admitted (retry_after_ms)"), "headers": RETRY},
            "422": err("idempotency_key_reused: the Idempotency-Key was used for another request"),
            "429": {**err("rate_limited: reason and retry_after_ms say what ran out and when to come back"), "headers": {**RETRY, **RL_HEADERS}},
            "502": {**err("delivery_failed: Kafka refused some records (per-record results in offsets)"), "headers": REPLAYED},
            "503": {**err("kafka_unavailable or shutting_down; idempotency_unavailable: the key store did not answer and [idempotency] on_store_error = \"refuse\" (nothing written); jwks_unavailable: the token names a key the gateway does not hold and its issuer's JWKS cannot be fetched, or was fetched less than min_refetch_s ago (Retry-After: when the next fetch is allowed)"), "headers": RETRY},
        },
    }},
    "/healthz": {"get": {"summary": "Alive", "responses": {"200": {"description": "alive", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    "/readyz": {"get": {"summary": "Ready for traffic", "responses": {
        "200": jres("ready", ref("Readiness")),
        "503": jres("not ready: shutting_down, registry_unverified, registry_loading, quotas_counted_apart (the shared registry sets quotas, and this replica has no [cluster] redis_url to count them with the others), buffer_high_water or kafka_unreachable", ref("Readiness")),
    }}},
    "/metrics": {"get": {"summary": "Prometheus metrics (OpenMetrics text)", "responses": {"200": {"description": "the exposition", "content": {"text/plain; version=0.0.4; charset=utf-8": {"schema": {"type": "string"}}, "application/openmetrics-text; version=1.0.0; charset=utf-8": {"schema": {"type": "string"}}}}}, "description": "OpenMetrics when the Accept header asks for application/openmetrics-text (as Prometheus does), Prometheus' classic text format otherwise. Per-tenant series as [metrics] per_tenant says (default: the 100 busiest, the rest under tenant=\"_other\"). With [metrics] token_env, 401 without its bearer token."}},
    "/admin/tenants": {"get": admin_op("List tenants, a page at a time in id order", {
        "200": jres("a page of tenants", {"type": "object", "required": ["tenants", "next"], "properties": {
            "tenants": {"type": "array", "items": ref("Tenant")},
            "next": {"type": ["string", "null"], "description": "the cursor of the next page (pass it as after); null on the last page"}}}),
        "422": err("invalid_field: limit out of range, or an unknown parameter"),
    }, params=[
        {"name": "limit", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}},
        {"name": "after", "in": "query", "required": False, "schema": {"type": "string"}, "description": "list the tenants whose id sorts after this one (the previous page's next)"},
        {"name": "prefix", "in": "query", "required": False, "schema": {"type": "string"}, "description": "only ids that start with this"},
    ])},
    "/admin/tenants/{id}": {
        "get": admin_op("A tenant's settings and live state", {"200": tenant_view("the tenant"), "404": err("tenant_not_found")}, params=[id_param]),
        "put": admin_op("Create or replace a tenant's settings (its keys are kept)", {
            "200": tenant_view("replaced"), "201": tenant_view("created"),
            "400": err("malformed_body"), "409": conflict, "422": err("invalid_field: the field is named"), "500": not_saved, "503": registry_down,
        }, body=json_body(ref("TenantSettings")), params=[id_param, if_match]),
        "patch": admin_op("Change some settings (JSON merge patch; null unsets)", {
            "200": tenant_view("changed"), "400": err("malformed_body"), "404": err("tenant_not_found"),
            "409": conflict, "422": err("invalid_field: the field is named"), "500": not_saved, "503": registry_down,
        }, body=json_body(ref("TenantPatch"), merge=True), params=[id_param, if_match]),
        "delete": admin_op("Delete a tenant", {"204": {"description": "deleted"}, "404": err("tenant_not_found"), "409": conflict, "422": err("invalid_field: If-Match is not a version"), "500": not_saved, "503": registry_down}, params=[id_param, if_match]),
    },
    "/admin/tenants/{id}/keys": {"post": admin_op("Issue a new API key (shown once)", {
        "201": jres("issued", {"type": "object", "required": ["tenant", "key_id", "api_key"], "properties": {"tenant": {"type": "string"}, "key_id": {"type": "string"}, "api_key": {"type": "string"}}}),
        "404": err("tenant_not_found"), "500": not_saved, "503": registry_down,
    }, params=[id_param])},
    "/admin/tenants/{id}/keys/{key_id}": {"delete": admin_op("Revoke a key", {
        "204": {"description": "revoked"}, "404": err("tenant_not_found or key_not_found"), "500": not_saved, "503": registry_down,
    }, params=[id_param, {"name": "key_id", "in": "path", "required": True, "schema": {"type": "string"}}])},
    "/admin/global": {
        "get": admin_op("The global budget and its live tokens", {"200": jres("the global budget", ref("Global"))}),
        "put": admin_op("Replace the global budget", {
            "200": jres("replaced", ref("Global")), "400": err("malformed_body"), "422": err("invalid_field: the field is named"), "500": not_saved, "503": registry_down,
        }, body=json_body(ref("GlobalSettings"))),
    },
    "/admin/adaptive": {
        "get": admin_op("The adaptive limit: settings, where it stands, why it last moved", {"200": jres("the adaptive limit", ref("Adaptive"))}),
        "put": admin_op("Replace the adaptive settings live (not persisted)", {
            "200": jres("replaced", ref("Adaptive")), "400": err("malformed_body"), "422": err("invalid_field: the field is named"),
        }, body=json_body(ref("AdaptiveSettings"))),
    },
    "/admin/lag-guards": {"get": admin_op("The lag guards and where they stand", {"200": jres("every guard", {"type": "object", "required": ["guards"], "properties": {"guards": {"type": "array", "items": ref("LagGuard")}}})})},
    "/admin/lag-guards/{name}": {
        "get": admin_op("One lag guard", {"200": jres("the guard", ref("LagGuard")), "404": err("lag_guard_not_found")}, params=[guard_param]),
        "put": admin_op("Create or replace a lag guard live (not persisted)", {
            "200": jres("replaced", ref("LagGuard")), "201": jres("created", ref("LagGuard")),
            "400": err("malformed_body"), "422": err("invalid_field: the field is named"),
        }, body=json_body(ref("LagGuardSettings")), params=[guard_param]),
        "delete": admin_op("Remove a lag guard (its cap lifts at once)", {"204": {"description": "removed"}, "404": err("lag_guard_not_found")}, params=[guard_param]),
    },
    "/admin/status": {"get": admin_op("The status page's snapshot: the tenants asked for with rates over the last 10 s and a minute of history (kept by the gateway whether or not anyone looks), totals, bucket levels, buffer, Kafka, cluster", {
        "200": jres("a consistent snapshot", {"type": "object", "required": ["window_secs", "tenant_count", "totals", "tenants", "buffer", "kafka", "lag_guards"], "properties": {
            "window_secs": {"type": "number", "minimum": 0, "description": "seconds the rates cover (the sampler reads the counters once a second)"},
            "tenant_count": {"type": "integer", "minimum": 0},
            "totals": {"type": "object", "description": "every tenant's traffic summed, per second over the window"},
            "tenants": {"type": "array", "items": {"type": "object", "required": ["id", "admitted_records_per_sec", "admitted_requests_per_sec", "refused_requests_per_sec", "refused_records_per_sec", "refused_by_reason", "history", "buffer_bytes", "buffer_records", "buffer_share"], "properties": {
                "id": {"type": "string"},
                "admitted_records_per_sec": {"type": "number"}, "admitted_requests_per_sec": {"type": "number"}, "refused_requests_per_sec": {"type": "number"},
                "refused_records_per_sec": {"type": "number", "description": "records of refused requests whose body was read"},
                "refused_by_reason": {"type": "object", "additionalProperties": {"type": "number"}},
                "shadowed_by_reason": {"type": "object", "additionalProperties": {"type": "integer"}, "description": "requests a limit in shadow mode would have refused since start, by the reason it would have given"},
                "history": {"type": "array", "items": {"type": "object", "properties": {"admitted_records": {"type": "number"}, "refused_requests": {"type": "number"}}}},
                "records_bucket": {"type": ["object", "null"]}, "bytes_bucket": {"type": ["object", "null"]},
                "quotas": {"type": "array", "description": "calendar quotas in their current window", "items": {"type": "object", "properties": {
                    "window": {"type": "string", "enum": ["hour", "day", "month"]}, "dimension": {"type": "string", "enum": ["records", "bytes"]},
                    "used": {"type": "integer"}, "limit": {"type": "integer"}, "reset_in_s": {"type": "integer"}}}},
                "buffer_bytes": {"type": "integer"}, "buffer_records": {"type": "integer"}, "buffer_share": {"type": "number"}}}},
            "global_records": {"type": ["object", "null"]}, "global_bytes": {"type": ["object", "null"]},
            "global_quotas": {"type": "array", "description": "the global calendar quotas in their current window, as a tenant's quotas are shown"},
            "buffer": {"type": "object"}, "kafka": {"type": "object"}, "cluster": {"type": ["object", "null"]},
            "lag_guards": {"type": "array"}, "adaptive": {"type": ["object", "null"], "description": "the adaptive limit as GET /admin/adaptive shows it"}}}),
        "422": err("invalid_field: limit out of range, sort not refused|admitted|id, or an unknown parameter"),
    }, params=[
        {"name": "limit", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50}},
        {"name": "sort", "in": "query", "required": False, "schema": {"type": "string", "enum": ["refused", "admitted", "id"], "default": "refused"}},
        {"name": "q", "in": "query", "required": False, "schema": {"type": "string"}, "description": "only tenants whose id starts with this"},
    ])},
    "/ui": {"get": {"summary": "The status page (HTML; asks for the admin token, then reads /admin/status)", "responses": {"200": {"description": "the page", "content": {"text/html; charset=utf-8": {"schema": {"type": "string"}}}}}}},
    "/ui/app.js": {"get": {"summary": "The status page's script", "responses": {"200": {"description": "JavaScript", "content": {"text/javascript; charset=utf-8": {"schema": {"type": "string"}}}}}}},
    "/ui/app.css": {"get": {"summary": "The status page's stylesheet", "responses": {"200": {"description": "CSS", "content": {"text/css; charset=utf-8": {"schema": {"type": "string"}}}}}}},
    "/ui/favicon.svg": {"get": {"summary": "The status page's icon", "responses": {"200": {"description": "SVG", "content": {"image/svg+xml": {"schema": {"type": "string"}}}}}}},
    "/admin/usage": {"get": admin_op("Usage by tenant and hour or day, for chargeback, as this replica counted it: admitted, delivered and refused (by reason), a page at a time in (start, tenant) order. Each replica answers for its own traffic; with [cluster] redis_url, sum the replicas' answers", {
        "200": jres("a page of intervals", {"type": "object", "required": ["replica", "granularity", "rows", "next"], "properties": {
            "replica": {"type": ["string", "null"], "description": "this replica's id in cluster mode"},
            "granularity": {"type": "string", "enum": ["hour", "day"]},
            "rows": {"type": "array", "items": {"type": "object", "required": ["tenant", "start", "end", "admitted", "failed_records", "delivered_records", "refused", "shadowed"], "properties": {
                "tenant": {"type": "string"},
                "start": {"type": "string", "format": "date-time"}, "end": {"type": "string", "format": "date-time"},
                "admitted": ref("Flow"),
                "failed_records": {"type": "integer", "minimum": 0, "description": "admitted records Kafka then refused or did not take in time"},
                "delivered_records": {"type": "integer", "minimum": 0, "description": "records Kafka acknowledged, in the interval its answer came: what Kafka holds (a record still in flight is not in it yet)"},
                "refused": {"type": "object", "description": "by reason (tenant_records, tenant_quota, ...); records and bytes of requests refused after their body was read", "additionalProperties": ref("Flow")},
                "shadowed": {"type": "object", "description": "by reason: requests a limit in shadow mode would have refused, admitted all the same (and counted in admitted)", "additionalProperties": ref("Flow")}}}},
            "next": {"type": ["string", "null"], "description": "pass as `after` for the next page; null on the last"}}}),
        "422": err("invalid_field: a parameter out of range or unknown"),
    }, params=[
        {"name": "tenant", "in": "query", "required": False, "schema": {"type": "string"}, "description": "one tenant only"},
        {"name": "from", "in": "query", "required": False, "schema": INSTANT, "description": "intervals starting at or after this: RFC 3339 or Unix seconds"},
        {"name": "to", "in": "query", "required": False, "schema": INSTANT, "description": "intervals starting before this: RFC 3339 or Unix seconds"},
        {"name": "granularity", "in": "query", "required": False, "schema": {"type": "string", "enum": ["hour", "day"], "default": "hour"}},
        {"name": "limit", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}},
        {"name": "after", "in": "query", "required": False, "schema": {"type": "string", "pattern": "^-?[0-9]{1,18}[.]"}, "description": "the previous page's `next` (START.TENANT)"},
    ])},
    "/admin/audit": {"get": admin_op("Recent registry changes (shared registry), from every replica, in topic order", {
        "200": jres("the changes at or after `since`", {"type": "object", "required": ["shared", "entries"], "properties": {
            "shared": {"type": "boolean", "description": "false: a local registry, whose audit events are in the log only"},
            "entries": {"type": "array", "items": {"type": "object", "required": ["offset", "key", "outcome"], "properties": {
                "offset": {"type": "integer"}, "key": {"type": "string"}, "actor": {"type": "string"}, "action": {"type": "string"},
                "replica": {"type": "string"}, "base_version": {"type": "integer"}, "version": {"type": ["integer", "null"]},
                "outcome": {"type": "string", "description": "applied, or why every replica skipped it"}, "before": {}, "after": {}}}}}}),
        "422": err("invalid_field: since is not an offset, or an unknown parameter"),
    }, params=[{"name": "since", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0, "maximum": 9223372036854775807}, "description": "the first offset of the registry topic to list"}])},
}
spec = {
    "openapi": "3.1.0",
    "info": {"title": "floodgate", "version": "0.1.0", "description": "HTTP ingest gateway in front of Kafka. The produce API is served on [server] listen; everything under /admin, /metrics, /healthz and /readyz on [server] admin_listen."},
    "servers": [{"url": "http://127.0.0.1:8080", "description": "produce listener"}, {"url": "http://127.0.0.1:9090", "description": "admin listener"}],
    "components": {
        "securitySchemes": {
            "apiKey": {"type": "http", "scheme": "bearer", "description": "A tenant's API key, or a JWT from an issuer of [[auth.jwt]] (RS256, ES256, EdDSA), or none with a verified client certificate (mTLS)"},
            "adminToken": {"type": "http", "scheme": "bearer", "description": "An admin token from the variable named by [admin] token_env"},
        },
        "schemas": schemas,
    },
    "paths": paths,
}
json.dump(spec, open(OUT, "w"), indent=2, ensure_ascii=False)
open(OUT, "a").write("\n")

# ---- Confluent REST Proxy compatibility (produce listener) ----
spec = json.load(open(OUT))
S = spec["components"]["schemas"]
S["ConfluentError"] = {
    "type": "object", "required": ["error_code", "message"],
    "properties": {"error_code": {"type": "integer"}, "message": {"type": "string"},
                   "retry_after_ms": {"type": "integer", "minimum": 0, "description": "429 only: floodgate's addition"}},
}
S["V2Offset"] = {"type": "object", "required": ["partition", "offset", "error_code", "error"], "properties": {
    "partition": {"type": ["integer", "null"]}, "offset": {"type": ["integer", "null"]},
    "error_code": {"type": ["integer", "null"], "description": "null when written; 50002 refused by Kafka, 50003 retriable"},
    "error": {"type": ["string", "null"]}}}
S["V2Answer"] = {"type": "object", "required": ["offsets", "key_schema_id", "value_schema_id"], "properties": {
    "offsets": {"type": "array", "items": ref("V2Offset")}, "key_schema_id": {"type": "null"}, "value_schema_id": {"type": "null"}}}
v2_data_bin = {"type": ["string", "null"], "pattern": B64}
# null is absent in every record field, as in kafka-rest (its fields are @Nullable): Confluent's
# Node client sends "partition": null with every record.
V2_PARTITION = {"type": ["integer", "null"], "minimum": 0, "maximum": 2147483647, "description": "null: none (the URL's, or the producer's choice)"}
S["V2BinaryBody"] = {"type": "object", "additionalProperties": False, "required": ["records"], "properties": {"records": {
    "type": "array", "minItems": 1, "maxItems": 10000, "items": {"type": "object", "additionalProperties": False, "properties": {
        "key": v2_data_bin, "value": v2_data_bin, "partition": V2_PARTITION}}}}}
S["V2JsonBody"] = {"type": "object", "additionalProperties": False, "required": ["records"], "properties": {"records": {
    "type": "array", "minItems": 1, "maxItems": 10000, "items": {"type": "object", "additionalProperties": False, "properties": {
        "key": {}, "value": {}, "partition": V2_PARTITION}}}}}
v3_data = {"type": "object", "additionalProperties": False, "required": ["type"], "oneOf": [
    {"properties": {"type": {"const": "BINARY"}, "data": {"type": ["string", "null"], "pattern": B64}}},
    {"properties": {"type": {"const": "JSON"}, "data": {}}},
    {"properties": {"type": {"const": "STRING"}, "data": {"type": ["string", "null"]}}},
], "properties": {"type": {"enum": ["BINARY", "JSON", "STRING"]}, "data": {}}}
v3_record_props = {
    "partition_id": {"type": ["integer", "null"], "minimum": 0, "maximum": 2147483647},
    "headers": {"type": ["array", "null"], "items": {"type": "object", "additionalProperties": False, "required": ["name"], "properties": {
        "name": {"type": "string"}, "value": {"type": ["string", "null"], "pattern": B64}}}},
    "key": {"anyOf": [v3_data, {"type": "null"}]}, "value": {"anyOf": [v3_data, {"type": "null"}]},
    "timestamp": {"type": ["string", "null"], "format": "date-time", "pattern": "^(197[1-9]|19[89][0-9]|[2-9][0-9]{3})-", "description": "RFC 3339; Kafka timestamps start in 1970"},
}
S["V3Record"] = {"type": "object", "additionalProperties": False, "properties": v3_record_props,
    "description": "With a Schema Registry configured ([schema_registry] url), a key or value may also be {\"type\": \"AVRO\"|\"JSONSCHEMA\"|\"PROTOBUF\", \"schema\"|\"schema_id\"|\"schema_version\", \"subject\", \"subject_name_strategy\", \"data\"} or carry no type (the latest schema of its subject); the data is written in Confluent's wire format, or the record refused 422 schema_violation / schema_not_found / schema_invalid naming the field, 422 schema_too_costly (checking the record or compiling its schema is over a bound the detail names; Confluent code 42209), 429 schema_busy with a Retry-After (the tenant's share of the schema threads, or its schema registrations, are taken; 42902), or 503 schema_registry_unavailable. This document describes a gateway without one."}
S["V3BatchBody"] = {"type": "object", "additionalProperties": False, "required": ["entries"], "properties": {"entries": {
    "type": "array", "minItems": 1, "maxItems": 10, "items": {"type": "object", "additionalProperties": False, "required": ["id"],
        "properties": {"id": {"type": "string", "pattern": "^[0-9A-Za-z_-]{1,80}$"}, **v3_record_props}}}}}
described = {"type": "object", "required": ["type", "size"], "properties": {"type": {"type": "string"}, "size": {"type": "integer"}}}
S["V3Report"] = {"type": "object", "required": ["error_code"], "properties": {
    "error_code": {"type": "integer", "description": "200 when written; otherwise the status the record would have had, or 50002/50003/50302"},
    "message": {"type": "string"}, "retry_after_ms": {"type": "integer"},
    "cluster_id": {"type": "string"}, "topic_name": {"type": "string"}, "partition_id": {"type": "integer"},
    "offset": {"type": "integer"}, "timestamp": {"type": "string"}, "key": described, "value": described}}
S["V3BatchSuccess"] = {"type": "object", "required": ["id", "cluster_id", "topic_name", "partition_id", "offset"], "properties": {
    "id": {"type": "string"}, "cluster_id": {"type": "string"}, "topic_name": {"type": "string"}, "partition_id": {"type": "integer"},
    "offset": {"type": "integer"}, "timestamp": {"type": "string"}, "key": described, "value": described}}
S["V3BatchAnswer"] = {"type": "object", "required": ["successes", "failures"], "properties": {
    "successes": {"type": "array", "items": ref("V3BatchSuccess")},
    "failures": {"type": "array", "items": {"type": "object", "required": ["id", "error_code", "message"], "properties": {
        "id": {"type": "string"}, "error_code": {"type": "integer"}, "message": {"type": "string"}}}}}}
S["V3Cluster"] = {"type": "object", "required": ["kind", "metadata", "cluster_id"], "properties": {
    "kind": {"const": "KafkaCluster"}, "metadata": {"type": "object", "required": ["self"], "properties": {"self": {"type": "string"}}},
    "cluster_id": {"type": "string"}}}
S["V3ClusterList"] = {"type": "object", "required": ["kind", "data"], "properties": {
    "kind": {"const": "KafkaClusterList"}, "metadata": {"type": "object"}, "data": {"type": "array", "items": ref("V3Cluster")}}}
# A calendar quota, as the admin API takes it (config::QuotaConfig).
S["Quota"] = {"type": "object", "additionalProperties": False, "required": ["window"],
    "anyOf": [{"required": ["records"]}, {"required": ["bytes"]}], "properties": {
    "window": {"type": "string", "enum": ["hour", "day", "month"], "description": "the calendar period counted, in [quotas] utc_offset"},
    "records": {"type": "integer", "minimum": 1, "description": "records admitted per window"},
    "bytes": {"type": "integer", "minimum": 1, "description": "record bytes admitted per window"},
    "mode": LIMIT_MODE}}

def cerr(desc, media="application/json", headers=None):
    r = {"description": desc, "content": {media: {"schema": ref("ConfluentError")}}}
    if headers: r["headers"] = headers
    return r
V2M = "application/vnd.kafka.v2+json"
topic_param = {"name": "topic", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,248}$"}, "example": "events.demo"}
def v2_op(extra_params, summary):
    return {"post": {
        "summary": summary, "security": [{"apiKey": []}, {"basicKey": []}],
        "parameters": [topic_param] + extra_params + [IDEM_KEY],
        "requestBody": {"required": True, "content": {
            "application/vnd.kafka.binary.v2+json": {"schema": ref("V2BinaryBody"), "example": {"records": [{"key": "a2V5", "value": "dmFsdWU="}]}},
            "application/vnd.kafka.json.v2+json": {"schema": ref("V2JsonBody")},
        }},
        "responses": {
            "200": {"description": "every record answered by Kafka; a record it refused carries its error code", "headers": {**RL_HEADERS, **REPLAYED}, "content": {V2M: {"schema": ref("V2Answer")}}},
            "400": cerr("malformed JSON (40001); a malformed Idempotency-Key (40002)", V2M), "401": cerr("no or unknown key, or a JWT that does not verify (40101; the message starts with floodgate's code, e.g. token_expired:)", V2M),
            "409": cerr("another request with this Idempotency-Key is still being read or admitted (40901)", V2M, RETRY),
            "403": cerr("topic outside the tenant's patterns (40301), or a valid token or certificate of no tenant (40302)", V2M),
            "404": cerr("unknown topic (40401) or partition (40402)", V2M),
            "406": {"description": "the Accept header allows none of application/vnd.kafka.v2+json, application/vnd.kafka+json, application/json"},
            "408": cerr("the body did not arrive in time", V2M),
            "413": cerr("too large (41301) or over a burst (41302)", V2M),
            "415": cerr("not the binary or json embedded format (schema formats need a Schema Registry)", V2M),
            "422": cerr("no records, or a record with an unknown or wrong field (42206); the Idempotency-Key was used for another request (42207)", V2M),
            "429": cerr("over budget (42901): Retry-After, retry_after_ms and the RateLimit fields say when to come back", V2M, {**RETRY, **RL_HEADERS}),
            "503": cerr("Kafka did not answer in time (50302), shutting down (50301), the Idempotency-Key store did not answer (50303), or the token's issuer keys cannot be fetched or were fetched less than min_refetch_s ago (50304)", V2M),
        }}}
paths = spec["paths"]
paths["/topics/{topic}"] = v2_op([], "Produce (Confluent REST Proxy v2)")
paths["/topics/{topic}/partitions/{partition}"] = v2_op([{"name": "partition", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 0, "maximum": 2147483647}}], "Produce to a partition (Confluent REST Proxy v2); a record's own partition wins")
cid = {"name": "cluster_id", "in": "path", "required": True, "schema": {"type": "string"}, "description": "not checked unless [compat] check_cluster_id is set (as in Confluent Platform)"}
common_v3 = {"401": cerr("no or unknown key, or a JWT that does not verify (40101; the message starts with floodgate's code)"), "429": cerr("too many failed authentications from this address (42901)", headers=RETRY)}
auth_v3 = {"403": cerr("a valid token or certificate of no tenant (40302)"), "503": cerr("the token's issuer keys cannot be fetched or were fetched less than min_refetch_s ago (50304), or shutting down (50301)")}
for prefix in ["/v3", "/kafka/v3"]:
    paths[f"{prefix}/clusters"] = {"get": {"summary": "The cluster this gateway produces to (Confluent REST Proxy v3)", "security": [{"apiKey": []}, {"basicKey": []}],
        "responses": {"200": jres("the cluster list", ref("V3ClusterList")), **auth_v3, **common_v3}}}
    paths[f"{prefix}/clusters/{{cluster_id}}"] = {"get": {"summary": "One cluster (Confluent REST Proxy v3)", "security": [{"apiKey": []}, {"basicKey": []}],
        "parameters": [cid], "responses": {"200": jres("the cluster", ref("V3Cluster")), "404": cerr("another cluster id (40401)"), **auth_v3, **common_v3}}}
    paths[f"{prefix}/clusters/{{cluster_id}}/topics/{{topic}}/records"] = {"post": {
        "summary": "Produce records (Confluent REST Proxy v3): one JSON object per record, concatenated, optionally as a chunked stream; one delivery report per record, in order, each followed by \\r\\n",
        "security": [{"apiKey": []}, {"basicKey": []}], "parameters": [cid, topic_param],
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref("V3Record"), "example": {"value": {"type": "JSON", "data": {"hello": "world"}}}}}},
        "responses": {
            "200": {"description": "the stream started: one report per record, in order (a record refused inside the stream gets its own error_code, 429 with retry_after_ms when over budget)", "headers": RL_HEADERS, "content": {"application/json": {"schema": ref("V3Report")}}},
            "400": cerr("the topic name is not a Kafka topic name, or the first bytes are not a record (40001); an Idempotency-Key was sent (40002)"),
            "403": cerr("topic outside the tenant's patterns (40301), or a valid token or certificate of no tenant (40302)"), "404": cerr("unknown topic (40401) or cluster (40401)"),
            "408": cerr("the first record did not arrive in time"),
            "413": cerr("the declared body, or the first record, is larger than allowed"),
            "422": cerr("the first record is not a valid record (42206)"),
            "415": cerr("not application/json"),
            "429": cerr("refused before any record was read (42901): Retry-After, retry_after_ms and the RateLimit fields", headers={**RETRY, **RL_HEADERS}),
            "503": cerr("Kafka's metadata cannot be read (50302), shutting down (50301), or the token's issuer keys cannot be fetched or were fetched less than min_refetch_s ago (50304)"),
            **{k: v for k, v in common_v3.items() if k != "429"},
        }}}
    paths[f"{prefix}/clusters/{{cluster_id}}/topics/{{topic}}/records:batch"] = {"post": {
        "summary": "Produce a batch (Confluent REST Proxy v3), admitted whole; 207 with successes and failures in request order",
        "security": [{"apiKey": []}, {"basicKey": []}], "parameters": [cid, topic_param, IDEM_KEY],
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref("V3BatchBody"), "example": {"entries": [{"id": "1", "value": {"type": "JSON", "data": 1}}]}}}},
        "responses": {
            "207": {"description": "every entry answered", "headers": {**RL_HEADERS, **REPLAYED}, "content": {"application/json": {"schema": ref("V3BatchAnswer")}}},
            "400": cerr("malformed JSON, or not a Kafka topic name (40001); a malformed Idempotency-Key (40002)"), "403": cerr("topic outside the tenant's patterns (40301), or a valid token or certificate of no tenant (40302)"),
            "409": cerr("another request with this Idempotency-Key is still being read or admitted (40901)", headers=RETRY),
            "404": cerr("unknown topic (40401) or partition (40402)"), "408": cerr("the body did not arrive in time"),
            "413": cerr("too large (41301) or over a burst (41302)"), "415": cerr("not application/json"),
            "422": cerr("ids or entry count break the batch rules (42208), an invalid entry (42206), or the Idempotency-Key was used for another request (42207)"),
            "429": cerr("over budget (42901)", headers={**RETRY, **RL_HEADERS}),
            "503": cerr("Kafka did not answer in time (50302), shutting down (50301), the Idempotency-Key store did not answer (50303), or the token's issuer keys cannot be fetched or were fetched less than min_refetch_s ago (50304)"),
            **{k: v for k, v in common_v3.items() if k != "429"},
        }}}
# Answers outside the operations (OpenAPI has no place for a method a path does not serve):
# described here and in info.description, checked by the routers' tests.
spec["info"]["description"] += (
    " Every error has a JSON body, outside the operations below too: a method a path does not serve"
    " is 405 with an Allow header naming the methods it does (response MethodNotAllowed), and a path"
    " no route has is 404 (response NotFound), on both listeners; under /topics, /v3 and /kafka/v3"
    " both are Confluent's envelope (ConfluentMethodNotAllowed, ConfluentNotFound: error_code 405 or"
    " 404, the status itself, as Confluent's REST Proxy answers them).")
ALLOW = {"Allow": {"description": "the methods this path serves", "schema": {"type": "string"}}}
spec["components"]["responses"] = {
    "MethodNotAllowed": err("method_not_allowed: this path is served with other methods") | {"headers": ALLOW},
    "NotFound": err("not_found: no route has this path"),
    "ConfluentMethodNotAllowed": cerr("error_code 405: this path is served with other methods (application/vnd.kafka.v2+json under /topics)", headers=ALLOW),
    "ConfluentNotFound": cerr("error_code 404: no route has this path (application/vnd.kafka.v2+json under /topics)"),
}
spec["components"]["securitySchemes"]["basicKey"] = {"type": "http", "scheme": "basic", "description": "Basic with the API key as the password (Confluent Cloud's clients); the user name is not checked"}

# #43: every produce route takes a content-coded body, decoded in the pipeline (one place for
# every wire format), so the same words and answers are added to each. The coding is said in
# the operation's description, not as a header parameter: like Content-Type it describes the
# body, and a fuzzer filling in the parameter would send plain bodies labelled gzip.
CONTENT_ENCODING = {"description": "Content-Encoding, the body's content coding: gzip (or x-gzip), deflate (zlib, or raw deflate), zstd (frames with a window of at most 8 MiB), snappy (the framing format, or one raw block as Vector sends it; x-snappy-framed too), identity. Up to 2 stacked, in the order applied (\"gzip, zstd\": decoded zstd first). The body is read inflated a piece at a time: max_body_bytes bounds it as sent and as inflated, a body inflating past [server] max_inflation_ratio (100) times what was sent (past its first 64 KiB) is 413 while it inflates, and the tenants' byte budgets count the records as inflated. Anything else is 415 with Accept-Encoding."}
ACCEPT_ENCODING = {"Accept-Encoding": {"description": "on a 415 for the Content-Encoding: the codings accepted", "schema": {"type": "string", "example": "gzip, deflate, zstd, snappy, identity"}}}
for path, item in paths.items():
    op = item.get("post")
    if not op or not any(path.startswith(p) for p in ("/v1/topics/", "/topics/", "/v3/", "/kafka/v3/")):
        continue
    op["description"] = (op.get("description", "") + "\n\n" + CONTENT_ENCODING["description"]).strip()
    r = op["responses"]
    confluent = not path.startswith("/v1/")
    r["415"]["description"] += "; " + ("" if confluent else "unsupported_encoding: ") + "a Content-Encoding not decoded here, or more than 2 stacked (" + ("41501, " if confluent else "") + "with Accept-Encoding)"
    r["415"]["headers"] = {**r["415"].get("headers", {}), **ACCEPT_ENCODING}
    r["413"]["description"] += "; a coded body inflating past max_body_bytes, or past max_inflation_ratio times its coded size (body_too_large" + (", 41301" if confluent else "") + ")"
    r["400"]["description"] += "; a body that is not valid data of its Content-Encoding (" + ("40001" if confluent else "malformed_body") + ": the detail names the coding)"
json.dump(spec, open(OUT, "w"), indent=2, ensure_ascii=False)
open(OUT, "a").write("\n")
if CHECK:
    made, committed = open(OUT).read(), open(COMMITTED).read()
    os.unlink(OUT)
    if made != committed:
        sys.exit("openapi.json is not what scripts/openapi.py makes: edit the script, run it, commit both")

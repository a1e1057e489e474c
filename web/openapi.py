"""The OpenAPI 3.1 document of the HTTP API, built here and kept in the repo as web/openapi.json.

`python -m web.openapi` rewrites web/openapi.json; a test fails when the file
and this module disagree, or when a route is not documented.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

from dispatcher.domain.delivery_options import (
    CONCURRENCY_MODES,
    CONTROL_MODES,
    MAX_BACKLOG,
    MAX_BACKLOG_BYTES,
    MAX_BATCH_BYTES,
    MAX_HEARTBEAT,
    MAX_RATE,
    MIN_BACKLOG_BYTES,
    MIN_HEARTBEAT,
    MIN_RATE,
    ORDERINGS,
)
from dispatcher.domain.ordering_keys import MAX_KEY_LEN

from .receiver_ops import APPLIED_WAIT, MAX_REPLAY, STATUSES

DOC_PATH = Path(__file__).resolve().parent / "openapi.json"  # package data: served by any install

ID = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$"}
OBJ = {"type": "object"}
NUM = {"type": "number"}
INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


ORDERING_KEY = {
    "type": "string", "minLength": 1, "maxLength": MAX_KEY_LEN,
    "description": "Receivers with `\"ordering\": \"key\"` deliver messages of one key in seq order "
    "and different keys side by side (an event's copies carry its key). Printable characters only.",
}
RECEIVER_FIELDS: dict[str, Any] = {
    "url": {"type": "string", "maxLength": 2048},
    "event_types": {"type": "array", "items": STR, "maxItems": 256},
    "tenant": nullable(STR),
    "secret": STR,
    "signing": {"enum": ["hmac-sha256", "ed25519"]},
    "headers": {"type": "object", "additionalProperties": STR},
    "authorization": STR,
    "verify": BOOL,
    "retry": nullable(OBJ),
    "ordering": {
        "enum": list(ORDERINGS),
        "description": "`strict` (default): one message out at a time, in seq order. `key`: messages with "
        "the same `ordering_key` go in seq order, different keys side by side up to `max_in_flight` (a "
        "failing key holds only itself; up to 64 messages may wait behind their keys); messages without "
        "a key are ordered with none. `none`: up to `max_in_flight` out at once, each retried on its own.",
    },
    "max_in_flight": {"type": "integer", "minimum": 1, "maximum": 64},
    "coalesce": {
        **BOOL,
        "description": "With `\"ordering\": \"key\"`: latest per key. A message still waiting (not "
        "started, behind its key, or waiting for a retry) when a newer one of its ordering key arrives is "
        "settled unsent as `superseded` (message status, catch-up, `messages_superseded_total`); only "
        "the newest goes. One already out is never superseded. The receiver sees a seq gap for each.",
    },
    # 0 or null: no limit
    "rate_limit": {"anyOf": [
        {"type": "null"}, {"const": 0}, {**NUM, "minimum": MIN_RATE, "maximum": MAX_RATE},
    ]},
    "batch_max": {"type": "integer", "minimum": 1, "maximum": 1000},
    "batch_max_bytes": {"type": "integer", "minimum": 0, "maximum": MAX_BATCH_BYTES},
    "backlog_max": {"type": "integer", "minimum": 0, "maximum": MAX_BACKLOG},
    # 0: the worker's default; a smaller cap could not hold a message
    "backlog_max_bytes": {"anyOf": [
        {"const": 0}, {**INT, "minimum": MIN_BACKLOG_BYTES, "maximum": MAX_BACKLOG_BYTES},
    ]},
    "backlog_overflow": {"enum": ["", "dead_letter_oldest", "reject"]},
    "concurrency": {
        "enum": list(CONCURRENCY_MODES),
        "description": "Key-ordered and unordered receivers: `adaptive` (default) grows the in-flight "
        "window by one after a run of fast 2xx answers and halves it on 429, 503, a timeout or answers far "
        "slower than the receiver's unloaded baseline, with `max_in_flight` as its ceiling; `fixed` keeps "
        "`max_in_flight` out.",
    },
    "delivery_control": {
        "enum": list(CONTROL_MODES),
        "description": "`obey` (default): the receiver may steer its delivery with the "
        "`webhook-delivery-control` response header (pause=N, max-in-flight=N, rate=R, disable) on any "
        "answer, clamped to this receiver's settings; `ignore`: the header is logged, not followed.",
    },
    "filter": {
        "anyOf": [{"type": "object", "maxProperties": 256}, {"type": "null"}],
        "description": "A content filter (Convoy/Outpost syntax) over `{\"payload\", \"headers\", "
        "\"event_type\"}`: e.g. `{\"payload\": {\"amount\": {\"$gte\": 10}}, \"headers\": "
        "{\"x-region\": {\"$in\": [\"eu\", \"uk\"]}}}`. Plain values match by equality (an array by "
        "containing it), objects nest, dotted keys are paths (a numeric segment indexes an array; a path "
        "through an array looks into every element), header names are case-insensitive. Operators: "
        "`$eq $neq $gt $gte $lt $lte $in $nin $exist $regex` (RE2, linear time) on a field; `$and $or` "
        "(lists) and `$not` at any level. Events a receiver's filter refuses are not fanned out to it; a "
        "direct message it refuses takes no seq and reads `filtered`. At most 16 KiB of JSON, 256 "
        "conditions, 12 levels, patterns of 512 characters; errors name the path (`filter.payload.amount."
        "$gte`). null or {}: every message. A PATCH without `filter` keeps it; `null` removes it.",
    },
    "auth": {
        "anyOf": [ref("MtlsAuth"), ref("OAuth2Auth"), {"type": "null"}],
        "description": "How the dispatcher proves itself to the receiver: a TLS client certificate "
        "(`mtls`, https URLs only) or an OAuth2 client-credentials token sent as `Authorization: Bearer` "
        "(`oauth2`; not with `authorization`). The private key and the client secret are write-only: "
        "never shown again; a body that leaves one out keeps the current one (same type; a client secret "
        "only while `token_url` stays on the same host). A PATCH "
        "without `auth` keeps it; `null` removes it. Errors name the field (`auth.private_key`).",
    },
    "tls": {
        "anyOf": [{"type": "object", "required": ["ca"], "additionalProperties": False,
                   "properties": {"ca": {**STR, "maxLength": 65536}}}, {"type": "null"}],
        "description": "`{\"ca\": PEM}` (https URLs only): the CA certificates the receiver's server "
        "certificate must chain to, instead of the system's and DISPATCHER_CA_FILE's, for this receiver "
        "alone (host names are still checked). A PATCH without `tls` keeps it; `null` removes it.",
    },
    "transform": {
        "anyOf": [{"type": "object"}, {"type": "null"}],
        "description": "A json-e template (json-e.js.org) applied to each message at delivery, over "
        "`{payload, event_type, headers, message: {id, seq, timestamp}, receiver: {id, tenant, "
        "event_types}, now}`. It must give an object: `body` (any JSON: replaces the whole request body, the "
        "`{type, timestamp, data}` envelope included; the signature covers it), `headers` (extra headers; "
        "`webhook-*`, Host, Content-*, Authorization and other reserved ones cannot be set), `path` "
        "(appended to the URL's path, its query to the URL's query; never a scheme, host, `//`, `..` or "
        "backslash: the host never changes) or `cancel: true` (settled without a POST; the message "
        "reads `cancelled`). "
        "Evaluation is bounded (20,000 steps, values of 256 KiB, a body of 256 KiB of JSON); a failure "
        "dead-letters the message as `transform_error`, kept for a replay once the template is fixed. At "
        "most 16 KiB of JSON and 32 levels, expressions of 1,024 characters that parse (errors name the "
        "path). Not with "
        "`batch_max` above 1. A PATCH without `transform` keeps it; `null` removes it. Try one with "
        "POST /v1/receivers/{receiver_id}/transform/test.",
    },
    "heartbeat_interval": {
        "anyOf": [
            {"type": "null"}, {"const": 0}, {**NUM, "minimum": MIN_HEARTBEAT, "maximum": MAX_HEARTBEAT},
        ],
        "description": "Seconds: when nothing has gone to the receiver for this long, it gets a signed "
        "`webhook.heartbeat` carrying `last_seq`, the highest seq delivered or dead-lettered "
        "(0 or null: none).",
    },
}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "field", "message"],
                "properties": {"code": STR, "field": STR, "message": STR},
            }
        },
    },
    "MtlsAuth": {
        "type": "object",
        "required": ["type", "certificate"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "mtls"},
            "certificate": {**STR, "maxLength": 65536,
                            "description": "PEM: the client certificate, then any intermediates; not "
                            "expired"},
            "private_key": {**STR, "maxLength": 65536, "writeOnly": True,
                            "description": "PEM, unencrypted, matching the certificate; required unless the "
                            "receiver already has one"},
        },
    },
    "OAuth2Auth": {
        "type": "object",
        "required": ["type", "token_url", "client_id"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "oauth2"},
            "token_url": {**STR, "maxLength": 2048, "description": "https (unless DISPATCHER_REQUIRE_HTTPS "
                          "is off); passes the same target guard as receiver URLs"},
            "client_id": {**STR, "maxLength": 256},
            "client_secret": {**STR, "maxLength": 1024, "writeOnly": True,
                              "description": "required unless the receiver already has one"},
            "scope": {**STR, "maxLength": 1024},
            "audience": {**STR, "maxLength": 1024},
            "client_auth": {"enum": ["basic", "body"], "description": "`basic` (default): HTTP Basic "
                            "(client_secret_basic); `body`: client_id and client_secret in the form"},
        },
    },
    "AuthView": {
        "type": "object",
        "description": "A receiver's `auth` as shown: `private_key` and `client_secret` read \"set\"; "
        "a certificate shows subject, issuer, fingerprint_sha256, serial_number, not_before, not_after.",
        "required": ["type"],
        "properties": {
            "type": {"enum": ["mtls", "oauth2"]},
            "certificate": OBJ,
            "private_key": {"const": "set"},
            "token_url": STR,
            "client_id": STR,
            "client_secret": {"const": "set"},
            "scope": STR,
            "audience": STR,
            "client_auth": STR,
        },
    },
    "ReceiverCreate": {
        "type": "object",
        "required": ["url"],
        "additionalProperties": False,
        "properties": {"id": ID, **RECEIVER_FIELDS},
    },
    "ReceiverPatch": {"type": "object", "additionalProperties": False, "properties": RECEIVER_FIELDS},
    "Receiver": {
        "type": "object",
        "description": "Options and retry settings show the values deliveries get. A field the receiver "
        "left to the worker is stored as 0, \"\" or no `retry` key, so a later change of the worker's "
        "DISPATCHER_* default reaches it, and shows that default: `batch_max_bytes`, `backlog_max`, "
        "`backlog_max_bytes`, `backlog_overflow` and each field of `retry`. `worker_defaults` names the "
        "fields that follow the worker now (`retry.<name>` for retry's); set one to 0 or \"\" (or leave "
        "its `retry` key out) to follow the worker again.",
        "required": ["id", "url", "event_types", "signing", "verified"],
        "properties": {
            "id": ID,
            "url": STR,
            "event_types": {"type": "array", "items": STR},
            "tenant": nullable(STR),
            "filter": nullable(OBJ),
            "auth": nullable(ref("AuthView")),
            "tls": nullable({"type": "object", "properties": {
                "ca": STR, "ca_certificates": {"type": "array", "items": OBJ}}}),
            "transform": nullable(OBJ),
            "signing": STR,
            "verified": BOOL,
            "secret": STR,
            "public_key": STR,
            "retry": OBJ,
            "worker_defaults": {"type": "array", "items": STR},
            "partition": INT,
            "state": ref("ReceiverState"),
        },
    },
    "ReceiverState": {
        "type": "object",
        "required": ["status", "next_seq", "delivered_seq", "backlog"],
        "properties": {
            "status": {
                "enum": list(STATUSES),
                "description": "What holds the receiver (deleting, resetting, disabled, paused, unverified), "
                "else failing (the circuit is not closed), retrying (a message still to be delivered has "
                "failed an attempt and waits for its retry) or active.",
            },
            "circuit": {"enum": ["closed", "open", "half_open"]},
            "next_seq": INT,
            "delivered_seq": INT,
            "backlog": INT,
            "backlog_bytes": INT,
            "head_seq": nullable(INT),
            "window": {
                "type": "array", "items": OBJ,
                "description": "Unordered and key-ordered receivers: the messages started and not settled, "
                "each with `seq`, `attempts`, `next_attempt_at`, `posting` (out now) and `behind_key` "
                "(key-ordered: waiting for an earlier message of its ordering key).",
            },
            "concurrency": nullable({
                "type": "object",
                "description": "Unordered receivers: how many messages may be out now (`window`), its "
                "ceiling (`max_in_flight`), when and why it last changed (start, grew, ceiling, 429, 503, "
                "timeout, latency), the last cut's window (`plateau`) and the answer-time baseline.",
                "properties": {
                    "mode": {"enum": list(CONCURRENCY_MODES)}, "window": INT, "ceiling": INT,
                    "changed_at": nullable(NUM), "reason": nullable(STR), "plateau": nullable(INT),
                    "baseline_ms": nullable(NUM), "cuts": INT,
                },
            }),
            "delivery_control": {
                "type": "object",
                "description": "What the receiver asked for with `webhook-delivery-control` and still holds.",
                "properties": {
                    "mode": {"enum": list(CONTROL_MODES)}, "paused_until": nullable(NUM),
                    "max_in_flight": nullable(INT), "rate": nullable(NUM), "last_at": nullable(NUM),
                    "last": nullable(STR),
                },
            },
            "heartbeat": nullable({
                "type": "object",
                "properties": {
                    "interval": NUM, "sent": INT, "last_at": nullable(NUM), "next_at": nullable(NUM),
                },
            }),
            "lane": OBJ,
            "last_response": nullable(OBJ),
        },
    },
    "Message": {
        "type": "object",
        "required": ["receiver_id", "event_type", "payload"],
        "additionalProperties": False,
        "properties": {
            "receiver_id": ID,
            "event_type": STR,
            "payload": {},
            "id": ID,
            "headers": {"type": "object", "additionalProperties": STR},
            "ordering_key": ORDERING_KEY,
        },
    },
    "Event": {
        "type": "object",
        "required": ["event_type", "payload"],
        "additionalProperties": False,
        "properties": {
            "event_type": STR, "payload": {}, "tenant": STR, "id": ID, "ordering_key": ORDERING_KEY,
        },
    },
    "Control": {"type": "object", "properties": {"reason": {"type": "string", "maxLength": 500}}},
    "TransformTest": {
        "type": "object",
        "required": ["payload"],
        "additionalProperties": False,
        "properties": {
            "payload": {},
            "event_type": {**STR, "default": "transform.test"},
            "headers": {"type": "object", "additionalProperties": STR},
            "transform": {**OBJ, "description": "a template to try instead of the receiver's saved one"},
        },
    },
    "TransformResult": {
        "type": "object",
        "required": ["cancel", "body", "headers", "path", "url"],
        "properties": {
            "cancel": BOOL,
            "body": {"description": "the JSON body that would be POSTed (null when cancelled)"},
            "headers": {"type": "object", "additionalProperties": STR, "description": "the transform's"},
            "path": STR,
            "url": nullable(STR),
        },
    },
    "TokenCreate": {
        "type": "object",
        "required": ["tenant"],
        "additionalProperties": False,
        "properties": {
            "tenant": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$"},
            "name": {"type": "string", "maxLength": 100, "description": "for people: what the token is for"},
            "expires_at": {
                "oneOf": [{"type": "number", "minimum": 0}, STR],
                "description": "unix seconds or RFC 3339 with an offset, in the future; none: never expires",
            },
        },
    },
    "Token": {
        "type": "object",
        "description": "A tenant token as listed: never its secret nor the secret's hash. `prefix` (the "
        "token's first characters) and `last4` (its last four) tell tokens apart.",
        "required": ["id", "tenant", "name", "created_at", "expires_at", "revoked_at", "prefix", "last4",
                     "status"],
        "properties": {
            "id": STR, "tenant": STR, "name": STR, "created_at": NUM, "expires_at": nullable(NUM),
            "revoked_at": nullable(NUM), "prefix": STR, "last4": STR,
            "status": {"enum": ["active", "revoked", "expired"]},
            "token": {"type": "string", "description": "the plaintext token: in the mint's answer only"},
        },
    },
}

TENANT_TOKENS = (
    "Every /v1 call takes the admin token (DISPATCHER_API_TOKEN) or a tenant token (`wdt_...`, minted "
    "with POST /v1/tokens). A tenant token reaches only its tenant's receivers: the list shows them only, "
    "another tenant's receiver answers 404 as an unknown one does (on every receiver route, and for a "
    "message sent to it), a receiver it creates gets its tenant (another in `tenant` is a 403, and a PATCH "
    "cannot change or clear it), and an event it publishes gets its tenant (another is a 403). Token "
    "management is for the admin token only (403)."
)


READY = {
    "type": "object",
    "required": ["status"],
    "properties": {"status": {"enum": ["ready", "starting"]}, "partitions": {"type": "array", "items": INT}},
}


def answer(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"description": description}
    if schema is not None:
        body["content"] = {"application/json": {"schema": schema}}
    return body


def errors(*statuses: int) -> dict[str, Any]:
    why = {
        400: "invalid JSON",
        401: "no or wrong token (a tenant token also: revoked or expired)",
        403: "a tenant token may not do this (`field` Authorization: the call needs the admin token; "
        "`tenant`: another tenant)",
        404: "not found (for a tenant token, another tenant's receiver too)",
        409: "conflict",
        410: "gone (past retention)",
        413: "too large",
        422: "invalid field",
        429: "backlog full",
        503: "owner moving",
        504: "not applied yet",
    }
    return {str(s): answer(why[s], ref("Error")) for s in statuses}


def body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def receiver_op(
    summary: str,
    ok: dict[str, Any],
    *,
    method_body: dict[str, Any] | None = None,
    fail: tuple[int, ...] = (401, 404),
    description: str = "",
) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {**ok, **errors(*fail)}}
    if description:
        op["description"] = description
    if method_body is not None:
        op["requestBody"] = method_body
    return op


DEAD_LETTER_REASONS = (
    "The receiver's dead letters (messages that had a seq; the newest DISPATCHER_DEAD_LETTERS_KEEP), "
    "with `reason`: `permanent_status` (answered a status not worth retrying), `max_attempts` (its last "
    "allowed attempt failed), `max_age` (undelivered past `retry.max_age`), `missing_entry` (its stored "
    "entry was lost), `backlog_full` (the oldest over a `dead_letter_oldest` cap), `receiver_deleted` "
    "(while a delete runs), `transform_error` (the receiver's transform failed on it; the message is kept, "
    "so a replay after the template is fixed delivers it) or `state_reset` (the backlog a reset "
    "dead-lettered; a reset keeps every dead letter, so those messages never read delivered). The "
    "`<app_id>.dead-letters` topic gets every one of these, and also records that never got a seq: "
    "`unknown_receiver`, `accepted_before_creation`, `too_large` (a message, or an event's copies, over "
    "what a record holds), `backlog_full` (refused by a `reject` backlog), `receiver_deleted` and "
    "`state_reset` (arrived during a delete or reset), `forbidden_record` (configuration on the requests "
    "topic), `malformed` (an unreadable message or event record) and `internal_error` (a record whose "
    "processing failed)."
)
LIMIT = {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}
# The example is a receiver the schemathesis test creates, so generated calls reach real logic.
RID = {"name": "receiver_id", "in": "path", "required": True, "schema": ID, "example": "rcv_example"}


# One operationId per operation, in one table: clients (dispatcher/client.py's OPERATIONS) and
# generated SDKs name their calls by it. with_operation_ids fails on a missing or stale entry.
OPERATION_IDS: dict[tuple[str, str], str] = {
    ("/healthz", "get"): "getHealth",
    ("/readyz", "get"): "getReady",
    ("/openapi.json", "get"): "getOpenApiDocument",
    ("/v1/receivers", "get"): "listReceivers",
    ("/v1/receivers", "post"): "createReceiver",
    ("/v1/receivers/{receiver_id}", "get"): "getReceiver",
    ("/v1/receivers/{receiver_id}", "patch"): "updateReceiver",
    ("/v1/receivers/{receiver_id}", "delete"): "deleteReceiver",
    ("/v1/receivers/{receiver_id}/state", "get"): "getReceiverState",
    ("/v1/receivers/{receiver_id}/state", "delete"): "resetReceiverState",
    ("/v1/receivers/{receiver_id}/events", "get"): "listReceiverEvents",
    ("/v1/receivers/{receiver_id}/messages/{message_id}", "get"): "getMessageStatus",
    ("/v1/receivers/{receiver_id}/ping", "post"): "pingReceiver",
    ("/v1/receivers/{receiver_id}/attempts", "get"): "listAttempts",
    ("/v1/receivers/{receiver_id}/last-response", "get"): "getLastResponse",
    ("/v1/receivers/{receiver_id}/dead-letters", "get"): "listDeadLetters",
    ("/v1/receivers/{receiver_id}/replay", "post"): "replayDeadLetters",
    ("/v1/receivers/{receiver_id}/messages/{message_id}/resend", "post"): "resendMessage",
    ("/v1/receivers/{receiver_id}/recover", "post"): "recoverDeadLetters",
    ("/v1/receivers/{receiver_id}/secrets/rotate", "post"): "rotateReceiverSecret",
    ("/v1/receivers/{receiver_id}/verify", "post"): "verifyReceiver",
    ("/v1/receivers/{receiver_id}/transform/test", "post"): "testReceiverTransform",
    ("/v1/receivers/{receiver_id}/pause", "post"): "pauseReceiver",
    ("/v1/receivers/{receiver_id}/resume", "post"): "resumeReceiver",
    ("/v1/receivers/{receiver_id}/enable", "post"): "enableReceiver",
    ("/v1/receivers/{receiver_id}/disable", "post"): "disableReceiver",
    ("/v1/messages", "post"): "sendMessage",
    ("/v1/messages/batch", "post"): "sendMessageBatch",
    ("/v1/events", "post"): "publishEvent",
    ("/v1/tokens", "get"): "listTokens",
    ("/v1/tokens", "post"): "createToken",
    ("/v1/tokens/{token_id}", "delete"): "revokeToken",
}


def with_operation_ids(paths: dict[str, Any]) -> dict[str, Any]:
    """`paths` with each operation's operationId from OPERATION_IDS; every operation needs one."""
    documented = {(path, method) for path, ops in paths.items() for method in ops if method != "parameters"}
    unnamed, stale = documented - OPERATION_IDS.keys(), OPERATION_IDS.keys() - documented
    if unnamed or stale:
        raise ValueError(f"OPERATION_IDS: no id for {sorted(unnamed)}, no operation for {sorted(stale)}")
    for (path, method), op_id in OPERATION_IDS.items():
        paths[path][method]["operationId"] = op_id
    return paths


def build() -> dict[str, Any]:
    paths: dict[str, Any] = {
        "/healthz": {
            "get": {
                "summary": "the process lives",
                "security": [],
                "responses": {"200": answer("alive", OBJ)},
            }
        },
        "/readyz": {
            "get": {
                "summary": "partitions assigned, tables recovered",
                "description": "Without a token (probes): `status` only. With the API's bearer token: "
                "also the worker's figures (partitions, deliveries in flight, slots, subscriptions, timers, "
                "collector).",
                "security": [{}, {"bearer": []}],  # the token is optional: it adds the figures
                "responses": {"200": answer("ready", READY), "503": answer("starting", READY)},
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "this document",
                "security": [],
                "responses": {"200": answer("the document", OBJ)},
            }
        },
        "/v1/receivers": {
            "get": {
                **receiver_op(
                    "receivers in id order, filtered, a page at a time",
                    {"200": answer("a page", {
                        "type": "object", "required": ["receivers"],
                        "properties": {
                            "receivers": {"type": "array", "items": OBJ}, "next_cursor": nullable(STR),
                        },
                    })},
                    fail=(401, 403, 422, 503),
                ),
                "parameters": [
                    {"name": "tenant", "in": "query", "schema": STR},
                    {"name": "event_type", "in": "query", "schema": STR},
                    {"name": "status", "in": "query", "schema": {"enum": list(STATUSES)}},
                    {"name": "disabled", "in": "query", "schema": {"enum": ["true", "false"]}},
                    {"name": "search", "in": "query", "schema": {"type": "string", "maxLength": 200},
                     "description": "text the receiver's id or URL contains (any case)"},
                    {"name": "cursor", "in": "query", "schema": ID},
                    LIMIT,
                ],
            },
            "post": receiver_op(
                "create, or replace an existing id",
                {"201": answer("created", ref("Receiver")), "200": answer("replaced", ref("Receiver"))},
                method_body=body(ref("ReceiverCreate")),
                fail=(400, 401, 403, 409, 422, 503, 504),
            )
        },
        "/v1/receivers/{receiver_id}": {
            "parameters": [RID],
            "get": receiver_op(
                "config and state", {"200": answer("the receiver", ref("Receiver"))}, fail=(401, 404, 422)
            ),
            "patch": receiver_op(
                "change the named fields",
                {"200": answer("changed", ref("Receiver"))},
                method_body=body(ref("ReceiverPatch")),
                fail=(400, 401, 403, 404, 409, 422, 503, 504),
            ),
            "delete": receiver_op(
                "dead-letter the backlog and remove the receiver",
                {"200": answer("gone", OBJ), "202": answer("still deleting", OBJ)},
                fail=(401, 404, 422),
            ),
        },
        "/v1/receivers/{receiver_id}/state": {
            "parameters": [RID],
            "get": receiver_op(
                "the actor's live state, from its owner",
                {"200": answer("state", ref("ReceiverState"))},
                fail=(401, 404, 422),
            ),
            "delete": {
                **receiver_op(
                    "reset: dead-letter the backlog, drop counters and history (for testing)",
                    {
                        "200": answer("the fresh state", ref("ReceiverState")),
                        "202": answer("still resetting", OBJ),
                    },
                    fail=(401, 404, 409, 422),
                    description=(
                        "The backlog is dead-lettered with reason `state_reset`, then the actor starts "
                        "afresh: counters, circuit, lane, pause/disable, the attempt log and the settled "
                        "messages kept for catch-up go; config and seqs carry on. Dead letters stay, from "
                        "before the reset and its own (listed, replayable; `dead_lettered` counts the "
                        "reset's), so those messages read `dead_lettered` (reason `state_reset` for the "
                        "reset's) in the message status and the catch-up, never `delivered`."
                    ),
                ),
                "parameters": [
                    {"name": "confirm", "in": "query", "required": True, "schema": {"enum": ["reset"]}}
                ],
            },
        },
        "/v1/receivers/{receiver_id}/events": {
            "parameters": [RID],
            "get": {
                **receiver_op(
                    "catch-up: messages above a seq, settled ones kept a while",
                    {"200": answer("events", {
                        "type": "object", "required": ["events", "next_after_seq"],
                        "properties": {
                            "events": {"type": "array", "items": OBJ}, "next_after_seq": nullable(INT),
                        },
                    })},
                    fail=(401, 404, 422),
                    description="Each event carries the body fields a delivery does and its `status`: "
                    "pending, delivered, dead_lettered, or superseded (a coalescing receiver settled it "
                    "unsent for a newer message of its ordering key).",
                ),
                "parameters": [
                    {"name": "after_seq", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                    LIMIT,
                ],
            },
        },
        "/v1/receivers/{receiver_id}/messages/{message_id}": {
            "parameters": [RID, {"name": "message_id", "in": "path", "required": True, "schema": ID}],
            "get": receiver_op(
                "pending, delivered, dead-lettered, superseded, filtered or cancelled",
                {
                    "200": answer(
                        "status",
                        {
                            "type": "object",
                            "required": ["id", "seq", "status"],
                            "properties": {
                                "id": ID,
                                "seq": nullable(INT),
                                "status": {"enum": [
                                    "pending", "delivered", "dead_lettered", "superseded", "filtered",
                                    "cancelled",
                                ]},
                                "superseded_by": INT,
                            },
                        },
                    )
                },
                fail=(401, 404, 422, 503),
                description=(
                    "An id this owner has not seen yet may belong to a message accepted a moment ago and "
                    f"not applied yet: the owner then waits, at most {APPLIED_WAIT:g} seconds (normally "
                    "milliseconds), until "
                    "it has applied the receiver's requests up to their end as of this call, and looks "
                    "again. So a message whose send was answered 202 before this call is never unknown. "
                    "404 `not_found` (field `message_id`): not known once caught up (never accepted, "
                    "accepted but dead-lettered before it got a seq, or older than the dedup window); 503 "
                    "`unavailable`: the owner did not catch up within the wait, or the receiver's partition "
                    "moved meanwhile; retry. `filtered` (seq null): the receiver's content filter "
                    "refused the message; it took no seq, and the next message took the next one. "
                    "`superseded` (a coalescing receiver): settled unsent, `superseded_by` the seq of the "
                    "newer message of its ordering key that went instead. "
                    "`cancelled`: the receiver's transform cancelled it; it was settled without a POST."
                ),
            ),
        },
        "/v1/receivers/{receiver_id}/ping": {
            "parameters": [RID],
            "post": receiver_op(
                "send a webhook.ping now", {"200": answer("the receiver's answer", OBJ)}, fail=(401, 404, 422)
            ),
        },
        "/v1/receivers/{receiver_id}/attempts": {
            "parameters": [RID],
            "get": {
                **receiver_op(
                    "the attempt log, newest first", {"200": answer("attempts", OBJ)}, fail=(401, 404, 422)
                ),
                "parameters": [LIMIT],
            },
        },
        "/v1/receivers/{receiver_id}/last-response": {
            "parameters": [RID],
            "get": receiver_op(
                "the newest attempt", {"200": answer("attempt", OBJ)}, fail=(401, 404, 422),
                description="404 `no_attempt` (field `receiver_id`): the receiver has had no attempt yet; "
                "404 `not_found`: no such receiver.",
            ),
        },
        "/v1/receivers/{receiver_id}/dead-letters": {
            "parameters": [RID],
            "get": {
                **receiver_op(
                    "dead letters in seq order", {"200": answer("dead letters", OBJ)}, fail=(401, 404, 422),
                    description=DEAD_LETTER_REASONS,
                ),
                "parameters": [
                    {"name": "after_seq", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                    LIMIT,
                ],
            },
        },
        "/v1/receivers/{receiver_id}/replay": {
            "parameters": [RID],
            "post": receiver_op(
                "replay dead letters as new messages",
                {"202": answer("replayed", OBJ)},
                method_body=body(OBJ, required=False),
                fail=(400, 401, 404, 422),
            ),
        },
        "/v1/receivers/{receiver_id}/messages/{message_id}/resend": {
            "parameters": [RID, {"name": "message_id", "in": "path", "required": True, "schema": ID}],
            "post": receiver_op(
                "send a delivered message again, as a new message",
                {"202": answer("accepted", {
                    "type": "object", "required": ["id", "receiver_id", "resend_of"],
                    "properties": {"id": ID, "receiver_id": ID, "resend_of": {
                        "type": "object", "properties": {"id": ID, "seq": INT}}},
                })},
                method_body=body({"type": "object", "properties": {"id": ID}, "additionalProperties": False},
                                 required=False),
                fail=(400, 401, 404, 409, 410, 422, 503),
                description=(
                    "A delivered message still kept (DISPATCHER_RETAIN_SECONDS) is sent again as a new "
                    "message at the end of the receiver's backlog: a new id (webhook-id), the next seq, and "
                    "`webhook-replay-of` naming the seq it copies, so seqs stay contiguous and order holds. "
                    "`id` (optional) names the new message, so a retried call is taken once. 404 "
                    "`not_found` (field `message_id`): unknown message; 409 `not_delivered`: it is pending, "
                    "dead-lettered (use recover or replay) or was filtered; 409 `conflict` (field `id`): "
                    "`id` is another message's on this receiver, not a copy's of this one; 410 `expired`: "
                    "delivered and no longer kept."
                ),
            ),
        },
        "/v1/receivers/{receiver_id}/recover": {
            "parameters": [RID],
            "post": receiver_op(
                "send dead letters of a time window again, a page per call",
                {"202": answer("recovered", {
                    "type": "object",
                    "required": ["recovered", "messages", "skipped_seqs", "scanned", "next_after_seq",
                                 "since", "until"],
                    "properties": {
                        "recovered": INT, "messages": {"type": "array", "items": OBJ},
                        "skipped_seqs": {"type": "array", "items": INT}, "scanned": INT,
                        "next_after_seq": nullable(INT), "since": NUM, "until": NUM,
                    },
                })},
                method_body=body({
                    "type": "object", "required": ["since"], "additionalProperties": False,
                    "properties": {
                        "since": {"oneOf": [{"type": "number", "minimum": 0}, STR]},
                        "until": {"oneOf": [{"type": "number", "minimum": 0}, STR]},
                        "after_seq": {"type": "integer", "minimum": 0},
                        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_REPLAY},
                    },
                }),
                fail=(400, 401, 404, 422),
                description=(
                    "Dead letters whose dead-letter time is in `since`..`until` (unix seconds or RFC 3339 "
                    "with an offset; `until` defaults to now) are sent again as new messages, like replay. "
                    "One call reads at most 10,000 dead letters and sends at most `limit` (default 1,000): "
                    "while `next_after_seq` is not null, call again with it as `after_seq` and the answer's "
                    "`until`, so copies that fail again (later dead letters) are not recovered twice."
                ),
            ),
        },
        "/v1/receivers/{receiver_id}/secrets/rotate": {
            "parameters": [RID],
            "post": receiver_op(
                "a new secret; the old one signs during the grace",
                {"200": answer("rotated", ref("Receiver"))},
                method_body=body(OBJ, required=False),
                fail=(400, 401, 404, 422, 504),
            ),
        },
        "/v1/receivers/{receiver_id}/verify": {
            "parameters": [RID],
            "post": receiver_op(
                "run the verification handshake again",
                {"200": answer("verified or not", ref("Receiver"))},
                fail=(401, 404, 409, 422, 504),
                description="For a receiver created with `\"verify\": true`: runs the handshake and stores "
                "its result, which `verified` follows. 409 `verification_off` (field `verify`): the receiver "
                "does not require verification (it is always `verified`), so nothing is run; PATCH "
                "`\"verify\": true` to require it.",
            ),
        },
        "/v1/receivers/{receiver_id}/transform/test": {
            "parameters": [RID],
            "post": receiver_op(
                "run the receiver's transform (or one given) on a sample message; nothing is sent",
                {"200": answer("what delivery would do", ref("TransformResult"))},
                method_body=body(ref("TransformTest")),
                fail=(400, 401, 404, 422),
                description="`transform` in the body is tried instead of the receiver's saved one (try a "
                "template before saving it). 422 with code `transform_error`: the template failed or gave a "
                "result out of bounds (the field names the part: `transform`, `transform.path`, "
                "`transform.headers.<name>`, `transform.body`), as delivery would dead-letter it; 422 "
                "`invalid` (field `transform`): no transform given and none saved, or one that does not "
                "validate.",
            ),
        },
        "/v1/messages": {
            "post": receiver_op(
                "send one message",
                {
                    "202": answer(
                        "accepted",
                        {"type": "object", "required": ["id"], "properties": {"id": ID, "receiver_id": ID}},
                    )
                },
                method_body=body(ref("Message")),
                fail=(400, 401, 404, 413, 422, 429),
                description="413 `too_large`: field `payload` when the payload, as JSON, is over "
                "DISPATCHER_MAX_PAYLOAD bytes (the payload alone counts); field `body` when the whole "
                "message would not fit in a record (DISPATCHER_MAX_RECORD_BYTES less 4 KiB).",
            )
        },
        "/v1/messages/batch": {
            "post": receiver_op(
                "send up to 1,000 messages and 32 x DISPATCHER_MAX_PAYLOAD bytes (8 MiB), all or none",
                {
                    "202": answer(
                        "accepted",
                        {
                            "type": "object",
                            "required": ["ids"],
                            "properties": {"ids": {"type": "array", "items": ID}},
                        },
                    )
                },
                method_body=body(
                    {
                        "type": "object",
                        "required": ["messages"],
                        "properties": {
                            "messages": {
                                "type": "array",
                                "items": ref("Message"),
                                "minItems": 1,
                                "maxItems": 1000,
                            }
                        },
                    }
                ),
                fail=(400, 401, 404, 413, 422, 429),
                description="413 `too_large`: field `messages[i].payload` when that payload, as JSON, is "
                "over DISPATCHER_MAX_PAYLOAD bytes, `messages[i]` when that whole message would not fit in a "
                "record; `messages` (the body) or `messages[i].payload` (the message that crossed it) when "
                "the batch is over its byte cap.",
            )
        },
        "/v1/tokens": {
            "get": {
                **receiver_op(
                    "tenant tokens (admin token only), revoked and expired ones too, in the order minted",
                    {"200": answer("the tokens", {
                        "type": "object", "required": ["tokens"],
                        "properties": {"tokens": {"type": "array", "items": ref("Token")}},
                    })},
                    fail=(401, 403, 422),
                    description="Never a secret nor its hash: the plaintext token is shown only when minted.",
                ),
                "parameters": [{"name": "tenant", "in": "query", "schema": STR,
                                "description": "that tenant's tokens only"}],
            },
            "post": receiver_op(
                "mint a tenant token (admin token only); the answer's `token` is shown this once",
                {"201": answer("minted: the record and its `token`", ref("Token"))},
                method_body=body(ref("TokenCreate")),
                fail=(400, 401, 403, 422),
                description="Only the SHA-256 of the token's secret is stored; keep the `token` from this "
                "answer, as nothing shows it again. Any worker takes it at once.",
            ),
        },
        "/v1/tokens/{token_id}": {
            "parameters": [{"name": "token_id", "in": "path", "required": True, "schema": STR}],
            "delete": receiver_op(
                "revoke a tenant token for good (admin token only)",
                {"200": answer("revoked (also when it already was)", ref("Token"))},
                fail=(401, 403, 404),
                description="The worker that answers refuses the token from this answer on; the other "
                "workers once the revocation reaches them (normally within 100 ms). Sessions of the "
                "console opened with it end too.",
            ),
        },
        "/v1/events": {
            "post": receiver_op(
                "publish an event to every subscribed receiver",
                {
                    "202": answer(
                        "accepted",
                        {
                            "type": "object",
                            "required": ["id", "event_type", "receivers"],
                            "properties": {"id": ID, "event_type": STR, "receivers": INT},
                        },
                    )
                },
                method_body=body(ref("Event")),
                fail=(400, 401, 403, 413, 422),
                description="413 `too_large`: field `payload` when the payload, as JSON, is over "
                "DISPATCHER_MAX_PAYLOAD bytes; field `body` when the whole event would not fit in a record.",
            )
        },
    }
    for action in ("pause", "resume", "enable", "disable"):
        paths[f"/v1/receivers/{{receiver_id}}/{action}"] = {
            "parameters": [RID],
            "post": receiver_op(
                f"{action} delivery",
                {"200": answer("applied", ref("Receiver"))},
                method_body=body(ref("Control"), required=False),
                fail=(400, 401, 404, 422, 504),
            ),
        }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "webhook-dispatcher",
            "version": "1",
            "description": 'Signed, ordered webhook delivery. Errors are {"error": {code, field, message}}. '
            + TENANT_TOKENS,
        },
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": with_operation_ids(paths),
    }


def render() -> bytes:
    return orjson.dumps(build(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


if __name__ == "__main__":
    DOC_PATH.write_bytes(render())
    print(f"wrote {DOC_PATH}", file=sys.stderr)

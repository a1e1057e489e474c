"""`POST /v1/receivers/{id}/transform/test`: a receiver's transform (or one not saved yet) run on a sample.

Nothing is sent nor stored. The answer says what delivery would do with such
a message: cancel it, or POST which body, with which extra headers, to which
URL. A failing template answers the error delivery would dead-letter with.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from .errors import InvalidInput
from .field_checks import check_depth, check_event_type, reject_unknown
from .headers import check_headers
from .jsone_bounded import Budget
from .records import ReceiverConfig
from .transform import check_transform, sent_url
from .webhook import build_transformed, transform_entry

PREVIEW_FIELDS = {"payload", "event_type", "headers", "transform"}
PREVIEW_EVENT_TYPE = "transform.test"
PREVIEW_ID = "msg_transform_test"


def preview(config: ReceiverConfig, body: object, now: float, budget: Budget | None = None) -> dict[str, Any]:
    """The result of the transform on the sample `body` describes; InvalidInput naming the field at fault.

    With `budget`, the evaluation's (a TransformError with `spent` when it runs out); else the whole one.
    """
    if not isinstance(body, dict):
        raise InvalidInput("body", "must be a JSON object")
    reject_unknown(body, PREVIEW_FIELDS, "")
    if "payload" not in body:
        raise InvalidInput("payload", "is required")
    check_depth(body["payload"], "payload")
    template = check_transform(body["transform"], "transform") if "transform" in body else config.transform
    if template is None:
        raise InvalidInput("transform", "the receiver has no transform: give one to try")
    entry = {
        "id": PREVIEW_ID,
        "seq": 0,
        "type": check_event_type(body.get("event_type", PREVIEW_EVENT_TYPE), "event_type"),
        "data": body["payload"],
        "headers": check_headers(body.get("headers"), "headers"),
        "accepted_at": now,
    }
    config = replace(config, transform=template)
    shaped = transform_entry(config, entry, now, budget)  # TransformError (an InvalidInput) names the part
    if shaped.cancel:
        return {"cancel": True, "body": None, "headers": {}, "path": "", "url": None}
    url, sent, _ = build_transformed(config, entry, shaped, now)
    return {"cancel": False, "body": orjson.loads(sent), "headers": shaped.headers, "path": shaped.path,
            "url": sent_url(url)}

"""The OpenAPI document: the committed file is the generated one, and every route is in it."""

from __future__ import annotations

import re

from aiohttp import web

from dispatcher.domain.actor import effects
from web.app import setup_web
from web.openapi import DOC_PATH, build, render


def test_the_committed_document_is_current() -> None:
    assert DOC_PATH.read_bytes() == render(), "run `python -m web.openapi` and commit web/openapi.json"


def test_every_route_is_documented_and_every_documented_route_exists() -> None:
    app = web.Application()
    setup_web(app, object())  # type: ignore[arg-type] - routes only, nothing is called
    routes = {
        (re.sub(r"\{(\w+)(:[^}]*)?\}", r"{\1}", r.resource.canonical), r.method.lower())
        for r in app.router.routes()
        if r.method != "HEAD" and not r.resource.canonical.startswith("/ui")  # the console: HTML
    }
    paths = build()["paths"]
    documented = {(path, method) for path, ops in paths.items() for method in ops if method != "parameters"}
    assert routes == documented


def test_document_is_openapi_3_1_with_bearer_auth() -> None:
    doc = build()
    assert doc["openapi"] == "3.1.0"
    assert doc["security"] == [{"bearer": []}]
    # Outside /v1 no token is needed ([] or an optional {}); /readyz takes one for its figures.
    assert all(op.get("security") == [] or {} in op.get("security", ())
               for path, ops in doc["paths"].items() if not path.startswith("/v1") for op in ops.values())
    assert doc["paths"]["/readyz"]["get"]["security"] == [{}, {"bearer": []}]


def test_the_dead_letter_listing_names_every_reason_a_letter_can_have() -> None:
    reasons = {value for name, value in vars(effects).items() if name.isupper() and isinstance(value, str)}
    reasons |= {"malformed", "forbidden_record", "internal_error"}  # the glue's, for records it cannot apply
    text = build()["paths"]["/v1/receivers/{receiver_id}/dead-letters"]["get"]["description"]
    assert [reason for reason in sorted(reasons) if f"`{reason}`" not in text] == []

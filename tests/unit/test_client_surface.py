"""The Python client and the CLI cover every operation of web/openapi.json, and call the right one.

The client is driven against a real aiohttp server on 127.0.0.1 that records what
it is asked; the worker-backed behaviour is in tests/integration/test_client_cli.py.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import re
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from dispatcher.cli_api import CLI_OPERATIONS, add_api_commands, run_api_command
from dispatcher.cli_output import Table, readable
from dispatcher.client import OPERATIONS, ApiError, DispatcherClient
from web.openapi import build


def operations() -> dict[str, tuple[str, str]]:
    """operationId -> (method, path template) of every documented operation."""
    found = {}
    for path, ops in build()["paths"].items():
        for method, op in ops.items():
            if method != "parameters":
                found[op["operationId"]] = (method.upper(), path)
    return found


def test_every_operation_has_a_unique_camel_case_id() -> None:
    ids = [op["operationId"] for ops in build()["paths"].values()
           for method, op in ops.items() if method != "parameters"]
    assert len(ids) == len(set(ids)) == 26
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]*)+", i) for i in ids), ids


def test_every_operation_has_a_client_method_and_every_named_method_exists() -> None:
    assert set(OPERATIONS) == set(operations()), "add the new operation's method to client.OPERATIONS"
    for op_id, name in OPERATIONS.items():
        method = getattr(DispatcherClient, name, None)
        assert inspect.iscoroutinefunction(method), (op_id, name)
        assert method.__doc__, f"{name} needs a docstring saying what comes back"


def api_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="webhook-dispatcher", exit_on_error=False)
    add_api_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def commands(parser: argparse.ArgumentParser, prefix: str = "") -> set[str]:
    """Every runnable command line ("receivers create") of `parser`."""
    found = set()
    for action in parser._actions:  # argparse has no public walk of sub-commands
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= commands(sub, f"{prefix}{name} ")
    if not found and parser.get_default("api_command") is not None:
        found.add(prefix.strip())
    return found


def test_every_operation_has_a_cli_command_and_every_named_command_exists() -> None:
    assert set(CLI_OPERATIONS) == set(operations()), "add the new operation's command to CLI_OPERATIONS"
    available = commands(api_parser())
    assert set(CLI_OPERATIONS.values()) <= available, set(CLI_OPERATIONS.values()) - available


class Recorder:
    """A real HTTP server that records each request and answers a body every client method accepts."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, str], Any]] = []
        self.answer: tuple[int, bytes, str] = (200, b"", "application/json")
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = orjson.loads(raw) if raw else None
        self.calls.append((request.method, request.path, dict(request.query), body))
        status, answer, kind = self.answer
        if not answer:
            answer = orjson.dumps({"status": "ready", "id": "x", "attempts": [], "ids": []})
        return web.Response(status=status, body=answer, content_type=kind)


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    recorder = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    recorder.url = f"http://127.0.0.1:{port}"
    yield recorder
    await runner.cleanup()


ARGS = {
    "receiver_id": "r1", "message_id": "m1", "url": "https://example.com/hook", "event_type": "t.x",
    "payload": {"n": 1}, "messages": [{"receiver_id": "r1", "event_type": "t.x", "payload": {}}],
}


def template_matches(template: str, path: str) -> bool:
    return re.fullmatch(re.sub(r"\{\w+\}", "[^/]+", template), path) is not None


async def test_each_client_method_calls_its_operation(recorder: Recorder) -> None:
    async with DispatcherClient(recorder.url, "t") as client:
        for op_id, name in OPERATIONS.items():
            method = getattr(client, name)
            required = [p for p in inspect.signature(method).parameters.values()
                        if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
            await method(*(ARGS[p.name] for p in required))
            verb, path = recorder.calls[-1][:2]
            assert verb == operations()[op_id][0] and template_matches(operations()[op_id][1], path), (
                op_id, name, verb, path)
    assert len(recorder.calls) == len(OPERATIONS)


async def test_receiver_fields_are_sent_as_given_and_unset_ones_not_at_all(recorder: Recorder) -> None:
    async with DispatcherClient(recorder.url, "t") as client:
        await client.create_receiver("https://example.com/h", tenant=None, event_types=["a.*"], batch_max=5,
                                     retry={"max_attempts": 3})
        await client.update_receiver("r1", tenant=None)
        await client.reset_receiver_state("r1")
        await client.rotate_secret("r1", grace_seconds=0)
    create, patch, reset, rotate = recorder.calls
    assert create[3] == {"url": "https://example.com/h", "tenant": None, "event_types": ["a.*"],
                         "batch_max": 5, "retry": {"max_attempts": 3}}
    assert patch[:2] == ("PATCH", "/v1/receivers/r1") and patch[3] == {"tenant": None}
    assert reset[:3] == ("DELETE", "/v1/receivers/r1/state", {"confirm": "reset"})
    assert rotate[3] == {"grace_seconds": 0}


async def test_errors_keep_the_api_fields_or_a_proxy_page_as_text(recorder: Recorder) -> None:
    async with DispatcherClient(recorder.url, "t") as client:
        error = {"error": {"code": "not_found", "field": "receiver_id", "message": "no receiver 'r1'"}}
        recorder.answer = (404, orjson.dumps(error), "application/json")
        with pytest.raises(ApiError) as info:
            await client.last_response("r1")
        assert (info.value.status, info.value.code, info.value.field) == (404, "not_found", "receiver_id")

        recorder.answer = (404, orjson.dumps({"error": {**error["error"], "code": "no_attempt"}}),
                           "application/json")
        assert await client.last_response("r1") is None, "no attempt yet is not an error"

        page = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
        recorder.answer = (502, page, "text/html")
        with pytest.raises(ApiError) as info:
            await client.get_receiver("r1")
        assert (info.value.status, info.value.code, info.value.message) == (502, "error", page.decode())

        recorder.answer = (200, b"<html>a portal</html>", "text/html")
        with pytest.raises(ApiError) as info:
            await client.get_receiver("r1")
        assert info.value.code == "invalid_response" and "a portal" in info.value.message

        recorder.answer = (503, b'{"status": "starting"}', "application/json")
        assert await client.ready() == {"status": "starting"}, "not ready is an answer, not an error"


def test_readable_output_shows_every_value_without_cutting_it() -> None:
    long = "x" * 500
    answer = {
        "id": "r1", "tenant": None, "event_types": ["a.*", "b.c"], "empty": [], "flag": False, "note": "",
        "long": long,
        "state": {"status": "active", "lane": {"name": "fast", "since": 1.5}, "window": []},
        "body": "line one\nline two",
        "attempts": [{"seq": 1, "status": 200}, {"seq": 2, "status": None}],
        "nested": [{"seq": 1, "headers": {"a": "1"}}],
    }
    assert readable(answer).splitlines() == [
        "id: r1",
        "tenant: -",
        "event_types: a.*, b.c",
        "empty: (none)",
        "flag: false",
        'note: ""',
        f"long: {long}",
        "state:",
        "  status: active",
        "  lane:",
        "    name: fast",
        "    since: 1.5",
        "  window: (none)",
        "body: |",
        "  line one",
        "  line two",
        "attempts:",
        "  SEQ  STATUS",
        "  1    200",
        "  2    -",
        "nested:",
        "  - seq: 1",
        "    headers:",
        "      a: 1",
    ]
    assert readable(Table([{"id": "a", "tenant": None}], ["id", "tenant"])).splitlines() == [
        "ID  TENANT", "a   -"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["send", "r1", "t.x", "{nope"], "argument payload: not JSON"),
        (["receivers", "create", "https://e.com", "--set", "retry={x"], "argument --set: retry: not JSON"),
        (["receivers", "create", "https://e.com", "--set", "retry"], "argument --set: must be FIELD=JSON"),
        (["receivers", "update", "r1", "--config", "[1]"], "argument --config: must be a JSON object"),
        (["receivers", "create", "https://e.com", "--header", "X-A"], "argument --header: must be NAME="),
        (["receivers", "create", "https://e.com", "--signing", "rsa"], "argument --signing: must be hmac"),
        (["receivers", "attempts", "r1", "--limit", "0"], "argument --limit: must be a whole number >= 1"),
    ],
)
def test_a_bad_argument_is_exit_status_2_naming_the_option(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = api_parser()
    parser.exit_on_error = True
    with pytest.raises(SystemExit) as info:
        parser.parse_args(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_reset_state_without_confirm_is_refused_before_any_call(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DISPATCHER_URL", "http://127.0.0.1:9")  # nothing listens: no call may be made
    monkeypatch.setenv("DISPATCHER_API_TOKEN", "t")
    assert run_api_command(api_parser().parse_args(["receivers", "reset-state", "r1"])) == 2
    assert "add --confirm" in capsys.readouterr().err
    assert run_api_command(api_parser().parse_args(["receivers", "update", "r1"])) == 2
    assert "at least one field" in capsys.readouterr().err


async def test_the_cli_shows_a_proxy_error_page_and_exits_1(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DISPATCHER_URL", recorder.url)
    monkeypatch.setenv("DISPATCHER_API_TOKEN", "t")
    recorder.answer = (502, b"<html>502 Bad Gateway</html>", "text/html")
    args = api_parser().parse_args(["receivers", "show", "r1"])
    assert await asyncio.to_thread(run_api_command, args) == 1
    assert capsys.readouterr().err == "error: 502 error: <html>502 Bad Gateway</html>\n"

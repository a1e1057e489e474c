"""The Python client and the CLI cover every operation of web/openapi.json, and call the right one.

The client is driven against a real aiohttp server on 127.0.0.1 that records what
it is asked; the worker-backed behaviour is in tests/integration/test_client_cli.py.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import re
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote

import orjson
import pytest
from aiohttp import web

from dispatcher.cli_api import CLI_OPERATIONS, add_api_commands, run_api_command
from dispatcher.cli_commands import receiver_fields
from dispatcher.cli_output import Table, readable
from dispatcher.client import OPERATIONS, ApiError, DispatcherClient, segment
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
    assert len(ids) == len(set(ids)) == 32
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
        self.raw_paths: list[str] = []  # as sent, still percent-encoded
        self.answer: tuple[int, bytes, str] = (200, b"", "application/json")
        self.next_answers: list[tuple[int, bytes, str]] = []  # answered first, one a request
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = orjson.loads(raw) if raw else None
        self.calls.append((request.method, request.path, dict(request.query), body))
        self.raw_paths.append(request.raw_path.partition("?")[0])
        status, answer, kind = self.next_answers.pop(0) if self.next_answers else self.answer
        if not answer:
            answer = orjson.dumps({"status": "ready", "id": "x", "attempts": [], "ids": [], "tokens": []})
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
    "payload": {"n": 1}, "since": 0, "messages": [{"receiver_id": "r1", "event_type": "t.x", "payload": {}}],
    "tenant": "acme", "token_id": "t1",
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


def nested(depth: int) -> str:
    return "[" * depth + "0" + "]" * depth


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
        (["receivers", "create", "https://e.com", "--rate-limit", "nan"], "argument --rate-limit: must be"),
        (["receivers", "update", "r1", "--rate-limit", "inf"], "argument --rate-limit: must be a finite"),
        (["receivers", "update", "r1", "--rate-limit", "-1"], "argument --rate-limit: must be a finite"),
        (["receivers", "rotate-secret", "r1", "--grace-seconds=-inf"], "argument --grace-seconds: must be"),
        (["receivers", "rotate-secret", "r1", "--grace-seconds", "inf"], "argument --grace-seconds: must be"),
        (["health", "--timeout", "nan"], "argument --timeout: must be a finite"),
        (["health", "--timeout", "0"], "argument --timeout: must be a number of seconds above 0"),
        (["receivers", "show", ""], "argument receiver_id: must not be empty"),
        (["messages", "status", "r1", ""], "argument message_id: must not be empty"),
        (["send", "r1", "t.x", nested(300)], "argument payload: JSON nested too deeply"),
        (["send", "r1", "t.x", nested(253)], "argument payload: JSON nested too deeply"),  # +1 in the body
        (["receivers", "create", "https://e.com", "--set", f"retry={nested(260)}"], "--set: retry: JSON"),
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


def test_a_deep_payload_that_fits_is_taken() -> None:
    assert api_parser().parse_args(["send", "r1", "t.x", nested(252)]).payload is not None


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["receivers", "create", "https://e.com", "--set", "secret=whsec_c2VjcmV0LXZhbHVl"], "--set"),
        (["receivers", "create", "https://e.com", "--set", "whsec_c2VjcmV0LXZhbHVl"], "--set"),
        (["receivers", "update", "r1", "--config", "whsec_c2VjcmV0LXZhbHVl"], "--config"),
        (["receivers", "update", "r1", "--config", '{"secret": "whsec_c2VjcmV0LXZhbHVl"'], "--config"),
        (["receivers", "create", "https://e.com", "--header", "Authorization: whsec_c2VjcmV0LXZhbHVl"],
         "--header"),
    ],
)
def test_a_bad_argument_never_echoes_a_value_that_may_be_a_secret(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = api_parser()
    parser.exit_on_error = True
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
    err = capsys.readouterr().err
    assert f"argument {option}: " in err and "c2VjcmV0LXZhbHVl" not in err, err


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


# ids in URL paths -------------------------------------------------------------------

HOSTILE_IDS = ["rcv_x/../victim", "../../healthz", "..", ".", "a%2Fb", "q?x=1#frag", "sp ace", "é"]


def segments_of(template: str, raw_path: str) -> list[str] | None:
    """The decoded value of each `{name}` of `template` in `raw_path`, or None if it is another route."""
    found = re.fullmatch(re.sub(r"\{\w+\}", "([^/]+)", template), raw_path)
    return None if found is None else [unquote(value) for value in found.groups()]


@pytest.mark.parametrize("hostile", HOSTILE_IDS)
async def test_every_id_is_sent_as_one_encoded_path_segment(recorder: Recorder, hostile: str) -> None:
    """`/`, `..` and `%` in an id never change the route: the server sees the id as one segment."""
    async with DispatcherClient(recorder.url, "t") as client:
        for op_id, name in OPERATIONS.items():
            verb, template = operations()[op_id]
            if "{" not in template:
                continue
            method = getattr(client, name)
            required = [p for p in inspect.signature(method).parameters.values()
                        if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
            args = {**ARGS, "receiver_id": hostile, "message_id": hostile, "token_id": hostile}
            await method(*(args[p.name] for p in required))
            path = recorder.raw_paths[-1]
            assert recorder.calls[-1][0] == verb
            assert segments_of(template, path) == [hostile] * template.count("{"), (op_id, path)


def test_an_empty_id_is_refused_before_any_call() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        segment("")
    assert segment("..") == "%2E%2E" and segment("a/b") == "a%2Fb"


# retries, last response ---------------------------------------------------------------

UNAVAILABLE = (503, orjson.dumps({"error": {"code": "unavailable", "field": "id",
                                            "message": "the owner of this id is moving (rebalance); retry"}}),
               "application/json")
STATUS = (200, orjson.dumps({"status": "delivered", "seq": 1}), "application/json")


async def test_a_get_answered_503_unavailable_is_tried_again(recorder: Recorder) -> None:
    recorder.next_answers = [UNAVAILABLE, UNAVAILABLE, STATUS]
    async with DispatcherClient(recorder.url, "t") as client:
        assert await client.message_status("r1", "m1") == {"status": "delivered", "seq": 1}
    assert len(recorder.calls) == 3


async def test_a_lasting_503_surfaces_after_a_bounded_number_of_tries(recorder: Recorder) -> None:
    recorder.answer = UNAVAILABLE
    async with DispatcherClient(recorder.url, "t") as client:
        started = time.monotonic()
        with pytest.raises(ApiError) as info:
            await client.message_status("r1", "m1")
        assert (info.value.status, info.value.code) == (503, "unavailable")
        assert len(recorder.calls) == 3 and time.monotonic() - started < 2.5
        del recorder.calls[:]
        with pytest.raises(ApiError):  # not a GET: the call may have been applied, so never repeated
            await client.pause("r1")
        recorder.answer = (503, orjson.dumps({"error": {"code": "draining"}}), "application/json")
        with pytest.raises(ApiError):  # a 503 the API does not say to retry
            await client.get_receiver("r1")
    assert len(recorder.calls) == 2


async def test_last_response_is_none_only_for_no_attempt(recorder: Recorder) -> None:
    async with DispatcherClient(recorder.url, "t") as client:
        recorder.answer = (404, b"404: Not Found", "text/plain")  # another server's page (a wrong URL)
        with pytest.raises(ApiError) as info:
            await client.last_response("r1")
        assert (info.value.status, info.value.code) == (404, "error")
        recorder.answer = (404, orjson.dumps({"error": {"code": "gone"}}), "application/json")
        with pytest.raises(ApiError):
            await client.last_response("r1")


# CLI errors -------------------------------------------------------------------------------


def cli_env(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("DISPATCHER_URL", url)
    monkeypatch.setenv("DISPATCHER_API_TOKEN", "t")


@pytest.mark.parametrize("url", ["127.0.0.1:18431", "http://", "ftp://example.com", "http//x", "http://[::1"])
def test_a_bad_dispatcher_url_is_exit_status_2_naming_the_variable(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_env(monkeypatch, url)
    assert run_api_command(api_parser().parse_args(["health"])) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: DISPATCHER_URL ") and err.count("\n") == 1, err


async def serve_raw(behaviour: Any) -> tuple[asyncio.Server, str]:
    """A TCP server on 127.0.0.1 running `behaviour(reader, writer)` for each connection; its URL."""
    server = await asyncio.start_server(behaviour, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_a_dropped_connection_or_a_hang_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.close()

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        await asyncio.sleep(30)

    for behaviour, argv, said in (
        (drop, ["health"], "error: cannot reach http://127.0.0.1:"),
        (hang, ["health", "--timeout", "0.3"], " within 0.3 s"),
    ):
        server, url = await serve_raw(behaviour)
        cli_env(monkeypatch, url)
        try:
            status = await asyncio.to_thread(run_api_command, api_parser().parse_args(argv))
        finally:
            server.close()
        err = capsys.readouterr().err
        assert status == 1 and said in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert "error: no answer from http://127.0.0.1:" in err


async def test_quiet_create_keeps_the_new_secret_on_stderr(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_env(monkeypatch, recorder.url)
    recorder.answer = (201, orjson.dumps({"id": "rcv_1", "secret": "whsec_only_copy"}), "application/json")
    args = api_parser().parse_args(["receivers", "create", "https://example.com/h", "-q"])
    assert await asyncio.to_thread(run_api_command, args) == 0
    out, err = capsys.readouterr()
    assert out == "rcv_1\n"
    assert err == "secret (shown once, keep it): whsec_only_copy\n"

    args = api_parser().parse_args(["receivers", "create", "https://example.com/h", "-q",
                                    "--secret", "whsec_only_copy"])
    assert await asyncio.to_thread(run_api_command, args) == 0
    assert capsys.readouterr() == ("rcv_1\n", ""), "a secret the caller gave is not repeated"


async def test_a_filter_is_sent_as_given_and_null_removes_it(recorder: Recorder) -> None:
    wanted = {"payload": {"amount": {"$gte": 10}}}
    async with DispatcherClient(recorder.url, "t") as client:
        await client.create_receiver("https://example.com/h", filter=wanted)
        await client.update_receiver("r1", filter=None)
    create, patch = recorder.calls
    assert create[3] == {"url": "https://example.com/h", "filter": wanted}
    assert patch[3] == {"filter": None}


@pytest.mark.parametrize(("argv", "sent"), [
    (["receivers", "create", "https://e.com", "--filter", '{"payload.currency": "EUR"}'],
     {"filter": {"payload.currency": "EUR"}}),
    (["receivers", "update", "r1", "--filter", "null"], {"filter": None}),
    (["receivers", "update", "r1", "--event-type", "a.*"], {"event_types": ["a.*"]}),
])
def test_the_filter_option_becomes_the_body_field(argv: list[str], sent: dict[str, Any]) -> None:
    assert receiver_fields(api_parser().parse_args(argv)) == sent


def test_a_filter_option_that_is_not_an_object_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    parser = api_parser()
    parser.exit_on_error = True
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["receivers", "create", "https://e.com", "--filter", "[1]"])
    assert info.value.code == 2 and "argument --filter: must be a JSON object" in capsys.readouterr().err


MINTED = {"id": "01JD3Q7ZK8W4G2M5N6P7R8S9TV", "tenant": "acme", "name": "ci", "status": "active",
          "last4": "abcd", "prefix": "wdt_01JD3Q7ZK8W4G2M5N6P7R8S9TV_", "created_at": 1.0, "expires_at": None,
          "revoked_at": None}


async def test_tokens_create_shows_the_token_once_and_quiet_prints_only_it(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_env(monkeypatch, recorder.url)
    token = "wdt_01JD3Q7ZK8W4G2M5N6P7R8S9TV_" + "s" * 39 + "abcd"
    recorder.answer = (201, orjson.dumps({**MINTED, "token": token}), "application/json")
    args = api_parser().parse_args(["tokens", "create", "--tenant", "acme", "--name", "ci",
                                    "--expires-at", "2030-01-01T00:00:00Z", "-q"])
    assert await asyncio.to_thread(run_api_command, args) == 0
    assert capsys.readouterr() == (token + "\n", "")
    assert recorder.calls[-1] == ("POST", "/v1/tokens", {}, {
        "tenant": "acme", "name": "ci", "expires_at": "2030-01-01T00:00:00Z"})
    args = api_parser().parse_args(["tokens", "create", "--tenant", "acme"])
    assert await asyncio.to_thread(run_api_command, args) == 0
    out, err = capsys.readouterr()
    assert token in out and err == "note: the token is shown only in this answer; keep it\n"
    assert recorder.calls[-1][3] == {"tenant": "acme"}


async def test_tokens_list_and_revoke(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_env(monkeypatch, recorder.url)
    recorder.answer = (200, orjson.dumps({"tokens": [MINTED]}), "application/json")
    args = api_parser().parse_args(["tokens", "list", "--tenant", "acme"])
    assert await asyncio.to_thread(run_api_command, args) == 0
    out, _ = capsys.readouterr()
    assert "01JD3Q7ZK8W4G2M5N6P7R8S9TV" in out and "active" in out and "abcd" in out
    assert recorder.calls[-1][:3] == ("GET", "/v1/tokens", {"tenant": "acme"})
    revoked = {**MINTED, "status": "revoked", "revoked_at": 2.0}
    recorder.answer = (200, orjson.dumps(revoked), "application/json")
    args = api_parser().parse_args(["tokens", "revoke", MINTED["id"], "--field", "status"])
    assert await asyncio.to_thread(run_api_command, args) == 0
    assert capsys.readouterr().out == "revoked\n"
    assert recorder.calls[-1][:2] == ("DELETE", f"/v1/tokens/{MINTED['id']}")

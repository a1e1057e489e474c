"""The CLI's printer never lets a receiver's bytes act on the terminal: every control character is shown."""

from __future__ import annotations

import argparse
import asyncio
import re
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from dispatcher.cli_api import add_api_commands, run_api_command
from dispatcher.cli_output import Plain, Table, as_json, escape, readable

# What a receiver answered in the review: clear the screen, home, red, fake text, set the window title.
HOSTILE = "\x1b[2J\x1b[H\x1b[31mFAKE\x1b]0;owned\x07"
# Every character a terminal may act on (C0 but the newline, DEL, C1, bidi), one of each.
CONTROLS = "".join(map(chr, [*range(0x00, 0x0A), *range(0x0B, 0x20), *range(0x7F, 0xA0),
                             *range(0x202A, 0x202F), *range(0x2066, 0x206A)]))
ACTS_ON_A_TERMINAL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_escape_shows_each_control_character_as_text() -> None:
    assert escape(HOSTILE) == "\\x1b[2J\\x1b[H\\x1b[31mFAKE\\x1b]0;owned\\x07"
    assert escape("a\u202eb\u2066c\x9bd\x7fe\tf\r\n") == "a\\u202eb\\u2066c\\x9bd\\x7fe\\x09f\\x0d\n"
    assert escape("line\nnext", one_line=True) == "line\\x0anext"
    assert escape("plain text, ünïcode ✓") == "plain text, ünïcode ✓"


def test_readable_output_holds_no_control_character_wherever_the_text_comes() -> None:
    answer = {
        "ok": False,
        "body_prefix": HOSTILE + "\n" + CONTROLS,  # a multi-line block
        "error": CONTROLS,
        "headers": {"x-evil" + CONTROLS: HOSTILE, "x-fine": "ok"},  # keys too
        "attempts": [{"seq": 1, "error": HOSTILE}, {"seq": 2, "error": "a\nb" + CONTROLS}],  # table, blocks
        "nested": [[HOSTILE]],
    }
    for shown in (
        readable(answer),
        readable(Table([{"seq": 1, "last_error": HOSTILE + "\nfake row"}], ["seq", "last_error"])),
        readable(Plain("rcv_1\n" + HOSTILE)),
    ):
        assert ACTS_ON_A_TERMINAL.search(shown) is None, repr(shown)
    lines = readable(answer).splitlines()
    assert "body_prefix: |" in lines and "  " + escape(HOSTILE) in lines
    assert "  x-evil" + escape(CONTROLS, one_line=True) + ": " + escape(HOSTILE) in lines
    table = readable(Table([{"seq": 1, "last_error": "one\nfake row"}], ["seq", "last_error"])).splitlines()
    assert table == ["SEQ  LAST_ERROR", "1    one\\x0afake row"], "a newline cannot fake a row"


def test_json_output_is_the_same_value_with_no_raw_control_character() -> None:
    answer = {"body": HOSTILE + CONTROLS + "\n", CONTROLS: [HOSTILE]}
    text = as_json(answer)
    assert orjson.loads(text) == answer
    assert ACTS_ON_A_TERMINAL.search(text) is None, text
    assert "\\u009b" in text and "\\u202e" in text


class Hostile:
    """A real API stand-in on 127.0.0.1 answering every call with a receiver's hostile answer."""

    def __init__(self) -> None:
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        answer = {"id": "rcv_1", "ok": True, "status": 200, "body_prefix": HOSTILE, "tenant": "acme"}
        return web.json_response(answer)


@pytest.fixture
async def hostile() -> AsyncIterator[Hostile]:
    server = Hostile()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    yield server
    await runner.cleanup()


def cli_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="webhook-dispatcher")
    add_api_commands(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("argv", "printed"),
    [
        (["receivers", "ping", "rcv_1"], f"body_prefix: {escape(HOSTILE)}"),
        (["receivers", "last-response", "rcv_1"], f"body_prefix: {escape(HOSTILE)}"),
        (["receivers", "ping", "rcv_1", "--json"], '"body_prefix": "\\u001b[2J'),
        (["receivers", "ping", "rcv_1", "--field", "body_prefix"], escape(HOSTILE)),
        (["receivers", "ping", "rcv_1", "--field", "tenant"], "acme"),  # a safe string: as it is
    ],
)
async def test_the_cli_prints_a_hostile_answer_escaped(
    hostile: Hostile, argv: list[str], printed: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DISPATCHER_URL", hostile.url)
    monkeypatch.setenv("DISPATCHER_API_TOKEN", "t")
    assert await asyncio.to_thread(run_api_command, cli_args(*argv)) == 0
    out = capsys.readouterr().out
    assert printed in out.splitlines() or printed in out, out
    assert ACTS_ON_A_TERMINAL.search(out) is None, repr(out)

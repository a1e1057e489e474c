"""The README's examples, run as written against a fresh `make run`.

Every fenced `sh`, `python` and `js` block of README.md runs, in order, in one
bash session in a scratch directory, as a new user would paste them into a
second shell: `sh` blocks as they are, `python` blocks as programs
(`python - <<EOF`). A block preceded by `<!-- readme-test: file NAME -->` is
saved as NAME there (a later block runs it); `<!-- readme-test: skip (why) -->`
leaves a block out and must say why. What the harness changes, and only that:
- the line `export DISPATCHER_API_TOKEN=...` becomes the `export` lines the
  banner printed (the README tells the reader to paste those);
- the well-known ports (8080, 9092, 9000-9006) become free ones, so the suite
  can run beside a developer's own `make run`;
- `.venv` is the virtualenv the suite runs in;
- `curl` fails on an HTTP error (`--fail-with-body`), so a refused call fails
  the block instead of printing an error nobody reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from dispatcher.broker import free_ports
from dispatcher.settings import Settings
from tests.harness import wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUNNABLE = {"sh", "python", "js"}
# Aliases would slip past the runner unnoticed: a README block uses the names above.
NOT_ALLOWED = {"bash", "shell", "console", "py", "python3", "javascript", "node"}
PORTS = ("8080", "9092", "9000", "9001", "9002", "9003", "9004", "9005", "9006")
FENCE = re.compile(r"(?:<!-- readme-test: (?P<mark>[^>]*?) -->\n)?^```(?P<lang>\S*)\n(?P<body>.*?)^```$",
                   re.S | re.M)
TOKEN_LINE = re.compile(r"^export DISPATCHER_API_TOKEN=\.\.\..*$", re.M)


@dataclass(frozen=True)
class Block:
    line: int
    lang: str
    mark: str
    body: str


def readme_blocks(text: str) -> list[Block]:
    return [
        Block(text.count("\n", 0, m.start("body")), m["lang"], m["mark"] or "", m["body"])
        for m in FENCE.finditer(text)
    ]


def test_every_block_is_labelled_so_the_runner_sees_it() -> None:
    blocks = readme_blocks((ROOT / "README.md").read_text())
    assert blocks
    for block in blocks:
        assert block.lang not in NOT_ALLOWED, f"README line {block.line}: use sh, python or js"
        if block.mark.startswith("skip"):
            assert re.fullmatch(r"skip \(.+\)", block.mark), f"README line {block.line}: say why"
        elif block.mark:
            assert re.fullmatch(r"file [\w.-]+", block.mark), f"README line {block.line}: {block.mark!r}"


def test_every_setting_is_in_the_readme() -> None:
    """Each `Settings` field is read from DISPATCHER_<NAME>; the README's table names each one.

    A row may shorten names that share a prefix: `DISPATCHER_BREAKER_FAILURES` / `_WINDOW`.
    """
    text = (ROOT / "README.md").read_text()
    documented: set[str] = set()
    for row in re.findall(r"^\| (`DISPATCHER_\w+`.*?) \|", text, re.M):
        names = re.findall(r"`(DISPATCHER_\w+|_\w+)`", row)
        first = names[0]
        parts = first.split("_")
        for name in names:
            if name.startswith("DISPATCHER_"):
                documented.add(name)
            else:  # any prefix of the row's first name, then this suffix
                documented |= {"_".join(parts[:i]) + name for i in range(1, len(parts))}
    missing = [f"DISPATCHER_{f.name.upper()}" for f in dataclasses.fields(Settings)
               if f"DISPATCHER_{f.name.upper()}" not in documented]
    assert not missing, f"settings missing from the README's table: {missing}"


def build_script(blocks: list[Block], exports: str, ports: dict[str, str], scratch: Path) -> str:
    """One bash script of the runnable blocks, in order; files written to `scratch` on the way."""
    port = re.compile(r"(?<![\w.])(" + "|".join(PORTS) + r")(?![\w])")
    venv = Path(sys.prefix)
    lines = [
        "set -euo pipefail",
        f"cd {scratch}",
        'curl() { command curl --fail-with-body "$@"; }',
    ]
    for block in blocks:
        if block.lang not in RUNNABLE or block.mark.startswith("skip"):
            continue
        body = port.sub(lambda m: ports[m[1]], block.body)
        if block.mark.startswith("file "):
            (scratch / block.mark.removeprefix("file ")).write_text(body)
            continue
        lines.append(f"echo '::: README line {block.line} :::' >&2")
        if block.lang == "sh":
            body = body.replace(". .venv/bin/activate", f". {venv}/bin/activate")
            lines.append(TOKEN_LINE.sub(exports, body))
        elif block.lang == "python":
            lines += ["python - <<'README_PYTHON'", body + "README_PYTHON"]
        else:
            lines += ["node - <<'README_JS'", body + "README_JS"]
    return "\n".join(lines) + "\n"


async def test_readme_examples_run_as_written(tmp_path: Path) -> None:
    ports = {p: str(port) for p, port in zip(PORTS, free_ports(len(PORTS)), strict=True)}
    make_env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_")}
    make_env |= {
        "DISPATCHER_WEB_PORT": ports["8080"],
        "DISPATCHER_DEV_BROKER_PORT": ports["9092"],
        "DISPATCHER_DATA_DIR": str(tmp_path / "data"),
    }
    dev_out = tmp_path / "make-run.out"
    # `make run` is `install` then `dev`; `make test` has just installed (and from a git worktree
    # a reinstall would point the suite's virtualenv at it), so `-o install` skips that step.
    with dev_out.open("wb") as out:
        dev = subprocess.Popen(
            ["make", "-s", "-o", "install", "run", f"VENV={sys.prefix}"], cwd=ROOT, env=make_env,
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    shell: subprocess.Popen[bytes] | None = None
    try:
        await wait_until(lambda: "=" * 78 + "\n" in _banner(dev_out) or dev.poll() is not None, 180,
                         "make run's banner")
        banner = _banner(dev_out)
        exports = "\n".join(re.findall(r"^\s+(export DISPATCHER_\w+=\S+)$", banner, re.M))
        assert "export DISPATCHER_API_TOKEN=" in exports, dev_out.read_text()

        scratch = tmp_path / "shell"
        scratch.mkdir()
        blocks = readme_blocks((ROOT / "README.md").read_text())
        script = build_script(blocks, exports, ports, scratch)
        assert script.count("::: README line") >= 6, script
        assert exports in script  # the README's token line was found and replaced
        shell_out = tmp_path / "shell.out"
        shell_env = {k: v for k, v in make_env.items() if not k.startswith("DISPATCHER_")}
        with shell_out.open("wb") as out:
            shell = subprocess.Popen(
                ["bash", "-c", script], cwd=scratch, env=shell_env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        await wait_until(lambda: shell is not None and shell.poll() is not None, 300, "the README's blocks")
        text = shell_out.read_text(errors="replace")
        assert shell.returncode == 0, text[-6000:]

        # What the examples say happens: the listener and the four verifying receivers report it.
        await wait_until(lambda: _count(shell_out, r"^verified \S+ .*order\.shipped") >= 4, 60,
                         "the four verifying receivers to get order.shipped")
        await wait_until(lambda: _count(shell_out, r"invoice\.paid .*signature ok  -> 200") >= 9, 60,
                         "nine signed deliveries at the listener")
        text = shell_out.read_text(errors="replace")
        assert "REJECTED" not in text and "signature BAD" not in text, text[-6000:]
        assert re.search(r"-> 503", text), text[-6000:]  # the failing receiver was tried
        # A verifier that let everything through would pass the above: each refuses forgeries.
        forged = await _forge_requests([int(ports[p]) for p in ("9002", "9003", "9004", "9005")])
        assert set(forged) == {401}, forged
        await wait_until(lambda: _count(shell_out, r"^REJECTED ") == len(forged), 30,
                         "every forged request rejected by the README's receivers")
    finally:
        if shell is not None and shell.poll() is None:
            os.killpg(shell.pid, signal.SIGTERM)
        elif shell is not None:
            _kill_group(shell.pid)  # the background receivers the blocks started
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGINT)  # Ctrl-C, as the README says
            try:
                await asyncio.to_thread(dev.wait, 30)
            except subprocess.TimeoutExpired:
                os.killpg(dev.pid, signal.SIGKILL)
                dev.wait(10)
    tail = dev_out.read_text(errors="replace").split("=" * 78 + "\n")[-1]
    assert "stopped." in tail and "Traceback" not in tail and "ERROR" not in tail, tail


FORGERIES = (
    {},  # no webhook headers at all
    {"webhook-id": "msg_forged", "webhook-signature": "v1,AAAA v1a,AAAA"},  # a stale-less bad signature
    {"webhook-id": "msg_forged", "webhook-signature": "v1,\xe9\xff v1a,\xe9\xff"},  # not ASCII
    {"webhook-id": "msg_forged", "webhook-signature": "v1,AAAA", "webhook-timestamp": "\xb2"},  # "²"
    {"webhook-id": "msg_forged", "webhook-signature": "v1,AAAA", "webhook-timestamp": "9" * 5000},
)


async def _forge_requests(ports: list[int]) -> list[int]:
    """POST requests no key signed (some with hostile header bytes) to each receiver: the statuses."""
    statuses = []
    for port in ports:
        for headers in FORGERIES:
            stamp = {"webhook-timestamp": str(int(time.time()))}
            raw = "".join(f"{k}: {v}\r\n" for k, v in {**stamp, **headers}.items())
            body = b'{"type":"order.shipped","data":{"order":666}}'
            request = (f"POST /hook HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                       f"content-length: {len(body)}\r\nconnection: close\r\n{raw}\r\n").encode("latin-1")
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request + body)
            await writer.drain()
            status_line = await asyncio.wait_for(reader.readline(), 10)
            writer.close()
            statuses.append(int(status_line.split()[1]) if status_line else 0)
    return statuses


def _banner(path: Path) -> str:
    text = path.read_text(errors="replace")
    start = text.find("=" * 78)
    return text[start:] if start >= 0 else ""


def _count(path: Path, pattern: str) -> int:
    return len(re.findall(pattern, path.read_text(errors="replace"), re.M))


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)

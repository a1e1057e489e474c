"""The README's run command, driven for real: `webhook-dispatcher dev` in a subprocess."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dispatcher.broker import free_port
from tests.harness import Api, Receiver, wait_until

pytestmark = pytest.mark.integration


async def _read_banner(proc: subprocess.Popen[bytes], limit: float = 120) -> str:
    """Read the dev command's output until it prints the token (bounded)."""
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    out = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and b"API token:" not in out:
        chunk = proc.stdout.read()
        if chunk:
            out += chunk
        elif proc.poll() is not None:
            break
        await asyncio.sleep(0.1)
    return out.decode(errors="replace")


async def test_dev_command_delivers_and_stops_its_children(tmp_path: Path, receiver: Receiver) -> None:
    port = free_port()
    env = {
        **os.environ,
        "DISPATCHER_WEB_PORT": str(port),
        "DISPATCHER_DATA_DIR": str(tmp_path / "data"),
        "DISPATCHER_APP_ID": "clitest",
    }
    env.pop("DISPATCHER_API_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "dev"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    try:
        banner = await _read_banner(proc)
        token = re.search(r"API token:\s+(\S+)", banner)
        assert token, banner
        assert f"http://127.0.0.1:{port}" in banner
        api = Api(f"http://127.0.0.1:{port}", token.group(1))
        try:
            created = await api.create_receiver(receiver.url("cli"))
            status, _ = await api.call(
                "POST", "/v1/messages",
                {"receiver_id": created["id"], "event_type": "hello.world", "payload": {"hi": 1}},
            )
            assert status == 202
            await wait_until(lambda: len(receiver.deliveries) == 1, 30, "the delivery")
        finally:
            await api.close()
        assert receiver.deliveries[0].headers["webhook-event-type"] == "hello.world"
        children = _children(proc.pid)
        assert len(children) == 2  # the broker and the worker
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(40) == 0
        for child in children:
            assert not Path(f"/proc/{child}").exists() or _is_zombie(child), f"child {child} still runs"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except FileNotFoundError:
        return True

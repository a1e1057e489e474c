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

import aiohttp
import pytest
from aiohttp import web

from dispatcher import __version__
from dispatcher.broker import free_port
from dispatcher.cli import main
from dispatcher.dev import _StopRequest, wait_ready
from dispatcher.ports import EXIT_PORT_IN_USE
from tests.harness import Api, Receiver, wait_until

pytestmark = pytest.mark.integration


async def _read_banner(proc: subprocess.Popen[bytes], limit: float = 120) -> str:
    """Read the dev command's output until it prints the token (bounded)."""
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    out = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and not re.search(rb"is ready.*?\n={78}\n", out, re.S):
        chunk = proc.stdout.read()
        if chunk:
            out += chunk
        elif proc.poll() is not None:
            break
        await asyncio.sleep(0.1)
    return out.decode(errors="replace")


async def test_dev_delivers_and_stops_its_children_on_ctrl_c(tmp_path: Path, receiver: Receiver) -> None:
    """Ctrl-C reaches the terminal's whole foreground group: `dev` must stop its children in order."""
    port = free_port()
    proc = _start_dev(_dev_env(tmp_path, port))
    try:
        banner = await _read_banner(proc)
        token = re.search(r"API token\s+(\S+)", banner)
        assert token, banner
        assert f"export DISPATCHER_API_TOKEN={token.group(1)}" in banner
        assert f"http://127.0.0.1:{port}" in banner
        assert re.search(rf"console\s+http://127\.0\.0\.1:{port}/ui/", banner), banner
        assert re.search(rf"metrics\s+http://127\.0\.0\.1:{port}/metrics", banner), banner
        assert re.search(r"broker\s+127\.0\.0\.1:\d+", banner), banner
        # The banner is the last thing printed, and the libraries' start-up chatter is not there.
        assert banner.rstrip().endswith("=" * 78), banner
        assert "Starting..." not in banner, banner
        api = Api(f"http://127.0.0.1:{port}", token.group(1))
        try:
            created = await api.create_receiver(receiver.url("cli"))
            status, _ = await api.call(
                "POST", "/v1/messages",
                {"receiver_id": created["id"], "event_type": "hello.world", "payload": {"hi": 1}},
            )
            assert status == 202
            await wait_until(lambda: len(receiver.deliveries) == 1, 30, "the delivery")
            async with aiohttp.ClientSession() as session:
                for path in ("/ui/login", "/metrics"):  # the banner's URLs answer
                    async with session.get(f"http://127.0.0.1:{port}{path}") as resp:
                        assert resp.status == 200, path
        finally:
            await api.close()
        assert receiver.deliveries[0].headers["webhook-event-type"] == "hello.world"
        children = _children(proc.pid)
        assert len(children) == 2  # the broker and the worker
        # The embedded broker holds each join for half the session: dev's worker runs the short one.
        [worker] = [c for c in children if b"worker" in Path(f"/proc/{c}/cmdline").read_bytes()]
        environ = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
        assert b"DISPATCHER_SESSION_TIMEOUT=6" in environ
        # A second dev on the same data dir would wipe this one's tables: it is refused.
        second = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "dispatcher", "dev"], env=_dev_env(tmp_path, free_port()),
            capture_output=True, text=True, timeout=60,
        )
        assert second.returncode == 2 and "another dev runs on" in second.stderr, second
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C: the whole group
        await wait_until(lambda: proc.poll() is not None, 30, "dev to stop")
        assert proc.returncode == 0
        assert _all_gone(children), f"children {children} still run"
        assert proc.stdout is not None
        tail = proc.stdout.read().decode(errors="replace")
        assert "stopped." in tail, tail
        assert "ERROR" not in tail and "Traceback" not in tail, tail
        assert len(tail.splitlines()) <= 10, tail
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


async def test_children_stop_when_dev_is_killed(tmp_path: Path) -> None:
    """kill -9 of `dev` leaves no broker or worker behind: each child was told to stop with it."""
    proc = _start_dev(_dev_env(tmp_path, free_port()))
    try:
        await _read_banner(proc)
        children = _children(proc.pid)
        assert len(children) == 2
    finally:
        proc.kill()
        proc.wait(10)
    await wait_until(lambda: _all_gone(children), 30, "the orphaned children to stop")


async def test_dev_stops_when_its_broker_dies(tmp_path: Path) -> None:
    proc = _start_dev(_dev_env(tmp_path, free_port()))
    try:
        await _read_banner(proc)
        children = _children(proc.pid)
        broker = [c for c in children if "broker" in Path(f"/proc/{c}/cmdline").read_text()]
        assert len(broker) == 1, children
        os.kill(broker[0], signal.SIGKILL)
        await wait_until(lambda: proc.poll() is not None, 30, "dev to stop")
        assert proc.returncode == 1
        assert proc.stdout is not None
        tail = proc.stdout.read().decode(errors="replace")
        assert "the embedded broker exited" in tail, tail
        assert _all_gone(children)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


async def test_dev_never_empties_a_directory_it_did_not_make(tmp_path: Path) -> None:
    mine = tmp_path / "data" / "dev"
    mine.mkdir(parents=True)
    (mine / "fixtures.sql").write_text("precious")
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "dispatcher", "dev"], env=_dev_env(tmp_path, free_port()),
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2, done
    assert "was not made by dev" in done.stderr and str(mine) in done.stderr
    assert (mine / "fixtures.sql").read_text() == "precious"


def _start_dev(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`dev` in its own process group, as a shell runs a foreground job; output read by the test."""
    return subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "dev"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )


def _all_gone(pids: list[int]) -> bool:
    return all(not Path(f"/proc/{pid}").exists() or _is_zombie(pid) for pid in pids)


def _dev_env(tmp_path: Path, port: int) -> dict[str, str]:
    env = {
        **os.environ,
        "DISPATCHER_WEB_PORT": str(port),
        "DISPATCHER_DEV_BROKER_PORT": "0",
        "DISPATCHER_DATA_DIR": str(tmp_path / "data"),
        "DISPATCHER_APP_ID": "clitest",
    }
    env.pop("DISPATCHER_API_TOKEN", None)
    env.pop("DISPATCHER_SESSION_TIMEOUT", None)
    return env


async def _foreign_ready_server(asked: list[str] | None = None) -> tuple[web.AppRunner, int]:
    """Something else on the port that answers 200 on /readyz, as another program might."""

    async def readyz(request: web.Request) -> web.Response:
        if asked is not None:
            asked.append(request.headers.get("Authorization", ""))
        return web.json_response({"status": "ready"})

    app = web.Application()
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, runner.addresses[0][1]


async def test_a_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    runner, port = await _foreign_ready_server()
    try:
        for command in ("dev", "worker"):
            env = {**_dev_env(tmp_path, port), "DISPATCHER_API_TOKEN": "t" * 20}
            done = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-m", "dispatcher", command], env=env,
                capture_output=True, text=True, timeout=60,
            )
            assert done.returncode == EXIT_PORT_IN_USE, (command, done.stdout, done.stderr)
            assert "is ready" not in done.stdout
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1, (command, done.stderr)
            assert f"127.0.0.1:{port} is already in use" in lines[0]
            assert "DISPATCHER_WEB_PORT" in lines[0]
    finally:
        await runner.cleanup()


async def test_dev_counts_only_its_own_worker_as_ready() -> None:
    """A /readyz answering 200 without the PID of the worker `dev` started is not that worker."""
    asked: list[str] = []
    runner, port = await _foreign_ready_server(asked)
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stop = _StopRequest()
        waiting = asyncio.create_task(
            asyncio.to_thread(wait_ready, f"http://127.0.0.1:{port}", "token", stand_in, stop, 30)
        )
        await wait_until(lambda: len(asked) >= 3, 20, "dev asking the foreign /readyz")
        assert not waiting.done()  # three 200s, none of them its worker's
        assert asked[0] == "Bearer token"
        stand_in.kill()  # as a worker that cannot listen exits
        assert await waiting is False
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        stand_in.kill()
        stand_in.wait(10)
        await runner.cleanup()


def test_version_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"webhook-dispatcher {__version__}"
    changelog = (Path(__file__).parents[2] / "CHANGELOG.md").read_text()
    assert f"## {__version__}" in changelog  # users can tell what a version holds


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except FileNotFoundError:
        return True

"""`webhook-dispatcher dev`: the embedded broker and one worker, owned by this process.

Both children run in sessions of their own, so a Ctrl-C in the terminal reaches
only `dev`, which stops the worker first (it commits and flushes while the
broker still answers) and the broker after it. Each child is also told to stop
if `dev` dies without cleaning up (Linux's parent-death signal).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import orjson

from . import __version__
from .broker import EMBEDDED_BROKER_SETTINGS, BrokerError, EmbeddedBroker, free_port
from .ports import EXIT_PORT_IN_USE, PortClash, check_port_free
from .settings import Settings, is_wildcard

# `dev` runs receivers on the developer's machine; a worker allows no loopback.
DEV_ALLOW_TARGETS = "127.0.0.0/8,::1/128"
# Where a worker looks for Kafka by default, so the producer snippets need no other address.
DEV_BROKER_PORT = 9092
WORKER_STOP_TIMEOUT = 15.0
READY_TIMEOUT = 120.0
PR_SET_PDEATHSIG = 1


def run_dev(broker_port: int) -> int:
    settings = Settings.from_env(require_https=False, allow_targets=DEV_ALLOW_TARGETS)
    token = settings.api_token or secrets.token_urlsafe(24)
    try:
        check_port_free(settings.web_host, settings.web_port, "DISPATCHER_WEB_PORT")
        check_port_free("127.0.0.1", broker_port, "DISPATCHER_DEV_BROKER_PORT (or --broker-port; 0: any)")
    except PortClash as exc:
        print(f"webhook-dispatcher dev: {exc}", file=sys.stderr)
        return EXIT_PORT_IN_USE
    data_dir = settings.data_dir / "dev"
    # The embedded broker keeps nothing across runs, so neither may the tables.
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    stop = _StopRequest()
    print(f"webhook-dispatcher {__version__}: starting the embedded broker ...", flush=True)
    try:
        broker = EmbeddedBroker(broker_port or free_port())
        broker.start(str(data_dir / "broker.log"), preexec_fn=_child_setup)
    except BrokerError as exc:
        print(f"webhook-dispatcher dev: the embedded broker did not start: {exc}", file=sys.stderr)
        return 1
    try:
        api = f"http://{_url_host(settings.web_host)}:{settings.web_port}"
        env = {
            **EMBEDDED_BROKER_SETTINGS,
            **os.environ,
            "DISPATCHER_BROKER": broker.url,
            "DISPATCHER_API_TOKEN": token,
            "DISPATCHER_DATA_DIR": str(data_dir),
            "DISPATCHER_REQUIRE_HTTPS": "true" if settings.require_https else "false",
            "DISPATCHER_ALLOW_TARGETS": settings.allow_targets,
        }
        print(f"starting the worker on {api} ...", flush=True)
        worker = subprocess.Popen(
            [sys.executable, "-m", "dispatcher", "worker"], env=env, start_new_session=True,
            preexec_fn=_child_setup,  # dev runs no threads, so a pre-exec hook is safe
        )
        try:
            if wait_ready(api, token, worker, stop):
                print(banner(api, token, broker, settings), flush=True)
            while not stop.requested and worker.poll() is None:
                time.sleep(0.2)
        finally:
            if worker.poll() is None:
                print("stopping the worker ...", flush=True)
            stop_child(worker, WORKER_STOP_TIMEOUT, stop)
    finally:
        broker.stop()
    if stop.requested:
        print("stopped.", flush=True)
        return 0
    code = worker.returncode
    if code != EXIT_PORT_IN_USE:
        print(f"webhook-dispatcher dev: the worker exited with code {code}", file=sys.stderr)
    return code or 1


class _StopRequest:
    """Ctrl-C or SIGTERM once: stop in order; a second Ctrl-C: kill the worker at once."""

    def __init__(self) -> None:
        self.requested = False
        self.forced = False
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.requested and signum == signal.SIGINT:
            self.forced = True
        self.requested = True


def _child_setup() -> None:
    """In the child before exec: stop when `dev` dies, even by kill -9 (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no such guard
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def wait_ready(api: str, token: str, worker: subprocess.Popen[bytes], stop: _StopRequest,
               limit: float = READY_TIMEOUT) -> bool:
    """Until `api`/readyz says ready *for this worker*: its answer (with the token) names its PID.

    Something else on the port that answers 200 does not count: the worker then fails to
    listen and exits, which ends the wait.
    """
    deadline = time.monotonic() + limit
    request = urllib.request.Request(api + "/readyz", headers={"Authorization": f"Bearer {token}"})
    while time.monotonic() < deadline and worker.poll() is None and not stop.requested:
        try:
            with urllib.request.urlopen(request, timeout=1) as resp:
                if resp.status == 200 and _pid_of(resp.read()) == worker.pid:
                    return True
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    if worker.poll() is None and not stop.requested:
        print(f"webhook-dispatcher dev: the worker was not ready within {limit:.0f} s", file=sys.stderr)
    return False


def _pid_of(body: bytes) -> int | None:
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    pid = answer.get("pid") if isinstance(answer, dict) else None
    return pid if isinstance(pid, int) else None


def banner(api: str, token: str, broker: EmbeddedBroker, settings: Settings) -> str:
    allowed = settings.target_policy().allow.describe()
    rule = "=" * 78
    lines = [
        rule,
        f"  webhook-dispatcher {__version__} (dev) is ready",
        "",
        f"  API          {api}    (OpenAPI: {api}/openapi.json)",
        f"  API token    {token}",
        f"  broker       {broker.host}:{broker.port}    (embedded, memory only: for DispatcherProducer)",
        f"  data dir     {settings.data_dir / 'dev'}    (wiped at every start)",
        f"  targets      loopback ({allowed}){'' if settings.require_https else ' and http://'} allowed;"
        " other private addresses refused",
        "",
        "  In another shell, for the CLI and the Python client:",
        "    . .venv/bin/activate",
        f"    export DISPATCHER_API_TOKEN={token}",
    ]
    if api != "http://127.0.0.1:8080":
        lines.append(f"    export DISPATCHER_URL={api}")
    lines += [
        "    webhook-dispatcher receivers list",
        "",
        "  Ctrl-C stops the worker, then the broker.",
        rule,
    ]
    return "\n".join(lines)


def stop_child(proc: subprocess.Popen[bytes], timeout: float, stop: _StopRequest | None = None) -> None:
    """SIGTERM, then wait up to `timeout` (less if a second Ctrl-C comes), then SIGKILL. By PID only."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline and not (stop and stop.forced):
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout)


def _url_host(host: str) -> str:
    """The host part of a URL this machine can open: a wildcard bind is reached on loopback."""
    if is_wildcard(host):
        return "127.0.0.1" if ":" not in host else "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


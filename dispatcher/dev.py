"""`webhook-dispatcher dev`: the embedded broker and one worker, owned by this process.

Both children run in sessions of their own, so a Ctrl-C in the terminal reaches
only `dev`, which stops the worker first (it commits and flushes while the
broker still answers) and the broker after it. Each child is also told to stop
if `dev` dies without cleaning up (Linux's parent-death signal).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import orjson

from . import __version__
from .broker import EMBEDDED_BROKER_SESSION, EMBEDDED_BROKER_SETTINGS, BrokerError, EmbeddedBroker, free_port
from .ports import EXIT_PORT_IN_USE, CannotListen, check_port_free
from .preflight import preflight
from .settings import Settings, is_wildcard

# `dev` runs receivers on the developer's machine; a worker allows no loopback.
DEV_ALLOW_TARGETS = "127.0.0.0/8,::1/128"
# Where a worker looks for Kafka by default, so the producer snippets need no other address.
DEV_BROKER_PORT = 9092
WORKER_STOP_TIMEOUT = 15.0
READY_NOTE = 30.0  # seconds between notes while the worker is not ready
BROKERLESS_STOP_TIMEOUT = 3.0
PR_SET_PDEATHSIG = 1


def run_dev(broker_port: int) -> int:
    settings = Settings.from_env(require_https=False, allow_targets=DEV_ALLOW_TARGETS)
    token = settings.api_token or secrets.token_urlsafe(24)
    preflight(settings)  # a SettingsError: one line, from the caller
    try:
        check_port_free(settings.web_host, settings.web_port, "DISPATCHER_WEB_PORT", "DISPATCHER_WEB_HOST",
                        any_port=False)
        check_port_free("127.0.0.1", broker_port, "DISPATCHER_DEV_BROKER_PORT (or --broker-port; 0: any)")
    except CannotListen as exc:
        print(f"webhook-dispatcher dev: {exc}", file=sys.stderr)
        return exc.exit_code
    try:
        with DevDataDir(settings.data_dir / "dev") as data_dir:
            return _run(broker_port, settings, token, data_dir)
    except DataDirTaken as exc:
        print(f"webhook-dispatcher dev: {exc}", file=sys.stderr)
        return 2


def _run(broker_port: int, settings: Settings, token: str, data_dir: Path) -> int:
    stop = _StopRequest()
    print(f"webhook-dispatcher {__version__}: starting the embedded broker ...", flush=True)
    try:
        broker = EmbeddedBroker(broker_port or free_port())
        broker.start(str(data_dir / "broker.log"), preexec_fn=_child_setup(os.getpid()))
    except BrokerError as exc:
        print(f"webhook-dispatcher dev: the embedded broker did not start: {exc}", file=sys.stderr)
        return 1
    assert broker.process is not None
    broker_gone = False
    try:
        api = f"http://{_url_host(settings.web_host)}:{settings.web_port}"
        env = {
            **EMBEDDED_BROKER_SETTINGS,
            **EMBEDDED_BROKER_SESSION,
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
            preexec_fn=_child_setup(os.getpid()),  # dev runs no threads, so a pre-exec hook is safe
        )
        try:
            if wait_ready(api, token, worker, stop, broker=broker.process):
                print(banner(api, token, broker, settings), flush=True)
            while not stop.requested and worker.poll() is None and broker.process.poll() is None:
                time.sleep(0.2)
            if broker.process.poll() is not None and not stop.requested:
                broker_gone = True
                code = broker.process.returncode
                print(f"webhook-dispatcher dev: the embedded broker exited (code {code}; its log:"
                      f" {data_dir / 'broker.log'}); stopping the worker", file=sys.stderr, flush=True)
        finally:
            if worker.poll() is None:
                print("stopping the worker ...", flush=True)
            # Without a broker the worker cannot commit or flush: no point waiting long for it.
            stop_child(worker, BROKERLESS_STOP_TIMEOUT if broker_gone else WORKER_STOP_TIMEOUT, stop)
    finally:
        broker.stop()
    if stop.requested:
        print("stopped.", flush=True)
        return 0
    if broker_gone:
        return 1
    code = worker.returncode
    if code != EXIT_PORT_IN_USE:
        print(f"webhook-dispatcher dev: the worker exited with code {code}", file=sys.stderr)
    return code or 1


class DataDirTaken(Exception):
    pass


class DevDataDir:
    """`<DISPATCHER_DATA_DIR>/dev`, emptied at start: only if `dev` made it, and only one `dev` at a time.

    The embedded broker keeps nothing across runs, so neither may the tables. A
    directory `dev` did not make (no marker file) is never emptied, and a lock
    beside it keeps a second `dev` from wiping the tables of one that runs.
    """

    MARKER = ".webhook-dispatcher-dev"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock: int | None = None

    def __enter__(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.parent / "dev.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirTaken(f"another dev runs on {self.path} ({lock_path} is locked); stop it, or set "
                               "DISPATCHER_DATA_DIR to another directory") from None
        self._lock = fd
        if self.path.exists() and any(self.path.iterdir()) and not self._made_by_dev():
            self.__exit__(None, None, None)
            raise DataDirTaken(f"{self.path} exists and was not made by dev, which empties its directory at"
                               " every start; remove it, or set DISPATCHER_DATA_DIR to another directory")
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir(parents=True)
        (self.path / self.MARKER).write_text("made by `webhook-dispatcher dev`: emptied at its every start\n")
        return self.path

    def _made_by_dev(self) -> bool:
        # Versions before the marker left their embedded broker's log there.
        return (self.path / self.MARKER).exists() or (self.path / "broker.log").exists()

    def __exit__(self, *exc: object) -> None:
        if self._lock is not None:
            os.close(self._lock)  # releases the lock
            self._lock = None


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


def _child_setup(parent: int) -> Callable[[], None]:
    """A pre-exec hook: the child stops when `dev` dies, even by kill -9 (PR_SET_PDEATHSIG)."""

    def setup() -> None:
        with contextlib.suppress(OSError, AttributeError):  # not Linux: no such guard
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # `dev` died before the guard was set
            os.kill(os.getpid(), signal.SIGTERM)

    return setup


def wait_ready(api: str, token: str, worker: subprocess.Popen[bytes], stop: _StopRequest,
               limit: float | None = None, broker: subprocess.Popen[bytes] | None = None) -> bool:
    """Until `api`/readyz says ready *for this worker*: its answer (with the token) names its PID.

    Something else on the port that answers 200 does not count: the worker then fails to
    listen and exits, which ends the wait. A long start says so every READY_NOTE seconds.
    """
    started = time.monotonic()
    note = started + READY_NOTE
    request = urllib.request.Request(api + "/readyz", headers={"Authorization": f"Bearer {token}"})
    while worker.poll() is None and not stop.requested and (broker is None or broker.poll() is None):
        if limit is not None and time.monotonic() > started + limit:
            return False
        try:
            with urllib.request.urlopen(request, timeout=1) as resp:
                if resp.status == 200 and _pid_of(resp.read()) == worker.pid:
                    return True
        except (OSError, ValueError):
            pass
        if time.monotonic() > note:
            note += READY_NOTE
            print(f"the worker is not ready after {time.monotonic() - started:.0f} s (joining the group,"
                  " recovering tables); still waiting", flush=True)
        time.sleep(0.2)
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
        f"  console      {api}/ui/    (log in with the API token)",
        f"  metrics      {api}/metrics{'    (with the metrics token)' if settings.metrics_token else ''}",
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


"""`webhook-dispatcher dev | worker`, and sub-commands over the API (`cli_api.py`)."""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

from .broker import EMBEDDED_BROKER_SETTINGS, EmbeddedBroker, free_port
from .cli_api import add_api_commands, run_api_command
from .settings import Settings, SettingsError

# `dev` runs receivers on the developer's machine; a worker allows no loopback.
DEV_ALLOW_TARGETS = "127.0.0.0/8,::1/128"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="webhook-dispatcher")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("worker", help="run a worker against DISPATCHER_BROKER (any Kafka)")
    dev = sub.add_parser("dev", help="run the embedded broker and one worker on loopback")
    default_port = int(os.environ.get("DISPATCHER_DEV_BROKER_PORT", "0"))
    dev.add_argument("--broker-port", type=int, default=default_port, help="0 picks a free port")
    add_api_commands(sub)
    args = parser.parse_args(argv)
    if getattr(args, "api_command", None) is not None:
        return run_api_command(args)
    try:
        if args.command == "worker":
            return _worker()
        return _dev(args.broker_port)
    except SettingsError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2


def _worker() -> int:
    from .worker import run_worker

    settings = Settings.from_env()
    settings.target_policy()  # a bad allow list stops the worker here, naming the entry
    if not settings.api_token:
        print("configuration error: DISPATCHER_API_TOKEN must be set for a worker", file=sys.stderr)
        return 2
    return run_worker(settings)


def _dev(broker_port: int) -> int:
    """Embedded broker + one worker child; both stopped on Ctrl-C or SIGTERM."""
    settings = Settings.from_env(require_https=False, allow_targets=DEV_ALLOW_TARGETS)
    token = settings.api_token or secrets.token_urlsafe(24)
    data_dir = settings.data_dir / "dev"
    # The embedded broker keeps nothing across runs, so neither may the tables.
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    broker = EmbeddedBroker(broker_port or free_port()).start(str(data_dir / "broker.log"))
    env = {
        **EMBEDDED_BROKER_SETTINGS,
        **os.environ,
        "DISPATCHER_BROKER": broker.url,
        "DISPATCHER_API_TOKEN": token,
        "DISPATCHER_DATA_DIR": str(data_dir),
        "DISPATCHER_REQUIRE_HTTPS": "true" if settings.require_https else "false",
        "DISPATCHER_ALLOW_TARGETS": settings.allow_targets,
    }
    worker = subprocess.Popen([sys.executable, "-m", "dispatcher", "worker"], env=env)
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        api = f"http://{settings.web_host}:{settings.web_port}"
        if _wait_ready(api, worker, lambda: stopping):
            _banner(api, token, broker.url, settings)
        while not stopping and worker.poll() is None:
            time.sleep(0.2)
    finally:
        _stop_child(worker)
        broker.stop()
    return 0 if stopping else (worker.returncode or 1)


def _wait_ready(api: str, worker: subprocess.Popen[bytes], stopping: object, limit: float = 120) -> bool:
    deadline = time.monotonic() + limit
    print(f"starting worker on {api} ...", flush=True)
    while time.monotonic() < deadline and worker.poll() is None and not stopping():  # type: ignore[operator]
        try:
            with urllib.request.urlopen(api + "/readyz", timeout=1) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.3)
    return False


def _banner(api: str, token: str, broker: str, settings: Settings) -> None:
    lines = [
        "webhook-dispatcher dev is ready",
        f"  API:        {api}   (health: {api}/healthz)",
        f"  API token:  {token}",
        f"  broker:     {broker} (embedded, memory only)",
        f"  data dir:   {settings.data_dir / 'dev'}",
        f"  targets:    dev mode allows {settings.target_policy().allow.describe()}"
        f"{'' if settings.require_https else ' and http://'};",
        "              other private, link-local and metadata addresses stay refused",
        "  try:",
        f"    curl -s -H 'Authorization: Bearer {token}' -H 'content-type: application/json' \\",
        f"      -d '{{\"url\": \"http://127.0.0.1:9000/hook\"}}' {api}/v1/receivers",
        "  Ctrl-C stops the worker and the broker.",
    ]
    print("\n".join(lines), flush=True)


def _stop_child(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


if __name__ == "__main__":
    raise SystemExit(main())

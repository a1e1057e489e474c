"""`webhook-dispatcher dev | worker`, and sub-commands over the API (`cli_api.py`)."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .cli_api import add_api_commands, run_api_command
from .preflight import preflight
from .settings import Settings, SettingsError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="webhook-dispatcher")
    parser.add_argument("--version", action="version", version=f"webhook-dispatcher {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("worker", help="run a worker against DISPATCHER_BROKER (any Kafka)")
    dev = sub.add_parser("dev", help="run the embedded broker and one worker on loopback")
    dev.add_argument(
        "--broker-port", type=_port, default=os.environ.get("DISPATCHER_DEV_BROKER_PORT", "9092"),
        help="the embedded broker's port (default 9092, or DISPATCHER_DEV_BROKER_PORT; 0 picks a free one)",
    )
    listen = sub.add_parser("listen", help="a receiver to try things with: prints and checks each delivery")
    listen.add_argument("--host", default="127.0.0.1")
    listen.add_argument("--port", type=_port, default=9000)
    listen.add_argument("--secret", default=os.environ.get("WEBHOOK_SECRET"),
                        help="whsec_ secret or whpk_ public key to check signatures with (or WEBHOOK_SECRET)")
    listen.add_argument("--status", type=int, default=200, help="the status to answer deliveries with")
    add_api_commands(sub)
    args = parser.parse_args(argv)
    if getattr(args, "api_command", None) is not None:
        return run_api_command(args)
    try:
        if args.command == "worker":
            return _worker()
        if args.command == "listen":
            return _listen(args)
        from .dev import run_dev

        return run_dev(args.broker_port)
    except SettingsError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r} (0..65535)")
    return port


def _listen(args: argparse.Namespace) -> int:
    from .domain.signing import SecretError, check_verify_key
    from .listen import run_listener
    from .ports import CannotListen, check_port_free

    if not 100 <= args.status <= 599:
        print(f"error: --status {args.status} is not an HTTP status (100..599)", file=sys.stderr)
        return 2
    if args.secret:
        try:
            check_verify_key(args.secret)
        except SecretError as exc:
            print(f"error: --secret (or WEBHOOK_SECRET): {exc}", file=sys.stderr)
            return 2
    try:
        check_port_free(args.host, args.port, "--port", "--host")
    except CannotListen as exc:
        print(f"webhook-dispatcher listen: {exc}", file=sys.stderr)
        return exc.exit_code
    return run_listener(args.host, args.port, args.secret, args.status)


def _worker() -> int:
    from .worker import run_worker

    settings = Settings.from_env()
    settings.target_policy()  # a bad allow list stops the worker here, naming the entry
    preflight(settings)
    if not settings.api_token:
        print("configuration error: DISPATCHER_API_TOKEN must be set for a worker", file=sys.stderr)
        return 2
    return run_worker(settings)


if __name__ == "__main__":
    raise SystemExit(main())

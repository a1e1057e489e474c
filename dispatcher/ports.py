"""Checking an address before listening on it, so a clash or a bad setting is one clear line."""

from __future__ import annotations

import errno
import socket

# A worker, `dev` or `listen` that cannot listen because the port is taken exits with this code,
# having said why in one line; a bad host or port is a configuration error (2).
EXIT_PORT_IN_USE = 3
EXIT_CONFIG = 2


class CannotListen(Exception):
    """Why nothing can listen there, naming the setting to change; `exit_code` for the process."""

    exit_code = EXIT_CONFIG


class PortClash(CannotListen):
    exit_code = EXIT_PORT_IN_USE


def check_port_free(
    host: str, port: int, setting: str, host_setting: str = "", any_port: bool = True
) -> None:
    """Raise `CannotListen` unless something could listen on host:port now (as aiohttp binds).

    `any_port`: 0 (the system picks) is allowed; else the port must be 1..65535.
    """
    where = f"{host}:{port}"
    if not (0 if any_port else 1) <= port <= 65535:
        raise CannotListen(f"{setting}={port} is not a port number ({0 if any_port else 1}..65535)")
    if port == 0:
        return
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bare, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortClash(f"{where} is already in use; set {setting} to a free port"
                                " (or stop whatever listens there)") from exc
            fix = f"check {host_setting}" if host_setting else "check the host"
            if exc.errno == errno.EACCES:
                raise CannotListen(f"cannot listen on {where}: permission denied (ports below 1024 need"
                                   f" privileges); set {setting} to a port above 1023") from exc
            raise CannotListen(f"cannot listen on {where}: {exc.strerror or exc}; {fix}") from exc

"""Checking a port before listening on it, so a clash is one clear line, not a traceback."""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

# A worker or `dev` that cannot listen exits with this code, having said why in one line.
EXIT_PORT_IN_USE = 3


@dataclass(frozen=True)
class PortClash(Exception):
    host: str
    port: int
    setting: str

    def __str__(self) -> str:
        return (f"{self.host}:{self.port} is already in use; set {self.setting} to a free port"
                f" (or stop whatever listens there)")


def check_port_free(host: str, port: int, setting: str) -> None:
    """Raise `PortClash` if nothing could listen on host:port now (as aiohttp binds: reuse_address)."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortClash(host, port, setting) from exc
            raise

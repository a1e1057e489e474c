"""Test harness: the embedded broker, worker processes, loopback receivers, API client.

Everything listens on 127.0.0.1; every process is started here and stopped by
its own PID.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from dispatcher.broker import EMBEDDED_BROKER_SESSION, EMBEDDED_BROKER_SETTINGS, free_port
from dispatcher.settings import Settings

TOKEN = "test-token"


def _without_broker_workarounds() -> dict[str, str]:
    """The embedded-broker settings group set back to the defaults a Kafka deployment runs with."""
    defaults = Settings()
    values = {}
    for name in EMBEDDED_BROKER_SETTINGS:
        value = getattr(defaults, name.removeprefix("DISPATCHER_").lower())
        values[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return values


# Extra env for a worker that must keep the invariants without the embedded broker's workarounds.
WITHOUT_BROKER_WORKAROUNDS = _without_broker_workarounds()


@dataclass
class WorkerProcess:
    """One `webhook-dispatcher worker` child process."""

    broker_url: str
    app_id: str
    data_dir: Path
    log_path: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    ready_statuses: list[int] = field(default_factory=list)  # /readyz answers while starting

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            **EMBEDDED_BROKER_SETTINGS,
            "DISPATCHER_BROKER": self.broker_url,
            "DISPATCHER_APP_ID": self.app_id,
            "DISPATCHER_WEB_PORT": str(self.port),
            "DISPATCHER_DATA_DIR": str(self.data_dir),
            "DISPATCHER_API_TOKEN": TOKEN,
            "DISPATCHER_REQUIRE_HTTPS": "false",
            # Receivers listen on 127.0.0.1; canaries on 127.0.0.2 and ::1 stay refused.
            "DISPATCHER_ALLOW_TARGETS": "127.0.0.1/32",
            "DISPATCHER_HOST_LIMIT": "1024",  # every test receiver shares 127.0.0.1
            **EMBEDDED_BROKER_SESSION,
            "DISPATCHER_HEARTBEAT_INTERVAL": "1",
            # Short clocks so retries, probes and expiries happen within a test.
            "DISPATCHER_RETRY_SCHEDULE": "exponential",
            "DISPATCHER_RETRY_BASE": "0.05",
            "DISPATCHER_RETRY_CAP": "0.5",
            "DISPATCHER_MAX_ATTEMPTS": "10000",
            "DISPATCHER_PROBE_BASE": "0.1",
            "DISPATCHER_PROBE_CAP": "0.5",
            "DISPATCHER_LOG_LEVEL": "info",
            **self.extra_env,
        }

    def start(self) -> WorkerProcess:
        self.port = self.port or free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dispatcher", "worker"],
            env=self.env(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        log.close()
        return self

    def rss_mb(self) -> float:
        """The worker's resident memory, from /proc."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    async def wait_ready(self, limit: float = 90.0) -> None:
        deadline = time.monotonic() + limit
        # With the token /readyz names its PID: a port picked free may have been taken meanwhile by
        # a worker of the other test process (pytest -n), which must not pass for this one.
        headers = {"Authorization": f"Bearer {self.env()['DISPATCHER_API_TOKEN']}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise RuntimeError(f"worker exited {self.process.returncode}; see {self.log_path}")
                try:
                    async with session.get(self.url + "/readyz") as resp:
                        self.ready_statuses.append(resp.status)
                        body = await resp.json() if resp.status == 200 else None
                        if isinstance(body, dict) and body.get("pid") == self.process.pid:
                            return
                except (aiohttp.ClientError, ValueError):  # not up yet, or not a worker's answer
                    pass
                await asyncio.sleep(0.2)
        raise TimeoutError(f"worker not ready within {limit}s; see {self.log_path}")

    async def readyz(self) -> dict[str, Any]:
        """The worker's /readyz answer with the token: partitions owned, delivery and subscription figures."""
        headers = {"Authorization": f"Bearer {TOKEN}"}
        timeout = aiohttp.ClientTimeout(total=10)  # a paused (SIGSTOP) worker never answers
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session, \
                session.get(self.url + "/readyz") as resp:
            return await resp.json()


def new_app_id() -> str:
    return "t" + uuid.uuid4().hex[:10]


@dataclass
class Delivery:
    path: str
    at: float
    headers: dict[str, str]
    body: bytes

    @property
    def msg_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def seq(self) -> int:
        """The webhook-sequence header; 0 for a ping, which has none."""
        return int(self.headers.get("webhook-sequence", 0))


# A behaviour answers a status, or a status and response headers.
Behaviour = Callable[[str, Delivery], Awaitable[int | tuple[int, dict[str, str]]]]


async def answer_200(path: str, delivery: Delivery) -> int:
    return 200


COUNT_AFTER_S = 0.1  # see Receiver._handle


class Receiver:
    """A real aiohttp server on 127.0.0.1 recording every request it gets.

    `behaviour(path, delivery)` returns the status to answer (it may sleep).
    Requests are recorded when they arrive; `completed` counts answered ones.
    """

    def __init__(
        self,
        behaviour: Behaviour = answer_200,
        echo_challenge: bool = False,
        host: str = "127.0.0.1",
        cancel_on_disconnect: bool = False,
    ) -> None:
        self.host = host  # any 127/8 address is loopback: distinct hosts for per-host limits
        # Cancel a handler whose client hung up, so `concurrent` counts open requests.
        self.cancel_on_disconnect = cancel_on_disconnect
        self.behaviour = behaviour
        self.echo_challenge = echo_challenge  # answer a verification GET by echoing its challenge
        self.challenges: list[Delivery] = []  # verification GETs received
        self.deliveries: list[Delivery] = []
        self.completed: list[Delivery] = []
        self.concurrent = 0
        self.max_concurrent = 0
        self._runner: web.AppRunner | None = None
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}/{path}"

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/{path:.*}", self._handle)
        app.router.add_get("/{path:.*}", self._handle_get)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=self.cancel_on_disconnect)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> Receiver:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, request: web.Request) -> web.Response:
        delivery = Delivery(
            request.match_info["path"], time.time(),
            {k.lower(): v for k, v in request.headers.items()}, await request.read(),
        )
        self.deliveries.append(delivery)
        self.concurrent += 1
        # Counted a moment after the request starts, if it is still open: a client that hung up and
        # at once dialled again is seen twice until this server notices the hang-up, which under
        # load can come after the new request (both in one poll of the loop).
        sample = asyncio.get_running_loop().call_later(COUNT_AFTER_S, self._count_concurrent)
        try:
            answer = await self.behaviour(delivery.path, delivery)
        finally:
            sample.cancel()
            self.concurrent -= 1
        status, headers = answer if isinstance(answer, tuple) else (answer, {})
        self.completed.append(delivery)
        return web.Response(status=status, text="ok" if status < 300 else "no", headers=headers)

    def _count_concurrent(self) -> None:
        self.max_concurrent = max(self.max_concurrent, self.concurrent)

    def count_afresh(self) -> None:
        """Start `max_concurrent` again from the requests open now, counted as each new one is:
        a moment later, so one whose client has hung up (and not yet been noticed) is not counted."""
        self.max_concurrent = 0
        asyncio.get_running_loop().call_later(COUNT_AFTER_S, self._count_concurrent)

    async def _handle_get(self, request: web.Request) -> web.Response:
        delivery = Delivery(
            request.match_info["path"], time.time(), {k.lower(): v for k, v in request.headers.items()}, b""
        )
        self.challenges.append(delivery)
        challenge = delivery.headers.get("webhook-challenge", "")
        return web.Response(text=challenge if self.echo_challenge else "hello")

    def by_path(self, path: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.path == path]


class Api:
    """A small client for the worker's /v1 API."""

    def __init__(self, base_url: str, token: str = TOKEN) -> None:
        self.base_url = base_url
        self._session = aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"})

    async def close(self) -> None:
        await self._session.close()

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = orjson.dumps(body) if body is not None else None
        async with self._session.request(method, self.base_url + path, data=data) as resp:
            raw = await resp.read()
            return resp.status, (orjson.loads(raw) if raw else None)

    async def create_receiver(self, url: str, **extra: Any) -> dict[str, Any]:
        status, body = await self.call("POST", "/v1/receivers", {"url": url, **extra})
        assert status == 201, body
        return body

    async def send_batch(self, messages: list[dict[str, Any]]) -> list[str]:
        status, body = await self.call("POST", "/v1/messages/batch", {"messages": messages})
        assert status == 202, body
        return body["ids"]

    async def state(self, receiver_id: str) -> dict[str, Any]:
        status, body = await self.call("GET", f"/v1/receivers/{receiver_id}")
        assert status == 200, body
        return body["state"]

    async def eventually_state(
        self, receiver_id: str, check: Callable[[dict[str, Any]], bool], limit: float, what: str
    ) -> dict[str, Any]:
        """Poll the receiver's state until `check` holds; bounded by `limit` seconds."""
        deadline = time.monotonic() + limit
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            state = await self.state(receiver_id)
            if check(state):
                return state
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out after {limit}s waiting for {what}: {state}")

    async def attempts(self, receiver_id: str) -> list[dict[str, Any]]:
        """The receiver's attempt log, oldest first."""
        status, body = await self.call("GET", f"/v1/receivers/{receiver_id}/attempts")
        assert status == 200, body
        return body["attempts"][::-1]


async def create_topic(servers: str, topic: str, partitions: int) -> None:
    """Create `topic` on the broker at `servers` (host:port), replication 1."""
    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def wait_until(predicate: Callable[[], bool], limit: float, what: str, step: float = 0.05) -> None:
    """Poll `predicate` until true; bounded by `limit` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(step)
    raise AssertionError(f"timed out after {limit}s waiting for {what}")


async def wait_until_read(
    read: Callable[[], Awaitable[Any]],
    check: Callable[[Any], bool],
    limit: float,
    what: str,
    step: float = 0.1,
) -> Any:
    """Poll the awaitable `read` until `check` holds for its value; bounded by `limit` seconds."""
    deadline = time.monotonic() + limit
    value = None
    while time.monotonic() < deadline:
        value = await read()
        if check(value):
            return value
        await asyncio.sleep(step)
    raise AssertionError(f"timed out after {limit}s waiting for {what} (last: {value!r})")


PARTITIONS = Settings().partitions  # a worker's, unless its test sets DISPATCHER_PARTITIONS


async def owned(worker: WorkerProcess) -> list[int]:
    """The partitions a worker owns once ready; none while it starts, rebalances or is down (its
    API answers `unavailable` for them then)."""
    try:
        body = await worker.readyz()
    except (aiohttp.ClientError, OSError, ValueError):
        return []
    return sorted(body.get("partitions") or ()) if body.get("status") == "ready" else []


async def wait_assigned(
    workers: list[WorkerProcess], what: str, partitions: int = PARTITIONS, limit: float = 120
) -> dict[str, list[int]]:
    """Until each of `workers` is ready and owns some partitions, and every partition has one owner."""

    async def read() -> dict[str, list[int]]:
        return {w.data_dir.name: await owned(w) for w in workers}

    def settled(by_worker: dict[str, list[int]]) -> bool:
        every = sorted(p for parts in by_worker.values() for p in parts)
        return every == list(range(partitions)) and all(by_worker.values())

    return await wait_until_read(read, settled, limit, what, step=0.25)


def first_copies(deliveries: list[Delivery]) -> list[Delivery]:
    """Deliveries with later copies of the same webhook-id dropped (at-least-once)."""
    seen: set[str] = set()
    out = []
    for d in deliveries:
        if d.msg_id not in seen:
            seen.add(d.msg_id)
            out.append(d)
    return out


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "ScriptedReceiver"], Awaitable[None]]


class ScriptedReceiver:
    """A raw receiver on 127.0.0.1: `handler` writes exactly the bytes a test wants on each connection.

    Keeps each request's raw bytes as they came off the socket, and counts connections.
    """

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> ScriptedReceiver:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def url(self, path: str = "hook") -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length:\s*(\d+)\r$", head)
        body = await reader.readexactly(int(length[1])) if length else b""
        self.requests.append(head + body)
        return head

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()  # stops listening at once; open connections end with their handlers


def answering(*responses: bytes, keep_open: bool = True) -> Handler:
    """Answer each request on a connection with the next of `responses` (the last repeats)."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: ScriptedReceiver
    ) -> None:
        for i in range(100):  # bounded: 100 requests a connection
            await server.read_request(reader)
            writer.write(responses[min(i, len(responses) - 1)])
            await writer.drain()
            if not keep_open:
                return

    return handler


async def tls_receiver(ca: Any, text: str = "tls ok") -> tuple[web.AppRunner, int]:
    """An HTTPS receiver on 127.0.0.1 with a certificate from `ca` (a trustme.CA); answers every POST."""

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text=text)

    app = web.Application()
    app.router.add_post("/{tail:.*}", hello)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
